package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/stampede-lab/stampede/pay"
)

// getPayment reads payment id; lock selects the statement with the
// dialect's row lock.
func (s *Store) getPayment(ctx context.Context, q querier, id string, lock bool) (pay.Payment, int64, error) {
	query := s.q.getPayment
	if lock {
		query = s.q.lockPayment
	}
	p, seq, err := s.scanPayment(s.queryRow(ctx, q, query, id))
	if errors.Is(err, pay.ErrNotFound) {
		return p, 0, fmt.Errorf("payment %q: %w", id, pay.ErrNotFound)
	}
	return p, seq, err
}

// lockWithHistory reads payment id with its history, locking the
// payment row (Dialect.LockRow) for the rest of the transaction.
func (s *Store) lockWithHistory(ctx context.Context, tx *sql.Tx, id string) (pay.Payment, int64, error) {
	rows, err := s.query(ctx, tx, s.q.lockWithHistory, id)
	if err != nil {
		return pay.Payment{}, 0, err
	}
	defer rows.Close()
	var (
		p   pay.Payment
		seq int64
	)
	for rows.Next() {
		var (
			status, mode     string
			from, to, reason sql.NullString
			changeAt, next   time.Time
		)
		if err := rows.Scan(&p.ID, &p.MerchantID, &p.OrderID, &p.Amount, &p.Currency, &status, &p.ExternalKey, &p.IdempotencyKey,
			&p.ManualReview, &p.ReviewReason, s.at(&p.CreatedAt), s.at(&p.UpdatedAt), &seq, s.nullAt(&next), &p.Inquiries,
			&mode, &p.Captured, &from, &to, &reason, s.nullAt(&changeAt)); err != nil {
			return pay.Payment{}, 0, err
		}
		p.Status, p.NextInquiryAt, p.CaptureMode = pay.Status(status), next, pay.CaptureMode(mode)
		if from.Valid {
			p.History = append(p.History, pay.StatusChange{
				From: pay.Status(from.String), To: pay.Status(to.String), Reason: reason.String, At: changeAt})
		}
	}
	if err := rows.Err(); err != nil {
		return pay.Payment{}, 0, err
	}
	if p.ID == "" {
		return p, 0, fmt.Errorf("payment %q: %w", id, pay.ErrNotFound)
	}
	return p, seq, nil
}

func (s *Store) history(ctx context.Context, q querier, id string) ([]pay.StatusChange, error) {
	rows, err := s.query(ctx, q, s.q.history, id)
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
		if err := rows.Scan(&from, &to, &c.Reason, s.at(&c.At)); err != nil {
			return nil, err
		}
		c.From, c.To = pay.Status(from), pay.Status(to)
		out = append(out, c)
	}
	return out, rows.Err()
}

