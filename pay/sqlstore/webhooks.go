package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/stampede-lab/stampede/pay"
)

func (s *Store) scanDelivery(row interface{ Scan(...any) error }, extra ...any) (pay.Delivery, error) {
	var (
		d            pay.Delivery
		body, status string
	)
	dest := []any{&d.ID, &d.PaymentID, &d.Seq, &d.MerchantID, &d.Type, &body, &status, &d.Attempts, &d.LastError,
		s.at(&d.NextAt), s.at(&d.Since), s.at(&d.CreatedAt), s.at(&d.UpdatedAt)}
	err := row.Scan(append(dest, extra...)...)
	if errors.Is(err, sql.ErrNoRows) {
		return d, pay.ErrNotFound
	}
	d.Body, d.Status = []byte(body), pay.DeliveryStatus(status)
	return d, err
}

func (s *Store) listDeliveries(ctx context.Context, query string, withWebhook bool, args ...any) ([]pay.Delivery, error) {
	out := []pay.Delivery{}
	err := s.run(ctx, func(ctx context.Context, db *sql.DB) error {
		rows, err := s.query(ctx, db, query, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				d   pay.Delivery
				err error
			)
			if withWebhook {
				var url, secret string
				d, err = s.scanDelivery(rows, &url, &secret)
				d.URL, d.Secret = url, secret
			} else {
				d, err = s.scanDelivery(rows)
			}
			if err != nil {
				return err
			}
			out = append(out, d)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// DueDeliveries implements pay.WebhookStore.
func (s *Store) DueDeliveries(ctx context.Context, now time.Time, limit int) ([]pay.Delivery, error) {
	if err := pay.CheckLimit(limit); err != nil {
		return nil, err
	}
	return s.listDeliveries(ctx, s.q.dueDeliveries, true, s.d.EncodeTime(pay.StoreTime(now)), limit)
}

// ClaimDelivery implements pay.WebhookStore.
func (s *Store) ClaimDelivery(ctx context.Context, id string, now, until time.Time) (bool, error) {
	var n int64
	err := s.writeTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := s.exec(ctx, tx, s.q.claimDelivery, s.d.EncodeTime(pay.StoreTime(until)), id, s.d.EncodeTime(pay.StoreTime(now)))
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n == 1, err
}

// RecordAttempt implements pay.WebhookStore.
func (s *Store) RecordAttempt(ctx context.Context, id string, a pay.Attempt) error {
	switch a.Status {
	case pay.DeliveryPending, pay.DeliveryDelivered, pay.DeliveryFailed:
	default:
		return pay.Invalid("status", "unknown delivery status %q", a.Status)
	}
	next := a.NextAt
	if a.Status != pay.DeliveryPending || next.IsZero() {
		next = a.At
	}
	return s.writeTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := s.exec(ctx, tx, s.q.recordAttempt, string(a.Status), a.LastError,
			s.d.EncodeTime(pay.StoreTime(next)), s.d.EncodeTime(pay.StoreTime(a.At)), id)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			if err == nil {
				err = fmt.Errorf("delivery %q: %w", id, pay.ErrNotFound)
			}
			return err
		}
		return nil
	})
}

// Deliveries implements pay.WebhookStore.
func (s *Store) Deliveries(ctx context.Context, paymentID string, limit int) ([]pay.Delivery, error) {
	if err := pay.CheckLimit(limit); err != nil {
		return nil, err
	}
	if paymentID == "" {
		return s.listDeliveries(ctx, s.q.listDeliveries, false, limit)
	}
	return s.listDeliveries(ctx, s.q.listPaymentDeliveries, false, paymentID, limit)
}

// Delivery implements pay.WebhookStore.
func (s *Store) Delivery(ctx context.Context, id string) (pay.Delivery, error) {
	var d pay.Delivery
	err := s.run(ctx, func(ctx context.Context, db *sql.DB) error {
		var err error
		d, err = s.scanDelivery(s.queryRow(ctx, db, s.q.getDelivery, id))
		if errors.Is(err, pay.ErrNotFound) {
			err = fmt.Errorf("delivery %q: %w", id, pay.ErrNotFound)
		}
		return err
	})
	return d, err
}

// ResendDelivery implements pay.WebhookStore.
func (s *Store) ResendDelivery(ctx context.Context, id string, now time.Time) error {
	return s.writeTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := s.exec(ctx, tx, s.q.resend, s.d.EncodeTime(pay.StoreTime(now)), id)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			if err == nil {
				err = fmt.Errorf("delivery %q: %w", id, pay.ErrNotFound)
			}
			return err
		}
		return nil
	})
}
