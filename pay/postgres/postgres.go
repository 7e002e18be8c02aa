// Package postgres is the production pay.Store: PostgreSQL through pgx v5.
//
// Transactions run at READ COMMITTED; a status change locks the payment row
// with SELECT ... FOR UPDATE, so compare-and-set and the per-payment outbox
// sequence are serialised per payment, and a payment's outbox rows commit
// in sequence order. A concurrent CreatePending with the same idempotency
// key waits on the key's row (INSERT ... ON CONFLICT) and then sees the
// winner's record.
package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/puddle/v2"

	"github.com/stampede-lab/stampede/pay"
)

var _ pay.Store = (*Store)(nil)

// Config configures a Store.
type Config struct {
	// URL is the connection string, e.g.
	// postgres://user@host:5432/db?sslmode=disable.
	URL string
	// Schema, when set, is the schema the tables live in (created if
	// missing; the connections' search_path). Empty uses the URL's
	// search_path, normally public.
	Schema string
	// MaxConns bounds the open connections.
	MaxConns int
	// ConnectTimeout bounds each connection attempt, unless the URL sets
	// connect_timeout.
	ConnectTimeout time.Duration
	// Now returns the current time; tests replace it with a fake clock.
	Now func() time.Time
}

// DefaultConfig returns 10 connections, a 5 s connect timeout and the wall
// clock; set URL.
func DefaultConfig() Config {
	return Config{MaxConns: 10, ConnectTimeout: 5 * time.Second, Now: time.Now}
}

var identifier = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// Validate reports every invalid field; each error names its field.
func (c Config) Validate() error {
	var errs []error
	if strings.TrimSpace(c.URL) == "" {
		errs = append(errs, errors.New("postgres: URL: must not be empty"))
	} else if _, err := pgx.ParseConfig(c.URL); err != nil {
		errs = append(errs, fmt.Errorf("postgres: URL: %v", err))
	}
	if c.Schema != "" && !identifier.MatchString(c.Schema) {
		errs = append(errs, fmt.Errorf("postgres: Schema: must be a lower-case identifier, got %q", c.Schema))
	}
	if c.MaxConns < 1 {
		errs = append(errs, fmt.Errorf("postgres: MaxConns: must be at least 1, got %d", c.MaxConns))
	}
	if c.ConnectTimeout < 0 {
		errs = append(errs, fmt.Errorf("postgres: ConnectTimeout: must not be negative, got %s", c.ConnectTimeout))
	}
	if c.Now == nil {
		errs = append(errs, errors.New("postgres: Now: must not be nil (use time.Now)"))
	}
	return errors.Join(errs...)
}

// Store is the PostgreSQL pay.Store.
type Store struct {
	cfg  Config
	pool *pgxpool.Pool
}

// Open connects to the database at url with the default configuration and
// applies the migrations. An unreachable database is a CodeUnavailable
// error.
func Open(ctx context.Context, url string) (*Store, error) {
	cfg := DefaultConfig()
	cfg.URL = url
	return OpenConfig(ctx, cfg)
}

// OpenConfig connects to the database cfg describes and applies the
// migrations.
func OpenConfig(ctx context.Context, cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	pc, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		return nil, err
	}
	cc := pc.ConnConfig
	if cc.ConnectTimeout == 0 {
		cc.ConnectTimeout = cfg.ConnectTimeout
	}
	if cfg.Schema != "" {
		cc.RuntimeParams["search_path"] = cfg.Schema
	}
	pc.MaxConns = int32(cfg.MaxConns)
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, mapErr(err)
	}
	s := &Store{cfg: cfg, pool: pool}
	if err := s.migrate(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return s, nil
}

//go:embed migrations/*.sql
var migrations embed.FS

