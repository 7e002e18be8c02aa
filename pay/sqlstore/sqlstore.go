// Package sqlstore is the one implementation of pay.Store over
// database/sql, shared by the SQLite and PostgreSQL adapters. The money
// path (CreatePending, Transition and the outbox) is written here once;
// what really differs between the databases is a Dialect: placeholders,
// how a timestamp is stored, the row lock that makes a read-then-update a
// compare-and-set, and what a unique violation or an outage looks like.
//
// The split follows River's drivers (riverdriver with riverpgxv5 and
// riverdatabasesql): the shared code speaks database/sql, an adapter
// (pay/sqlite, pay/postgres) picks its Dialect from the SQL seam
// (internal/sqldb), opens its *sql.DB handles there, runs its own
// migrations (see Migrate) and wraps a *Store.
//
// Every call runs under Config.OpTimeout: a database that does not answer
// gives a pay error with CodeUnavailable within that time, never a hang.
package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/internal/sqldb"
	"github.com/stampede-lab/stampede/pay"
)

var (
	_ pay.Store         = (*Store)(nil)
	_ pay.MerchantStore = (*Store)(nil)
	_ pay.WebhookStore  = (*Store)(nil)
)

// Dialect is what an adapter tells the shared store about its database
// (sqldb.SQLite or sqldb.Postgres): placeholders, timestamps, the row lock
// that makes reading a payment and changing it a compare-and-set, and the
// classification of driver errors.
type Dialect = sqldb.Dialect

// Config configures a Store.
type Config struct {
	// OpTimeout bounds every call, transactions included: a database that
	// does not answer within it gives CodeUnavailable.
	OpTimeout time.Duration
	// Now returns the current time; tests replace it with a fake clock.
	Now func() time.Time
	// GroupCommit runs every write transaction on one writer goroutine
	// that commits the transactions of concurrent callers together (see
	// group.go). It suits a database with a single writer (SQLite), where
	// writers queue anyway and each commit is a WAL append.
	GroupCommit bool
	// MaxBatch bounds the write transactions one group commit holds.
	MaxBatch int
	// PrepareStatements prepares every statement once on each handle
	// when the store is made (see prepared.go), for a driver that would
	// otherwise compile each statement's text on every call.
	PrepareStatements bool
	// MerchantTTL is how long a merchant read from the database is kept
	// and used without reading it again: by the API key check
	// (MerchantByKeyHash) and by a payment's events, which build a
	// webhook delivery only when the merchant has a webhook. A revocation
	// or webhook change made through this store applies at once; one made
	// by another process, within MerchantTTL. 0 reads the merchant every
	// time.
	MerchantTTL time.Duration
}

// DefaultOpTimeout is the default Config.OpTimeout.
const DefaultOpTimeout = 2 * time.Second

// DefaultMaxBatch is the default Config.MaxBatch.
const DefaultMaxBatch = 64

// DefaultConfig returns a 2 s operation timeout, the wall clock, no
// group commit (batches of up to 64 when it is turned on) and merchants
// kept for DefaultMerchantTTL.
func DefaultConfig() Config {
	return Config{OpTimeout: DefaultOpTimeout, Now: time.Now, MaxBatch: DefaultMaxBatch, MerchantTTL: DefaultMerchantTTL}
}

// Validate reports every invalid field at once, each named in snake_case
// as the flag that sets it: db_timeout (OpTimeout), now, max_batch,
// merchant_ttl.
func (c Config) Validate() error {
	var f stampede.Fields
	if c.OpTimeout <= 0 {
		f.Add("db_timeout", "must be positive, got %s", c.OpTimeout)
	}
	if c.Now == nil {
		f.Add("now", "must not be nil (use time.Now)")
	}
	if c.GroupCommit && c.MaxBatch < 1 {
		f.Add("max_batch", "must be at least 1 with group commit, got %d", c.MaxBatch)
	}
	if c.MerchantTTL < 0 {
		f.Add("merchant_ttl", "must not be negative, got %s", c.MerchantTTL)
	}
	return f.Err()
}

// Store is pay.Store over database/sql. Adapters embed it.
type Store struct {
	cfg   Config
	d     Dialect
	write *sql.DB // write transactions
	read  *sql.DB // reads; may be write
	q     queries
	rq    refundQueries
	oq    opQueries
	cq    cancelQueries
	fq    confirmQueries
	gc    *committer // nil without Config.GroupCommit
	// wst and rst are the prepared statements of write and read by
	// text; nil without Config.PrepareStatements.
	wst, rst map[string]*sql.Stmt
	closed   atomic.Bool
	// merchants is nil when Config.MerchantTTL is 0.
	merchants *merchantCache
	// writeFailed is set when a write failed as unavailable (a full
	// disk, an I/O error) and cleared by the next write that commits:
	// while it is set, Ping proves the store can write before saying
	// ready.
	writeFailed atomic.Bool
}

// New returns a Store on write (write transactions) and read (everything
// else; nil or write itself to use one pool), both already migrated. The
// Store owns the handles: Close closes them.
func New(d Dialect, write, read *sql.DB, cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if d == nil || write == nil {
		return nil, errors.New("sqlstore: New: a Dialect and a write *sql.DB are required")
	}
	if read == nil {
		read = write
	}
	s := &Store{cfg: cfg, d: d, write: write, read: read, q: newQueries(d), rq: newRefundQueries(d), oq: newOpQueries(d), cq: newCancelQueries(d), fq: newConfirmQueries(d)}
	if cfg.MerchantTTL > 0 {
		s.merchants = newMerchantCache(cfg.MerchantTTL, cfg.Now)
	}
	if cfg.PrepareStatements {
		ctx, cancel := context.WithTimeout(context.Background(), cfg.OpTimeout)
		err := s.prepare(ctx)
		cancel()
		if err != nil {
			return nil, MapError(d, fmt.Errorf("prepare statements: %w", err))
		}
	}
	if cfg.GroupCommit {
		s.gc = newCommitter(write, cfg.OpTimeout, cfg.MaxBatch)
	}
	return s, nil
}

