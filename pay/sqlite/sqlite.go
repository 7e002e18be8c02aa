// Package sqlite is the embedded pay.Store: SQLite through
// modernc.org/sqlite (pure Go, no cgo), in WAL mode with a busy timeout and
// foreign keys on. It is the default when no PostgreSQL is configured.
//
// The store itself is pay/sqlstore; this package is its SQLite dialect,
// its migrations (goose, embedded) and how the database is opened.
//
// Writes go through one connection whose transactions start with BEGIN
// IMMEDIATE, so writers of this process queue in Go instead of failing with
// SQLITE_BUSY, and writers of other processes wait up to the busy timeout.
// That write lock is also what makes a status change a compare-and-set: no
// row lock is needed. Reads use a separate pool of read-only connections
// (WAL lets them run beside the writer). The path ":memory:" opens a
// private in-memory database on a single connection, for tests.
//
// By default (Config.GroupCommit) one writer goroutine runs the write
// transactions of concurrent callers in one BEGIN IMMEDIATE ... COMMIT,
// each in its own SAVEPOINT, and answers each caller after that COMMIT:
// one WAL append and one commit for a batch instead of one each, and a
// failing write rolled back alone. Every statement is prepared once
// (sqlstore.Config.PrepareStatements): modernc.org/sqlite would otherwise
// compile its text on every call. Durability is what WAL with synchronous
// NORMAL gives, batched or not: a commit survives the process crashing
// (it is in the WAL file when COMMIT returns), and is fsynced at the next
// checkpoint, so a power loss may lose the last commits.
package sqlite

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

	"github.com/pressly/goose/v3"
	sqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/stampede-lab/stampede/pay"
	"github.com/stampede-lab/stampede/pay/sqlstore"
)

var _ pay.Store = (*Store)(nil)

var _ sqlstore.Dialect = Dialect{}

// Memory is the path of a private in-memory database.
const Memory = ":memory:"

// Config configures a Store.
type Config struct {
	// Path is the database file, created if missing, or Memory.
	Path string
	// OpTimeout bounds every store call: a database that does not answer
	// within it (a write lock held elsewhere, say) gives CodeUnavailable.
	OpTimeout time.Duration
	// BusyTimeout is how long a write waits for another process's write
	// lock before failing with CodeUnavailable. The busy timeout set on
	// the connections is the smaller of BusyTimeout and OpTimeout.
	BusyTimeout time.Duration
	// MaxReadConns bounds the read-only connections (file databases only).
	MaxReadConns int
	// Now returns the current time; tests replace it with a fake clock.
	Now func() time.Time
	// GroupCommit commits the write transactions of concurrent callers
	// together, up to MaxBatch at a time, one SAVEPOINT each (see
	// sqlstore.Config.GroupCommit). Every caller is still answered only
	// after the commit that holds its write.
	GroupCommit bool
	// MaxBatch bounds the write transactions of one group commit.
	MaxBatch int
}

// DefaultConfig returns a configuration for an in-memory database: a 2 s
// operation and busy timeout, 4 read connections, the wall clock, group
// commit in batches of up to 64.
func DefaultConfig() Config {
	return Config{
		Path:         Memory,
		OpTimeout:    sqlstore.DefaultOpTimeout,
		BusyTimeout:  sqlstore.DefaultOpTimeout,
		MaxReadConns: 4,
		Now:          time.Now,
		GroupCommit:  true,
		MaxBatch:     sqlstore.DefaultMaxBatch,
	}
}

// Validate reports every invalid field; each error names its field.
func (c Config) Validate() error {
	var errs []error
	if strings.TrimSpace(c.Path) == "" {
		errs = append(errs, errors.New("sqlite: Path: must not be empty (use \":memory:\" for an in-memory database)"))
	} else if strings.ContainsAny(c.Path, "?#") {
		errs = append(errs, fmt.Errorf("sqlite: Path: must not contain '?' or '#', got %q", c.Path))
	}
	if c.BusyTimeout < 0 {
		errs = append(errs, fmt.Errorf("sqlite: BusyTimeout: must not be negative, got %s", c.BusyTimeout))
	}
	if c.MaxReadConns < 1 {
		errs = append(errs, fmt.Errorf("sqlite: MaxReadConns: must be at least 1, got %d", c.MaxReadConns))
	}
	// OpTimeout and Now are the shared store's.
	errs = append(errs, c.store().Validate())
	return errors.Join(errs...)
}

// store returns the configuration of the shared store.
func (c Config) store() sqlstore.Config {
	return sqlstore.Config{OpTimeout: c.OpTimeout, Now: c.Now, GroupCommit: c.GroupCommit, MaxBatch: c.MaxBatch,
		PrepareStatements: true}
}

// Store is the SQLite pay.Store.
type Store struct {
	*sqlstore.Store
}

// Open opens (creating if needed) the database at path with the default
// configuration and applies the migrations.
func Open(path string) (*Store, error) {
	cfg := DefaultConfig()
	cfg.Path = path
	return OpenConfig(context.Background(), cfg)
}