func (s *Store) listPayments(ctx context.Context, q querier, query string, args ...any) ([]pay.Payment, error) {
	rows, err := s.query(ctx, q, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []pay.Payment{}
	for rows.Next() {
		p, _, err := s.scanPayment(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// insertOutbox writes outbox row e of a payment of merchantID and, in the
// same transaction, its webhook delivery when the merchant has a webhook
// (as the merchant cache has it: a webhook set by another process is
// used within Config.MerchantTTL). The delivery's body is built only
// then. change is the payment's history entry the event records (its
// creation or a status change), nil for any other event: the history is
// read from these rows.
func (s *Store) insertOutbox(ctx context.Context, tx *sql.Tx, merchantID string, e pay.OutboxEvent, change *pay.StatusChange) error {
	var from, to, reason any // NULL: not a status change
	if change != nil {
		from, to, reason = string(change.From), string(change.To), change.Reason
	}
	if _, err := s.exec(ctx, tx, s.q.insertOutbox, e.PaymentID, e.Seq, e.Type, string(e.Payload), s.d.EncodeTime(e.CreatedAt), merchantID,
		from, to, reason); err != nil {
		return err
	}
	if hook, err := s.hasWebhook(ctx, tx, merchantID); err != nil || !hook {
		return err
	}
	d := pay.NewDelivery(e, merchantID)
	_, err := s.exec(ctx, tx, s.q.insertDelivery, d.ID, d.PaymentID, d.Seq, d.Type, string(d.Body), s.d.EncodeTime(d.CreatedAt), merchantID)
	return err
}

// liveOrder returns the ID of the payment that keeps the order taken
// (see keepsOrder), or "" if it has none.
func (s *Store) liveOrder(ctx context.Context, q querier, merchantID, orderID string) (string, error) {
	var id string
	err := s.queryRow(ctx, q, s.q.liveOrder, merchantID, orderID).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	return id, err
}

func (s *Store) getIdempotency(ctx context.Context, q querier, key string) (pay.IdempotencyRecord, error) {
	var (
		r     pay.IdempotencyRecord
		state string
	)
	err := s.queryRow(ctx, q, s.q.getIdem, key).
		Scan(&r.Key, &r.RequestHash, &r.PaymentID, &state, s.at(&r.CreatedAt), s.at(&r.ExpiresAt))
	if errors.Is(err, sql.ErrNoRows) {
		return r, fmt.Errorf("idempotency key %q: %w", key, pay.ErrNotFound)
	}
	if err != nil {
		return r, err
	}
	r.State = pay.IdempotencyState(state)
	return r, nil
}

// CreatePending implements pay.Store.
func (s *Store) CreatePending(ctx context.Context, p pay.Payment, idem pay.IdempotencyRecord) (pay.Payment, error) {
	p, idem, err := pay.PrepareCreate(p, idem, s.cfg.Now())
	if err != nil {
		return pay.Payment{}, err
	}
	err = s.writeTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		// The key first: a live record means nothing else is written. A
		// concurrent insert of the same key waits for the other
		// transaction (PostgreSQL: on the key's row; SQLite: on the write
		// lock) and then finds its row; an expired record is replaced.
		res, err := s.exec(ctx, tx, s.q.upsertIdem, idem.Key, idem.RequestHash, idem.PaymentID,
			s.d.EncodeTime(idem.CreatedAt), s.d.EncodeTime(idem.ExpiresAt))
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			if err != nil {
				return err
			}
			rec, err := s.getIdempotency(ctx, tx, idem.Key)
			if err != nil {
				return err
			}
			return &pay.IdempotencyConflict{Record: rec}
		}
		// One live payment per order: found here, or (a concurrent create
		// of the same order) by the partial unique index below.
		if id, err := s.liveOrder(ctx, tx, p.MerchantID, p.OrderID); err != nil || id != "" {
			if err != nil {
				return err
			}
			return &pay.OrderExistsError{PaymentID: id}
		}
		if _, err := s.exec(ctx, tx, s.q.insertPayment,
			p.ID, p.MerchantID, p.OrderID, p.Amount, p.Currency, string(p.Status), p.ExternalKey, p.IdempotencyKey,
			p.ManualReview, p.ReviewReason, s.d.EncodeTime(p.CreatedAt), s.d.EncodeTime(p.UpdatedAt),
			s.encodeNullTime(p.NextInquiryAt), string(p.CaptureMode)); err != nil {
			return err
		}
		return s.insertOutbox(ctx, tx, p.MerchantID, pay.NewEvent(pay.EventCreated, p, 1, "", pay.ReasonCreated, p.CreatedAt), &p.History[0])
	})
	if table, ok := s.d.UniqueViolation(err); ok && table == "payments" {
		// A concurrent create of the same order committed first.
		var id string
		if rerr := s.run(ctx, func(ctx context.Context, db *sql.DB) error {
			var err error
			id, err = s.liveOrder(ctx, db, p.MerchantID, p.OrderID)
			return err
		}); rerr == nil && id != "" {
			return pay.Payment{}, &pay.OrderExistsError{PaymentID: id}
		}
		if p.ExternalKey != p.ID {
			// The external key the connector chose (the order id, with
			// a ClientAuthorized connector) already names a payment.
			return pay.Payment{}, &pay.Error{Code: pay.CodeConflict, Field: "order_id", Err: err,
				Message: "with this connector the order id is the institution's key of one payment, and a payment already has it: pay again under a new order_id"}
		}
	}
	if table, ok := s.d.UniqueViolation(err); ok && table == "idempotency_keys" {
		// Not expected (ON CONFLICT handles the key) but answered as the
		// conflict it is.
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
func (s *Store) Transition(ctx context.Context, id string, from, to pay.Status, reason string) (pay.Payment, error) {
	if err := pay.CheckTransition(from, to); err != nil {
		return pay.Payment{}, err
	}
	now := pay.StoreTime(s.cfg.Now())
	var p pay.Payment
	err := s.writeTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		// The row lock (or the database-wide write lock) makes the read
		// and the update below one compare-and-set, and serialises the
		// payment's outbox sequence.
		cur, seq, err := s.lockWithHistory(ctx, tx, id)
		if err != nil {
			return err
		}
		if p, err = s.applyTransition(ctx, tx, cur, seq, from, to, reason, now); err != nil {
			return err
		}
		// The new entry has the highest id of the payment's history: the
		// lock held since the read above lets no other change in.
		p.History = append(p.History, pay.StatusChange{From: from, To: to, Reason: reason, At: now})
		return nil
	})
	if err != nil {
		return pay.Payment{}, err
	}
	return p, nil
}

// applyTransition moves cur, read with its outbox sequence seq under the
// row lock of tx, from `from` to `to` at now: the compare-and-set
// (ErrStaleStatus, nothing written, when cur is not in from), the status
// update and the outbox row that carries the history entry (which also
// completes the payment's idempotency record: see idemCols). Transition
// and TransitionBatch both
// write a transition with it. It returns the payment as updated, its
// history as cur had it.
func (s *Store) applyTransition(ctx context.Context, tx *sql.Tx, cur pay.Payment, seq int64, from, to pay.Status, reason string, now time.Time) (pay.Payment, error) {
	id := cur.ID
	if cur.Status != from {
		return pay.Payment{}, fmt.Errorf("payment %s is %s, not %s: %w", id, cur.Status, from, pay.ErrStaleStatus)
	}
	seq++
	// UNKNOWN is due for an inquiry at once; a final status never is.
	next := time.Time{}
	if to == pay.StatusUnknown {
		next = now
	}
	update := s.q.updateStatus
	if !keepsOrder(to) {
		update = s.q.updateStatusFreeing
	}
	if _, err := s.exec(ctx, tx, update, string(to), s.d.EncodeTime(now), seq, id, s.encodeNullTime(next)); err != nil {
		return pay.Payment{}, err
	}
	cur.NextInquiryAt = next
	cur.Status, cur.UpdatedAt = to, now
	change := pay.StatusChange{From: from, To: to, Reason: reason, At: now}
	if err := s.insertOutbox(ctx, tx, cur.MerchantID, pay.NewEvent(pay.EventStatusChanged, cur, seq, from, reason, now), &change); err != nil {
		return pay.Payment{}, err
	}
	// The payment has left PENDING: its idempotency record reads as
	// completed from now on, and a repeated request is answered from the
	// payment (see idemCols).
	return cur, nil
}

// Get implements pay.Store.
func (s *Store) Get(ctx context.Context, id string) (pay.Payment, error) {
	var p pay.Payment
	err := s.readTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		if p, _, err = s.getPayment(ctx, tx, id, false); err != nil {
			return err
		}
		p.History, err = s.history(ctx, tx, id)
		return err
	})
	if err != nil {
		return pay.Payment{}, err
	}
	return p, nil
}

