package sqlstore

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	_ "modernc.org/sqlite" // the "sqlite" database/sql driver

	"github.com/stampede-lab/stampede/pay/postgres"
	"github.com/stampede-lab/stampede/pay/sqlite"
	paysql "github.com/stampede-lab/stampede/pay/sqlstore"
)

// Memory is the SQLitePath of a private in-memory database.
const Memory = sqlite.Memory

// VersionTable is the goose version table of checkout's migrations,
// apart from pay's and fulfilment's.
const VersionTable = "checkout_goose_db_version"

// Config configures Open.
type Config struct {
	// PostgresURL, when set, selects PostgreSQL.
	PostgresURL string
	// Schema, with PostgreSQL, is the schema of the tables (created if
	// missing; the connections' search_path). Empty: the URL's.
	Schema string
	// SQLitePath is the SQLite file (created if missing), or Memory;
	// used when PostgresURL is empty.
	SQLitePath string
	// MaxConns bounds the PostgreSQL connections, or SQLite's read-only
	// connections (SQLite writes through one).
	MaxConns int
	// OpTimeout bounds every store call; with SQLite it is also the busy
	// timeout.
	OpTimeout time.Duration
}

// DefaultConfig returns an in-memory SQLite database, 8 connections and a
// 2 s operation timeout.
func DefaultConfig() Config {
	return Config{SQLitePath: Memory, MaxConns: 8, OpTimeout: 2 * time.Second}
}

var identifier = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// Validate reports every invalid field; each error names its field.
func (c Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("checkout/sqlstore: %s: %s", field, fmt.Sprintf(format, args...)))
	}
	if c.PostgresURL != "" {
		if _, err := pgx.ParseConfig(c.PostgresURL); err != nil {
			bad("PostgresURL", "%v", err)
		}
		if c.Schema != "" && !identifier.MatchString(c.Schema) {
			bad("Schema", "must be a lower-case identifier, got %q", c.Schema)
		}
	} else {
		switch {
		case strings.TrimSpace(c.SQLitePath) == "":
			bad("SQLitePath", "must not be empty without a PostgresURL (use %q)", Memory)
		case strings.ContainsAny(c.SQLitePath, "?#"):
			bad("SQLitePath", "must not contain '?' or '#', got %q", c.SQLitePath)
		}
		if c.Schema != "" {
			bad("Schema", "only for PostgreSQL (set PostgresURL)")
		}
	}
	if c.MaxConns < 1 {
		bad("MaxConns", "must be at least 1, got %d", c.MaxConns)
	}
	if c.OpTimeout <= 0 {
		bad("OpTimeout", "must be positive, got %s", c.OpTimeout)
	}
	return errors.Join(errs...)
}

// Open opens the database cfg names and applies the pending migrations.
// An unreachable database is an error with CodeUnavailable.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.PostgresURL != "" {
		return openPostgres(ctx, cfg)
	}
	return openSQLite(ctx, cfg)
}

//go:embed migrations/sqlite/*.sql migrations/postgres/*.sql
var migrations embed.FS

// Migrate applies to db the migrations of d ("sqlite" or "postgres") not
// yet applied, recording them in VersionTable. It takes no lock (Open
// does).
func Migrate(ctx context.Context, db *sql.DB, d Dialect) error {
	gd, ok := paysql.GooseDialect(d.Name())
	if !ok {
		return fmt.Errorf("checkout/sqlstore: no migrations for dialect %q", d.Name())
	}
	fsys, err := fs.Sub(migrations, "migrations/"+d.Name())
	if err != nil {
		return err
	}
	return MapError(d, paysql.MigrateTable(ctx, db, gd, fsys, VersionTable))
}

// openSQLite opens SQLite the way pay/sqlite does (sqlite.OpenDB): writes
// through one connection whose transactions begin IMMEDIATE, reads through
// a pool of read-only connections (WAL); an in-memory database on one
// connection. Processes opening a new file together migrate one at a time,
// holding an exclusive transaction on a side file, path+"-checkout-migrate".
func openSQLite(ctx context.Context, cfg Config) (*Store, error) {
	write, read, d, err := sqlite.OpenDB(ctx, sqlite.DBConfig{
		Path:         cfg.SQLitePath,
		BusyTimeout:  cfg.OpTimeout,
		MaxReadConns: cfg.MaxConns,
		LockSuffix:   "-checkout-migrate",
		Migrate: func(ctx context.Context, db *sql.DB) error {
			return Migrate(ctx, db, sqlite.Dialect{})
		},
	})
	if err != nil {
		return nil, MapError(sqlite.Dialect{}, err)
	}
	return newStore(d, write, read, cfg)
}

// openPostgres opens PostgreSQL the way pay/postgres does
// (postgres.OpenDB) and migrates under an advisory lock of the schema.
func openPostgres(ctx context.Context, cfg Config) (*Store, error) {
	db, d, err := postgres.OpenDB(ctx, postgres.DBConfig{
		URL:             cfg.PostgresURL,
		Schema:          cfg.Schema,
		MaxConns:        cfg.MaxConns,
		ConnectTimeout:  5 * time.Second,
		ConnMaxIdleTime: 0,
		PingTimeout:     cfg.OpTimeout,
		LockKey:         "stampede.checkout.migrate:",
		Migrate: func(ctx context.Context, db *sql.DB) error {
			return Migrate(ctx, db, postgres.Dialect{})
		},
	})
	if err != nil {
		return nil, MapError(postgres.Dialect{}, err)
	}
	return newStore(d, db, nil, cfg)
}

// newStore returns a Store on the handles, or closes them.
func newStore(d Dialect, write, read *sql.DB, cfg Config) (*Store, error) {
	s, err := New(d, write, read, cfg.OpTimeout)
	if err != nil {
		write.Close()
		if read != nil && read != write {
			read.Close()
		}
		return nil, err
	}
	return s, nil
}
