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
	gd := map[string]goose.Dialect{"sqlite": goose.DialectSQLite3, "postgres": goose.DialectPostgres}[d.Name()]
	if gd == "" {
		return fmt.Errorf("checkout/sqlstore: no migrations for dialect %q", d.Name())
	}
	fsys, err := fs.Sub(migrations, "migrations/"+d.Name())
	if err != nil {
		return err
	}
	p, err := goose.NewProvider(gd, db, fsys, goose.WithDisableGlobalRegistry(true), goose.WithTableName(VersionTable))
	if err == nil {
		_, err = p.Up(ctx)
	}
	if err != nil {
		return MapError(d, fmt.Errorf("migrate: %w", err))
	}
	return nil
}

// sqliteDSN is path with SQLite pragmas.
func sqliteDSN(path string, pragmas ...string) string {
	return path + "?" + url.Values{"_pragma": pragmas}.Encode()
}

// openSQLite opens SQLite the way pay/sqlite does: writes through one
// connection whose transactions begin IMMEDIATE, reads through a pool of
// read-only connections (WAL); an in-memory database on one connection.
func openSQLite(ctx context.Context, cfg Config) (*Store, error) {
	d := sqlite.Dialect{}
	busy := fmt.Sprintf("busy_timeout(%d)", cfg.OpTimeout.Milliseconds())
	dsn := sqliteDSN(Memory, busy)
	if cfg.SQLitePath != Memory {
		dsn = sqliteDSN(cfg.SQLitePath, busy, "journal_mode(WAL)", "synchronous(NORMAL)") + "&_txlock=immediate"
	}
	write, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, MapError(d, err)
	}
	write.SetMaxOpenConns(1)
	write.SetMaxIdleConns(1)
	write.SetConnMaxLifetime(0)
	write.SetConnMaxIdleTime(0)
	read := write
	fail := func(err error) (*Store, error) {
		write.Close()
		if read != write {
			read.Close()
		}
		return nil, err
	}
	if err := migrateSQLite(ctx, write, cfg.SQLitePath); err != nil {
		return fail(err)
	}
	if cfg.SQLitePath != Memory {
		if read, err = sql.Open("sqlite", sqliteDSN(cfg.SQLitePath, busy, "query_only(1)")); err != nil {
			read = write
			return fail(MapError(d, err))
		}
		read.SetMaxOpenConns(cfg.MaxConns)
		read.SetMaxIdleConns(cfg.MaxConns)
	}
	s, err := New(d, write, read, cfg.OpTimeout)
	if err != nil {
		return fail(err)
	}
	return s, nil
}

// migrateSQLite migrates holding an exclusive transaction on a side file,
// path+"-checkout-migrate", so that processes opening a new file together
// apply each migration once.
func migrateSQLite(ctx context.Context, db *sql.DB, path string) error {
	d := sqlite.Dialect{}
	if path != Memory {
		lock, err := sql.Open("sqlite", sqliteDSN(path+"-checkout-migrate", "busy_timeout(60000)"))
		if err != nil {
			return MapError(d, err)
		}
		defer lock.Close()
		conn, err := lock.Conn(ctx)
		if err == nil {
			defer conn.Close()
			_, err = conn.ExecContext(ctx, "BEGIN EXCLUSIVE")
		}
		if err != nil {
			return MapError(d, fmt.Errorf("lock migrations: %w", err))
		}
		defer conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK") //nolint:errcheck // releases the lock
	}
	return Migrate(ctx, db, d)
}

// openPostgres opens PostgreSQL through pgx's database/sql driver and
// migrates under an advisory lock.
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
	pctx, cancel := context.WithTimeout(ctx, cfg.OpTimeout)
	err = db.PingContext(pctx)
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
// advisory lock on a connection of its own, so that instances starting
// together migrate one after the other.
func migratePostgres(ctx context.Context, db *sql.DB, cc *pgx.ConnConfig, schema string) error {
	lock, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return err
	}
	defer lock.Close(context.WithoutCancel(ctx))
	if _, err := lock.Exec(ctx, `SELECT pg_advisory_lock(hashtext($1))`, "stampede.checkout.migrate:"+schema); err != nil {
		return err
	}
	if schema != "" {
		if _, err := lock.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+pgx.Identifier{schema}.Sanitize()); err != nil {
			return err
		}
	}
	return Migrate(ctx, db, postgres.Dialect{})
}
