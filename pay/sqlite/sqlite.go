// Package sqlite is the embedded pay.Store: SQLite through
// modernc.org/sqlite (pure Go, no cgo), in WAL mode with a busy timeout and
// foreign keys on. It is the default when no PostgreSQL is configured.
//
// The store itself is pay/sqlstore; the SQLite dialect and how the
// database is opened are the SQL seam's (internal/sqldb: sqldb.SQLite,
// sqldb.OpenSQLite); this package is the payment store's configuration
// on SQLite and its migrations (goose, embedded).
//
// Writes go through one connection whose transactions start with BEGIN
// IMMEDIATE, so writers of this process queue in Go instead of failing with
// SQLITE_BUSY, and writers of other processes wait up to the busy timeout.
// That write lock is also what makes a status change a compare-and-set: no
// row lock is needed. Reads use a separate pool of read-only connections
// (WAL lets them run beside the writer). The path ":memory:" opens a
// private in-memory database on a single connection, for tests.
//
// A file database's WAL is checkpointed every CheckpointInterval by a
// connection of its own (checkpoint.go), never by a commit on the writer.
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
	"io/fs"
	"strings"
	"sync/atomic"
	"time"

	"github.com/pressly/goose/v3"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/internal/sqldb"
	"github.com/stampede-lab/stampede/pay"
	"github.com/stampede-lab/stampede/pay/sqlstore"
)

var _ pay.Store = (*Store)(nil)

// Memory is the path of a private in-memory database.
const Memory = sqldb.Memory

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
	// MerchantTTL is how long a merchant read is used without reading it
	// again (sqlstore.Config.MerchantTTL): a revocation or a webhook set
	// by another process applies within it; 0 reads it every time.
	MerchantTTL time.Duration
	// GroupCommit commits the write transactions of concurrent callers
	// together, up to MaxBatch at a time, one SAVEPOINT each (see
	// sqlstore.Config.GroupCommit). Every caller is still answered only
	// after the commit that holds its write.
	GroupCommit bool
	// MaxBatch bounds the write transactions of one group commit.
	MaxBatch int
}

// DefaultConfig returns a configuration for an in-memory database: a 2 s
// operation and busy timeout, 4 read connections, the wall clock,
// merchants kept for sqlstore.DefaultMerchantTTL, group commit in batches
// of up to 64.
func DefaultConfig() Config {
	return Config{
		Path:         Memory,
		OpTimeout:    sqlstore.DefaultOpTimeout,
		BusyTimeout:  sqlstore.DefaultOpTimeout,
		MaxReadConns: 4,
		Now:          time.Now,
		MerchantTTL:  sqlstore.DefaultMerchantTTL,
		GroupCommit:  true,
		MaxBatch:     sqlstore.DefaultMaxBatch,
	}
}

// Validate reports every invalid field at once, each named in snake_case
// as the flag that sets it: sqlite (Path), busy_timeout, max_read_conns,
// and the shared store's db_timeout (OpTimeout), now, max_batch.
func (c Config) Validate() error {
	var f stampede.Fields
	if strings.TrimSpace(c.Path) == "" {
		f.Add("sqlite", "must not be empty (use %q for an in-memory database)", Memory)
	} else if strings.ContainsAny(c.Path, "?#") {
		f.Add("sqlite", "must not contain '?' or '#', got %q", c.Path)
	}
	if c.BusyTimeout < 0 {
		f.Add("busy_timeout", "must not be negative, got %s", c.BusyTimeout)
	}
	if c.MaxReadConns < 1 {
		f.Add("max_read_conns", "must be at least 1, got %d", c.MaxReadConns)
	}
	f.Check("", c.store().Validate())
	return f.Err()
}

// store returns the configuration of the shared store.
func (c Config) store() sqlstore.Config {
	return sqlstore.Config{OpTimeout: c.OpTimeout, Now: c.Now, MerchantTTL: c.MerchantTTL, GroupCommit: c.GroupCommit, MaxBatch: c.MaxBatch,
		PrepareStatements: true}
}

// Store is the SQLite pay.Store.
type Store struct {
	*sqlstore.Store
	cp      *checkpointer // nil for Memory
	closeCP atomic.Bool
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
	write, read, d, err := sqldb.OpenSQLite(ctx, sqldb.SQLiteConfig{
		Path:         cfg.Path,
		BusyTimeout:  min(cfg.BusyTimeout, cfg.OpTimeout),
		MaxReadConns: cfg.MaxReadConns,
		Pragmas:      []string{"foreign_keys(1)"},
		// Savepoints (group commit) journal the pages they change in a
		// statement journal: in memory, not a temporary file. The WAL is
		// checkpointed by the checkpointer, not by the commits.
		WritePragmas: []string{"temp_store(MEMORY)", "wal_autocheckpoint(0)"},
		LockSuffix:   "-migrate",
		Migrate: func(ctx context.Context, db *sql.DB) error {
			return sqlstore.Migrate(ctx, db, sqldb.SQLite{}, goose.DialectSQLite3, fsys)
		},
	})
	if err != nil {
		return nil, sqlstore.MapError(sqldb.SQLite{}, err)
	}
	s, err := sqlstore.New(d, write, read, cfg.store())
	if err != nil {
		write.Close()
		if read != write {
			read.Close()
		}
		return nil, err
	}
	st := &Store{Store: s}
	if cfg.Path != Memory {
		if st.cp, err = startCheckpointer(cfg.Path, min(cfg.BusyTimeout, cfg.OpTimeout)); err != nil {
			s.Close()
			return nil, sqlstore.MapError(sqldb.SQLite{}, err)
		}
	}
	return st, nil
}

// Close implements pay.Store: the store's connections, then the
// checkpointer's.
func (s *Store) Close() error {
	err := s.Store.Close()
	if s.cp != nil && s.closeCP.CompareAndSwap(false, true) {
		err = errors.Join(err, s.cp.close())
	}
	return err
}

// Migrations holds the goose migrations, one SQL file per version.
//
//go:embed migrations/*.sql
var migrations embed.FS

// The first migration creates every table and index only if missing,
// so that a database created before goose (recorded in the old
// schema_migrations table, left in place) is taken over as it is.