// migrate applies the migrations not yet recorded in schema_migrations, in
// file-name order, in one transaction holding an advisory lock, so that
// instances starting together apply each migration once.
func (s *Store) migrate(ctx context.Context) error {
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return pay.Internal(err)
	}
	slices.Sort(names)
	return s.tx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext($1))`, "stampede.pay.migrate:"+s.cfg.Schema); err != nil {
			return err
		}
		if s.cfg.Schema != "" {
			if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+pgx.Identifier{s.cfg.Schema}.Sanitize()); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
			version    text PRIMARY KEY,
			applied_at timestamptz NOT NULL DEFAULT now()
		)`); err != nil {
			return err
		}
		for _, name := range names {
			version := strings.TrimSuffix(strings.TrimPrefix(name, "migrations/"), ".sql")
			var done bool
			if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM schema_migrations WHERE version = $1)`, version).Scan(&done); err != nil {
				return err
			}
			if done {
				continue
			}
			body, err := migrations.ReadFile(name)
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, string(body)); err != nil {
				return fmt.Errorf("migration %s: %w", version, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version) VALUES ($1)`, version); err != nil {
				return err
			}
		}
		return nil
	})
}

// tx runs fn in a transaction on a pooled connection and commits it, or
// rolls it back when fn fails.
func (s *Store) tx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return mapErr(s.withConn(ctx, func(c *pgx.Conn) error { return pgx.BeginFunc(ctx, c, fn) }))
}

// conn runs fn on a pooled connection.
func (s *Store) conn(ctx context.Context, fn func(c *pgx.Conn) error) error {
	return mapErr(s.withConn(ctx, fn))
}

// withConn runs fn on a connection from the pool.
func (s *Store) withConn(ctx context.Context, fn func(c *pgx.Conn) error) error {
	return s.pool.AcquireFunc(ctx, func(c *pgxpool.Conn) error { return fn(c.Conn()) })
}

// mapErr turns driver errors into pay errors and passes pay errors
// through.
func mapErr(err error) error {
	var (
		pe *pay.Error
		ic *pay.IdempotencyConflict
		pg *pgconn.PgError
		ce *pgconn.ConnectError
		ne net.Error
	)
	switch {
	case err == nil:
		return nil
	case errors.As(err, &pe), errors.As(err, &ic),
		errors.Is(err, pay.ErrNotFound), errors.Is(err, pay.ErrStaleStatus):
		return err
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded), pgconn.Timeout(err):
		return &pay.Error{Code: pay.CodeUnavailable, Message: "the store did not answer in time", Err: err}
	case errors.Is(err, puddle.ErrClosedPool), errors.As(err, &ce), errors.As(err, &ne),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed),
		strings.Contains(err.Error(), "conn closed"): // the server or the network dropped the connection
		return pay.Unavailable(err)
	case errors.As(err, &pg):
		switch {
		case strings.HasPrefix(pg.Code, "08"), // connection exception
			strings.HasPrefix(pg.Code, "53"),                           // insufficient resources
			pg.Code == "57P01", pg.Code == "57P02", pg.Code == "57P03", // shutdown, cannot connect now
			pg.Code == "40001", pg.Code == "40P01", pg.Code == "55P03": // serialization, deadlock, lock not available
			return pay.Unavailable(err)
		case pg.Code == "23505": // unique violation
			msg := "conflicting write (" + pg.ConstraintName + ")"
			if pg.ConstraintName == "payments_pkey" || pg.ConstraintName == "payments_external_key_key" {
				msg = "the payment already exists"
			}
			return &pay.Error{Code: pay.CodeConflict, Message: msg, Err: err}
		}
	}
	return pay.Internal(err)
}

// isIdempotencyUnique reports a unique violation on the idempotency key.
func isIdempotencyUnique(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && pg.Code == "23505" && pg.ConstraintName == "idempotency_keys_pkey"
}

type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

const paymentCols = `id, merchant_id, order_id, amount, currency, status, external_key, idempotency_key,
	manual_review, review_reason, created_at, updated_at, event_seq`

