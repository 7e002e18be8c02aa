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

// VersionTable is the goose version table of fulfilment's migrations,
// apart from pay's goose_db_version.
const VersionTable = "fulfilment_goose_db_version"

// Config configures Open.
type Config struct {
	// PostgresURL, when set, selects PostgreSQL, e.g.
	// postgres://user@host:5432/db?sslmode=disable.
	PostgresURL string
	// Schema, with PostgreSQL, is the schema the tables live in (created
	// if missing; the connections' search_path). Empty uses the URL's
	// search_path, normally public.
	Schema string
	// SQLitePath is the SQLite database file (created if missing), or
	// Memory; used when PostgresURL is empty.
	SQLitePath string
	// MaxConns bounds the PostgreSQL connections, or SQLite's read-only
	// connections (SQLite writes through one).
	MaxConns int
	// OpTimeout bounds every store call, transactions included; with
	// SQLite it is also the busy timeout (how long a write waits for
	// another process's write lock).
	OpTimeout time.Duration
}

// DefaultConfig returns an in-memory SQLite database, 4 connections and a
// 2 s operation timeout.
func DefaultConfig() Config {
	return Config{SQLitePath: Memory, MaxConns: 4, OpTimeout: 2 * time.Second}
}

var identifier = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// Validate reports every invalid field; each error names its field.
func (c Config) Validate() error {
	var errs []error
	if c.PostgresURL != "" {
		if _, err := pgx.ParseConfig(c.PostgresURL); err != nil {
			errs = append(errs, fmt.Errorf("fulfilment/sqlstore: PostgresURL: %v", err))
		}
		if c.Schema != "" && !identifier.MatchString(c.Schema) {
			errs = append(errs, fmt.Errorf("fulfilment/sqlstore: Schema: must be a lower-case identifier, got %q", c.Schema))
		}
	} else {
		if strings.TrimSpace(c.SQLitePath) == "" {
			errs = append(errs, errors.New("fulfilment/sqlstore: SQLitePath: must not be empty without a PostgresURL (use \":memory:\")"))
		} else if strings.ContainsAny(c.SQLitePath, "?#") {
			errs = append(errs, fmt.Errorf("fulfilment/sqlstore: SQLitePath: must not contain '?' or '#', got %q", c.SQLitePath))
		}
		if c.Schema != "" {
			errs = append(errs, errors.New("fulfilment/sqlstore: Schema: only for PostgreSQL (set PostgresURL)"))
		}
	}
	if c.MaxConns < 1 {
		errs = append(errs, fmt.Errorf("fulfilment/sqlstore: MaxConns: must be at least 1, got %d", c.MaxConns))
	}
	if c.OpTimeout <= 0 {
		errs = append(errs, fmt.Errorf("fulfilment/sqlstore: OpTimeout: must be positive, got %s", c.OpTimeout))
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

// Migrations returns the goose migrations of a dialect ("sqlite" or
// "postgres"), one SQL file per version at the root.
func Migrations(dialect string) (fs.FS, error) { return fs.Sub(migrations, "migrations/"+dialect) }

// Migrate applies to db the migrations of d not yet applied, recording
// them in VersionTable. It takes no lock: callers that may migrate one
// database from several processes at once serialise them (Open does).
func Migrate(ctx context.Context, db *sql.DB, d Dialect) error {
	gd, ok := paysql.GooseDialect(d.Name())
	if !ok {
		return fmt.Errorf("fulfilment/sqlstore: no migrations for dialect %q", d.Name())
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
// holding an exclusive transaction on a side file, path+"-fulfilment-migrate".
func openSQLite(ctx context.Context, cfg Config) (*Store, error) {
	write, read, d, err := sqlite.OpenDB(ctx, sqlite.DBConfig{
		Path:         cfg.SQLitePath,
		BusyTimeout:  cfg.OpTimeout,
		MaxReadConns: cfg.MaxConns,
		LockSuffix:   "-fulfilment-migrate",
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
		ConnMaxIdleTime: 30 * time.Minute,
		PingTimeout:     cfg.OpTimeout,
		LockKey:         "stampede.fulfilment.migrate:",
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
