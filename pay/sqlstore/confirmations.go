package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/stampede-lab/stampede/pay"
)

var _ pay.ConfirmationStore = (*Store)(nil)

// confirmQueries are the statements of confirmations, rebound for the
// dialect.
type confirmQueries struct {
	insert, byPayment, unconfirmed string
}

func newConfirmQueries(d Dialect) confirmQueries {
	q := confirmQueries{
		insert:    `INSERT INTO payment_confirmations (payment_id, merchant_id, confirmed_at) VALUES ($1, $2, $3)`,
		byPayment: `SELECT c.payment_id, c.merchant_id, p.order_id, c.confirmed_at FROM payment_confirmations c JOIN payments p ON p.id = c.payment_id WHERE c.payment_id = $1`,
		unconfirmed: `SELECT ` + paymentCols + ` FROM payments
			WHERE status IN ('APPROVED', 'AUTHORIZED') AND created_at >= $1 AND created_at < $2
			AND NOT EXISTS (SELECT 1 FROM payment_confirmations c WHERE c.payment_id = payments.id)
			AND NOT EXISTS (SELECT 1 FROM payment_cancellations x WHERE x.payment_id = payments.id)
			ORDER BY created_at, id LIMIT $3`,
	}
	for _, p := range []*string{&q.insert, &q.byPayment, &q.unconfirmed} {
		*p = d.Rebind(*p)
	}
	return q
}

func (s *Store) scanConfirmation(row interface{ Scan(...any) error }) (pay.Confirmation, error) {
	var c pay.Confirmation
	err := row.Scan(&c.PaymentID, &c.MerchantID, &c.OrderID, s.at(&c.ConfirmedAt))
	if errors.Is(err, sql.ErrNoRows) {
		return c, pay.ErrNotFound
	}
	return c, err
}

// Confirm implements pay.ConfirmationStore.
func (s *Store) Confirm(ctx context.Context, merchantID, paymentID string, at time.Time) (pay.Confirmation, pay.Payment, error) {
	var (
		c pay.Confirmation
		p pay.Payment
	)
	err := s.writeTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		// The payment's lock orders a confirmation against a closure.
		if p, _, err = s.getPayment(ctx, tx, paymentID, true); err != nil {
			return err
		}
		if p.MerchantID != merchantID {
			return fmt.Errorf("payment %q of another merchant: %w", paymentID, pay.ErrNotFound)
		}
		if c, err = s.scanConfirmation(s.queryRow(ctx, tx, s.fq.byPayment, paymentID)); err == nil {
			return nil // confirmed before
		} else if !errors.Is(err, pay.ErrNotFound) {
			return err
		}
		if got, err := s.scanCancellation(s.queryRow(ctx, tx, s.cq.byPayment, paymentID)); err == nil {
			return &pay.CancellationConflict{Cancellation: got}
		} else if !errors.Is(err, pay.ErrNotFound) {
			return err
		}
		if p.Status != pay.StatusApproved && p.Status != pay.StatusAuthorized {
			return &pay.NotConfirmableError{Status: p.Status}
		}
		c = pay.Confirmation{PaymentID: p.ID, MerchantID: p.MerchantID, OrderID: p.OrderID, ConfirmedAt: pay.StoreTime(at)}
		_, err = s.exec(ctx, tx, s.fq.insert, c.PaymentID, c.MerchantID, s.d.EncodeTime(c.ConfirmedAt))
		return err
	})
	if err != nil {
		return pay.Confirmation{}, pay.Payment{}, err
	}
	return c, p, nil
}

// Confirmation implements pay.ConfirmationStore.
func (s *Store) Confirmation(ctx context.Context, paymentID string) (pay.Confirmation, error) {
	var c pay.Confirmation
	err := s.readTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		c, err = s.scanConfirmation(s.queryRow(ctx, tx, s.fq.byPayment, paymentID))
		return err
	})
	return c, err
}

// Unconfirmed implements pay.ConfirmationStore.
func (s *Store) Unconfirmed(ctx context.Context, after, before time.Time, limit int) ([]pay.Payment, error) {
	if err := pay.CheckLimit(limit); err != nil {
		return nil, err
	}
	var out []pay.Payment
	err := s.run(ctx, func(ctx context.Context, db *sql.DB) error {
		var err error
		out, err = s.listPayments(ctx, db, s.fq.unconfirmed, s.d.EncodeTime(pay.StoreTime(after)), s.d.EncodeTime(pay.StoreTime(before)), limit)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// CreateClosure implements pay.ConfirmationStore.
func (s *Store) CreateClosure(ctx context.Context, c pay.Cancellation) (pay.Cancellation, pay.Payment, error) {
	return s.createCancellation(ctx, c, true)
}
