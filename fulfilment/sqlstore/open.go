package sqlstore

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	_ "modernc.org/sqlite" // the "sqlite" database/sql driver

	"github.com/stampede-lab/stampede/pay/postgres"
	"github.com/stampede-lab/stampede/pay/sqlite"
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
	var gd goose.Dialect
	switch d.Name() {
	case "sqlite":
		gd = goose.DialectSQLite3
	case "postgres":
		gd = goose.DialectPostgres
	default:
		return fmt.Errorf("fulfilment/sqlstore: no migrations for dialect %q", d.Name())
	}
	fsys, err := Migrations(d.Name())
	if err != nil {
		return err
	}
	p, err := goose.NewProvider(gd, db, fsys, goose.WithDisableGlobalRegistry(true), goose.WithTableName(VersionTable))
	if err != nil {
		return MapError(d, fmt.Errorf("migrations: %w", err))
	}
	if _, err := p.Up(ctx); err != nil {
		return MapError(d, fmt.Errorf("migrate: %w", err))
	}
	return nil
}

func sqliteDSN(path string, pragmas ...string) string {
	return path + "?" + url.Values{"_pragma": pragmas}.Encode()
}

// openSQLite opens SQLite as pay/sqlite does: writes through one
// connection whose transactions begin IMMEDIATE, reads through a pool of
// read-only connections (WAL); an in-memory database on one connection.
func openSQLite(ctx context.Context, cfg Config) (*Store, error) {
	d := sqlite.Dialect{}
	busy := fmt.Sprintf("busy_timeout(%d)", cfg.OpTimeout.Milliseconds())
	var write, read *sql.DB
	if cfg.SQLitePath == Memory {
		db, err := sql.Open("sqlite", sqliteDSN(Memory, busy))
		if err != nil {
			return nil, MapError(d, err)
		}
		db.SetMaxOpenConns(1)
		db.SetMaxIdleConns(1)
		db.SetConnMaxLifetime(0)
		db.SetConnMaxIdleTime(0)
		write, read = db, db
	} else {
		w, err := sql.Open("sqlite", sqliteDSN(cfg.SQLitePath, busy, "journal_mode(WAL)", "synchronous(NORMAL)")+"&_txlock=immediate")
		if err != nil {
			return nil, MapError(d, err)
		}
		w.SetMaxOpenConns(1)
		w.SetMaxIdleConns(1)
		write = w
	}
	if err := migrateSQLite(ctx, write, cfg.SQLitePath); err != nil {
		write.Close()
		return nil, err
	}
	if read == nil {
		r, err := sql.Open("sqlite", sqliteDSN(cfg.SQLitePath, busy, "query_only(1)"))
		if err != nil {
			write.Close()
			return nil, MapError(d, err)
		}
		r.SetMaxOpenConns(cfg.MaxConns)
		r.SetMaxIdleConns(cfg.MaxConns)
		read = r
	}
	s, err := New(d, write, read, cfg.OpTimeout)
	if err != nil {
		write.Close()
		if read != write {
			read.Close()
		}
		return nil, err
	}
	return s, nil
}

// migrateSQLite migrates the database at path holding an exclusive
// transaction on a side file, path+"-fulfilment-migrate", so that
// processes opening a new file together apply each migration once (goose
// reads the version and applies a migration in separate transactions).
func migrateSQLite(ctx context.Context, db *sql.DB, path string) error {
	d := sqlite.Dialect{}
	if path != Memory {
		lock, err := sql.Open("sqlite", sqliteDSN(path+"-fulfilment-migrate", "busy_timeout(60000)"))
		if err != nil {
			return MapError(d, err)
		}
		defer lock.Close()
		lock.SetMaxOpenConns(1)
		conn, err := lock.Conn(ctx)
		if err != nil {
			return MapError(d, fmt.Errorf("lock migrations: %w", err))
		}
		defer conn.Close()
		if _, err := conn.ExecContext(ctx, "BEGIN EXCLUSIVE"); err != nil {
			return MapError(d, fmt.Errorf("lock migrations: %w", err))
		}
		defer conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK") //nolint:errcheck // releases the lock
	}
	return Migrate(ctx, db, d)
}

// openPostgres opens PostgreSQL through pgx's database/sql driver, as
// pay/postgres does, and migrates under an advisory lock.
func openPostgres(ctx context.Context, cfg Config) (*Store, error) {
	d := postgres.Dialect{}
	cc, err := pgx.ParseConfig(cfg.PostgresURL)
	if err != nil {
		return nil, err
	}
	if cc.ConnectTimeout == 0 {
		cc.ConnectTimeout = 5 * time.Second
	}
	if cfg.Schema != "" {
		cc.RuntimeParams["search_path"] = cfg.Schema
	}
	db := stdlib.OpenDB(*cc)
	db.SetMaxOpenConns(cfg.MaxConns)
	db.SetMaxIdleConns(cfg.MaxConns)
	db.SetConnMaxLifetime(time.Hour)
	db.SetConnMaxIdleTime(30 * time.Minute)
	pingCtx, cancel := context.WithTimeout(ctx, cfg.OpTimeout)
	err = db.PingContext(pingCtx)
	cancel()
	if err == nil {
		err = migratePostgres(ctx, db, cc, cfg.Schema)
	}
	if err != nil {
		db.Close()
		return nil, MapError(d, err)
	}
	s, err := New(d, db, nil, cfg.OpTimeout)
	if err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// migratePostgres creates the schema if missing and migrates, holding an
// advisory lock of the schema on a connection of its own, so that
// instances starting together migrate one after the other.
func migratePostgres(ctx context.Context, db *sql.DB, cc *pgx.ConnConfig, schema string) error {
	lock, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return err
	}
	defer lock.Close(context.WithoutCancel(ctx)) // ends the session and its lock
	if _, err := lock.Exec(ctx, `SELECT pg_advisory_lock(hashtext($1))`, "stampede.fulfilment.migrate:"+schema); err != nil {
		return err
	}
	if schema != "" {
		if _, err := lock.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+pgx.Identifier{schema}.Sanitize()); err != nil {
			return err
		}
	}
	return Migrate(ctx, db, postgres.Dialect{})
}
