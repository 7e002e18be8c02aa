// Package sqlite is the embedded pay.Store: SQLite through
// modernc.org/sqlite (pure Go, no cgo), in WAL mode with a busy timeout and
// foreign keys on. It is the default when no PostgreSQL is configured.
//
// Writes go through one connection whose transactions start with BEGIN
// IMMEDIATE, so writers of this process queue in Go instead of failing with
// SQLITE_BUSY, and writers of other processes wait up to the busy timeout.
// Reads use a separate pool of read-only connections (WAL lets them run
// beside the writer). The path ":memory:" opens a private in-memory
// database on a single connection, for tests.
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	sqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/stampede-lab/stampede/pay"
)

var _ pay.Store = (*Store)(nil)

// Memory is the path of a private in-memory database.
const Memory = ":memory:"

// Config configures a Store.
type Config struct {
	// Path is the database file, created if missing, or Memory.
	Path string
	// BusyTimeout is how long a write waits for another process's write
	// lock before failing with CodeUnavailable.
	BusyTimeout time.Duration
	// MaxReadConns bounds the read-only connections (file databases only).
	MaxReadConns int
	// Now returns the current time; tests replace it with a fake clock.
	Now func() time.Time
}

// DefaultConfig returns a configuration for an in-memory database: 5 s
// busy timeout, 4 read connections, the wall clock.
func DefaultConfig() Config {
	return Config{Path: Memory, BusyTimeout: 5 * time.Second, MaxReadConns: 4, Now: time.Now}
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
	if c.Now == nil {
		errs = append(errs, errors.New("sqlite: Now: must not be nil (use time.Now)"))
	}
	return errors.Join(errs...)
}

// Store is the SQLite pay.Store.
type Store struct {
	cfg    Config
	write  *sql.DB // one connection, BEGIN IMMEDIATE
	read   *sql.DB // read-only connections; the write pool for Memory
	closed atomic.Bool
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
	s := &Store{cfg: cfg}
	busy := fmt.Sprintf("busy_timeout(%d)", cfg.BusyTimeout.Milliseconds())
	if cfg.Path == Memory {
		db, err := sql.Open("sqlite", dsn(Memory, busy, "foreign_keys(1)"))
		if err != nil {
			return nil, mapErr(err)
		}
		// The database lives as long as its one connection: keep it.
		db.SetMaxOpenConns(1)
		db.SetMaxIdleConns(1)
		db.SetConnMaxLifetime(0)
		db.SetConnMaxIdleTime(0)
		s.write, s.read = db, db
	} else {
		w, err := sql.Open("sqlite", dsn(cfg.Path, busy, "journal_mode(WAL)", "synchronous(NORMAL)", "foreign_keys(1)")+"&_txlock=immediate")
		if err != nil {
			return nil, mapErr(err)
		}
		w.SetMaxOpenConns(1)
		w.SetMaxIdleConns(1)
		s.write = w
	}
	if err := s.migrate(ctx); err != nil {
		s.write.Close()
		return nil, err
	}
	if s.read == nil {
		r, err := sql.Open("sqlite", dsn(cfg.Path, busy, "foreign_keys(1)", "query_only(1)"))
		if err != nil {
			s.write.Close()
			return nil, mapErr(err)
		}
		r.SetMaxOpenConns(cfg.MaxReadConns)
		r.SetMaxIdleConns(cfg.MaxReadConns)
		s.read = r
	}
	return s, nil
}

func dsn(path string, pragmas ...string) string {
	q := url.Values{"_pragma": pragmas}
	return path + "?" + q.Encode()
}

//go:embed migrations/*.sql
var migrations embed.FS

