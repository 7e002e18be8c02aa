package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/stampede-lab/stampede/pay"
)

var _ pay.RefundStore = (*Store)(nil)

const refundCols = `id, payment_id, merchant_id, amount, currency, reason, status, external_key, idempotency_key,
	request_hash, created_at, updated_at, next_inquiry_at, inquiries`

// refundQueries are the statements of refunds and of the merchant's
// listing, with $n placeholders rebound for the dialect.
type refundQueries struct {
	insertRefund, insertRefundHistory, refundByKey, getRefund, refundHistory string
	refundsOfPayment, refundHistoriesOfPayment, heldRefunds                  string
	updateRefund, bumpSeq, claimDueRefunds, deferRefund, anyDueRefund        string
	listForMerchant                                                          string
}

func newRefundQueries(d Dialect) refundQueries {
	q := refundQueries{
		insertRefund: `INSERT INTO refunds (` + refundCols + `)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, 0)`,
		insertRefundHistory: `INSERT INTO refund_history (refund_id, from_status, to_status, reason, at) VALUES ($1, $2, $3, $4, $5)`,
		refundByKey:         `SELECT ` + refundCols + ` FROM refunds WHERE idempotency_key = $1`,
		getRefund:           `SELECT ` + refundCols + ` FROM refunds WHERE id = $1`,
		refundHistory:       `SELECT refund_id, from_status, to_status, reason, at FROM refund_history WHERE refund_id = $1 ORDER BY id`,
		refundsOfPayment:    `SELECT ` + refundCols + ` FROM refunds WHERE payment_id = $1 ORDER BY created_at, id`,
		refundHistoriesOfPayment: `SELECT h.refund_id, h.from_status, h.to_status, h.reason, h.at
			FROM refund_history h JOIN refunds r ON r.id = h.refund_id WHERE r.payment_id = $1 ORDER BY h.id`,
		heldRefunds: `SELECT COALESCE(SUM(amount), 0) FROM refunds WHERE payment_id = $1 AND status <> 'FAILED'`,
		// The compare-and-set of a refund's status.
		updateRefund: `UPDATE refunds SET status = $1, updated_at = $2, next_inquiry_at = $3 WHERE id = $4 AND status = $5`,
		bumpSeq:      `UPDATE payments SET event_seq = $1 WHERE id = $2`,
		claimDueRefunds: `WITH due AS (
				SELECT id FROM refunds
				WHERE status IN ('PENDING', 'UNKNOWN') AND next_inquiry_at <= $1
				ORDER BY next_inquiry_at, id LIMIT $3` + claimLock(d) + `
			)
			UPDATE refunds SET next_inquiry_at = $2 WHERE id IN (SELECT id FROM due)
			RETURNING ` + refundCols,
		anyDueRefund: `SELECT COUNT(*) FROM (SELECT 1 FROM refunds
			WHERE status IN ('PENDING', 'UNKNOWN') AND next_inquiry_at <= $1 LIMIT 1) due`,
		deferRefund: `UPDATE refunds SET inquiries = inquiries + 1, next_inquiry_at = $3
			WHERE id = $1 AND status = $2
			RETURNING ` + refundCols,
		// Keyset pagination on (created_at, id); an empty filter matches
		// everything.
		listForMerchant: `SELECT ` + paymentCols + ` FROM payments
			WHERE merchant_id = $1 AND ($2 = '' OR order_id = $2) AND ($3 = '' OR status = $3)
			AND created_at >= $4 AND created_at < $5
			AND (created_at > $6 OR (created_at = $6 AND id > $7))
			ORDER BY created_at, id LIMIT $8`,
	}
	for _, p := range []*string{
		&q.insertRefund, &q.insertRefundHistory, &q.refundByKey, &q.getRefund, &q.refundHistory,
		&q.refundsOfPayment, &q.refundHistoriesOfPayment, &q.heldRefunds,
		&q.updateRefund, &q.bumpSeq, &q.claimDueRefunds, &q.deferRefund, &q.anyDueRefund, &q.listForMerchant,
	} {
		*p = d.Rebind(*p)
	}
	return q
}

