// Package sqldb is the SQL seam of every Stampede store: the two
// dialects (SQLite through modernc.org/sqlite, PostgreSQL through pgx's
// database/sql driver) and how each is opened (OpenSQLite, OpenPostgres:
// pools, pragmas, WAL, busy timeout, connection limits), the goose
// migration runner (each store passes its own embedded migrations and its
// own version table), the classification of driver errors into
// stampede.Error (Classify, DriverUnavailable), the time encoding
// (StoreTime, TimeCol) and placeholder rebinding (Dialect.Rebind).
//
// It belongs to no part: the payment store (pay/sqlstore, opened by
// pay/sqlite and pay/postgres), checkout/sqlstore and fulfilment/sqlstore
// are built on it, each keeping its own SQL, queries and domain errors.
// Config, Spec, Open and DB are the boilerplate those stores share: one
// Config, one Open that applies a store's own migrations under a lock,
// and DB, the write and read pools under an operation deadline with one
// classification of driver errors.
package sqldb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stampede-lab/stampede"
)

// Config says which database a store opens.
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

// Validate reports every invalid field at once, each named in snake_case
// as the command-line flag that sets it: postgres (PostgresURL), schema,
// sqlite (SQLitePath), max_conns, db_timeout (OpTimeout).
func (c Config) Validate() error {
	var f stampede.Fields
	if c.PostgresURL != "" {
		if _, err := pgx.ParseConfig(c.PostgresURL); err != nil {
			f.Add("postgres", "%v", err)
		}
		if c.Schema != "" && !identifier.MatchString(c.Schema) {
			f.Add("schema", "must be a lower-case identifier, got %q", c.Schema)
		}
	} else {
		switch {
		case strings.TrimSpace(c.SQLitePath) == "":
			f.Add("sqlite", "must not be empty without a PostgreSQL URL (use %q)", Memory)
		case strings.ContainsAny(c.SQLitePath, "?#"):
			f.Add("sqlite", "must not contain '?' or '#', got %q", c.SQLitePath)
		}
		if c.Schema != "" {
			f.Add("schema", "only for PostgreSQL (set a PostgreSQL URL)")
		}
	}
	if c.MaxConns < 1 {
		f.Add("max_conns", "must be at least 1, got %d", c.MaxConns)
	}
	if c.OpTimeout <= 0 {
		f.Add("db_timeout", "must be positive, got %s", c.OpTimeout)
	}
	return f.Err()
}

// Spec describes one store to Open: its name, its migrations and the
// domain errors its classification keeps.
type Spec struct {
	// Name names the store ("checkout", "fulfilment"): its goose version
	// table is Name+"_goose_db_version", apart from pay's, so that the
	// stores may share one database.
	Name string
	// Migrations holds a directory per dialect, "migrations/sqlite" and
	// "migrations/postgres", of goose SQL files: what a store's
	// "//go:embed migrations" gives.
	Migrations fs.FS
	// Own reports whether err is already one of the store's domain errors,
	// which pass through classification unchanged. Nil: none are.
	Own func(err error) bool
	// Unavailable wraps a failure a retry may cure (CodeUnavailable).
	Unavailable func(err error) *stampede.Error
	// Conflict wraps a unique violation on table (CodeConflict). Nil: a
	// generic "conflicting write (table)".
	Conflict func(table string, err error) *stampede.Error
}

// VersionTable is the goose version table of the store's migrations.
func (s Spec) VersionTable() string { return s.Name + "_goose_db_version" }

func (s Spec) validate() error {
	switch {
	case !identifier.MatchString(s.Name):
		return fmt.Errorf("sqldb: Spec.Name: must be a lower-case identifier, got %q", s.Name)
	case s.Migrations == nil:
		return errors.New("sqldb: Spec.Migrations: required")
	case s.Unavailable == nil:
		return errors.New("sqldb: Spec.Unavailable: required")
	}
	return nil
}

// MapError classifies err for the store: its own errors pass through,
// the rest as Classify says.
func (s Spec) MapError(d Dialect, err error) error {
	if err == nil {
		return nil
	}
	if s.Own != nil && s.Own(err) {
		return err
	}
	return Classify(d, err, s.Unavailable, s.Conflict)
}

// Migrate applies to db the migrations of spec for d not yet applied,
// recording them in spec.VersionTable. It takes no lock: Open serialises
// processes that migrate one database at once.
func Migrate(ctx context.Context, db *sql.DB, d Dialect, spec Spec) error {
	gd, ok := GooseDialect(d.Name())
	if !ok {
		return fmt.Errorf("sqldb: %s: no migrations for dialect %q", spec.Name, d.Name())
	}
	fsys, err := fs.Sub(spec.Migrations, "migrations/"+d.Name())
	if err != nil {
		return err
	}
	return spec.MapError(d, MigrateTable(ctx, db, gd, fsys, spec.VersionTable()))
}

