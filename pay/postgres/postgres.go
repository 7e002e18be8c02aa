// Package postgres is the production pay.Store: PostgreSQL through pgx v5
// (its database/sql driver, pgx/v5/stdlib, which keeps pgx's automatic
// prepared-statement cache).
//
// The store itself is pay/sqlstore; this package is its PostgreSQL
// dialect, its migrations (goose, embedded) and how the database is
// opened.
//
// Transactions run at READ COMMITTED; a status change locks the payment row
// with SELECT ... FOR UPDATE, so compare-and-set and the per-payment outbox
// sequence are serialised per payment, and a payment's outbox rows commit
// in sequence order. A concurrent CreatePending with the same idempotency
// key waits on the key's row (INSERT ... ON CONFLICT) and then sees the
// winner's record. Get reads at REPEATABLE READ: the payment and its
// history from one snapshot.
//
// Commits are durable when they return: the store leaves
// synchronous_commit at the server's setting (on), so each of a payment's
// two commits waits for its WAL flush. Config.MaxConns sizes the pool;
// BenchmarkPaymentsPostgresPool (package pay) measures it against
// throughput.
package postgres

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pressly/goose/v3"

	"github.com/stampede-lab/stampede/pay"
	"github.com/stampede-lab/stampede/pay/sqlstore"
)

var _ pay.Store = (*Store)(nil)

var _ sqlstore.Dialect = Dialect{}

// Config configures a Store.
type Config struct {
	// URL is the connection string, e.g.
	// postgres://user@host:5432/db?sslmode=disable.
	URL string
	// Schema, when set, is the schema the tables live in (created if
	// missing; the connections' search_path). Empty uses the URL's
	// search_path, normally public.
	Schema string
	// MaxConns bounds the open connections.
	MaxConns int
	// ConnectTimeout bounds each connection attempt, unless the URL sets
	// connect_timeout.
	ConnectTimeout time.Duration
	// OpTimeout bounds every store call, connecting included: a server
	// that does not answer within it gives CodeUnavailable.
	OpTimeout time.Duration
	// Now returns the current time; tests replace it with a fake clock.
	Now func() time.Time
}

// DefaultConfig returns 10 connections, a 5 s connect timeout, a 2 s
// operation timeout and the wall clock; set URL.
func DefaultConfig() Config {
	return Config{MaxConns: 10, ConnectTimeout: 5 * time.Second, OpTimeout: sqlstore.DefaultOpTimeout, Now: time.Now}
}

var identifier = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// Validate reports every invalid field; each error names its field.
func (c Config) Validate() error {
	var errs []error
	if strings.TrimSpace(c.URL) == "" {
		errs = append(errs, errors.New("postgres: URL: must not be empty"))
	} else if _, err := pgx.ParseConfig(c.URL); err != nil {
		errs = append(errs, fmt.Errorf("postgres: URL: %v", err))
	}
	if c.Schema != "" && !identifier.MatchString(c.Schema) {
		errs = append(errs, fmt.Errorf("postgres: Schema: must be a lower-case identifier, got %q", c.Schema))
	}
	if c.MaxConns < 1 {
		errs = append(errs, fmt.Errorf("postgres: MaxConns: must be at least 1, got %d", c.MaxConns))
	}
	if c.ConnectTimeout < 0 {
		errs = append(errs, fmt.Errorf("postgres: ConnectTimeout: must not be negative, got %s", c.ConnectTimeout))
	}
	// OpTimeout and Now are the shared store's.
	errs = append(errs, c.store().Validate())
	return errors.Join(errs...)
}

// store returns the configuration of the shared store.
func (c Config) store() sqlstore.Config {
	return sqlstore.Config{OpTimeout: c.OpTimeout, Now: c.Now}
}

// Store is the PostgreSQL pay.Store.
type Store struct {
	*sqlstore.Store
}