// scanRefund scans refundCols.
func (s *Store) scanRefund(row interface{ Scan(...any) error }) (pay.Refund, error) {
	var (
		r      pay.Refund
		status string
	)
	err := row.Scan(&r.ID, &r.PaymentID, &r.MerchantID, &r.Amount, &r.Currency, &r.Reason, &status, &r.ExternalKey,
		&r.IdempotencyKey, &r.RequestHash, s.at(&r.CreatedAt), s.at(&r.UpdatedAt), s.nullAt(&r.NextInquiryAt), &r.Inquiries)
	if errors.Is(err, sql.ErrNoRows) {
		return r, pay.ErrNotFound
	}
	r.Status = pay.RefundStatus(status)
	return r, err
}

func (s *Store) scanRefunds(ctx context.Context, q querier, query string, args ...any) ([]pay.Refund, error) {
	rows, err := s.query(ctx, q, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []pay.Refund{}
	for rows.Next() {
		r, err := s.scanRefund(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// refundHistories reads the history entries query returns, by refund.
func (s *Store) refundHistories(ctx context.Context, q querier, query string, arg string) (map[string][]pay.RefundChange, error) {
	rows, err := s.query(ctx, q, query, arg)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string][]pay.RefundChange{}
	for rows.Next() {
		var (
			id, from, to string
			c            pay.RefundChange
		)
		if err := rows.Scan(&id, &from, &to, &c.Reason, s.at(&c.At)); err != nil {
			return nil, err
		}
		c.From, c.To = pay.RefundStatus(from), pay.RefundStatus(to)
		out[id] = append(out[id], c)
	}
	return out, rows.Err()
}

func (s *Store) insertRefundHistory(ctx context.Context, tx *sql.Tx, id string, c pay.RefundChange) error {
	_, err := s.exec(ctx, tx, s.rq.insertRefundHistory, id, string(c.From), string(c.To), c.Reason, s.d.EncodeTime(c.At))
	return err
}

// CreateRefund implements pay.RefundStore.
func (s *Store) CreateRefund(ctx context.Context, r pay.Refund) (pay.Refund, error) {
	r, err := pay.PrepareRefund(r, s.cfg.Now())
	if err != nil {
		return pay.Refund{}, err
	}
	err = s.writeTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		// The payment's lock first: every refund of the payment waits
		// here, so the sum read below cannot change before the insert.
		p, seq, err := s.getPayment(ctx, tx, r.PaymentID, true)
		if err != nil {
			return err
		}
		if got, err := s.scanRefund(s.queryRow(ctx, tx, s.rq.refundByKey, r.IdempotencyKey)); err == nil {
			return &pay.RefundConflict{Refund: got}
		} else if !errors.Is(err, pay.ErrNotFound) {
			return err
		}
		if p.MerchantID != r.MerchantID {
			return fmt.Errorf("payment %q of another merchant: %w", r.PaymentID, pay.ErrNotFound)
		}
		if p.Status != pay.StatusApproved {
			return &pay.Error{Code: pay.CodeNotRefundable, Kind: pay.CodeConflict,
				Message: fmt.Sprintf("the payment is %s: only an APPROVED payment can be refunded", p.Status)}
		}
		var held int64
		if err := s.queryRow(ctx, tx, s.rq.heldRefunds, p.ID).Scan(&held); err != nil {
			return err
		}
		left := p.Refundable() - held
		if r.Amount == 0 {
			r.Amount = left
		}
		if r.Amount <= 0 || r.Amount > left {
			return &pay.Error{Code: pay.CodeRefundExceeds, Kind: pay.CodeConflict, Field: "amount",
				Message: fmt.Sprintf("the payment's refunds would exceed its amount: %d %s of %d are refunded or in flight, %d left", held, p.Currency, p.Refundable(), max(left, 0)),
				Extra:   map[string]any{"refundable": max(left, 0)}}
		}
		r.Currency, r.PaymentKey = p.Currency, p.ExternalKey
		if _, err := s.exec(ctx, tx, s.rq.insertRefund, r.ID, r.PaymentID, r.MerchantID, r.Amount, r.Currency, r.Reason,
			string(r.Status), r.ExternalKey, r.IdempotencyKey, r.RequestHash, s.d.EncodeTime(r.CreatedAt),
			s.d.EncodeTime(r.UpdatedAt), s.encodeNullTime(r.NextInquiryAt)); err != nil {
			return err
		}
		if err := s.insertRefundHistory(ctx, tx, r.ID, r.History[0]); err != nil {
			return err
		}
		return s.refundEvent(ctx, tx, p, seq, r, pay.EventRefundCreated, "", pay.ReasonCreated, r.CreatedAt)
	})
	if table, ok := s.d.UniqueViolation(err); ok && table == "refunds" {
		// The same key taken concurrently on another payment.
		if got, gerr := s.RefundByKey(ctx, r.IdempotencyKey); gerr == nil {
			return pay.Refund{}, &pay.RefundConflict{Refund: got}
		}
	}
	if err != nil {
		return pay.Refund{}, err
	}
	return r, nil
}

// refundEvent writes the outbox row of a change of refund r of payment p
// (locked, its last event seq) and moves the payment's seq on.
func (s *Store) refundEvent(ctx context.Context, tx *sql.Tx, p pay.Payment, seq int64, r pay.Refund, typ string, from pay.RefundStatus, reason string, at time.Time) error {
	seq++
	if _, err := s.exec(ctx, tx, s.rq.bumpSeq, seq, p.ID); err != nil {
		return err
	}
	return s.insertOutbox(ctx, tx, p.MerchantID, pay.NewRefundEvent(typ, p, r, seq, from, reason, at), nil)
}

// TransitionRefund implements pay.RefundStore.
func (s *Store) TransitionRefund(ctx context.Context, id string, from, to pay.RefundStatus, reason string) (pay.Refund, error) {
	if err := pay.CheckRefundTransition(from, to); err != nil {
		return pay.Refund{}, err
	}
	now := pay.StoreTime(s.cfg.Now())
	var r pay.Refund
	err := s.writeTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		cur, err := s.scanRefund(s.queryRow(ctx, tx, s.rq.getRefund, id))
		if err != nil {
			if errors.Is(err, pay.ErrNotFound) {
				return fmt.Errorf("refund %q: %w", id, pay.ErrNotFound)
			}
			return err
		}
		// The payment's lock serialises its outbox sequence.
		p, seq, err := s.getPayment(ctx, tx, cur.PaymentID, true)
		if err != nil {
			return err
		}
		next := time.Time{}
		if to == pay.RefundUnknown {
			next = now
		}
		res, err := s.exec(ctx, tx, s.rq.updateRefund, string(to), s.d.EncodeTime(now), s.encodeNullTime(next), id, string(from))
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return fmt.Errorf("refund %s is not %s: %w", id, from, pay.ErrStaleStatus)
		}
		c := pay.RefundChange{From: from, To: to, Reason: reason, At: now}
		if err := s.insertRefundHistory(ctx, tx, id, c); err != nil {
			return err
		}
		cur.Status, cur.UpdatedAt, cur.NextInquiryAt = to, now, next
		if err := s.refundEvent(ctx, tx, p, seq, cur, pay.EventRefundChanged, from, reason, now); err != nil {
			return err
		}
		h, err := s.refundHistories(ctx, tx, s.rq.refundHistory, id)
		if err != nil {
			return err
		}
		cur.History = h[id]
		r = cur
		return nil
	})
	if err != nil {
		return pay.Refund{}, err
	}
	return r, nil
}

