// Package sqlstore is the checkout.Store over database/sql, written once
// for SQLite and PostgreSQL on the SQL seam (internal/sqldb): its
// dialects give the placeholders and timestamps, and its classification
// of driver errors is the one every store shares.
// Open picks the database: PostgreSQL when Config.PostgresURL is set,
// otherwise SQLite at Config.SQLitePath. Each dialect has its own goose
// migrations, embedded, recorded in a version table of their own
// (checkout_goose_db_version), so that checkout may share a database with
// pay and fulfilment.
//
// No oversell, in SQL. A hold is one transaction that first runs
//
//	UPDATE checkout_events SET seats_left = seats_left - n WHERE id = $e AND seats_left >= n
//
// and goes on only if it changed the row. On PostgreSQL (READ COMMITTED)
// that update locks the event row until commit, and a concurrent hold of
// the same event waits for it and then re-evaluates seats_left >= n on
// the committed row; on SQLite every write transaction of the store
// begins IMMEDIATE, so they never overlap. In the same transaction the
// hold takes the n lowest free seats (seat rows whose hold_id IS NULL,
// set only while still NULL) and is inserted. Every change that gives
// seats back or sells them changes the event row in the same transaction
// as the hold's compare-and-set on its state, so the counters and the
// seats move together.
//
// Every call runs under the operation timeout: a database that does not
// answer gives CodeUnavailable (checkout.Unavailable) within it.
package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/checkout"
	"github.com/stampede-lab/stampede/internal/sqldb"
	"github.com/stampede-lab/stampede/protocol"
)

var _ checkout.Store = (*Store)(nil)

// Dialect is the SQL seam's dialect: sqldb.SQLite or sqldb.Postgres.
type Dialect = sqldb.Dialect

// Store is the checkout.Store over database/sql.
type Store struct {
	db *sqldb.DB
	d  Dialect
	q  queries
}

// spec is checkout's place among the SQL stores: its migrations, its
// version table and the errors that pass through classification.
var spec = sqldb.Spec{
	Name:        name,
	Migrations:  migrations,
	Unavailable: checkout.Unavailable,
	Own: func(err error) bool {
		if errors.Is(err, checkout.ErrNotFound) {
			return true
		}
		if _, ok := errors.AsType[*checkout.Error](err); ok {
			return true
		}
		if _, ok := errors.AsType[*checkout.SoldOutError](err); ok {
			return true
		}
		_, ok := errors.AsType[*checkout.StateError](err)
		return ok
	},
	Conflict: func(table string, err error) *stampede.Error {
		msg := "conflicting write (" + table + ")"
		if table == "checkout_events" {
			msg = "the event already exists"
		}
		return &checkout.Error{Code: stampede.Conflict, Message: msg, Err: err}
	},
}

