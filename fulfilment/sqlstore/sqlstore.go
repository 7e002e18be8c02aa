// Package sqlstore is the fulfilment.Store over database/sql, written once
// for SQLite and PostgreSQL on the SQL seam (internal/sqldb): its
// dialects give the placeholders, timestamps and row locks, and its
// classification of driver errors is the one every store shares.
//
// Open picks the database: PostgreSQL when Config.PostgresURL is set,
// otherwise SQLite at Config.SQLitePath (":memory:" by default). Each
// dialect has its own goose migrations, embedded, recorded in a version
// table of their own (fulfilment_goose_db_version), so that fulfilment and
// pay may share one database.
//
// Concurrency: a SQLite store writes through one connection whose
// transactions begin IMMEDIATE, so its write transactions never overlap,
// and other processes on the same file wait up to the busy timeout. On
// PostgreSQL (READ COMMITTED), the inbox insert is INSERT ... ON CONFLICT
// DO NOTHING: a second transaction claiming the same event waits for the
// first and then finds the row; payments and orders are locked with
// SELECT ... FOR UPDATE after an insert-if-missing, so the effects of one
// payment, and of one order, are decided one transaction at a time.
//
// Every call runs under Config.OpTimeout: a database that does not answer
// gives an error with CodeUnavailable (fulfilment.Unavailable) within that
// time, never a hang.
package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/fulfilment"
	"github.com/stampede-lab/stampede/internal/sqldb"
	"github.com/stampede-lab/stampede/protocol"
)

var (
	_ fulfilment.Store = (*Store)(nil)
	_ fulfilment.Tx    = (*tx)(nil)
)

// Dialect is the SQL seam's dialect: sqldb.SQLite or sqldb.Postgres.
type Dialect = sqldb.Dialect

// Store is the fulfilment.Store over database/sql.
type Store struct {
	db *sqldb.DB
	d  Dialect
	q  queries
}

// spec is fulfilment's place among the SQL stores: its migrations, its
// version table and the errors that pass through classification.
var spec = sqldb.Spec{
	Name:        name,
	Migrations:  migrations,
	Unavailable: fulfilment.Unavailable,
	Own: func(err error) bool {
		_, ok := errors.AsType[*fulfilment.Error](err)
		return ok || errors.Is(err, fulfilment.ErrNotFound)
	},
}

// Dialect returns the store's dialect.
func (s *Store) Dialect() Dialect { return s.d }

// Update implements fulfilment.Store.
func (s *Store) Update(ctx context.Context, fn func(ctx context.Context, tx fulfilment.Tx) error) error {
	return s.db.Update(ctx, func(ctx context.Context, sqlTx *sql.Tx) error {
		return fn(ctx, &tx{s: s, tx: sqlTx})
	})
}

// readOp runs fn on the read pool under the operation deadline.
func (s *Store) readOp(ctx context.Context, fn func(ctx context.Context, db *sql.DB) error) error {
	return s.db.Read(ctx, fn)
}

// Close implements fulfilment.Store.
func (s *Store) Close() error { return s.db.Close() }

// Ping implements fulfilment.Store.
func (s *Store) Ping(ctx context.Context) error { return s.db.Ping(ctx) }

// Inbox implements fulfilment.Store.
func (s *Store) Inbox(ctx context.Context, eventID string) (fulfilment.InboxEntry, error) {
	var e fulfilment.InboxEntry
	err := s.readOp(ctx, func(ctx context.Context, db *sql.DB) error {
		var at any
		err := db.QueryRowContext(ctx, s.q.inbox, eventID).Scan(&e.EventID, &e.PaymentID, &e.Seq, &e.Outcome, &at)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("event %s: %w", eventID, fulfilment.ErrNotFound)
		}
		if err != nil {
			return err
		}
		e.ProcessedAt, err = s.d.DecodeTime(at)
		return err
	})
	return e, err
}