// GetRefund implements pay.RefundStore.
func (s *Store) GetRefund(ctx context.Context, id string) (pay.Refund, error) {
	var r pay.Refund
	err := s.readTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		if r, err = s.scanRefund(s.queryRow(ctx, tx, s.rq.getRefund, id)); err != nil {
			if errors.Is(err, pay.ErrNotFound) {
				return fmt.Errorf("refund %q: %w", id, pay.ErrNotFound)
			}
			return err
		}
		h, err := s.refundHistories(ctx, tx, s.rq.refundHistory, id)
		r.History = h[id]
		return err
	})
	if err != nil {
		return pay.Refund{}, err
	}
	return r, nil
}

// RefundByKey implements pay.RefundStore.
func (s *Store) RefundByKey(ctx context.Context, key string) (pay.Refund, error) {
	var r pay.Refund
	err := s.run(ctx, func(ctx context.Context, db *sql.DB) error {
		var err error
		r, err = s.scanRefund(s.queryRow(ctx, db, s.rq.refundByKey, key))
		if errors.Is(err, pay.ErrNotFound) {
			return fmt.Errorf("refund key %q: %w", key, pay.ErrNotFound)
		}
		return err
	})
	if err != nil {
		return pay.Refund{}, err
	}
	return r, nil
}