// Open connects to the database at url with the default configuration and
// applies the migrations. An unreachable database is a CodeUnavailable
// error.
func Open(ctx context.Context, url string) (*Store, error) {
	cfg := DefaultConfig()
	cfg.URL = url
	return OpenConfig(ctx, cfg)
}

// OpenConfig connects to the database cfg describes and applies the
// migrations. The first connection must answer within OpTimeout;
// migrating is bounded by ctx only.
func OpenConfig(ctx context.Context, cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	fsys, err := fs.Sub(migrations, "migrations")
	if err != nil {
		return nil, pay.Internal(err)
	}
	// The first migration creates every table and index only if missing,
	// so that a schema created before goose (recorded in the old
	// schema_migrations table, left in place) is taken over as it is.
	db, _, err := OpenDB(ctx, DBConfig{
		URL:             cfg.URL,
		Schema:          cfg.Schema,
		MaxConns:        cfg.MaxConns,
		ConnectTimeout:  cfg.ConnectTimeout,
		ConnMaxIdleTime: 30 * time.Minute,
		PingTimeout:     cfg.OpTimeout,
		LockKey:         "stampede.pay.migrate:",
		Migrate: func(ctx context.Context, db *sql.DB) error {
			return sqlstore.Migrate(ctx, db, Dialect{}, goose.DialectPostgres, fsys)
		},
	})
	if err != nil {
		return nil, sqlstore.MapError(Dialect{}, err)
	}
	s, err := sqlstore.New(Dialect{}, db, nil, cfg.store())
	if err != nil {
		db.Close()
		return nil, err
	}
	return &Store{Store: s}, nil
}

// Migrations holds the goose migrations, one SQL file per version.
//
//go:embed migrations/*.sql
var migrations embed.FS

// Dialect is the PostgreSQL sqlstore.Dialect: $n placeholders,
// timestamptz, SELECT ... FOR UPDATE, SQLSTATE classes.
type Dialect struct{}

// Name implements sqlstore.Dialect.
func (Dialect) Name() string { return "postgres" }

// Rebind implements sqlstore.Dialect: queries are written for PostgreSQL.
func (Dialect) Rebind(query string) string { return query }

// LockRow implements sqlstore.Dialect.
func (Dialect) LockRow() string { return " FOR UPDATE" }

// ReadTx implements sqlstore.Dialect.
func (Dialect) ReadTx() *sql.TxOptions {
	return &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true}
}

// EncodeTime implements sqlstore.Dialect.
func (Dialect) EncodeTime(t time.Time) any { return t }

// DecodeTime implements sqlstore.Dialect.
func (Dialect) DecodeTime(src any) (time.Time, error) {
	t, ok := src.(time.Time)
	if !ok {
		return time.Time{}, fmt.Errorf("want timestamptz, got %T", src)
	}
	return t.UTC(), nil
}

// UniqueViolation implements sqlstore.Dialect: SQLSTATE 23505.
func (Dialect) UniqueViolation(err error) (string, bool) {
	var pg *pgconn.PgError
	if errors.As(err, &pg) && pg.Code == "23505" {
		return pg.TableName, true
	}
	return "", false
}

// Unavailable implements sqlstore.Dialect: timeouts, connection and
// network failures, and the SQLSTATEs of a server that cannot serve now.
func (Dialect) Unavailable(err error) bool {
	var (
		pg *pgconn.PgError
		ce *pgconn.ConnectError
		ne net.Error
	)
	switch {
	case pgconn.Timeout(err), errors.As(err, &ce), errors.As(err, &ne),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed),
		strings.Contains(err.Error(), "conn closed"): // the server or the network dropped the connection
		return true
	case errors.As(err, &pg):
		return strings.HasPrefix(pg.Code, "08") || // connection exception
			strings.HasPrefix(pg.Code, "53") || // insufficient resources
			pg.Code == "57P01" || pg.Code == "57P02" || pg.Code == "57P03" || // shutdown, cannot connect now
			pg.Code == "40001" || pg.Code == "40P01" || pg.Code == "55P03" // serialization, deadlock, lock not available
	}
	return false
}
