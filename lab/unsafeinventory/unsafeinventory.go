// Package unsafeinventory is the lab's counter-example of the checkout's
// one rule (no seat sold twice, no more seats sold than exist): a
// checkout.Store that holds seats by reading the inventory and then
// writing it, in two steps, with no guard. Concurrent holds all see the
// same seats free and all take them, so it oversells; the sale lab
// (serve checkout --unsafe-inventory) runs it to show that its report
// catches an oversell. It is never used outside the lab.
package unsafeinventory

import (
	"context"
	"database/sql"
	"strconv"
	"strings"

	"github.com/stampede-lab/stampede/checkout"
	"github.com/stampede-lab/stampede/checkout/sqlstore"
	"github.com/stampede-lab/stampede/internal/sqldb"
)

var _ checkout.Store = (*Store)(nil)

// Store is a checkout/sqlstore.Store whose Hold has no guard; every other
// method is the real store's.
type Store struct {
	*sqlstore.Store
	db      *sqldb.DB
	between func(context.Context)
	q       queries
}

// New wraps store. between, when not nil, runs between a hold's read and
// its write (a pause, or a barrier in tests, widens the race).
func New(store *sqlstore.Store, between func(context.Context)) *Store {
	db := store.DB()
	return &Store{Store: store, db: db, between: between, q: newQueries(db.Dialect())}
}

// Hold overrides checkout.Store.Hold. LAB ONLY: it reads the event and its
// n lowest free seats on the read pool, checks them in Go, calls between,
// and then writes what it read minus n, and the seats it saw free, in a
// second transaction without checking anything again.
func (s *Store) Hold(ctx context.Context, h checkout.Hold, n int) (checkout.Hold, error) {
	e, err := s.Event(ctx, h.EventID)
	if err != nil {
		return checkout.Hold{}, err
	}
	var seats []int
	err = s.db.Read(ctx, func(ctx context.Context, db *sql.DB) error {
		rows, err := db.QueryContext(ctx, s.q.freeSeats, h.EventID, n)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var no int
			if err := rows.Scan(&no); err != nil {
				return err
			}
			seats = append(seats, no)
		}
		return rows.Err()
	})
	if err != nil {
		return checkout.Hold{}, err
	}
	if e.SeatsLeft < n || len(seats) < n {
		return checkout.Hold{}, &checkout.SoldOutError{Left: e.SeatsLeft, Held: e.Held()}
	}
	if s.between != nil {
		s.between(ctx)
	}
	h.Seats = seats
	d := s.db.Dialect()
	err = s.db.Update(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, s.q.setSeatsLeft, e.SeatsLeft-n, h.EventID); err != nil {
			return err
		}
		for _, no := range seats {
			if _, err := tx.ExecContext(ctx, s.q.forceSeat, h.ID, h.EventID, no); err != nil {
				return err
			}
		}
		_, err := tx.ExecContext(ctx, s.q.insertHold, h.ID, h.EventID, h.User, seatsText(seats), h.Amount, h.Currency,
			string(h.State), h.Reason, sqldb.EncodeTime(d, h.ExpiresAt), sqldb.EncodeTime(d, h.CreatedAt), sqldb.EncodeTime(d, h.UpdatedAt))
		return err
	})
	if err != nil {
		return checkout.Hold{}, err
	}
	return h, nil
}

// seatsText writes seats as checkout/sqlstore stores them: "1,2,3".
func seatsText(seats []int) string {
	parts := make([]string, len(seats))
	for i, n := range seats {
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, ",")
}

// queries are the unsafe path's statements: a read, then blind writes.
type queries struct {
	freeSeats, setSeatsLeft, forceSeat, insertHold string
}

func newQueries(d sqldb.Dialect) queries {
	return queries{
		freeSeats:    d.Rebind(`SELECT seat_no FROM checkout_seats WHERE event_id = $1 AND hold_id IS NULL ORDER BY seat_no LIMIT $2`),
		setSeatsLeft: d.Rebind(`UPDATE checkout_events SET seats_left = $1 WHERE id = $2`),
		forceSeat:    d.Rebind(`UPDATE checkout_seats SET hold_id = $1 WHERE event_id = $2 AND seat_no = $3`),
		insertHold: d.Rebind(`INSERT INTO checkout_holds (id, event_id, user_id, seats, amount, currency, state, reason,
			expires_at, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`),
	}
}
