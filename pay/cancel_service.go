package pay

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// originCancel marks the voids a cancellation makes, in the metrics.
const originCancel = "cancel"

// cancellations returns the store's CancellationStore, or the error that
// cancellations are not available.
func (s *Service) cancellations() (CancellationStore, error) {
	cs, ok := s.store.(CancellationStore)
	if !ok {
		return nil, &Error{Code: CodeNotSupported, Kind: CodeConflict, Message: "this payment store keeps no cancellations"}
	}
	return cs, nil
}

// Cancel records the cancellation of payment paymentID of merchant
// merchantID under an idempotency key (scoped to the merchant), whatever
// the payment's status, and returns it with the payment as it stands.
// A payment that is PENDING or UNKNOWN keeps its cancellation REQUESTED
// until the payment settles (the reconciler's CancellationPass carries it
// out then); a settled one is carried out at once (CarryOut). A repeated
// key returns the cancellation as it stands with replayed true
// (CodeMismatch for another request); a payment that already has a
// cancellation under another key is CodeCancelExists. The connector must
// be able to carry it out (refunds; voids for a manual-capture payment):
// CodeNotSupported otherwise, before anything is written.
func (s *Service) Cancel(ctx context.Context, merchantID, paymentID, key string, b CancelBody) (c Cancellation, p Payment, replayed bool, err error) {
	if err := ValidateIdempotencyKey(key); err != nil {
		return Cancellation{}, Payment{}, false, err
	}
	pid, err := ParseUUID(paymentID)
	if err != nil {
		return Cancellation{}, Payment{}, false, Invalid("id", "must be a UUID")
	}
	if err := b.Validate(); err != nil {
		return Cancellation{}, Payment{}, false, err
	}
	mid, err := ParseUUID(merchantID)
	if err != nil {
		return Cancellation{}, Payment{}, false, Invalid("merchant_id", "must be a UUID")
	}
	cs, err := s.cancellations()
	if err != nil {
		return Cancellation{}, Payment{}, false, err
	}
	if _, _, err := s.refunds(); err != nil {
		return Cancellation{}, Payment{}, false, err
	}
	cur, err := s.store.Get(ctx, pid.String())
	if err != nil {
		return Cancellation{}, Payment{}, false, err
	}
	if cur.Manual() && !CapabilitiesOf(s.inst).Void {
		return Cancellation{}, Payment{}, false, errUnsupported(s.inst, "voids")
	}
	hash := b.Hash(pid.String())
	c, p, err = cs.CreateCancellation(ctx, Cancellation{PaymentID: pid.String(), MerchantID: mid.String(), Reason: b.Reason,
		IdempotencyKey: ScopedKey(mid.String(), key), RequestHash: hash, CreatedAt: s.cfg.Now()})
	if cf, ok := errors.AsType[*CancellationConflict](err); ok {
		got := cf.Cancellation
		switch {
		case got.IdempotencyKey != ScopedKey(mid.String(), key):
			return Cancellation{}, Payment{}, false, &Error{Code: CodeCancelExists, Kind: CodeConflict,
				Message: fmt.Sprintf("the payment already has a cancellation (%s), made under another key", got.Status),
				Extra:   map[string]any{"cancellation_status": got.Status}}
		case got.RequestHash != hash:
			return Cancellation{}, Payment{}, false, &Error{Code: CodeMismatch, Field: "Idempotency-Key", Message: "this key was used with a different request"}
		}
		p, err := s.store.Get(ctx, got.PaymentID)
		return got, p, true, err
	}
	if err != nil {
		return Cancellation{}, Payment{}, false, err
	}
	if p.Status != StatusPending && p.Status != StatusUnknown {
		if c, err = s.CarryOut(ctx, c); err != nil {
			// Recorded: the reconciler carries it out later.
			s.cfg.Logger.Warn("pay: carrying out a cancellation failed; the reconciler will retry", "payment", c.PaymentID, "err", err)
		}
		if p, err = s.store.Get(ctx, c.PaymentID); err != nil {
			return c, Payment{}, false, err
		}
	}
	return c, p, false, nil
}

// CancellationOf returns payment paymentID's cancellation, ok false when
// it has none (or the store keeps none).
func (s *Service) CancellationOf(ctx context.Context, paymentID string) (c Cancellation, ok bool, err error) {
	cs, cerr := s.cancellations()
	if cerr != nil {
		return Cancellation{}, false, nil
	}
	c, err = cs.GetCancellation(ctx, strings.ToLower(paymentID))
	if errors.Is(err, ErrNotFound) {
		return Cancellation{}, false, nil
	}
	return c, err == nil, err
}