// update runs fn in one write transaction under the operation deadline.
func (s *Store) update(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error {
	return s.db.Update(ctx, fn)
}

// readOp runs fn on the read pool under the operation deadline.
func (s *Store) readOp(ctx context.Context, fn func(ctx context.Context, db *sql.DB) error) error {
	return s.db.Read(ctx, fn)
}

// DB returns the store's database: its pools, dialect and error
// classification. The lab's unsafe inventory writes through it.
func (s *Store) DB() *sqldb.DB { return s.db }

// Close implements checkout.Store.
func (s *Store) Close() error { return s.db.Close() }

// Ping implements checkout.Store.
func (s *Store) Ping(ctx context.Context) error { return s.db.Ping(ctx) }

// enc encodes a time for the dialect, at microsecond precision in UTC.
func (s *Store) enc(t time.Time) any { return sqldb.EncodeTime(s.d, t) }

// at scans a timestamp column through the dialect.
func (s *Store) at(t *time.Time) sql.Scanner { return sqldb.TimeCol(s.d, t) }

// seatsCol scans a comma-separated list of seat numbers.
type seatsCol struct{ seats *[]int }

// Scan implements sql.Scanner.
func (c seatsCol) Scan(src any) error {
	var text string
	switch v := src.(type) {
	case string:
		text = v
	case []byte:
		text = string(v)
	default:
		return fmt.Errorf("seats: want text, got %T", src)
	}
	*c.seats = []int{}
	for f := range strings.SplitSeq(text, ",") {
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil {
			return fmt.Errorf("seats: %w", err)
		}
		*c.seats = append(*c.seats, n)
	}
	return nil
}

// seatsText writes seats as stored.
func seatsText(seats []int) string {
	parts := make([]string, len(seats))
	for i, n := range seats {
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, ",")
}

type scanner interface{ Scan(...any) error }

func (s *Store) scanEvent(row scanner) (checkout.Event, error) {
	var e checkout.Event
	err := row.Scan(&e.ID, &e.Seats, &e.SeatsLeft, &e.Sold, &e.Price, &e.Currency, s.at(&e.CreatedAt))
	if errors.Is(err, sql.ErrNoRows) {
		return e, fmt.Errorf("event: %w", checkout.ErrNotFound)
	}
	return e, err
}

func (s *Store) scanHold(row scanner) (checkout.Hold, error) {
	var (
		h     checkout.Hold
		state string
	)
	err := row.Scan(&h.ID, &h.EventID, &h.User, seatsCol{&h.Seats}, &h.Amount, &h.Currency, &state, &h.Reason,
		s.at(&h.ExpiresAt), s.at(&h.CreatedAt), s.at(&h.UpdatedAt))
	if errors.Is(err, sql.ErrNoRows) {
		return h, fmt.Errorf("hold: %w", checkout.ErrNotFound)
	}
	h.State = checkout.HoldState(state)
	return h, err
}

func (s *Store) scanOrder(row scanner) (checkout.Order, error) {
	var (
		o              checkout.Order
		status, pstate string
	)
	err := row.Scan(&o.ID, &o.HoldID, &o.EventID, &o.User, seatsCol{&o.Seats}, &o.Amount, &o.Currency, &status,
		&o.IdempotencyKey, &o.PaymentID, &pstate, &o.Reason, s.at(&o.CreatedAt), s.at(&o.UpdatedAt))
	if errors.Is(err, sql.ErrNoRows) {
		return o, fmt.Errorf("order: %w", checkout.ErrNotFound)
	}
	o.Status, o.PaymentStatus = checkout.OrderStatus(status), protocol.PaymentStatus(pstate)
	return o, err
}

// CreateEvent implements checkout.Store: the event row and one free seat
// row per seat.
func (s *Store) CreateEvent(ctx context.Context, e checkout.Event) (checkout.Event, error) {
	e.SeatsLeft, e.Sold, e.CreatedAt = e.Seats, 0, sqldb.StoreTime(e.CreatedAt)
	err := s.update(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, s.q.insertEvent, e.ID, e.Seats, e.Price, e.Currency, s.enc(e.CreatedAt)); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, s.q.insertSeats, e.ID, e.Seats)
		return err
	})
	if err == nil && s.q.analyzeSeats != "" {
		// The event exists: statistics that fail to update cost time
		// per hold, not correctness.
		_ = s.update(ctx, func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, s.q.analyzeSeats)
			return err
		})
	}
	return e, err
}

// Event implements checkout.Store.
func (s *Store) Event(ctx context.Context, id string) (checkout.Event, error) {
	var e checkout.Event
	err := s.readOp(ctx, func(ctx context.Context, db *sql.DB) error {
		var err error
		e, err = s.scanEvent(db.QueryRowContext(ctx, s.q.event, id))
		return err
	})
	return e, err
}

// soldOut explains why the guarded update changed no row: no such event,
// or too few seats left.
func (s *Store) soldOut(ctx context.Context, tx *sql.Tx, event string) error {
	e, err := s.scanEvent(tx.QueryRowContext(ctx, s.q.event, event))
	if err != nil {
		return err
	}
	return &checkout.SoldOutError{Left: e.SeatsLeft, Held: e.Held()}
}

// Hold implements checkout.Store: the guarded path. A read on the read
// pool first turns away holds of an event already sold out without
// queueing for the writer; it decides nothing else (the guard does).
func (s *Store) Hold(ctx context.Context, h checkout.Hold, n int) (checkout.Hold, error) {
	e, err := s.Event(ctx, h.EventID)
	if err != nil {
		return checkout.Hold{}, err
	}
	if e.SeatsLeft < n {
		return checkout.Hold{}, &checkout.SoldOutError{Left: e.SeatsLeft, Held: e.Held()}
	}
	err = s.update(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, s.q.takeSeats, n, h.EventID)
		if err != nil {
			return err
		}
		if k, err := res.RowsAffected(); err != nil {
			return err
		} else if k != 1 {
			return s.soldOut(ctx, tx, h.EventID)
		}
		seats, err := s.claimSeats(ctx, tx, h.ID, h.EventID, n)
		if err != nil {
			return err
		}
		if len(seats) != n {
			return fmt.Errorf("inventory out of step: seats_left allowed %d seats, %d were free", n, len(seats))
		}
		h.Seats = seats
		return s.insertHold(ctx, tx, h)
	})
	if err != nil {
		return checkout.Hold{}, err
	}
	return h, nil
}