// ListRefunds implements pay.RefundStore.
func (s *Store) ListRefunds(ctx context.Context, paymentID string) ([]pay.Refund, error) {
	var out []pay.Refund
	err := s.readTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		if out, err = s.scanRefunds(ctx, tx, s.rq.refundsOfPayment, paymentID); err != nil {
			return err
		}
		h, err := s.refundHistories(ctx, tx, s.rq.refundHistoriesOfPayment, paymentID)
		for i := range out {
			out[i].History = h[out[i].ID]
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ClaimDueRefunds implements pay.RefundStore.
func (s *Store) ClaimDueRefunds(ctx context.Context, now, until time.Time, limit int) ([]pay.Refund, error) {
	if err := pay.CheckLimit(limit); err != nil {
		return nil, err
	}
	// A read first: the reconciler asks on every tick, and most ticks
	// find nothing due, which must not cost a write transaction (on
	// SQLite, the one write lock).
	var due int
	if err := s.run(ctx, func(ctx context.Context, db *sql.DB) error {
		return s.queryRow(ctx, db, s.rq.anyDueRefund, s.d.EncodeTime(pay.StoreTime(now))).Scan(&due)
	}); err != nil {
		return nil, err
	}
	if due == 0 {
		return []pay.Refund{}, nil
	}
	var out []pay.Refund
	err := s.writeTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		out, err = s.scanRefunds(ctx, tx, s.rq.claimDueRefunds, s.d.EncodeTime(pay.StoreTime(now)), s.d.EncodeTime(pay.StoreTime(until)), limit)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// DeferRefundInquiry implements pay.RefundStore.
func (s *Store) DeferRefundInquiry(ctx context.Context, id string, status pay.RefundStatus, next time.Time) (pay.Refund, error) {
	var r pay.Refund
	err := s.writeTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		r, err = s.scanRefund(s.queryRow(ctx, tx, s.rq.deferRefund, id, string(status), s.d.EncodeTime(pay.StoreTime(next))))
		if errors.Is(err, pay.ErrNotFound) {
			if _, gerr := s.scanRefund(s.queryRow(ctx, tx, s.rq.getRefund, id)); errors.Is(gerr, pay.ErrNotFound) {
				return fmt.Errorf("refund %q: %w", id, pay.ErrNotFound)
			}
			return fmt.Errorf("refund %s is no longer %s: %w", id, status, pay.ErrStaleStatus)
		}
		return err
	})
	if err != nil {
		return pay.Refund{}, err
	}
	return r, nil
}

// farFuture is the upper bound of an open created range.
var farFuture = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

// ListForMerchant implements pay.MerchantLister.
func (s *Store) ListForMerchant(ctx context.Context, q pay.PaymentQuery) ([]pay.Payment, error) {
	if err := q.ValidateFilters(); err != nil {
		return nil, err
	}
	if err := pay.CheckLimit(q.Limit); err != nil {
		return nil, err
	}
	from, to := q.CreatedFrom, q.CreatedTo
	if from.IsZero() {
		from = time.Unix(0, 0)
	}
	if to.IsZero() {
		to = farFuture
	}
	afterAt := q.After.CreatedAt
	if afterAt.IsZero() {
		afterAt = time.Unix(0, 0).Add(-time.Microsecond)
	}
	var out []pay.Payment
	err := s.run(ctx, func(ctx context.Context, db *sql.DB) error {
		var err error
		out, err = s.listPayments(ctx, db, s.rq.listForMerchant, q.MerchantID, q.OrderID, string(q.Status),
			s.d.EncodeTime(pay.StoreTime(from)), s.d.EncodeTime(pay.StoreTime(to)),
			s.d.EncodeTime(pay.StoreTime(afterAt)), q.After.ID, q.Limit)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