// migrate applies the migrations not yet recorded in schema_migrations,
// each in its own transaction, in file-name order.
func (s *Store) migrate(ctx context.Context) error {
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return pay.Internal(err)
	}
	slices.Sort(names)
	if _, err := s.write.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    TEXT PRIMARY KEY,
		applied_at INTEGER NOT NULL
	)`); err != nil {
		return mapErr(fmt.Errorf("create schema_migrations: %w", err))
	}
	for _, name := range names {
		version := strings.TrimSuffix(strings.TrimPrefix(name, "migrations/"), ".sql")
		body, err := migrations.ReadFile(name)
		if err != nil {
			return pay.Internal(err)
		}
		err = s.writeTx(ctx, func(tx *sql.Tx) error {
			var n int
			if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM schema_migrations WHERE version = ?`, version).Scan(&n); err != nil || n > 0 {
				return err
			}
			if _, err := tx.ExecContext(ctx, string(body)); err != nil {
				return fmt.Errorf("migration %s: %w", version, err)
			}
			_, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)`, version, micros(s.cfg.Now()))
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

var errClosed = errors.New("sqlite: store is closed")

// writeTx runs fn in a write transaction (BEGIN IMMEDIATE) and commits it,
// or rolls it back when fn fails.
func (s *Store) writeTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	if s.closed.Load() {
		return pay.Unavailable(errClosed)
	}
	tx, err := s.write.BeginTx(ctx, nil)
	if err != nil {
		return mapErr(err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return mapErr(err)
	}
	return mapErr(tx.Commit())
}

// readTx runs fn in a read transaction, so that its queries see one
// snapshot.
func (s *Store) readTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	if s.closed.Load() {
		return pay.Unavailable(errClosed)
	}
	tx, err := s.read.BeginTx(ctx, &sql.TxOptions{ReadOnly: s.read != s.write})
	if err != nil {
		return mapErr(err)
	}
	defer tx.Rollback() //nolint:errcheck // read-only
	return mapErr(fn(tx))
}

// mapErr turns driver errors into pay errors and passes pay errors
// through.
func mapErr(err error) error {
	var (
		pe *pay.Error
		ic *pay.IdempotencyConflict
		se *sqlite.Error
	)
	switch {
	case err == nil:
		return nil
	case errors.As(err, &pe), errors.As(err, &ic),
		errors.Is(err, pay.ErrNotFound), errors.Is(err, pay.ErrStaleStatus):
		return err
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return &pay.Error{Code: pay.CodeUnavailable, Message: "the store did not answer in time", Err: err}
	case errors.Is(err, sql.ErrConnDone), errors.Is(err, errClosed), strings.Contains(err.Error(), "database is closed"):
		return pay.Unavailable(err)
	case errors.As(err, &se):
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_IOERR,
			sqlite3.SQLITE_FULL, sqlite3.SQLITE_NOMEM, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_PROTOCOL:
			return pay.Unavailable(err)
		case sqlite3.SQLITE_CONSTRAINT:
			if se.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE || se.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY {
				msg := "conflicting write"
				if strings.Contains(se.Error(), "payments.id") || strings.Contains(se.Error(), "payments.external_key") {
					msg = "the payment already exists"
				}
				return &pay.Error{Code: pay.CodeConflict, Message: msg, Err: err}
			}
		}
	}
	return pay.Internal(err)
}

func isUnique(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && (se.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE || se.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY)
}

func micros(t time.Time) int64 { return t.UnixMicro() }

func fromMicros(us int64) time.Time { return time.UnixMicro(us).UTC() }

type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

const paymentCols = `id, merchant_id, order_id, amount, currency, status, external_key, idempotency_key,
	manual_review, review_reason, created_at, updated_at, event_seq`

// scanPayment scans paymentCols; it returns the payment's last event seq.
func scanPayment(row interface{ Scan(...any) error }) (pay.Payment, int64, error) {
	var (
		p                  pay.Payment
		status             string
		created, updated   int64
		seq                int64
		manualReview       bool
		reviewReason, okey string
	)
	err := row.Scan(&p.ID, &p.MerchantID, &p.OrderID, &p.Amount, &p.Currency, &status, &p.ExternalKey, &okey,
		&manualReview, &reviewReason, &created, &updated, &seq)
	if errors.Is(err, sql.ErrNoRows) {
		return p, 0, pay.ErrNotFound
	}
	if err != nil {
		return p, 0, err
	}
	p.Status = pay.Status(status)
	p.IdempotencyKey = okey
	p.ManualReview, p.ReviewReason = manualReview, reviewReason
	p.CreatedAt, p.UpdatedAt = fromMicros(created), fromMicros(updated)
	return p, seq, nil
}

func getPayment(ctx context.Context, q querier, id string) (pay.Payment, int64, error) {
	p, seq, err := scanPayment(q.QueryRowContext(ctx, `SELECT `+paymentCols+` FROM payments WHERE id = ?`, id))
	if errors.Is(err, pay.ErrNotFound) {
		return p, 0, fmt.Errorf("payment %q: %w", id, pay.ErrNotFound)
	}
	return p, seq, err
}

func history(ctx context.Context, q querier, id string) ([]pay.StatusChange, error) {
	rows, err := q.QueryContext(ctx, `SELECT from_status, to_status, reason, at FROM payment_history WHERE payment_id = ? ORDER BY id`, id)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []pay.StatusChange
	for rows.Next() {
		var (
			c        pay.StatusChange
			from, to string
			at       int64
		)
		if err := rows.Scan(&from, &to, &c.Reason, &at); err != nil {
			return nil, err
		}
		c.From, c.To, c.At = pay.Status(from), pay.Status(to), fromMicros(at)
		out = append(out, c)
	}
	return out, rows.Err()
}

func listPayments(ctx context.Context, q querier, query string, args ...any) ([]pay.Payment, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []pay.Payment{}
	for rows.Next() {
		p, _, err := scanPayment(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

func insertHistory(ctx context.Context, tx *sql.Tx, id string, c pay.StatusChange) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO payment_history (payment_id, from_status, to_status, reason, at) VALUES (?, ?, ?, ?, ?)`,
		id, string(c.From), string(c.To), c.Reason, micros(c.At))
	return err
}