// claimSeats gives the n lowest free seats of event to hold and returns
// them, ascending.
func (s *Store) claimSeats(ctx context.Context, tx *sql.Tx, hold, event string, n int) ([]int, error) {
	rows, err := tx.QueryContext(ctx, s.q.claimSeats, hold, event, n)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var seats []int
	for rows.Next() {
		var no int
		if err := rows.Scan(&no); err != nil {
			return nil, err
		}
		seats = append(seats, no)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	slices.Sort(seats) // RETURNING keeps no order
	return seats, nil
}

func (s *Store) insertHold(ctx context.Context, tx *sql.Tx, h checkout.Hold) error {
	_, err := tx.ExecContext(ctx, s.q.insertHold, h.ID, h.EventID, h.User, seatsText(h.Seats), h.Amount, h.Currency,
		string(h.State), h.Reason, s.enc(h.ExpiresAt), s.enc(h.CreatedAt), s.enc(h.UpdatedAt))
	return err
}

// GetHold implements checkout.Store.
func (s *Store) GetHold(ctx context.Context, id string) (checkout.Hold, error) {
	var h checkout.Hold
	err := s.readOp(ctx, func(ctx context.Context, db *sql.DB) error {
		var err error
		h, err = s.scanHold(db.QueryRowContext(ctx, s.q.hold, id))
		return err
	})
	return h, err
}

// StartOrder implements checkout.Store.
func (s *Store) StartOrder(ctx context.Context, o checkout.Order, now time.Time) (checkout.Order, error) {
	o.CreatedAt, o.UpdatedAt = sqldb.StoreTime(o.CreatedAt), sqldb.StoreTime(o.UpdatedAt)
	err := s.update(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, s.q.startPaying, s.enc(now), o.HoldID)
		if err != nil {
			return err
		}
		if k, err := res.RowsAffected(); err != nil {
			return err
		} else if k != 1 {
			h, err := s.scanHold(tx.QueryRowContext(ctx, s.q.hold, o.HoldID))
			if err != nil {
				return err
			}
			return &checkout.StateError{State: h.State, Expired: h.State == checkout.HoldHeld}
		}
		_, err = tx.ExecContext(ctx, s.q.insertOrder, o.ID, o.HoldID, o.EventID, o.User, seatsText(o.Seats), o.Amount, o.Currency,
			string(o.Status), o.IdempotencyKey, o.PaymentID, string(o.PaymentStatus), o.Reason, s.enc(o.CreatedAt), s.enc(o.UpdatedAt))
		return err
	})
	if err != nil {
		return checkout.Order{}, err
	}
	return o, nil
}

// GetOrder implements checkout.Store.
func (s *Store) GetOrder(ctx context.Context, id string) (checkout.Order, error) {
	return s.orderBy(ctx, s.q.order, id)
}

// OrderOfHold implements checkout.Store.
func (s *Store) OrderOfHold(ctx context.Context, holdID string) (checkout.Order, error) {
	return s.orderBy(ctx, s.q.orderOfHold, holdID)
}

func (s *Store) orderBy(ctx context.Context, q, arg string) (checkout.Order, error) {
	var o checkout.Order
	err := s.readOp(ctx, func(ctx context.Context, db *sql.DB) error {
		var err error
		o, err = s.scanOrder(db.QueryRowContext(ctx, q, arg))
		return err
	})
	return o, err
}

// RecordPayment implements checkout.Store.
func (s *Store) RecordPayment(ctx context.Context, orderID, paymentID string, status protocol.PaymentStatus, now time.Time) (checkout.Order, error) {
	var o checkout.Order
	err := s.update(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, s.q.recordPayment, paymentID, string(status), s.enc(now), orderID); err != nil {
			return err
		}
		var err error
		o, err = s.scanOrder(tx.QueryRowContext(ctx, s.q.order, orderID))
		return err
	})
	return o, err
}

// Settle implements checkout.Store.
func (s *Store) Settle(ctx context.Context, orderID string, paid bool, paymentID string, status protocol.PaymentStatus, reason string, now time.Time) (checkout.Order, error) {
	var o checkout.Order
	err := s.update(ctx, func(ctx context.Context, tx *sql.Tx) error {
		to := checkout.OrderFailed
		if paid {
			to = checkout.OrderPaid
		}
		res, err := tx.ExecContext(ctx, s.q.endOrder, string(to), paymentID, string(status), reason, s.enc(now), orderID)
		if err != nil {
			return err
		}
		o, err = s.scanOrder(tx.QueryRowContext(ctx, s.q.order, orderID))
		if err != nil {
			return err
		}
		if k, err := res.RowsAffected(); err != nil || k != 1 {
			return err // ended before: nothing to do
		}
		if paid {
			if err := s.exec1(ctx, tx, s.q.sellHold, s.enc(now), o.HoldID); err != nil {
				return err
			}
			return s.exec1(ctx, tx, s.q.addSold, len(o.Seats), o.EventID)
		}
		return s.release(ctx, tx, o.HoldID, o.EventID, len(o.Seats), checkout.HoldPaying, reason, now)
	})
	return o, err
}