// scanPayment scans paymentCols; it returns the payment's last event seq.
func scanPayment(row pgx.Row) (pay.Payment, int64, error) {
	var (
		p      pay.Payment
		status string
		seq    int64
	)
	err := row.Scan(&p.ID, &p.MerchantID, &p.OrderID, &p.Amount, &p.Currency, &status, &p.ExternalKey, &p.IdempotencyKey,
		&p.ManualReview, &p.ReviewReason, &p.CreatedAt, &p.UpdatedAt, &seq)
	if errors.Is(err, pgx.ErrNoRows) {
		return p, 0, pay.ErrNotFound
	}
	if err != nil {
		return p, 0, err
	}
	p.Status = pay.Status(status)
	p.CreatedAt, p.UpdatedAt = p.CreatedAt.UTC(), p.UpdatedAt.UTC()
	return p, seq, nil
}

func getPayment(ctx context.Context, q querier, id string, forUpdate bool) (pay.Payment, int64, error) {
	query := `SELECT ` + paymentCols + ` FROM payments WHERE id = $1`
	if forUpdate {
		query += ` FOR UPDATE`
	}
	p, seq, err := scanPayment(q.QueryRow(ctx, query, id))
	if errors.Is(err, pay.ErrNotFound) {
		return p, 0, fmt.Errorf("payment %q: %w", id, pay.ErrNotFound)
	}
	return p, seq, err
}

func history(ctx context.Context, q querier, id string) ([]pay.StatusChange, error) {
	rows, err := q.Query(ctx, `SELECT from_status, to_status, reason, at FROM payment_history WHERE payment_id = $1 ORDER BY id`, id)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []pay.StatusChange
	for rows.Next() {
		var (
			c        pay.StatusChange
			from, to string
		)
		if err := rows.Scan(&from, &to, &c.Reason, &c.At); err != nil {
			return nil, err
		}
		c.From, c.To, c.At = pay.Status(from), pay.Status(to), c.At.UTC()
		out = append(out, c)
	}
	return out, rows.Err()
}