func insertOutbox(ctx context.Context, tx *sql.Tx, e pay.OutboxEvent) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO outbox (payment_id, seq, type, payload, created_at) VALUES (?, ?, ?, ?, ?)`,
		e.PaymentID, e.Seq, e.Type, string(e.Payload), micros(e.CreatedAt))
	return err
}

const idemCols = `key, request_hash, payment_id, state, response_code, response_body, created_at, expires_at`

func getIdempotency(ctx context.Context, q querier, key string) (pay.IdempotencyRecord, error) {
	var (
		r                pay.IdempotencyRecord
		state            string
		created, expires int64
	)
	err := q.QueryRowContext(ctx, `SELECT `+idemCols+` FROM idempotency_keys WHERE key = ?`, key).
		Scan(&r.Key, &r.RequestHash, &r.PaymentID, &state, &r.ResponseCode, &r.ResponseBody, &created, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return r, fmt.Errorf("idempotency key %q: %w", key, pay.ErrNotFound)
	}
	if err != nil {
		return r, err
	}
	r.State = pay.IdempotencyState(state)
	r.CreatedAt, r.ExpiresAt = fromMicros(created), fromMicros(expires)
	return r, nil
}

func checkResponse(resp pay.StoredResponse) error {
	if resp.Code < 100 || resp.Code > 599 {
		return pay.Invalid("code", "must be an HTTP status, got %d", resp.Code)
	}
	return nil
}

// CreatePending implements pay.Store.
func (s *Store) CreatePending(ctx context.Context, p pay.Payment, idem pay.IdempotencyRecord) (pay.Payment, error) {
	p, idem, err := pay.PrepareCreate(p, idem, s.cfg.Now())
	if err != nil {
		return pay.Payment{}, err
	}
	err = s.writeTx(ctx, func(tx *sql.Tx) error {
		// The key first: a live record means nothing else is written. An
		// expired one is replaced.
		res, err := tx.ExecContext(ctx, `INSERT INTO idempotency_keys (`+idemCols+`)
			VALUES (?, ?, ?, ?, 0, NULL, ?, ?)
			ON CONFLICT (key) DO UPDATE SET
				request_hash = excluded.request_hash, payment_id = excluded.payment_id, state = excluded.state,
				response_code = 0, response_body = NULL, created_at = excluded.created_at, expires_at = excluded.expires_at
			WHERE idempotency_keys.expires_at <= excluded.created_at`,
			idem.Key, idem.RequestHash, idem.PaymentID, string(idem.State), micros(idem.CreatedAt), micros(idem.ExpiresAt))
		var n int64
		if err == nil {
			n, err = res.RowsAffected()
		} else if isUnique(err) {
			err, n = nil, 0
		}
		if err != nil {
			return err
		}
		if n == 0 {
			rec, err := getIdempotency(ctx, tx, idem.Key)
			if err != nil {
				return err
			}
			return &pay.IdempotencyConflict{Record: rec}
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO payments (`+paymentCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1)`,
			p.ID, p.MerchantID, p.OrderID, p.Amount, p.Currency, string(p.Status), p.ExternalKey, p.IdempotencyKey,
			p.ManualReview, p.ReviewReason, micros(p.CreatedAt), micros(p.UpdatedAt)); err != nil {
			return err
		}
		if err := insertHistory(ctx, tx, p.ID, p.History[0]); err != nil {
			return err
		}
		return insertOutbox(ctx, tx, pay.NewEvent(pay.EventCreated, p, 1, "", pay.ReasonCreated, p.CreatedAt))
	})
	if err != nil {
		return pay.Payment{}, err
	}
	return p, nil
}

// Transition implements pay.Store.
func (s *Store) Transition(ctx context.Context, id string, from, to pay.Status, reason string, resp *pay.StoredResponse) (pay.Payment, error) {
	if err := pay.CheckTransition(from, to); err != nil {
		return pay.Payment{}, err
	}
	if resp != nil {
		if err := checkResponse(*resp); err != nil {
			return pay.Payment{}, err
		}
	}
	now := pay.StoreTime(s.cfg.Now())
	var p pay.Payment
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		// BEGIN IMMEDIATE holds the write lock: the read and the update
		// below are one compare-and-set.
		cur, seq, err := getPayment(ctx, tx, id)
		if err != nil {
			return err
		}
		if cur.Status != from {
			return fmt.Errorf("payment %s is %s, not %s: %w", id, cur.Status, from, pay.ErrStaleStatus)
		}
		seq++
		if _, err := tx.ExecContext(ctx, `UPDATE payments SET status = ?, updated_at = ?, event_seq = ? WHERE id = ?`,
			string(to), micros(now), seq, id); err != nil {
			return err
		}
		if err := insertHistory(ctx, tx, id, pay.StatusChange{From: from, To: to, Reason: reason, At: now}); err != nil {
			return err
		}
		cur.Status, cur.UpdatedAt = to, now
		if err := insertOutbox(ctx, tx, pay.NewEvent(pay.EventStatusChanged, cur, seq, from, reason, now)); err != nil {
			return err
		}
		if resp != nil {
			if _, err := tx.ExecContext(ctx, `UPDATE idempotency_keys SET state = ?, response_code = ?, response_body = ? WHERE payment_id = ?`,
				string(pay.IdempotencyCompleted), resp.Code, nonNil(resp.Body), id); err != nil {
				return err
			}
		}
		if cur.History, err = history(ctx, tx, id); err != nil {
			return err
		}
		p = cur
		return nil
	})
	if err != nil {
		return pay.Payment{}, err
	}
	return p, nil
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// CompleteIdempotency implements pay.Store.
func (s *Store) CompleteIdempotency(ctx context.Context, key string, resp pay.StoredResponse) error {
	if err := checkResponse(resp); err != nil {
		return err
	}
	return s.writeTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE idempotency_keys SET state = ?, response_code = ?, response_body = ? WHERE key = ?`,
			string(pay.IdempotencyCompleted), resp.Code, nonNil(resp.Body), key)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			if err == nil {
				err = fmt.Errorf("idempotency key %q: %w", key, pay.ErrNotFound)
			}
			return err
		}
		return nil
	})
}