// release moves hold from state from to released and gives its seats
// back; the hold must be in from.
func (s *Store) release(ctx context.Context, tx *sql.Tx, hold, event string, n int, from checkout.HoldState, reason string, now time.Time) error {
	if err := s.exec1(ctx, tx, s.q.releaseHold, reason, s.enc(now), hold, string(from)); err != nil {
		return err
	}
	if err := s.exec1(ctx, tx, s.q.giveBack, n, event); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, s.q.freeHoldSeats, hold)
	return err
}

// exec1 runs a statement that must change exactly one row.
func (s *Store) exec1(ctx context.Context, tx *sql.Tx, q string, args ...any) error {
	res, err := tx.ExecContext(ctx, q, args...)
	if err != nil {
		return err
	}
	if k, err := res.RowsAffected(); err != nil {
		return err
	} else if k != 1 {
		return fmt.Errorf("%d rows changed, want 1", k)
	}
	return nil
}

// ReleaseExpired implements checkout.Store: one transaction per hold, the
// hold's state compared and set.
func (s *Store) ReleaseExpired(ctx context.Context, event string, now time.Time, limit int) (int, error) {
	var due []checkout.Hold
	err := s.readOp(ctx, func(ctx context.Context, db *sql.DB) error {
		rows, err := db.QueryContext(ctx, s.q.expired, s.enc(now), event, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			h, err := s.scanHold(rows)
			if err != nil {
				return err
			}
			due = append(due, h)
		}
		return rows.Err()
	})
	if err != nil {
		return 0, err
	}
	released := 0
	for _, h := range due {
		freed := false
		err := s.update(ctx, func(ctx context.Context, tx *sql.Tx) error {
			res, err := tx.ExecContext(ctx, s.q.expireHold, s.enc(now), h.ID)
			if err != nil {
				return err
			}
			if k, err := res.RowsAffected(); err != nil || k != 1 {
				return err // paid for or released meanwhile
			}
			freed = true
			if err := s.exec1(ctx, tx, s.q.giveBack, len(h.Seats), h.EventID); err != nil {
				return err
			}
			_, err = tx.ExecContext(ctx, s.q.freeHoldSeats, h.ID)
			return err
		})
		if err != nil {
			return released, err
		}
		if freed {
			released++
		}
	}
	return released, nil
}

// PendingOrders implements checkout.Store.
func (s *Store) PendingOrders(ctx context.Context, before time.Time, limit int) ([]checkout.Order, error) {
	out := []checkout.Order{}
	err := s.readOp(ctx, func(ctx context.Context, db *sql.DB) error {
		rows, err := db.QueryContext(ctx, s.q.pending, s.enc(before), limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			o, err := s.scanOrder(rows)
			if err != nil {
				return err
			}
			out = append(out, o)
		}
		return rows.Err()
	})
	return out, err
}

// queries holds every statement, written with $n placeholders and rebound
// for the dialect.
type queries struct {
	insertEvent, insertSeats, event                  string
	takeSeats, claimSeats, insertHold, hold          string
	startPaying, insertOrder, order, orderOfHold     string
	recordPayment, endOrder, sellHold, addSold       string
	releaseHold, giveBack, freeHoldSeats, expireHold string
	expired, pending                                 string
	// analyzeSeats refreshes the planner's statistics of the seats after
	// an event is created (PostgreSQL; empty on SQLite).
	analyzeSeats string
}

const (
	eventCols = `id, seats, seats_left, sold, price, currency, created_at`
	holdCols  = `id, event_id, user_id, seats, amount, currency, state, reason, expires_at, created_at, updated_at`
	orderCols = `id, hold_id, event_id, user_id, seats, amount, currency, status, idempotency_key, payment_id,
		payment_status, reason, created_at, updated_at`
)