func listPayments(ctx context.Context, q querier, query string, args ...any) ([]pay.Payment, error) {
	rows, err := q.Query(ctx, query, args...)
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

func insertHistory(ctx context.Context, tx pgx.Tx, id string, c pay.StatusChange) error {
	_, err := tx.Exec(ctx, `INSERT INTO payment_history (payment_id, from_status, to_status, reason, at) VALUES ($1, $2, $3, $4, $5)`,
		id, string(c.From), string(c.To), c.Reason, c.At)
	return err
}

func insertOutbox(ctx context.Context, tx pgx.Tx, e pay.OutboxEvent) error {
	_, err := tx.Exec(ctx, `INSERT INTO outbox (payment_id, seq, type, payload, created_at) VALUES ($1, $2, $3, $4, $5)`,
		e.PaymentID, e.Seq, e.Type, e.Payload, e.CreatedAt)
	return err
}

const idemCols = `key, request_hash, payment_id, state, response_code, response_body, created_at, expires_at`

func getIdempotency(ctx context.Context, q querier, key string) (pay.IdempotencyRecord, error) {
	var (
		r     pay.IdempotencyRecord
		state string
	)
	err := q.QueryRow(ctx, `SELECT `+idemCols+` FROM idempotency_keys WHERE key = $1`, key).
		Scan(&r.Key, &r.RequestHash, &r.PaymentID, &state, &r.ResponseCode, &r.ResponseBody, &r.CreatedAt, &r.ExpiresAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, fmt.Errorf("idempotency key %q: %w", key, pay.ErrNotFound)
	}
	if err != nil {
		return r, err
	}
	r.State = pay.IdempotencyState(state)
	r.CreatedAt, r.ExpiresAt = r.CreatedAt.UTC(), r.ExpiresAt.UTC()
	return r, nil
}

func checkResponse(resp pay.StoredResponse) error {
	if resp.Code < 100 || resp.Code > 599 {
		return pay.Invalid("code", "must be an HTTP status, got %d", resp.Code)
	}
	return nil
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// CreatePending implements pay.Store.
func (s *Store) CreatePending(ctx context.Context, p pay.Payment, idem pay.IdempotencyRecord) (pay.Payment, error) {
	p, idem, err := pay.PrepareCreate(p, idem, s.cfg.Now())
	if err != nil {
		return pay.Payment{}, err
	}
	err = s.tx(ctx, func(tx pgx.Tx) error {
		// The key first: a live record means nothing else is written. A
		// concurrent insert of the same key waits here for the other
		// transaction and then finds its row; an expired record is
		// replaced.
		tag, err := tx.Exec(ctx, `INSERT INTO idempotency_keys (`+idemCols+`)
			VALUES ($1, $2, $3, $4, 0, NULL, $5, $6)
			ON CONFLICT (key) DO UPDATE SET
				request_hash = EXCLUDED.request_hash, payment_id = EXCLUDED.payment_id, state = EXCLUDED.state,
				response_code = 0, response_body = NULL, created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at
			WHERE idempotency_keys.expires_at <= EXCLUDED.created_at`,
			idem.Key, idem.RequestHash, idem.PaymentID, string(idem.State), idem.CreatedAt, idem.ExpiresAt)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			rec, err := getIdempotency(ctx, tx, idem.Key)
			if err != nil {
				return err
			}
			return &pay.IdempotencyConflict{Record: rec}
		}
		if _, err := tx.Exec(ctx, `INSERT INTO payments (`+paymentCols+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, 1)`,
			p.ID, p.MerchantID, p.OrderID, p.Amount, p.Currency, string(p.Status), p.ExternalKey, p.IdempotencyKey,
			p.ManualReview, p.ReviewReason, p.CreatedAt, p.UpdatedAt); err != nil {
			return err
		}
		if err := insertHistory(ctx, tx, p.ID, p.History[0]); err != nil {
			return err
		}
		return insertOutbox(ctx, tx, pay.NewEvent(pay.EventCreated, p, 1, "", pay.ReasonCreated, p.CreatedAt))
	})
	if isIdempotencyUnique(err) {
		// Not expected (ON CONFLICT handles the key) but mapped anyway.
		rec, gerr := s.Idempotency(ctx, idem.Key)
		if gerr != nil {
			return pay.Payment{}, gerr
		}
		return pay.Payment{}, &pay.IdempotencyConflict{Record: rec}
	}
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
	err := s.tx(ctx, func(tx pgx.Tx) error {
		cur, seq, err := getPayment(ctx, tx, id, true)
		if err != nil {
			return err
		}
		if cur.Status != from {
			return fmt.Errorf("payment %s is %s, not %s: %w", id, cur.Status, from, pay.ErrStaleStatus)
		}
		seq++
		if _, err := tx.Exec(ctx, `UPDATE payments SET status = $1, updated_at = $2, event_seq = $3 WHERE id = $4`,
			string(to), now, seq, id); err != nil {
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
			if _, err := tx.Exec(ctx, `UPDATE idempotency_keys SET state = $1, response_code = $2, response_body = $3 WHERE payment_id = $4`,
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

// CompleteIdempotency implements pay.Store.
func (s *Store) CompleteIdempotency(ctx context.Context, key string, resp pay.StoredResponse) error {
	if err := checkResponse(resp); err != nil {
		return err
	}
	return s.conn(ctx, func(c *pgx.Conn) error {
		tag, err := c.Exec(ctx, `UPDATE idempotency_keys SET state = $1, response_code = $2, response_body = $3 WHERE key = $4`,
			string(pay.IdempotencyCompleted), resp.Code, nonNil(resp.Body), key)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("idempotency key %q: %w", key, pay.ErrNotFound)
		}
		return nil
	})
}

// Get implements pay.Store.
func (s *Store) Get(ctx context.Context, id string) (pay.Payment, error) {
	var p pay.Payment
	// REPEATABLE READ: the payment and its history from one snapshot.
	err := mapErr(s.withConn(ctx, func(c *pgx.Conn) error {
		return pgx.BeginTxFunc(ctx, c, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
			var err error
			if p, _, err = getPayment(ctx, tx, id, false); err != nil {
				return err
			}
			p.History, err = history(ctx, tx, id)
			return err
		})
	}))
	if err != nil {
		return pay.Payment{}, err
	}
	return p, nil
}

// Idempotency implements pay.Store.
func (s *Store) Idempotency(ctx context.Context, key string) (pay.IdempotencyRecord, error) {
	var r pay.IdempotencyRecord
	err := s.conn(ctx, func(c *pgx.Conn) error {
		var err error
		r, err = getIdempotency(ctx, c, key)
		return err
	})
	if err != nil {
		return pay.IdempotencyRecord{}, err
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
	var out []pay.Payment
	err := s.conn(ctx, func(c *pgx.Conn) error {
		var err error
		out, err = listPayments(ctx, c, `SELECT `+paymentCols+` FROM payments WHERE status = $1 ORDER BY created_at, id LIMIT $2`, string(st), limit)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// List implements pay.Store.
func (s *Store) List(ctx context.Context, afterID string, limit int) ([]pay.Payment, error) {
	if err := pay.CheckLimit(limit); err != nil {
		return nil, err
	}
	var out []pay.Payment
	err := s.conn(ctx, func(c *pgx.Conn) error {
		var err error
		out, err = listPayments(ctx, c, `SELECT `+paymentCols+` FROM payments WHERE id > $1 ORDER BY id LIMIT $2`, afterID, limit)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// FlagReview implements pay.Store.
func (s *Store) FlagReview(ctx context.Context, id, reason string) error {
	if strings.TrimSpace(reason) == "" {
		return pay.Invalid("reason", "is required")
	}
	now := pay.StoreTime(s.cfg.Now())
	return s.tx(ctx, func(tx pgx.Tx) error {
		cur, seq, err := getPayment(ctx, tx, id, true)
		if err != nil {
			return err
		}
		seq++
		if _, err := tx.Exec(ctx, `UPDATE payments SET manual_review = true, review_reason = $1, updated_at = $2, event_seq = $3 WHERE id = $4`,
			reason, now, seq, id); err != nil {
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
	var out []pay.OutboxEvent
	err := s.conn(ctx, func(c *pgx.Conn) error {
		rows, err := c.Query(ctx, `SELECT id, payment_id, seq, type, payload, created_at FROM outbox
			WHERE published_at IS NULL ORDER BY id LIMIT $1`, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		out = []pay.OutboxEvent{}
		for rows.Next() {
			var e pay.OutboxEvent
			if err := rows.Scan(&e.ID, &e.PaymentID, &e.Seq, &e.Type, &e.Payload, &e.CreatedAt); err != nil {
				return err
			}
			e.CreatedAt = e.CreatedAt.UTC()
			out = append(out, e)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// MarkPublished implements pay.Store.
func (s *Store) MarkPublished(ctx context.Context, ids []int64, at time.Time) error {
	if len(ids) == 0 {
		return nil
	}
	return s.conn(ctx, func(c *pgx.Conn) error {
		_, err := c.Exec(ctx, `UPDATE outbox SET published_at = $1 WHERE published_at IS NULL AND id = ANY($2)`, pay.StoreTime(at), ids)
		return err
	})
}

// DeleteExpiredIdempotency implements pay.Store.
func (s *Store) DeleteExpiredIdempotency(ctx context.Context, now time.Time) (int, error) {
	var n int64
	err := s.conn(ctx, func(c *pgx.Conn) error {
		tag, err := c.Exec(ctx, `DELETE FROM idempotency_keys WHERE expires_at <= $1`, pay.StoreTime(now))
		n = tag.RowsAffected()
		return err
	})
	return int(n), err
}

// Ping implements pay.Store.
func (s *Store) Ping(ctx context.Context) error {
	return s.conn(ctx, func(c *pgx.Conn) error { return c.Ping(ctx) })
}

// Close implements pay.Store.
func (s *Store) Close() error {
	s.pool.Close()
	return nil
}