// Get implements pay.Store.
func (s *Store) Get(ctx context.Context, id string) (pay.Payment, error) {
	var p pay.Payment
	err := s.readTx(ctx, func(tx *sql.Tx) error {
		var err error
		if p, _, err = getPayment(ctx, tx, id); err != nil {
			return err
		}
		p.History, err = history(ctx, tx, id)
		return err
	})
	if err != nil {
		return pay.Payment{}, err
	}
	return p, nil
}

// Idempotency implements pay.Store.
func (s *Store) Idempotency(ctx context.Context, key string) (pay.IdempotencyRecord, error) {
	if s.closed.Load() {
		return pay.IdempotencyRecord{}, pay.Unavailable(errClosed)
	}
	r, err := getIdempotency(ctx, s.read, key)
	if err != nil {
		return pay.IdempotencyRecord{}, mapErr(err)
	}
	return r, nil
}

// ListByStatus implements pay.Store.
func (s *Store) ListByStatus(ctx context.Context, st pay.Status, limit int) ([]pay.Payment, error) {
	if !st.Valid() {
		return nil, pay.Invalid("status", "unknown status %q", st)
	}
	if err := pay.CheckLimit(limit); err != nil {
		return nil, err
	}
	if s.closed.Load() {
		return nil, pay.Unavailable(errClosed)
	}
	out, err := listPayments(ctx, s.read, `SELECT `+paymentCols+` FROM payments WHERE status = ? ORDER BY created_at, id LIMIT ?`, string(st), limit)
	return out, mapErr(err)
}