// Order implements fulfilment.Store.
func (s *Store) Order(ctx context.Context, merchantID, orderID string) (fulfilment.Order, error) {
	var o fulfilment.Order
	err := s.readOp(ctx, func(ctx context.Context, db *sql.DB) error {
		var err error
		o, err = s.scanOrder(db.QueryRowContext(ctx, s.q.order, merchantID, orderID))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("order %s/%s: %w", merchantID, orderID, fulfilment.ErrNotFound)
		}
		return err
	})
	return o, err
}

// Ticket implements fulfilment.Store.
func (s *Store) Ticket(ctx context.Context, merchantID, orderID string) (fulfilment.Ticket, error) {
	var t fulfilment.Ticket
	err := s.readOp(ctx, func(ctx context.Context, db *sql.DB) error {
		var err error
		t, err = s.scanTicket(db.QueryRowContext(ctx, s.q.ticket, merchantID, orderID))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("ticket of %s/%s: %w", merchantID, orderID, fulfilment.ErrNotFound)
		}
		return err
	})
	return t, err
}

// Revocation implements fulfilment.Store.
func (s *Store) Revocation(ctx context.Context, merchantID, orderID string) (fulfilment.Revocation, error) {
	var r fulfilment.Revocation
	err := s.readOp(ctx, func(ctx context.Context, db *sql.DB) error {
		var err error
		r, err = s.scanRevocation(db.QueryRowContext(ctx, s.q.revocation, merchantID, orderID))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("revoked ticket of %s/%s: %w", merchantID, orderID, fulfilment.ErrNotFound)
		}
		return err
	})
	return r, err
}

// Tickets implements fulfilment.Store.
func (s *Store) Tickets(ctx context.Context, afterPaymentID string, limit int) ([]fulfilment.Ticket, error) {
	if limit < 1 {
		return nil, stampede.InvalidField("limit", "must be at least 1, got %d", limit)
	}
	var out []fulfilment.Ticket
	err := s.readOp(ctx, func(ctx context.Context, db *sql.DB) error {
		rows, err := db.QueryContext(ctx, s.q.tickets, afterPaymentID, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			t, err := s.scanTicket(rows)
			if err != nil {
				return err
			}
			out = append(out, t)
		}
		return rows.Err()
	})
	return out, err
}

// Releases implements fulfilment.Store.
func (s *Store) Releases(ctx context.Context, merchantID, orderID string) ([]fulfilment.Release, error) {
	var out []fulfilment.Release
	err := s.readOp(ctx, func(ctx context.Context, db *sql.DB) error {
		rows, err := db.QueryContext(ctx, s.q.releases, merchantID, orderID)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				r  fulfilment.Release
				at any
			)
			if err := rows.Scan(&r.PaymentID, &r.MerchantID, &r.OrderID, &r.EventID, &r.Status, &at); err != nil {
				return err
			}
			if r.ReleasedAt, err = s.d.DecodeTime(at); err != nil {
				return err
			}
			out = append(out, r)
		}
		return rows.Err()
	})
	return out, err
}

// Counts implements fulfilment.Store. The counts come from one read
// transaction (Dialect.ReadTx): one snapshot.
func (s *Store) Counts(ctx context.Context) (fulfilment.Counts, error) {
	c := fulfilment.Counts{Orders: map[fulfilment.OrderState]int64{}}
	err := s.readOp(ctx, func(ctx context.Context, db *sql.DB) error {
		rtx, err := db.BeginTx(ctx, s.d.ReadTx())
		if err != nil {
			return err
		}
		defer rtx.Rollback() //nolint:errcheck // read-only
		for q, dst := range map[string]*int64{s.q.countInbox: &c.Inbox, s.q.countTickets: &c.Tickets, s.q.countRevoked: &c.Revoked, s.q.countReleases: &c.Releases} {
			if err := rtx.QueryRowContext(ctx, q).Scan(dst); err != nil {
				return err
			}
		}
		rows, err := rtx.QueryContext(ctx, s.q.countOrders)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				st fulfilment.OrderState
				n  int64
			)
			if err := rows.Scan(&st, &n); err != nil {
				return err
			}
			c.Orders[st] = n
		}
		return rows.Err()
	})
	return c, err
}

type scanner interface{ Scan(dst ...any) error }