// Open opens the database cfg names and applies spec's pending migrations.
//
// SQLite is opened with OpenSQLite: writes through
// one connection whose transactions begin IMMEDIATE, reads through a pool
// of read-only connections (WAL), an in-memory database on one connection;
// processes opening a new file together migrate one at a time, holding an
// exclusive transaction on a side file, path+"-NAME-migrate". PostgreSQL is
// opened with OpenPostgres and migrated under an advisory lock of the
// schema. An unreachable database is an error with
// CodeUnavailable.
func Open(ctx context.Context, cfg Config, spec Spec) (*DB, error) {
	if err := spec.validate(); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("%s/sqlstore: %w", spec.Name, err)
	}
	if cfg.PostgresURL != "" {
		db, d, err := OpenPostgres(ctx, PostgresConfig{
			URL:             cfg.PostgresURL,
			Schema:          cfg.Schema,
			MaxConns:        cfg.MaxConns,
			ConnectTimeout:  5 * time.Second,
			ConnMaxIdleTime: 30 * time.Minute,
			PingTimeout:     cfg.OpTimeout,
			LockKey:         "stampede." + spec.Name + ".migrate:",
			Migrate: func(ctx context.Context, db *sql.DB) error {
				return Migrate(ctx, db, Postgres{}, spec)
			},
		})
		if err != nil {
			return nil, spec.MapError(Postgres{}, err)
		}
		return newOrClose(d, db, nil, cfg.OpTimeout, spec)
	}
	write, read, d, err := OpenSQLite(ctx, SQLiteConfig{
		Path:         cfg.SQLitePath,
		BusyTimeout:  cfg.OpTimeout,
		MaxReadConns: cfg.MaxConns,
		LockSuffix:   "-" + spec.Name + "-migrate",
		Migrate: func(ctx context.Context, db *sql.DB) error {
			return Migrate(ctx, db, SQLite{}, spec)
		},
	})
	if err != nil {
		return nil, spec.MapError(SQLite{}, err)
	}
	return newOrClose(d, write, read, cfg.OpTimeout, spec)
}

// newOrClose returns a DB on the handles, or closes them.
func newOrClose(d Dialect, write, read *sql.DB, opTimeout time.Duration, spec Spec) (*DB, error) {
	db, err := New(d, write, read, opTimeout, spec)
	if err != nil {
		write.Close()
		if read != nil && read != write {
			read.Close()
		}
		return nil, err
	}
	return db, nil
}

// DB is a store's write and read pools under an operation deadline: every
// call is bounded by OpTimeout, and its error classified by the Spec.
type DB struct {
	d      Dialect
	write  *sql.DB
	read   *sql.DB
	opTime time.Duration
	spec   Spec
	closed atomic.Bool
}

// New returns a DB on write (write transactions) and read (reads; nil to
// use write), both already migrated (see Migrate), with opTimeout bounding
// every call. The DB owns the handles: Close closes them.
func New(d Dialect, write, read *sql.DB, opTimeout time.Duration, spec Spec) (*DB, error) {
	if err := spec.validate(); err != nil {
		return nil, err
	}
	if d == nil || write == nil {
		return nil, fmt.Errorf("%s/sqlstore: New: a Dialect and a write *sql.DB are required", spec.Name)
	}
	if opTimeout <= 0 {
		return nil, fmt.Errorf("%s/sqlstore: OpTimeout: must be positive, got %s", spec.Name, opTimeout)
	}
	if read == nil {
		read = write
	}
	return &DB{d: d, write: write, read: read, opTime: opTimeout, spec: spec}, nil
}

// Dialect returns the database's dialect.
func (db *DB) Dialect() Dialect { return db.d }

// MapError classifies err as the Spec says.
func (db *DB) MapError(err error) error { return db.spec.MapError(db.d, err) }

var errClosed = errors.New("store is closed")

// op bounds ctx by the operation timeout, or fails if the DB is closed.
func (db *DB) op(ctx context.Context) (context.Context, context.CancelFunc, error) {
	if db.closed.Load() {
		return ctx, func() {}, db.spec.Unavailable(fmt.Errorf("%s: %w", db.d.Name(), errClosed))
	}
	ctx, cancel := context.WithTimeout(ctx, db.opTime)
	return ctx, cancel, nil
}

// Update runs fn in one write transaction under the operation deadline:
// committed if fn returns nil, rolled back otherwise.
func (db *DB) Update(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error {
	ctx, cancel, err := db.op(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	tx, err := db.write.BeginTx(ctx, nil)
	if err != nil {
		return db.MapError(err)
	}
	if err := fn(ctx, tx); err != nil {
		_ = tx.Rollback()
		return db.MapError(err)
	}
	return db.MapError(tx.Commit())
}

// Read runs fn on the read pool under the operation deadline.
func (db *DB) Read(ctx context.Context, fn func(ctx context.Context, pool *sql.DB) error) error {
	ctx, cancel, err := db.op(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	return db.MapError(fn(ctx, db.read))
}

// Ping checks that the database answers a read within the deadline.
func (db *DB) Ping(ctx context.Context) error {
	return db.Read(ctx, func(ctx context.Context, pool *sql.DB) error {
		var one int
		return pool.QueryRowContext(ctx, `SELECT 1`).Scan(&one)
	})
}

// Close closes the pools; later calls fail with CodeUnavailable. Closing
// twice is harmless.
func (db *DB) Close() error {
	if db.closed.Swap(true) {
		return nil
	}
	err := db.write.Close()
	if db.read != db.write {
		err = errors.Join(err, db.read.Close())
	}
	return err
}