// List implements pay.Store.
func (s *Store) List(ctx context.Context, afterID string, limit int) ([]pay.Payment, error) {
	if err := pay.CheckLimit(limit); err != nil {
		return nil, err
	}
	if s.closed.Load() {
		return nil, pay.Unavailable(errClosed)
	}
	out, err := listPayments(ctx, s.read, `SELECT `+paymentCols+` FROM payments WHERE id > ? ORDER BY id LIMIT ?`, afterID, limit)
	return out, mapErr(err)
}

// FlagReview implements pay.Store.
func (s *Store) FlagReview(ctx context.Context, id, reason string) error {
	if strings.TrimSpace(reason) == "" {
		return pay.Invalid("reason", "is required")
	}
	now := pay.StoreTime(s.cfg.Now())
	return s.writeTx(ctx, func(tx *sql.Tx) error {
		cur, seq, err := getPayment(ctx, tx, id)
		if err != nil {
			return err
		}
		seq++
		if _, err := tx.ExecContext(ctx, `UPDATE payments SET manual_review = 1, review_reason = ?, updated_at = ?, event_seq = ? WHERE id = ?`,
			reason, micros(now), seq, id); err != nil {
			return err
		}
		cur.ManualReview, cur.ReviewReason, cur.UpdatedAt = true, reason, now
		return insertOutbox(ctx, tx, pay.NewEvent(pay.EventReviewFlagged, cur, seq, "", reason, now))
	})
}

// PendingOutbox implements pay.Store.
func (s *Store) PendingOutbox(ctx context.Context, limit int) ([]pay.OutboxEvent, error) {
	if err := pay.CheckLimit(limit); err != nil {
		return nil, err
	}
	if s.closed.Load() {
		return nil, pay.Unavailable(errClosed)
	}
	rows, err := s.read.QueryContext(ctx, `SELECT id, payment_id, seq, type, payload, created_at FROM outbox
		WHERE published_at IS NULL ORDER BY id LIMIT ?`, limit)
	if err != nil {
		return nil, mapErr(err)
	}
	defer rows.Close()
	out := []pay.OutboxEvent{}
	for rows.Next() {
		var (
			e       pay.OutboxEvent
			payload string
			created int64
		)
		if err := rows.Scan(&e.ID, &e.PaymentID, &e.Seq, &e.Type, &payload, &created); err != nil {
			return nil, mapErr(err)
		}
		e.Payload, e.CreatedAt = []byte(payload), fromMicros(created)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, mapErr(err)
	}
	return out, nil
}

// MarkPublished implements pay.Store.
func (s *Store) MarkPublished(ctx context.Context, ids []int64, at time.Time) error {
	if len(ids) == 0 {
		return nil
	}
	at = pay.StoreTime(at)
	return s.writeTx(ctx, func(tx *sql.Tx) error {
		for chunk := range slices.Chunk(ids, 500) {
			args := make([]any, 0, len(chunk)+1)
			args = append(args, micros(at))
			for _, id := range chunk {
				args = append(args, id)
			}
			marks := strings.TrimSuffix(strings.Repeat("?, ", len(chunk)), ", ")
			if _, err := tx.ExecContext(ctx, `UPDATE outbox SET published_at = ? WHERE published_at IS NULL AND id IN (`+marks+`)`, args...); err != nil {
				return err
			}
		}
		return nil
	})
}

// DeleteExpiredIdempotency implements pay.Store.
func (s *Store) DeleteExpiredIdempotency(ctx context.Context, now time.Time) (int, error) {
	var n int64
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM idempotency_keys WHERE expires_at <= ?`, micros(pay.StoreTime(now)))
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return int(n), err
}

// Ping implements pay.Store.
func (s *Store) Ping(ctx context.Context) error {
	if s.closed.Load() {
		return pay.Unavailable(errClosed)
	}
	var one int
	return mapErr(s.read.QueryRowContext(ctx, `SELECT 1`).Scan(&one))
}

// Close implements pay.Store.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	err := s.write.Close()
	if s.read != s.write {
		err = errors.Join(err, s.read.Close())
	}
	return err
}