// CarryOut carries out REQUESTED cancellation c if its payment has
// settled, and returns it as it then stands: an AUTHORIZED payment is
// voided, an APPROVED one refunded (what is left of it), both under
// CancelKey, so that the institution is asked once however often and
// wherever this runs; a DECLINED, FAILED or VOIDED payment (or one with
// nothing left to refund) needs nothing and the cancellation is CLOSED.
// While the payment is PENDING or UNKNOWN, or another capture or void
// holds it, or the cancellation's own void or refund is in flight, c is
// returned unchanged.
func (s *Service) CarryOut(ctx context.Context, c Cancellation) (Cancellation, error) {
	if c.Status != CancelRequested {
		return c, nil
	}
	cs, err := s.cancellations()
	if err != nil {
		return c, err
	}
	p, err := s.store.Get(ctx, c.PaymentID)
	if err != nil {
		return c, err
	}
	var (
		to       = CancelClosed
		action   = CancelActionNone
		actionID string
		why      string
	)
	switch p.Status {
	case StatusPending, StatusUnknown:
		return c, nil
	case StatusAuthorized:
		op, _, err := s.operate(ctx, c.MerchantID, c.PaymentID, CancelKey(c.PaymentID), OpVoid, 0, originCancel)
		switch code := ErrorCode(err); {
		case err == nil:
			to, action, actionID = CancelCarriedOut, CancelActionVoid, op.ID
			why = reason(ReasonCancelVoid, "the authorisation's void was recorded (%s)", op.Status)
			if op.Status == RefundFailed {
				_ = s.store.FlagReview(ctx, c.PaymentID, reason(ReasonCancelVoid, "cancelled, but the institution declined its void"))
				s.cfg.Metrics.flag()
			}
		case code == CodeOperationExists || code == CodeNotAuthorized || code == CodeConflict:
			// A capture or void holds the authorisation, or ours is in
			// flight elsewhere: the next pass sees how it ended.
			return c, nil
		default:
			return c, err
		}
	case StatusApproved:
		attempt, wait, err := s.cancelRefundAttempt(ctx, c)
		if err != nil {
			return c, err
		}
		if wait > 0 {
			return c, nil // the last refund was declined: the next one after a pause
		}
		r, _, err := s.Refund(ctx, c.MerchantID, c.PaymentID, CancelRefundKey(c.PaymentID, attempt), RefundBody{Reason: c.Reason})
		switch code := ErrorCode(err); {
		case err == nil && r.Status == RefundFailed && attempt < MaxCancelRefunds:
			// Declined (the institution refusing everything for a while):
			// money is still held for an order that does not go on, so the
			// cancellation stays REQUESTED and the next pass makes the next
			// refund, after CancelRetry (doubled at each decline).
			s.cfg.Logger.Warn("pay: the institution declined a cancellation's refund; it will be made again",
				"payment", c.PaymentID, "attempt", attempt, "refund", r.ID, "after", s.cancelRetryWait(attempt))
			return c, nil
		case err == nil:
			to, action, actionID = CancelCarriedOut, CancelActionRefund, r.ID
			why = reason(ReasonCancelRefund, "a refund of %d %s was recorded (%s)", r.Amount, r.Currency, r.Status)
			if r.Status == RefundFailed {
				_ = s.store.FlagReview(ctx, c.PaymentID, reason(ReasonCancelRefund, "cancelled, but the institution declined all %d of its refunds", attempt))
				s.cfg.Metrics.flag()
			}
		case code == CodeRefundExceeds:
			why = reason(ReasonCancelNothing, "nothing is left to refund: the payment's refunds already hold its amount")
		case code == CodeConflict:
			return c, nil // our refund is in flight elsewhere
		default:
			return c, err
		}
	default:
		why = reason(ReasonCancelNothing, "the payment is %s: no money was taken", p.Status)
	}
	got, err := cs.CloseCancellation(ctx, c.PaymentID, to, action, actionID, why)
	if errors.Is(err, ErrStaleStatus) {
		return cs.GetCancellation(ctx, c.PaymentID)
	}
	if err != nil {
		return c, err
	}
	s.cfg.Logger.Info("pay: cancellation carried out", "payment", c.PaymentID, "status", got.Status, "action", got.Action, "action_id", got.ActionID)
	return got, nil
}

// cancelRefundAttempt returns which refund (from 1) carries out
// cancellation c of an APPROVED payment next: one more than the refunds
// under its keys that the institution declined (never more than
// MaxCancelRefunds), and how long to wait before making it (0: now),
// CancelRetry after the latest decline, doubled at each one.
func (s *Service) cancelRefundAttempt(ctx context.Context, c Cancellation) (attempt int, wait time.Duration, err error) {
	rs, _, err := s.refunds()
	if err != nil {
		return 0, 0, err
	}
	list, err := rs.ListRefunds(ctx, c.PaymentID)
	if err != nil {
		return 0, 0, err
	}
	declined := 0
	var last time.Time
	for _, r := range list {
		if IsCancelRefund(r) && r.Status == RefundFailed {
			declined++
			if r.UpdatedAt.After(last) {
				last = r.UpdatedAt
			}
		}
	}
	switch {
	case declined == 0:
		return 1, 0, nil
	case declined >= MaxCancelRefunds:
		// The last was declined and the cancellation not closed (a crash
		// in between): the last refund again, a replay, closes it.
		return MaxCancelRefunds, 0, nil
	}
	return declined + 1, max(0, last.Add(s.cancelRetryWait(declined)).Sub(s.cfg.Now())), nil
}

// cancelRetryWait is the pause after the n-th declined refund of a
// cancellation: CancelRetry, doubled at each decline.
func (s *Service) cancelRetryWait(n int) time.Duration {
	return s.cfg.CancelRetry << min(max(n-1, 0), 10)
}

// CancellationPass carries out the REQUESTED cancellations whose payment
// has settled (CarryOut), batch after batch while it makes progress, and
// returns how many it closed. Without a CancellationStore it does
// nothing.
func (s *Service) CancellationPass(ctx context.Context) (int, error) {
	cs, ok := s.store.(CancellationStore)
	if !ok {
		return 0, nil
	}
	n := 0
	for ctx.Err() == nil {
		batch, err := cs.DueCancellations(ctx, 64)
		if err != nil || len(batch) == 0 {
			return n, err
		}
		progress := 0
		for _, c := range batch {
			got, err := s.CarryOut(ctx, c)
			if err != nil {
				s.cfg.Logger.Warn("pay: carrying out a cancellation failed", "payment", c.PaymentID, "err", err)
				continue
			}
			if got.Status != CancelRequested {
				progress++
			}
		}
		n += progress
		if progress < len(batch) {
			// The rest wait for a capture, a void or a refund in flight:
			// the next pass.
			return n, nil
		}
	}
	return n, nil
}