func newQueries(d Dialect) queries {
	q := queries{
		insertEvent: `INSERT INTO checkout_events (` + eventCols + `) VALUES ($1, $2, $2, 0, $3, $4, $5)`,
		insertSeats: `WITH RECURSIVE n(seat_no) AS (SELECT 1 UNION ALL SELECT seat_no + 1 FROM n WHERE seat_no < $2)
			INSERT INTO checkout_seats (event_id, seat_no, hold_id) SELECT $1, seat_no, NULL FROM n`,
		event: `SELECT ` + eventCols + ` FROM checkout_events WHERE id = $1`,
		// The guard.
		takeSeats: `UPDATE checkout_events SET seats_left = seats_left - $1 WHERE id = $2 AND seats_left >= $1`,
		claimSeats: `UPDATE checkout_seats SET hold_id = $1
			WHERE event_id = $2 AND hold_id IS NULL AND seat_no IN (
				SELECT seat_no FROM checkout_seats WHERE event_id = $2 AND hold_id IS NULL ORDER BY seat_no LIMIT $3)
			RETURNING seat_no`,
		insertHold:  `INSERT INTO checkout_holds (` + holdCols + `) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`,
		hold:        `SELECT ` + holdCols + ` FROM checkout_holds WHERE id = $1`,
		startPaying: `UPDATE checkout_holds SET state = 'paying', updated_at = $1 WHERE id = $2 AND state = 'held' AND expires_at > $1`,
		insertOrder: `INSERT INTO checkout_orders (` + orderCols + `) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)`,
		order:       `SELECT ` + orderCols + ` FROM checkout_orders WHERE id = $1`,
		orderOfHold: `SELECT ` + orderCols + ` FROM checkout_orders WHERE hold_id = $1`,
		recordPayment: `UPDATE checkout_orders SET payment_id = $1, payment_status = $2, updated_at = $3
			WHERE id = $4 AND status = 'pending'`,
		endOrder: `UPDATE checkout_orders SET status = $1, payment_id = $2, payment_status = $3, reason = $4, updated_at = $5
			WHERE id = $6 AND status = 'pending'`,
		sellHold:      `UPDATE checkout_holds SET state = 'sold', updated_at = $1 WHERE id = $2 AND state = 'paying'`,
		addSold:       `UPDATE checkout_events SET sold = sold + $1 WHERE id = $2`,
		releaseHold:   `UPDATE checkout_holds SET state = 'released', reason = $1, updated_at = $2 WHERE id = $3 AND state = $4`,
		giveBack:      `UPDATE checkout_events SET seats_left = seats_left + $1 WHERE id = $2`,
		freeHoldSeats: `UPDATE checkout_seats SET hold_id = NULL WHERE hold_id = $1`,
		expireHold: `UPDATE checkout_holds SET state = 'released', reason = 'expired', updated_at = $1
			WHERE id = $2 AND state = 'held' AND expires_at <= $1`,
		expired: `SELECT ` + holdCols + ` FROM checkout_holds WHERE state = 'held' AND expires_at <= $1 AND ($2 = '' OR event_id = $2)
			ORDER BY expires_at LIMIT $3`,
		pending: `SELECT ` + orderCols + ` FROM checkout_orders WHERE status = 'pending' AND updated_at <= $1
			ORDER BY updated_at LIMIT $2`,
	}
	if d.Name() == "postgres" {
		// The lowest free seats read once (an InitPlan: ARRAY of the
		// subquery), then each updated through an index. With IN
		// (subquery), PostgreSQL's generic plan joined the subquery to
		// every seat of the event (a hash semi join over a sequential
		// scan: 13 ms with 100,000 seats), and with the free seats'
		// index and no statistics a nested loop ran the subquery once
		// per free seat (1.2 s).
		q.claimSeats = `UPDATE checkout_seats SET hold_id = $1
			WHERE event_id = $2 AND hold_id IS NULL AND seat_no = ANY (ARRAY(
				SELECT seat_no FROM checkout_seats WHERE event_id = $2 AND hold_id IS NULL ORDER BY seat_no LIMIT $3))
			RETURNING seat_no`
		// A new event's seats, up to 100,000 rows, are unknown to the
		// planner until autovacuum analyzes the table (a minute or more):
		// it would take the event for a few rows and filter its seats
		// instead of looking them up.
		q.analyzeSeats = `ANALYZE checkout_seats`
	}
	for _, p := range []*string{
		&q.insertEvent, &q.insertSeats, &q.event, &q.takeSeats, &q.claimSeats, &q.insertHold, &q.hold,
		&q.startPaying, &q.insertOrder, &q.order, &q.orderOfHold,
		&q.recordPayment, &q.endOrder, &q.sellHold, &q.addSold, &q.releaseHold, &q.giveBack, &q.freeHoldSeats,
		&q.expireHold, &q.expired, &q.pending,
	} {
		*p = d.Rebind(*p)
	}
	return q
}