func (s *Store) scanOrder(row scanner) (fulfilment.Order, error) {
	var (
		o  fulfilment.Order
		at any
	)
	if err := row.Scan(&o.MerchantID, &o.OrderID, &o.State, &o.PaymentID, &at); err != nil {
		return o, err
	}
	var err error
	o.UpdatedAt, err = s.d.DecodeTime(at)
	return o, err
}

func (s *Store) scanTicket(row scanner) (fulfilment.Ticket, error) {
	var (
		t  fulfilment.Ticket
		at any
	)
	if err := row.Scan(&t.ID, &t.MerchantID, &t.OrderID, &t.PaymentID, &t.EventID, &t.Amount, &t.Currency, &at); err != nil {
		return t, err
	}
	var err error
	t.IssuedAt, err = s.d.DecodeTime(at)
	return t, err
}

func (s *Store) scanRevocation(row scanner) (fulfilment.Revocation, error) {
	var (
		r             fulfilment.Revocation
		issued, revok any
	)
	if err := row.Scan(&r.ID, &r.MerchantID, &r.OrderID, &r.PaymentID, &r.EventID, &r.Amount, &r.Currency, &issued,
		&r.RevokeEventID, &revok); err != nil {
		return r, err
	}
	var err error
	if r.IssuedAt, err = s.d.DecodeTime(issued); err != nil {
		return r, err
	}
	r.RevokedAt, err = s.d.DecodeTime(revok)
	return r, err
}

// tx is the fulfilment.Tx of Update.
type tx struct {
	s  *Store
	tx *sql.Tx
}

