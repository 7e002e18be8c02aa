package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/stampede-lab/stampede/pay"
)

var _ pay.OperationStore = (*Store)(nil)

// opCols are an operation's columns, with its payment's external key
// (the authorisation the institution knows) read alongside.
const opCols = `o.id, o.payment_id, o.merchant_id, o.kind, o.amount, o.currency, o.status, o.reason, o.external_key,
	o.idempotency_key, o.request_hash, o.created_at, o.updated_at, o.next_inquiry_at, o.inquiries,
	(SELECT p.external_key FROM payments p WHERE p.id = o.payment_id)`

// opQueries are the statements of captures and voids and of the events
// feed, rebound for the dialect.
type opQueries struct {
	insertOp, opByKey, getOp, opsOfPayment, holdingOp     string
	updateOp, setCaptured, claimDueOps, anyDueOp, deferOp string
	expiredAuths, merchantEvents                          string
}

func newOpQueries(d Dialect) opQueries {
	q := opQueries{
		insertOp: `INSERT INTO payment_operations (id, payment_id, merchant_id, kind, amount, currency, status, reason,
			external_key, idempotency_key, request_hash, created_at, updated_at, next_inquiry_at, inquiries)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, 0)`,
		opByKey:      `SELECT ` + opCols + ` FROM payment_operations o WHERE o.idempotency_key = $1`,
		getOp:        `SELECT ` + opCols + ` FROM payment_operations o WHERE o.id = $1`,
		opsOfPayment: `SELECT ` + opCols + ` FROM payment_operations o WHERE o.payment_id = $1 ORDER BY o.created_at, o.id`,
		// The operation holding a payment, if any: every one but FAILED.
		holdingOp: `SELECT ` + opCols + ` FROM payment_operations o WHERE o.payment_id = $1 AND o.status <> 'FAILED'`,
		// The compare-and-set of an operation's status.
		updateOp: `UPDATE payment_operations SET status = $1, reason = $2, updated_at = $3, next_inquiry_at = $4
			WHERE id = $5 AND status = $6`,
		setCaptured: `UPDATE payments SET captured = $1 WHERE id = $2`,
		claimDueOps: `WITH due AS (
				SELECT id FROM payment_operations
				WHERE status IN ('PENDING', 'UNKNOWN') AND next_inquiry_at <= $1
				ORDER BY next_inquiry_at, id LIMIT $3` + claimLock(d) + `
			)
			UPDATE payment_operations SET next_inquiry_at = $2 WHERE id IN (SELECT id FROM due)
			RETURNING id`,
		anyDueOp: `SELECT COUNT(*) FROM (SELECT 1 FROM payment_operations
			WHERE status IN ('PENDING', 'UNKNOWN') AND next_inquiry_at <= $1 LIMIT 1) due`,
		deferOp: `UPDATE payment_operations SET inquiries = inquiries + 1, next_inquiry_at = $3
			WHERE id = $1 AND status = $2`,
		// Authorisations past the window that no operation holds and that
		// have no void at all (a FAILED void is left for a person).
		expiredAuths: `SELECT ` + paymentCols + ` FROM payments
			WHERE status = 'AUTHORIZED' AND created_at < $1
			AND NOT EXISTS (SELECT 1 FROM payment_operations o
				WHERE o.payment_id = payments.id AND (o.status <> 'FAILED' OR o.kind = 'void'))
			ORDER BY created_at, id LIMIT $2`,
		merchantEvents: `SELECT id, payment_id, seq, type, payload, created_at FROM outbox
			WHERE merchant_id = $1 AND id > $2 ORDER BY id LIMIT $3`,
	}
	for _, p := range []*string{
		&q.insertOp, &q.opByKey, &q.getOp, &q.opsOfPayment, &q.holdingOp, &q.updateOp, &q.setCaptured,
		&q.claimDueOps, &q.anyDueOp, &q.deferOp, &q.expiredAuths, &q.merchantEvents,
	} {
		*p = d.Rebind(*p)
	}
	return q
}

