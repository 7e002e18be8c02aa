package sqldb

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"time"

	_ "modernc.org/sqlite" // the "sqlite" database/sql driver
)

// Memory is the path of a private in-memory SQLite database.
const Memory = ":memory:"

// SQLiteConfig configures OpenSQLite.
type SQLiteConfig struct {
	// Path is the database file, created if missing, or Memory.
	Path string
	// BusyTimeout is the busy timeout set on every connection.
	BusyTimeout time.Duration
	// MaxReadConns bounds the read-only connections (file databases only).
	MaxReadConns int
	// Pragmas are set on every connection, after the busy timeout (and,
	// on the write connection of a file, after WAL and synchronous).
	Pragmas []string
	// WritePragmas are set on the write connection of a file only, last.
	WritePragmas []string
	// LockSuffix names the side file, Path+LockSuffix, whose exclusive
	// transaction serialises the processes migrating one file
	// (lockMigrations).
	LockSuffix string
	// Migrate applies the pending migrations to the write handle, under
	// the lock; its errors are returned as they are.
	Migrate func(ctx context.Context, db *sql.DB) error
}

// OpenSQLite opens SQLite the way every Stampede store does: writes through
// one connection whose transactions begin IMMEDIATE (WAL, synchronous
// NORMAL), reads through a pool of read-only connections; Memory opens
// one connection, kept for the database's life, used for both. It
// migrates the write handle (one process at a time for a file) before
// opening the read pool. Errors are the driver's, unmapped, except
// Migrate's; on error nothing is left open.
func OpenSQLite(ctx context.Context, c SQLiteConfig) (write, read *sql.DB, d SQLite, err error) {
	busy := fmt.Sprintf("busy_timeout(%d)", c.BusyTimeout.Milliseconds())
	pragmas := func(ps ...string) []string { return append(append([]string{busy}, ps...), c.Pragmas...) }
	if c.Path == Memory {
		db, err := sql.Open("sqlite", dsn(Memory, pragmas()...))
		if err != nil {
			return nil, nil, d, err
		}
		// The database lives as long as its one connection: keep it.
		db.SetMaxOpenConns(1)
		db.SetMaxIdleConns(1)
		db.SetConnMaxLifetime(0)
		db.SetConnMaxIdleTime(0)
		write, read = db, db
	} else {
		w, err := sql.Open("sqlite", dsn(c.Path, append(pragmas("journal_mode(WAL)", "synchronous(NORMAL)"), c.WritePragmas...)...)+"&_txlock=immediate")
		if err != nil {
			return nil, nil, d, err
		}
		w.SetMaxOpenConns(1)
		w.SetMaxIdleConns(1)
		write = w
	}
	if err := migrateLocked(ctx, write, c); err != nil {
		write.Close()
		return nil, nil, d, err
	}
	if read == nil {
		r, err := sql.Open("sqlite", dsn(c.Path, append(pragmas(), "query_only(1)")...))
		if err != nil {
			write.Close()
			return nil, nil, d, err
		}
		r.SetMaxOpenConns(c.MaxReadConns)
		r.SetMaxIdleConns(c.MaxReadConns)
		read = r
	}
	return write, read, d, nil
}

// migrateLocked runs c.Migrate, holding the migration lock of a file.
func migrateLocked(ctx context.Context, db *sql.DB, c SQLiteConfig) error {
	if c.Migrate == nil {
		return nil
	}
	if c.Path != Memory {
		unlock, err := lockMigrations(ctx, c.Path+c.LockSuffix)
		if err != nil {
			return fmt.Errorf("lock migrations: %w", err)
		}
		defer unlock()
	}
	return c.Migrate(ctx, db)
}

// dsn is the modernc.org/sqlite data source name of path with pragmas.
func dsn(path string, pragmas ...string) string {
	q := url.Values{"_pragma": pragmas}
	return path + "?" + q.Encode()
}

// lockMigrations serialises the processes that migrate the database at
// path, so that each migration is applied and recorded once: goose checks
// the version and applies a migration in two transactions, and two
// processes opening a new file together would otherwise both apply it.
// The lock is an exclusive transaction on a side file, lockPath (the
// database's path and SQLiteConfig.LockSuffix), held until unlock or the
// end of the process; a process waits for it up to a minute, or until ctx
// is done.
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