// Idempotency implements pay.Store.
func (s *Store) Idempotency(ctx context.Context, key string) (pay.IdempotencyRecord, error) {
	var r pay.IdempotencyRecord
	err := s.run(ctx, func(ctx context.Context, db *sql.DB) error {
		var err error
		r, err = s.getIdempotency(ctx, db, key)
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
	err := s.run(ctx, func(ctx context.Context, db *sql.DB) error {
		var err error
		out, err = s.listPayments(ctx, db, s.q.listByStatus, string(st), limit)
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
	err := s.run(ctx, func(ctx context.Context, db *sql.DB) error {
		var err error
		out, err = s.listPayments(ctx, db, s.q.list, afterID, limit)
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
	return s.writeTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		cur, seq, err := s.getPayment(ctx, tx, id, true)
		if err != nil {
			return err
		}
		seq++
		if _, err := s.exec(ctx, tx, s.q.flagReview, true, reason, s.d.EncodeTime(now), seq, id); err != nil {
			return err
		}
		cur.ManualReview, cur.ReviewReason, cur.UpdatedAt = true, reason, now
		return s.insertOutbox(ctx, tx, cur.MerchantID, pay.NewEvent(pay.EventReviewFlagged, cur, seq, "", reason, now), nil)
	})
}

// PendingOutbox implements pay.Store.
func (s *Store) PendingOutbox(ctx context.Context, limit int) ([]pay.OutboxEvent, error) {
	if err := pay.CheckLimit(limit); err != nil {
		return nil, err
	}
	var out []pay.OutboxEvent
	err := s.run(ctx, func(ctx context.Context, db *sql.DB) error {
		rows, err := s.query(ctx, db, s.q.pendingOutbox, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		out = []pay.OutboxEvent{}
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

// markChunk bounds the IDs of one MarkPublished statement (SQLite allows
// 32,766 parameters, PostgreSQL 65,535).
const markChunk = 500

// MarkPublished implements pay.Store.
func (s *Store) MarkPublished(ctx context.Context, ids []int64, at time.Time) error {
	if len(ids) == 0 {
		return nil
	}
	at = pay.StoreTime(at)
	return s.writeTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		for chunk := range slices.Chunk(ids, markChunk) {
			args := make([]any, 0, len(chunk)+1)
			args = append(args, s.d.EncodeTime(at))
			for _, id := range chunk {
				args = append(args, id)
			}
			if _, err := s.exec(ctx, tx, markPublished(s.d, len(chunk)), args...); err != nil {
				return err
			}
		}
		return nil
	})
}

// DeleteExpiredIdempotency implements pay.Store.
func (s *Store) DeleteExpiredIdempotency(ctx context.Context, now time.Time) (int, error) {
	var n int64
	err := s.writeTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := s.exec(ctx, tx, s.q.deleteExpired, s.d.EncodeTime(pay.StoreTime(now)))
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return int(n), err
}

// ClaimDue implements pay.Store.
func (s *Store) ClaimDue(ctx context.Context, now, until time.Time, limit int) ([]pay.Payment, error) {
	if err := pay.CheckLimit(limit); err != nil {
		return nil, err
	}
	if !until.After(now) {
		return nil, pay.Invalid("until", "the lease must end after now")
	}
	var out []pay.Payment
	err := s.writeTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		out, err = s.listPayments(ctx, tx, s.q.claimDue,
			s.d.EncodeTime(pay.StoreTime(now)), s.d.EncodeTime(pay.StoreTime(until)), limit)
		return err
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b pay.Payment) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, nil
}

// ClaimOne implements pay.Store.
func (s *Store) ClaimOne(ctx context.Context, id string, now, until time.Time) (pay.Payment, bool, error) {
	if !until.After(now) {
		return pay.Payment{}, false, pay.Invalid("until", "the lease must end after now")
	}
	var (
		p  pay.Payment
		ok bool
	)
	err := s.writeTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		p, _, err = s.scanPayment(s.queryRow(ctx, tx, s.q.claimOne, id,
			s.d.EncodeTime(pay.StoreTime(now)), s.d.EncodeTime(pay.StoreTime(until))))
		if errors.Is(err, pay.ErrNotFound) {
			_, _, err = s.getPayment(ctx, tx, id, false) // not due, or no such payment?
			return err
		}
		ok = err == nil
		return err
	})
	if err != nil {
		return pay.Payment{}, false, err
	}
	return p, ok, nil
}

// DeferInquiry implements pay.Store.
func (s *Store) DeferInquiry(ctx context.Context, id string, status pay.Status, next time.Time) (pay.Payment, error) {
	if !status.Valid() || status.Terminal() {
		return pay.Payment{}, pay.Invalid("status", "only a PENDING or UNKNOWN payment awaits an inquiry, not %q", status)
	}
	if next.IsZero() {
		return pay.Payment{}, pay.Invalid("next", "is required")
	}
	var p pay.Payment
	err := s.writeTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		p, _, err = s.scanPayment(s.queryRow(ctx, tx, s.q.deferInquiry, id, string(status), s.d.EncodeTime(pay.StoreTime(next))))
		if errors.Is(err, pay.ErrNotFound) {
			cur, _, gerr := s.getPayment(ctx, tx, id, false)
			if gerr != nil {
				return gerr
			}
			return fmt.Errorf("payment %s is %s, not %s: %w", id, cur.Status, status, pay.ErrStaleStatus)
		}
		return err
	})
	if err != nil {
		return pay.Payment{}, err
	}
	return p, nil
}

// Stats implements pay.Store.
func (s *Store) Stats(ctx context.Context) (pay.Stats, error) {
	var st pay.Stats
	err := s.readTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		rows, err := s.query(ctx, tx, s.q.countUnsettled)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				status string
				n      int
			)
			if err := rows.Scan(&status, &n); err != nil {
				return err
			}
			switch pay.Status(status) {
			case pay.StatusPending:
				st.Pending = n
			case pay.StatusUnknown:
				st.Unknown = n
			}
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if err := s.queryRow(ctx, tx, s.q.countFlagged, true).Scan(&st.Flagged); err != nil {
			return err
		}
		err = s.queryRow(ctx, tx, s.q.oldestUnpublished).Scan(s.at(&st.OldestUnpublished))
		if errors.Is(err, sql.ErrNoRows) {
			err = nil
		}
		return err
	})
	if err != nil {
		return pay.Stats{}, err
	}
	return st, nil
}