// scanOp scans opCols.
func (s *Store) scanOp(row interface{ Scan(...any) error }) (pay.Operation, error) {
	var (
		op           pay.Operation
		kind, status string
		paymentKey   sql.NullString
	)
	err := row.Scan(&op.ID, &op.PaymentID, &op.MerchantID, &kind, &op.Amount, &op.Currency, &status, &op.Reason, &op.ExternalKey,
		&op.IdempotencyKey, &op.RequestHash, s.at(&op.CreatedAt), s.at(&op.UpdatedAt), s.nullAt(&op.NextInquiryAt), &op.Inquiries,
		&paymentKey)
	if errors.Is(err, sql.ErrNoRows) {
		return op, pay.ErrNotFound
	}
	op.Kind, op.Status, op.PaymentKey = pay.OperationKind(kind), pay.RefundStatus(status), paymentKey.String
	return op, err
}

func (s *Store) scanOps(ctx context.Context, q querier, query string, args ...any) ([]pay.Operation, error) {
	rows, err := s.query(ctx, q, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []pay.Operation{}
	for rows.Next() {
		op, err := s.scanOp(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, op)
	}
	return out, rows.Err()
}

// CreateOperation implements pay.OperationStore.
func (s *Store) CreateOperation(ctx context.Context, op pay.Operation) (pay.Operation, error) {
	op, err := pay.PrepareOperation(op, s.cfg.Now())
	if err != nil {
		return pay.Operation{}, err
	}
	err = s.writeTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		// The payment's lock first: every capture and void of the
		// payment waits here, so the checks below hold until the insert.
		p, seq, err := s.getPayment(ctx, tx, op.PaymentID, true)
		if err != nil {
			return err
		}
		if got, err := s.scanOp(s.queryRow(ctx, tx, s.oq.opByKey, op.IdempotencyKey)); err == nil {
			return &pay.OperationConflict{Operation: got}
		} else if !errors.Is(err, pay.ErrNotFound) {
			return err
		}
		if p.MerchantID != op.MerchantID {
			return fmt.Errorf("payment %q of another merchant: %w", op.PaymentID, pay.ErrNotFound)
		}
		if p.Status != pay.StatusAuthorized {
			return notAuthorized(op.Kind, p.Status)
		}
		if held, err := s.scanOp(s.queryRow(ctx, tx, s.oq.holdingOp, p.ID)); err == nil {
			return operationExists(op.Kind, held)
		} else if !errors.Is(err, pay.ErrNotFound) {
			return err
		}
		if op.Kind == pay.OpCapture {
			if op.Amount == 0 {
				op.Amount = p.Amount
			}
			if op.Amount > p.Amount {
				return &pay.Error{Code: pay.CodeCaptureExceeds, Kind: pay.CodeConflict, Field: "amount",
					Message: fmt.Sprintf("a capture of %d %s exceeds the authorised %d", op.Amount, p.Currency, p.Amount),
					Extra:   map[string]any{"authorized": p.Amount}}
			}
		}
		op.Currency, op.PaymentKey = p.Currency, p.ExternalKey
		if _, err := s.exec(ctx, tx, s.oq.insertOp, op.ID, op.PaymentID, op.MerchantID, string(op.Kind), op.Amount, op.Currency,
			string(op.Status), op.Reason, op.ExternalKey, op.IdempotencyKey, op.RequestHash, s.d.EncodeTime(op.CreatedAt),
			s.d.EncodeTime(op.UpdatedAt), s.encodeNullTime(op.NextInquiryAt)); err != nil {
			return err
		}
		return s.opEvent(ctx, tx, p, seq, op, "", pay.ReasonCreated, op.CreatedAt)
	})
	if table, ok := s.d.UniqueViolation(err); ok && table == "payment_operations" {
		// Taken concurrently: the same key, or (a backstop: the payment's
		// lock orders them) another holding operation of the payment.
		if got, gerr := s.OperationByKey(ctx, op.IdempotencyKey); gerr == nil {
			return pay.Operation{}, &pay.OperationConflict{Operation: got}
		}
		if held, gerr := s.scanOpsOf(ctx, op.PaymentID); gerr == nil {
			for _, h := range held {
				if h.Status != pay.RefundFailed {
					return pay.Operation{}, operationExists(op.Kind, h)
				}
			}
		}
	}
	if err != nil {
		return pay.Operation{}, err
	}
	return op, nil
}

// scanOpsOf reads the operations of a payment outside a transaction.
func (s *Store) scanOpsOf(ctx context.Context, paymentID string) ([]pay.Operation, error) {
	var out []pay.Operation
	err := s.run(ctx, func(ctx context.Context, db *sql.DB) error {
		var err error
		out, err = s.scanOps(ctx, db, s.oq.opsOfPayment, paymentID)
		return err
	})
	return out, err
}