// errClosed is the cause of every error of a closed store.
var errClosed = errors.New("store is closed")

// op returns ctx bounded by OpTimeout, or an error if the store is closed.
func (s *Store) op(ctx context.Context) (context.Context, context.CancelFunc, error) {
	if s.closed.Load() {
		return ctx, func() {}, pay.Unavailable(fmt.Errorf("%s: %w", s.d.Name(), errClosed))
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
	return ctx, cancel, nil
}

// run runs fn under the operation deadline on the read pool and maps its
// error.
func (s *Store) run(ctx context.Context, fn func(ctx context.Context, db *sql.DB) error) error {
	ctx, cancel, err := s.op(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	return s.mapErr(fn(ctx, s.read))
}

// writeTx runs fn in a write transaction under the operation deadline and
// commits it, or rolls it back when fn fails. It keeps writeFailed: set
// by a failure the store is to blame for (not the caller's deadline),
// cleared by a commit.
func (s *Store) writeTx(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error {
	err := s.writeTxOnce(ctx, fn)
	switch {
	case err == nil:
		s.writeFailed.Store(false)
	case ctx.Err() == nil && stampede.CodeOf(err) == stampede.Unavailable && !s.closed.Load():
		s.writeFailed.Store(true)
	}
	return err
}

// writeTxOnce is writeTx without the bookkeeping.
func (s *Store) writeTxOnce(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error {
	ctx, cancel, err := s.op(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	if s.gc != nil {
		err := s.gc.do(ctx, fn)
		if errors.Is(err, errClosed) {
			return pay.Unavailable(fmt.Errorf("%s: %w", s.d.Name(), err))
		}
		return s.mapErr(err)
	}
	tx, err := s.write.BeginTx(ctx, nil)
	if err != nil {
		return s.mapErr(err)
	}
	if err := fn(ctx, tx); err != nil {
		_ = tx.Rollback()
		return s.mapErr(err)
	}
	return s.mapErr(tx.Commit())
}

// readTx runs fn in a read transaction (Dialect.ReadTx) under the
// operation deadline, so that its queries see one snapshot.
func (s *Store) readTx(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error {
	ctx, cancel, err := s.op(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	tx, err := s.read.BeginTx(ctx, s.d.ReadTx())
	if err != nil {
		return s.mapErr(err)
	}
	defer tx.Rollback() //nolint:errcheck // read-only
	return s.mapErr(fn(context.WithValue(ctx, readTxKey{}, true), tx))
}

// mapErr maps err with the store's dialect.
func (s *Store) mapErr(err error) error { return MapError(s.d, err) }

// MapError turns a driver error into a pay error, using d to classify it,
// and passes pay errors through: a missed deadline or cancelled context,
// a lost connection, a closed pool and whatever d calls unavailable give
// CodeUnavailable; a unique violation gives CodeConflict; anything else
// CodeInternal. Adapters use it for what they do outside a Store (opening,
// migrating).
func MapError(d Dialect, err error) error {
	var (
		pe *pay.Error
		ic *pay.IdempotencyConflict
		oe *pay.OrderExistsError
		rc *pay.RefundConflict
	)
	switch {
	case err == nil:
		return nil
	case errors.As(err, &pe), errors.As(err, &ic), errors.As(err, &oe), errors.As(err, &rc),
		errors.Is(err, pay.ErrNotFound), errors.Is(err, pay.ErrStaleStatus):
		return err
	}
	if cause, ok := sqldb.DriverUnavailable(d, err); ok {
		return pay.Unavailable(cause)
	}
	if table, ok := d.UniqueViolation(err); ok {
		msg := "conflicting write (" + table + ")"
		if table == "payments" {
			msg = "the payment already exists"
		}
		return &pay.Error{Code: pay.CodeConflict, Message: msg, Err: err}
	}
	return pay.Internal(fmt.Errorf("%s: %w", d.Name(), err))
}

// Close implements pay.Store.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	if s.gc != nil {
		s.gc.close()
	}
	err := closeStmts(s.wst)
	if s.read != s.write {
		err = errors.Join(err, closeStmts(s.rst))
	}
	err = errors.Join(err, s.write.Close())
	if s.read != s.write {
		err = errors.Join(err, s.read.Close())
	}
	return err
}

// Ping implements pay.Store.
//
// After a write failed as unavailable (a full disk answers every write
// 503 while reads still work), Ping also writes: it creates and drops a
// table of its own in one committed transaction, which needs a new page
// and a journal write, and reports the store unavailable until that
// succeeds, so that readiness follows the ability to write.
func (s *Store) Ping(ctx context.Context) error {
	err := s.run(ctx, func(ctx context.Context, db *sql.DB) error {
		var one int
		return db.QueryRowContext(ctx, `SELECT 1`).Scan(&one)
	})
	if err != nil || !s.writeFailed.Load() {
		return err
	}
	name := "stampede_write_probe_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	return s.writeTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `CREATE TABLE `+name+` (x INTEGER)`); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO `+name+` (x) VALUES (1)`); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `DROP TABLE `+name)
		return err
	})
}