// Claim implements fulfilment.Tx.
func (t *tx) Claim(ctx context.Context, e fulfilment.InboxEntry) (bool, error) {
	res, err := t.tx.ExecContext(ctx, t.s.q.claim, e.EventID, e.PaymentID, e.Seq, string(e.Outcome), t.s.d.EncodeTime(e.ProcessedAt))
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// SetOutcome implements fulfilment.Tx.
func (t *tx) SetOutcome(ctx context.Context, eventID string, o fulfilment.Outcome) error {
	return t.exec1(ctx, t.s.q.setOutcome, string(o), eventID)
}

// Fence implements fulfilment.Tx. Raising the epoch takes the partition's
// row lock; checking it takes a share lock (PostgreSQL), so the
// transactions of one owner do not wait for each other, and a new owner's
// raise waits for the old owner's transactions in flight.
func (t *tx) Fence(ctx context.Context, partition int, epoch uint64) (bool, error) {
	if _, err := t.tx.ExecContext(ctx, t.s.q.insertFence, partition); err != nil {
		return false, err
	}
	if _, err := t.tx.ExecContext(ctx, t.s.q.raiseFence, partition, int64(epoch)); err != nil {
		return false, err
	}
	var stored int64
	if err := t.tx.QueryRowContext(ctx, t.s.q.readFence, partition).Scan(&stored); err != nil {
		return false, err
	}
	return uint64(stored) <= epoch, nil
}

// LockPayment implements fulfilment.Tx.
func (t *tx) LockPayment(ctx context.Context, paymentID string, now time.Time) (int64, error) {
	if _, err := t.tx.ExecContext(ctx, t.s.q.insertProgress, paymentID, t.s.d.EncodeTime(now)); err != nil {
		return 0, err
	}
	var last int64
	err := t.tx.QueryRowContext(ctx, t.s.q.lockProgress, paymentID).Scan(&last)
	return last, err
}

// AdvancePayment implements fulfilment.Tx.
func (t *tx) AdvancePayment(ctx context.Context, paymentID string, seq int64, status protocol.PaymentStatus, now time.Time) error {
	return t.exec1(ctx, t.s.q.advance, seq, string(status), t.s.d.EncodeTime(now), paymentID)
}

// LockOrder implements fulfilment.Tx.
func (t *tx) LockOrder(ctx context.Context, merchantID, orderID string, now time.Time) (fulfilment.Order, error) {
	if _, err := t.tx.ExecContext(ctx, t.s.q.insertOrder, merchantID, orderID, t.s.d.EncodeTime(now)); err != nil {
		return fulfilment.Order{}, err
	}
	return t.s.scanOrder(t.tx.QueryRowContext(ctx, t.s.q.lockOrder, merchantID, orderID))
}

// SaveOrder implements fulfilment.Tx.
func (t *tx) SaveOrder(ctx context.Context, o fulfilment.Order) error {
	return t.exec1(ctx, t.s.q.saveOrder, string(o.State), o.PaymentID, t.s.d.EncodeTime(o.UpdatedAt), o.MerchantID, o.OrderID)
}

// IssueTicket implements fulfilment.Tx.
func (t *tx) IssueTicket(ctx context.Context, tk fulfilment.Ticket) error {
	_, err := t.tx.ExecContext(ctx, t.s.q.insertTicket, tk.ID, tk.MerchantID, tk.OrderID, tk.PaymentID, tk.EventID,
		tk.Amount, tk.Currency, t.s.d.EncodeTime(tk.IssuedAt))
	return err
}

// RecordRelease implements fulfilment.Tx.
func (t *tx) RecordRelease(ctx context.Context, r fulfilment.Release) error {
	_, err := t.tx.ExecContext(ctx, t.s.q.insertRelease, r.PaymentID, r.MerchantID, r.OrderID, r.EventID,
		string(r.Status), t.s.d.EncodeTime(r.ReleasedAt))
	return err
}

// RevokeTicket implements fulfilment.Tx: it reads the order's ticket,
// writes it to ticket_revocations and deletes it from tickets.
func (t *tx) RevokeTicket(ctx context.Context, merchantID, orderID, eventID string, now time.Time) (fulfilment.Revocation, error) {
	tk, err := t.s.scanTicket(t.tx.QueryRowContext(ctx, t.s.q.ticket, merchantID, orderID))
	if errors.Is(err, sql.ErrNoRows) {
		return fulfilment.Revocation{}, fmt.Errorf("ticket of %s/%s: %w", merchantID, orderID, fulfilment.ErrNotFound)
	}
	if err != nil {
		return fulfilment.Revocation{}, err
	}
	r := fulfilment.Revocation{Ticket: tk, RevokeEventID: eventID, RevokedAt: now}
	if _, err := t.tx.ExecContext(ctx, t.s.q.insertRevocation, tk.ID, tk.MerchantID, tk.OrderID, tk.PaymentID, tk.EventID,
		tk.Amount, tk.Currency, t.s.d.EncodeTime(tk.IssuedAt), eventID, t.s.d.EncodeTime(now)); err != nil {
		return fulfilment.Revocation{}, err
	}
	return r, t.exec1(ctx, t.s.q.deleteTicket, tk.ID)
}

// exec1 runs an update that must change exactly one row.
func (t *tx) exec1(ctx context.Context, q string, args ...any) error {
	res, err := t.tx.ExecContext(ctx, q, args...)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n != 1 {
		return fmt.Errorf("%d rows changed, want 1: %w", n, fulfilment.ErrNotFound)
	}
	return nil
}

// queries holds every statement, written with $n placeholders and rebound
// for the dialect.
type queries struct {
	claim, setOutcome, inbox                 string
	insertProgress, lockProgress, advance    string
	insertOrder, lockOrder, saveOrder, order string
	insertTicket, ticket, tickets            string
	insertRevocation, deleteTicket           string
	revocation, countRevoked                 string
	insertRelease, releases                  string
	insertFence, raiseFence, readFence       string
	countInbox, countTickets, countReleases  string
	countOrders                              string
}

const (
	orderCols   = `merchant_id, order_id, state, payment_id, updated_at`
	ticketCols  = `ticket_id, merchant_id, order_id, payment_id, event_id, amount, currency, issued_at`
	releaseCols = `payment_id, merchant_id, order_id, event_id, status, released_at`
)

func newQueries(d Dialect) queries {
	q := queries{
		// A claimed event leaves the row alone: no row affected.
		claim: `INSERT INTO inbox (event_id, payment_id, seq, outcome, processed_at) VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (event_id) DO NOTHING`,
		setOutcome:     `UPDATE inbox SET outcome = $1 WHERE event_id = $2`,
		inbox:          `SELECT event_id, payment_id, seq, outcome, processed_at FROM inbox WHERE event_id = $1`,
		insertProgress: `INSERT INTO payment_progress (payment_id, last_seq, status, updated_at) VALUES ($1, 0, '', $2) ON CONFLICT (payment_id) DO NOTHING`,
		lockProgress:   `SELECT last_seq FROM payment_progress WHERE payment_id = $1` + d.LockRow(),
		advance:        `UPDATE payment_progress SET last_seq = $1, status = $2, updated_at = $3 WHERE payment_id = $4`,
		insertOrder: `INSERT INTO order_states (` + orderCols + `) VALUES ($1, $2, 'open', '', $3)
			ON CONFLICT (merchant_id, order_id) DO NOTHING`,
		lockOrder:     `SELECT ` + orderCols + ` FROM order_states WHERE merchant_id = $1 AND order_id = $2` + d.LockRow(),
		saveOrder:     `UPDATE order_states SET state = $1, payment_id = $2, updated_at = $3 WHERE merchant_id = $4 AND order_id = $5`,
		order:         `SELECT ` + orderCols + ` FROM order_states WHERE merchant_id = $1 AND order_id = $2`,
		insertTicket:  `INSERT INTO tickets (` + ticketCols + `) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
		ticket:        `SELECT ` + ticketCols + ` FROM tickets WHERE merchant_id = $1 AND order_id = $2`,
		tickets:       `SELECT ` + ticketCols + ` FROM tickets WHERE payment_id > $1 ORDER BY payment_id LIMIT $2`,
		insertRelease: `INSERT INTO order_releases (` + releaseCols + `) VALUES ($1, $2, $3, $4, $5, $6)`,
		releases:      `SELECT ` + releaseCols + ` FROM order_releases WHERE merchant_id = $1 AND order_id = $2 ORDER BY released_at, payment_id`,
		countInbox:    `SELECT count(*) FROM inbox`,
		countTickets:  `SELECT count(*) FROM tickets`,
		countRevoked:  `SELECT count(*) FROM ticket_revocations`,
		insertRevocation: `INSERT INTO ticket_revocations (` + ticketCols + `, revoke_event_id, revoked_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
		deleteTicket:  `DELETE FROM tickets WHERE ticket_id = $1`,
		revocation:    `SELECT ` + ticketCols + `, revoke_event_id, revoked_at FROM ticket_revocations WHERE merchant_id = $1 AND order_id = $2`,
		countReleases: `SELECT count(*) FROM order_releases`,
		countOrders:   `SELECT state, count(*) FROM order_states GROUP BY state`,
		insertFence:   `INSERT INTO partition_fences (part, epoch) VALUES ($1, 0) ON CONFLICT (part) DO NOTHING`,
		raiseFence:    `UPDATE partition_fences SET epoch = $2 WHERE part = $1 AND epoch < $2`,
		readFence:     `SELECT epoch FROM partition_fences WHERE part = $1` + shareLock(d),
	}
	for _, p := range []*string{
		&q.claim, &q.setOutcome, &q.inbox, &q.insertProgress, &q.lockProgress, &q.advance,
		&q.insertOrder, &q.lockOrder, &q.saveOrder, &q.order, &q.insertTicket, &q.ticket, &q.tickets,
		&q.insertRelease, &q.releases, &q.countInbox, &q.countTickets, &q.countReleases, &q.countOrders,
		&q.insertRevocation, &q.deleteTicket, &q.revocation, &q.countRevoked,
		&q.insertFence, &q.raiseFence, &q.readFence,
	} {
		*p = d.Rebind(*p)
	}
	return q
}

// shareLock is the dialect's shared row lock: FOR SHARE where rows lock
// (PostgreSQL), nothing where a write transaction holds the database
// (SQLite).
func shareLock(d Dialect) string {
	if d.LockRow() == "" {
		return ""
	}
	return " FOR SHARE"
}