// notAuthorized is the error of a capture or void of a payment in
// status st.
func notAuthorized(kind pay.OperationKind, st pay.Status) error {
	return &pay.Error{Code: pay.CodeNotAuthorized, Kind: pay.CodeConflict,
		Message: fmt.Sprintf("the payment is %s: only an AUTHORIZED payment can be %s", st, pastTense(kind)),
		Extra:   map[string]any{"payment_status": string(st)}}
}

// operationExists is the error of a capture or void of a payment that
// operation held holds.
func operationExists(kind pay.OperationKind, held pay.Operation) error {
	return &pay.Error{Code: pay.CodeOperationExists, Kind: pay.CodeConflict,
		Message: fmt.Sprintf("the authorisation already has a %s (%s): it cannot be %s", held.Kind, held.Status, pastTense(kind)),
		Extra:   map[string]any{"operation_id": held.ID, "operation_kind": string(held.Kind), "operation_status": string(held.Status)}}
}

func pastTense(k pay.OperationKind) string {
	if k == pay.OpCapture {
		return "captured"
	}
	return "voided"
}

// opEvent writes the outbox row of a change of operation op of payment
// p (locked, its last event seq) and moves the payment's seq on.
func (s *Store) opEvent(ctx context.Context, tx *sql.Tx, p pay.Payment, seq int64, op pay.Operation, from pay.RefundStatus, reason string, at time.Time) error {
	seq++
	if _, err := s.exec(ctx, tx, s.rq.bumpSeq, seq, p.ID); err != nil {
		return err
	}
	return s.insertOutbox(ctx, tx, p.MerchantID, pay.NewOperationEvent(p, op, seq, from, reason, at), nil)
}

// TransitionOperation implements pay.OperationStore.
func (s *Store) TransitionOperation(ctx context.Context, id string, from, to pay.RefundStatus, reason string) (pay.Operation, error) {
	if err := pay.CheckRefundTransition(from, to); err != nil {
		return pay.Operation{}, err
	}
	now := pay.StoreTime(s.cfg.Now())
	var op pay.Operation
	err := s.writeTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		cur, err := s.scanOp(s.queryRow(ctx, tx, s.oq.getOp, id))
		if err != nil {
			if errors.Is(err, pay.ErrNotFound) {
				return fmt.Errorf("operation %q: %w", id, pay.ErrNotFound)
			}
			return err
		}
		p, seq, err := s.lockWithHistory(ctx, tx, cur.PaymentID)
		if err != nil {
			return err
		}
		next := time.Time{}
		if to == pay.RefundUnknown {
			next = now
		}
		res, err := s.exec(ctx, tx, s.oq.updateOp, string(to), reason, s.d.EncodeTime(now), s.encodeNullTime(next), id, string(from))
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return fmt.Errorf("operation %s is not %s: %w", id, from, pay.ErrStaleStatus)
		}
		cur.Status, cur.Reason, cur.UpdatedAt, cur.NextInquiryAt = to, reason, now, next
		if to == pay.RefundSucceeded {
			// The payment moves with its operation, in this transaction.
			target := pay.StatusVoided
			if cur.Kind == pay.OpCapture {
				target = pay.StatusApproved
				if _, err := s.exec(ctx, tx, s.oq.setCaptured, cur.Amount, p.ID); err != nil {
					return err
				}
				p.Captured = cur.Amount
			}
			if p, err = s.applyTransition(ctx, tx, p, seq, pay.StatusAuthorized, target, reason, now); err != nil {
				return err
			}
			seq++
		}
		if err := s.opEvent(ctx, tx, p, seq, cur, from, reason, now); err != nil {
			return err
		}
		op = cur
		return nil
	})
	if err != nil {
		return pay.Operation{}, err
	}
	return op, nil
}

// GetOperation implements pay.OperationStore.
func (s *Store) GetOperation(ctx context.Context, id string) (pay.Operation, error) {
	var op pay.Operation
	err := s.run(ctx, func(ctx context.Context, db *sql.DB) error {
		var err error
		op, err = s.scanOp(s.queryRow(ctx, db, s.oq.getOp, id))
		if errors.Is(err, pay.ErrNotFound) {
			return fmt.Errorf("operation %q: %w", id, pay.ErrNotFound)
		}
		return err
	})
	if err != nil {
		return pay.Operation{}, err
	}
	return op, nil
}

