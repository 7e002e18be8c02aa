// Package postgres is the production pay.Store: PostgreSQL through pgx v5
// (its database/sql driver, pgx/v5/stdlib, which keeps pgx's automatic
// prepared-statement cache).
//
// The store itself is pay/sqlstore; the PostgreSQL dialect and how the
// database is opened are the SQL seam's (internal/sqldb: sqldb.Postgres,
// sqldb.OpenPostgres); this package is the payment store's configuration
// on PostgreSQL and its migrations (goose, embedded).
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
	"io/fs"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pressly/goose/v3"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/internal/sqldb"
	"github.com/stampede-lab/stampede/pay"
	"github.com/stampede-lab/stampede/pay/sqlstore"
)

var _ pay.Store = (*Store)(nil)

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
	// MerchantTTL is how long a merchant read is used without reading it
	// again (sqlstore.Config.MerchantTTL): a revocation or a webhook set
	// by another process applies within it; 0 reads it every time.
	MerchantTTL time.Duration
}

// DefaultConfig returns 10 connections, a 5 s connect timeout, a 2 s
// operation timeout, the wall clock and merchants kept for
// sqlstore.DefaultMerchantTTL; set URL.
func DefaultConfig() Config {
	return Config{MaxConns: 10, ConnectTimeout: 5 * time.Second, OpTimeout: sqlstore.DefaultOpTimeout, Now: time.Now,
		MerchantTTL: sqlstore.DefaultMerchantTTL}
}

var identifier = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// Validate reports every invalid field at once, each named in snake_case
// as the flag that sets it: postgres (URL), schema, max_conns,
// connect_timeout, and the shared store's db_timeout (OpTimeout), now.
func (c Config) Validate() error {
	var f stampede.Fields
	if strings.TrimSpace(c.URL) == "" {
		f.Add("postgres", "must not be empty")
	} else if _, err := pgx.ParseConfig(c.URL); err != nil {
		f.Add("postgres", "%v", err)
	}
	if c.Schema != "" && !identifier.MatchString(c.Schema) {
		f.Add("schema", "must be a lower-case identifier, got %q", c.Schema)
	}
	if c.MaxConns < 1 {
		f.Add("max_conns", "must be at least 1, got %d", c.MaxConns)
	}
	if c.ConnectTimeout < 0 {
		f.Add("connect_timeout", "must not be negative, got %s", c.ConnectTimeout)
	}
	f.Check("", c.store().Validate())
	return f.Err()
}

// store returns the configuration of the shared store.
func (c Config) store() sqlstore.Config {
	return sqlstore.Config{OpTimeout: c.OpTimeout, Now: c.Now, MerchantTTL: c.MerchantTTL}
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
	db, d, err := sqldb.OpenPostgres(ctx, sqldb.PostgresConfig{
		URL:             cfg.URL,
		Schema:          cfg.Schema,
		MaxConns:        cfg.MaxConns,
		ConnectTimeout:  cfg.ConnectTimeout,
		ConnMaxIdleTime: 30 * time.Minute,
		PingTimeout:     cfg.OpTimeout,
		LockKey:         "stampede.pay.migrate:",
		Migrate: func(ctx context.Context, db *sql.DB) error {
			return sqlstore.Migrate(ctx, db, sqldb.Postgres{}, goose.DialectPostgres, fsys)
		},
	})
	if err != nil {
		return nil, sqlstore.MapError(sqldb.Postgres{}, err)
	}
	s, err := sqlstore.New(d, db, nil, cfg.store())
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
