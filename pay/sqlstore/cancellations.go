package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/stampede-lab/stampede/pay"
)

var _ pay.CancellationStore = (*Store)(nil)

const cancelCols = `payment_id, merchant_id, idempotency_key, request_hash, reason, status, action, action_id, outcome,
	created_at, updated_at`

// cancelQueries are the statements of cancellations, rebound for the
// dialect.
type cancelQueries struct {
	insert, byPayment, byKey, due, close string
}

func newCancelQueries(d Dialect) cancelQueries {
	q := cancelQueries{
		insert: `INSERT INTO payment_cancellations (` + cancelCols + `)
			VALUES ($1, $2, $3, $4, $5, $6, '', '', $7, $8, $9)`,
		byPayment: `SELECT ` + cancelCols + ` FROM payment_cancellations WHERE payment_id = $1`,
		byKey:     `SELECT ` + cancelCols + ` FROM payment_cancellations WHERE idempotency_key = $1`,
		// The requested cancellations whose payment has settled.
		due: `SELECT c.payment_id, c.merchant_id, c.idempotency_key, c.request_hash, c.reason, c.status, c.action,
				c.action_id, c.outcome, c.created_at, c.updated_at
			FROM payment_cancellations c JOIN payments p ON p.id = c.payment_id
			WHERE c.status = 'REQUESTED' AND p.status NOT IN ('PENDING', 'UNKNOWN')
			ORDER BY c.created_at, c.payment_id LIMIT $1`,
		// The compare-and-set from REQUESTED.
		close: `UPDATE payment_cancellations SET status = $1, action = $2, action_id = $3, outcome = $4, updated_at = $5
			WHERE payment_id = $6 AND status = 'REQUESTED'`,
	}
	for _, p := range []*string{&q.insert, &q.byPayment, &q.byKey, &q.due, &q.close} {
		*p = d.Rebind(*p)
	}
	return q
}

// scanCancellation scans cancelCols.
func (s *Store) scanCancellation(row interface{ Scan(...any) error }) (pay.Cancellation, error) {
	var (
		c              pay.Cancellation
		status, action string
	)
	err := row.Scan(&c.PaymentID, &c.MerchantID, &c.IdempotencyKey, &c.RequestHash, &c.Reason, &status, &action,
		&c.ActionID, &c.Outcome, s.at(&c.CreatedAt), s.at(&c.UpdatedAt))
	if errors.Is(err, sql.ErrNoRows) {
		return c, pay.ErrNotFound
	}
	c.Status, c.Action = pay.CancellationStatus(status), pay.CancelAction(action)
	return c, err
}

// CreateCancellation implements pay.CancellationStore.
func (s *Store) CreateCancellation(ctx context.Context, c pay.Cancellation) (pay.Cancellation, pay.Payment, error) {
	return s.createCancellation(ctx, c, false)
}

// createCancellation records c; unlessConfirmed refuses it (pay.ErrConfirmed)
// when the payment is confirmed, under the payment's lock.
func (s *Store) createCancellation(ctx context.Context, c pay.Cancellation, unlessConfirmed bool) (pay.Cancellation, pay.Payment, error) {
	c, err := pay.PrepareCancellation(c, s.cfg.Now())
	if err != nil {
		return pay.Cancellation{}, pay.Payment{}, err
	}
	var p pay.Payment
	err = s.writeTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		// The payment's lock orders the cancellations of one payment.
		if p, _, err = s.getPayment(ctx, tx, c.PaymentID, true); err != nil {
			return err
		}
		if p.MerchantID != c.MerchantID {
			return fmt.Errorf("payment %q of another merchant: %w", c.PaymentID, pay.ErrNotFound)
		}
		if unlessConfirmed {
			if _, err := s.scanConfirmation(s.queryRow(ctx, tx, s.fq.byPayment, c.PaymentID)); err == nil {
				return fmt.Errorf("payment %s: %w", c.PaymentID, pay.ErrConfirmed)
			} else if !errors.Is(err, pay.ErrNotFound) {
				return err
			}
		}
		for _, q := range []struct{ query, arg string }{{s.cq.byKey, c.IdempotencyKey}, {s.cq.byPayment, c.PaymentID}} {
			got, err := s.scanCancellation(s.queryRow(ctx, tx, q.query, q.arg))
			if err == nil {
				return &pay.CancellationConflict{Cancellation: got}
			}
			if !errors.Is(err, pay.ErrNotFound) {
				return err
			}
		}
		_, err := s.exec(ctx, tx, s.cq.insert, c.PaymentID, c.MerchantID, c.IdempotencyKey, c.RequestHash, c.Reason,
			string(c.Status), c.Outcome, s.d.EncodeTime(c.CreatedAt), s.d.EncodeTime(c.UpdatedAt))
		return err
	})
	if table, ok := s.d.UniqueViolation(err); ok && table == "payment_cancellations" {
		// The same key taken concurrently on another payment.
		if got, gerr := s.scanCancellation(s.queryRow(ctx, s.read, s.cq.byKey, c.IdempotencyKey)); gerr == nil {
			return pay.Cancellation{}, pay.Payment{}, &pay.CancellationConflict{Cancellation: got}
		}
	}
	if err != nil {
		return pay.Cancellation{}, pay.Payment{}, err
	}
	return c, p, nil
}

// GetCancellation implements pay.CancellationStore.
func (s *Store) GetCancellation(ctx context.Context, paymentID string) (pay.Cancellation, error) {
	var c pay.Cancellation
	err := s.readTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		c, err = s.scanCancellation(s.queryRow(ctx, tx, s.cq.byPayment, paymentID))
		return err
	})
	return c, err
}

// DueCancellations implements pay.CancellationStore.
func (s *Store) DueCancellations(ctx context.Context, limit int) ([]pay.Cancellation, error) {
	if err := pay.CheckLimit(limit); err != nil {
		return nil, err
	}
	var out []pay.Cancellation
	err := s.readTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		rows, err := s.query(ctx, tx, s.cq.due, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		out = out[:0]
		for rows.Next() {
			c, err := s.scanCancellation(rows)
			if err != nil {
				return err
			}
			out = append(out, c)
		}
		return rows.Err()
	})
	return out, err
}

// CloseCancellation implements pay.CancellationStore.
func (s *Store) CloseCancellation(ctx context.Context, paymentID string, to pay.CancellationStatus, action pay.CancelAction, actionID, outcome string) (pay.Cancellation, error) {
	if err := pay.CheckCancellationClose(to, action, actionID); err != nil {
		return pay.Cancellation{}, err
	}
	now := pay.StoreTime(s.cfg.Now())
	var c pay.Cancellation
	err := s.writeTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := s.exec(ctx, tx, s.cq.close, string(to), string(action), actionID, outcome, s.d.EncodeTime(now), paymentID)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			if _, err := s.scanCancellation(s.queryRow(ctx, tx, s.cq.byPayment, paymentID)); err != nil {
				return fmt.Errorf("cancellation of %q: %w", paymentID, err)
			}
			return fmt.Errorf("cancellation of %s is no longer REQUESTED: %w", paymentID, pay.ErrStaleStatus)
		}
		c, err = s.scanCancellation(s.queryRow(ctx, tx, s.cq.byPayment, paymentID))
		return err
	})
	if err != nil {
		return pay.Cancellation{}, err
	}
	return c, nil
}