// OperationByKey implements pay.OperationStore.
func (s *Store) OperationByKey(ctx context.Context, key string) (pay.Operation, error) {
	var op pay.Operation
	err := s.run(ctx, func(ctx context.Context, db *sql.DB) error {
		var err error
		op, err = s.scanOp(s.queryRow(ctx, db, s.oq.opByKey, key))
		if errors.Is(err, pay.ErrNotFound) {
			return fmt.Errorf("operation key %q: %w", key, pay.ErrNotFound)
		}
		return err
	})
	if err != nil {
		return pay.Operation{}, err
	}
	return op, nil
}

// ListOperations implements pay.OperationStore.
func (s *Store) ListOperations(ctx context.Context, paymentID string) ([]pay.Operation, error) {
	out, err := s.scanOpsOf(ctx, paymentID)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ClaimDueOperations implements pay.OperationStore.
func (s *Store) ClaimDueOperations(ctx context.Context, now, until time.Time, limit int) ([]pay.Operation, error) {
	if err := pay.CheckLimit(limit); err != nil {
		return nil, err
	}
	// A read first: most ticks find nothing due, which must not cost a
	// write transaction.
	var due int
	if err := s.run(ctx, func(ctx context.Context, db *sql.DB) error {
		return s.queryRow(ctx, db, s.oq.anyDueOp, s.d.EncodeTime(pay.StoreTime(now))).Scan(&due)
	}); err != nil {
		return nil, err
	}
	if due == 0 {
		return []pay.Operation{}, nil
	}
	out := []pay.Operation{}
	err := s.writeTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		out = out[:0]
		rows, err := s.query(ctx, tx, s.oq.claimDueOps, s.d.EncodeTime(pay.StoreTime(now)), s.d.EncodeTime(pay.StoreTime(until)), limit)
		if err != nil {
			return err
		}
		var ids []string
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return err
			}
			ids = append(ids, id)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, id := range ids {
			op, err := s.scanOp(s.queryRow(ctx, tx, s.oq.getOp, id))
			if err != nil {
				return err
			}
			out = append(out, op)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// DeferOperationInquiry implements pay.OperationStore.
func (s *Store) DeferOperationInquiry(ctx context.Context, id string, status pay.RefundStatus, next time.Time) (pay.Operation, error) {
	var op pay.Operation
	err := s.writeTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := s.exec(ctx, tx, s.oq.deferOp, id, string(status), s.d.EncodeTime(pay.StoreTime(next)))
		if err != nil {
			return err
		}
		cur, err := s.scanOp(s.queryRow(ctx, tx, s.oq.getOp, id))
		if errors.Is(err, pay.ErrNotFound) {
			return fmt.Errorf("operation %q: %w", id, pay.ErrNotFound)
		} else if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return fmt.Errorf("operation %s is no longer %s: %w", id, status, pay.ErrStaleStatus)
		}
		op = cur
		return nil
	})
	if err != nil {
		return pay.Operation{}, err
	}
	return op, nil
}

// ExpiredAuthorizations implements pay.OperationStore.
func (s *Store) ExpiredAuthorizations(ctx context.Context, before time.Time, limit int) ([]pay.Payment, error) {
	if err := pay.CheckLimit(limit); err != nil {
		return nil, err
	}
	var out []pay.Payment
	err := s.run(ctx, func(ctx context.Context, db *sql.DB) error {
		var err error
		out, err = s.listPayments(ctx, db, s.oq.expiredAuths, s.d.EncodeTime(pay.StoreTime(before)), limit)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// MerchantEvents implements pay.EventFeed.
func (s *Store) MerchantEvents(ctx context.Context, merchantID string, after int64, limit int) ([]pay.OutboxEvent, error) {
	if err := pay.CheckLimit(limit); err != nil {
		return nil, err
	}
	out := []pay.OutboxEvent{}
	err := s.run(ctx, func(ctx context.Context, db *sql.DB) error {
		out = out[:0]
		rows, err := s.query(ctx, db, s.oq.merchantEvents, merchantID, after, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				e       pay.OutboxEvent
				payload string
			)
			if err := rows.Scan(&e.ID, &e.PaymentID, &e.Seq, &e.Type, &payload, s.at(&e.CreatedAt)); err != nil {
				return err
			}
			e.Payload = []byte(payload)
			out = append(out, e)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