// OpenConfig opens the database cfg describes and applies the migrations.
func OpenConfig(ctx context.Context, cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	fsys, err := fs.Sub(migrations, "migrations")
	if err != nil {
		return nil, pay.Internal(err)
	}
	write, read, _, err := OpenDB(ctx, DBConfig{
		Path:         cfg.Path,
		BusyTimeout:  min(cfg.BusyTimeout, cfg.OpTimeout),
		MaxReadConns: cfg.MaxReadConns,
		Pragmas:      []string{"foreign_keys(1)"},
		// Savepoints (group commit) journal the pages they change in a
		// statement journal: in memory, not a temporary file.
		WritePragmas: []string{"temp_store(MEMORY)"},
		LockSuffix:   "-migrate",
		Migrate: func(ctx context.Context, db *sql.DB) error {
			return sqlstore.Migrate(ctx, db, Dialect{}, goose.DialectSQLite3, fsys)
		},
	})
	if err != nil {
		return nil, sqlstore.MapError(Dialect{}, err)
	}
	s, err := sqlstore.New(Dialect{}, write, read, cfg.store())
	if err != nil {
		write.Close()
		if read != write {
			read.Close()
		}
		return nil, err
	}
	return &Store{Store: s}, nil
}

func dsn(path string, pragmas ...string) string {
	q := url.Values{"_pragma": pragmas}
	return path + "?" + q.Encode()
}

// Migrations holds the goose migrations, one SQL file per version.
//
//go:embed migrations/*.sql
var migrations embed.FS

// The first migration creates every table and index only if missing,
// so that a database created before goose (recorded in the old
// schema_migrations table, left in place) is taken over as it is.

// lockMigrations serialises the processes that migrate the database at
// path, so that each migration is applied and recorded once: goose checks
// the version and applies a migration in two transactions, and two
// processes opening a new file together would otherwise both apply it.
// The lock is an exclusive transaction on a side file, lockPath (the
// database's path and DBConfig.LockSuffix), held until unlock or the end
// of the process; a process waits for it up to a minute, or until ctx is
// done.
func lockMigrations(ctx context.Context, lockPath string) (unlock func(), err error) {
	db, err := sql.Open("sqlite", dsn(lockPath, "busy_timeout(60000)"))
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	conn, err := db.Conn(ctx)
	if err == nil {
		if _, err = conn.ExecContext(ctx, "BEGIN EXCLUSIVE"); err != nil {
			conn.Close()
		}
	}
	if err != nil {
		db.Close()
		return nil, err
	}
	return func() {
		_, _ = conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
		conn.Close()
		db.Close()
	}, nil
}

// Dialect is the SQLite sqlstore.Dialect: numbered ?NNN placeholders,
// times as INTEGER microseconds since the Unix epoch, no row lock (the
// write transaction's BEGIN IMMEDIATE excludes every other writer).
type Dialect struct{}

// Name implements sqlstore.Dialect.
func (Dialect) Name() string { return "sqlite" }

var dollar = regexp.MustCompile(`\$([0-9]+)`)

// Rebind implements sqlstore.Dialect: $n becomes ?n, SQLite's numbered
// parameter.
func (Dialect) Rebind(query string) string { return dollar.ReplaceAllString(query, "?$1") }

// LockRow implements sqlstore.Dialect.
func (Dialect) LockRow() string { return "" }

// ReadTx implements sqlstore.Dialect: a deferred (not IMMEDIATE)
// transaction, which in WAL mode reads one snapshot.
func (Dialect) ReadTx() *sql.TxOptions { return &sql.TxOptions{ReadOnly: true} }

// EncodeTime implements sqlstore.Dialect.
func (Dialect) EncodeTime(t time.Time) any { return t.UnixMicro() }

// DecodeTime implements sqlstore.Dialect.
func (Dialect) DecodeTime(src any) (time.Time, error) {
	us, ok := src.(int64)
	if !ok {
		return time.Time{}, fmt.Errorf("want INTEGER microseconds, got %T", src)
	}
	return time.UnixMicro(us).UTC(), nil
}

// UniqueViolation implements sqlstore.Dialect; the table is read from
// SQLite's message ("UNIQUE constraint failed: payments.id").
func (Dialect) UniqueViolation(err error) (string, bool) {
	var se *sqlite.Error
	if !errors.As(err, &se) || (se.Code() != sqlite3.SQLITE_CONSTRAINT_UNIQUE && se.Code() != sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY) {
		return "", false
	}
	msg := se.Error()
	if i := strings.LastIndex(msg, "failed: "); i >= 0 {
		msg = msg[i+len("failed: "):]
	}
	table, _, _ := strings.Cut(msg, ".")
	return table, true
}

// Unavailable implements sqlstore.Dialect: busy, locked, I/O and
// resource errors.
func (Dialect) Unavailable(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	switch se.Code() & 0xff {
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_IOERR,
		sqlite3.SQLITE_FULL, sqlite3.SQLITE_NOMEM, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_PROTOCOL,
		sqlite3.SQLITE_INTERRUPT:
		return true
	}
	return false
}
