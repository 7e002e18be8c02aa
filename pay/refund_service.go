package pay

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// refunds returns the store's RefundStore and the institution's Refunder,
// or the error that refunds are not available.
func (s *Service) refunds() (RefundStore, Refunder, error) {
	rs, ok := s.store.(RefundStore)
	if !ok {
		return nil, nil, &Error{Code: CodeNotSupported, Kind: CodeConflict, Message: "this payment store keeps no refunds"}
	}
	ref, ok := s.inst.(Refunder)
	if !ok || !CapabilitiesOf(s.inst).Refund {
		return nil, nil, errUnsupported(s.inst, "refunds")
	}
	return rs, ref, nil
}

// Refund refunds payment paymentID of merchant merchantID under an
// idempotency key (scoped to the merchant): all that is left of it when
// b.Amount is 0, else b.Amount. The refund is recorded PENDING before the
// institution is asked, and is returned as the answer left it:
// SUCCEEDED, FAILED, or UNKNOWN when the answer was lost (a status
// inquiry settles it later; it is never sent again). A repeated key
// returns that refund as it stands now with replayed true (CodeConflict
// while its call is in flight, CodeMismatch for another request).
//
// The refunds of a payment that hold money (all but FAILED) never add up
// to more than its amount, whatever the concurrency: the store checks it
// under the payment's lock (CodeRefundExceeds). Another merchant's
// payment is ErrNotFound; one that is not APPROVED is CodeNotRefundable.
func (s *Service) Refund(ctx context.Context, merchantID, paymentID, key string, b RefundBody) (r Refund, replayed bool, err error) {
	if err := ValidateIdempotencyKey(key); err != nil {
		return Refund{}, false, err
	}
	if _, err := ParseUUID(paymentID); err != nil {
		return Refund{}, false, Invalid("id", "must be a UUID")
	}
	if err := b.Validate(); err != nil {
		return Refund{}, false, err
	}
	rs, ref, err := s.refunds()
	if err != nil {
		return Refund{}, false, err
	}
	mid, err := ParseUUID(merchantID)
	if err != nil {
		return Refund{}, false, Invalid("merchant_id", "must be a UUID")
	}
	pid, _ := ParseUUID(paymentID)
	now := s.cfg.Now()
	r = Refund{ID: NewID(), PaymentID: pid.String(), MerchantID: mid.String(), Amount: b.Amount, Reason: b.Reason,
		IdempotencyKey: ScopedKey(mid.String(), key), RequestHash: b.Hash(pid.String()),
		NextInquiryAt: now.Add(s.cfg.ApprovalTimeout + s.cfg.TakeoverMargin), CreatedAt: now}
	if b.Amount != 0 && !CapabilitiesOf(s.inst).PartialRefund {
		// Whether it is partial is known only against the payment: the
		// store is asked for the full amount, which it checks.
		p, err := s.store.Get(ctx, r.PaymentID)
		if err == nil && b.Amount != p.Refundable() {
			return Refund{}, false, errUnsupported(s.inst, "partial refunds")
		}
	}
	hash := r.RequestHash
	r, err = rs.CreateRefund(ctx, r)
	if c, ok := errors.AsType[*RefundConflict](err); ok {
		got := c.Refund
		switch {
		case got.RequestHash != hash:
			return Refund{}, false, &Error{Code: CodeMismatch, Field: "Idempotency-Key", Message: "this key was used with a different request"}
		case got.Status == RefundPending:
			return Refund{}, false, &Error{Code: CodeConflict, Field: "Idempotency-Key", Message: "a refund with this key is still in flight; retry later", RetryAfter: time.Second}
		}
		return got, true, nil
	}
	if err != nil {
		return Refund{}, false, err
	}
	to, why := s.sendRefund(ctx, ref, r)
	r, err = s.finishRefund(context.WithoutCancel(ctx), rs, r, to, why)
	return r, false, err
}

// sendRefund makes the one refund call of r (never retried) and returns
// the status it moves r to and the public reason why.
func (s *Service) sendRefund(ctx context.Context, ref Refunder, r Refund) (RefundStatus, string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ApprovalTimeout)
	defer cancel()
	v, err := ref.Refund(ctx, RefundRequest{ExternalKey: r.ExternalKey, PaymentKey: r.PaymentKey, Amount: r.Amount, Currency: r.Currency, Reason: r.Reason})
	switch {
	case err == nil && v.Succeeded:
		return RefundSucceeded, reason(ReasonRefunded, "the institution refunded %d %s", r.Amount, r.Currency)
	case err == nil:
		return RefundFailed, reason(ReasonRefundDeclined, "the institution declined the refund")
	case errors.Is(err, ErrNotSent):
		s.cfg.Logger.Warn("pay: refund not sent", "refund", r.ID, "err", err)
		return RefundFailed, reason(ReasonNotSent, "the refund could not be sent; nothing happened")
	case errors.Is(err, ErrRejected):
		s.cfg.Logger.Warn("pay: refund rejected", "refund", r.ID, "err", err)
		return RefundFailed, reason(ReasonRejected, "the institution refused the refund without processing it")
	default:
		s.cfg.Logger.Warn("pay: refund outcome unknown", "refund", r.ID, "err", err)
		return RefundUnknown, reason(ReasonOutcomeUnknown, "no answer to the refund; a status inquiry will settle it")
	}
}

// finishRefund writes the outcome of r's refund call, retrying a database
// failure for up to WriteRetryFor; a refund a reconciler took over
// meanwhile (UNKNOWN) is settled by the verdict.
func (s *Service) finishRefund(ctx context.Context, rs RefundStore, r Refund, to RefundStatus, why string) (Refund, error) {
	start := s.cfg.Now()
	backoff := 10 * time.Millisecond
	for attempt := 1; ; attempt++ {
		cur, err := rs.TransitionRefund(ctx, r.ID, RefundPending, to, why)
		if errors.Is(err, ErrStaleStatus) {
			if cur, err = rs.GetRefund(ctx, r.ID); err == nil && cur.Status == RefundUnknown && to.Terminal() {
				cur, err = rs.TransitionRefund(ctx, r.ID, RefundUnknown, to, why)
				if errors.Is(err, ErrStaleStatus) {
					cur, err = rs.GetRefund(ctx, r.ID)
				}
			}
		}
		if err == nil || ErrorCode(err) != CodeUnavailable || attempt >= maxWriteAttempts || s.cfg.Now().Sub(start) >= s.cfg.WriteRetryFor {
			if err != nil {
				s.cfg.Logger.Error("pay: writing a refund's outcome failed; the reconciler will settle it", "refund", r.ID, "status", to, "err", err)
			}
			return cur, err
		}
		if err := s.cfg.Sleep(ctx, backoff); err != nil {
			return Refund{}, Unavailable(err)
		}
		backoff = min(2*backoff, time.Second)
	}
}

// RefundsFor returns the refunds of payment paymentID of merchant
// merchantID, oldest first; another merchant's payment is ErrNotFound.
func (s *Service) RefundsFor(ctx context.Context, merchantID, paymentID string) ([]Refund, error) {
	if _, err := ParseUUID(paymentID); err != nil {
		return nil, Invalid("id", "must be a UUID")
	}
	rs, ok := s.store.(RefundStore)
	if !ok {
		return nil, &Error{Code: CodeNotSupported, Kind: CodeConflict, Message: "this payment store keeps no refunds"}
	}
	p, err := s.store.Get(ctx, strings.ToLower(paymentID))
	if err != nil {
		return nil, err
	}
	if !strings.EqualFold(p.MerchantID, merchantID) {
		return nil, fmt.Errorf("payment %q of another merchant: %w", paymentID, ErrNotFound)
	}
	return rs.ListRefunds(ctx, p.ID)
}

// RefundPass runs one reconciliation pass over refunds: it claims the
// refunds due for an inquiry (a PENDING one only once its call must have
// ended: it is turned UNKNOWN first) and asks about each, at most
// InquiryConcurrency at once. A refund the institution has is settled
// SUCCEEDED or FAILED; one it does not have after its not-found window
// since our last request is FAILED (never processed: its amount is free
// again); anything else leaves it UNKNOWN and defers the next inquiry. A
// refund is never sent again. It returns how many refunds it settled;
// without refunds (store or connector) it does nothing.
func (s *Service) RefundPass(ctx context.Context) (int, error) {
	rs, ok := s.store.(RefundStore)
	ref, ok2 := s.inst.(Refunder)
	if !ok || !ok2 {
		return 0, nil
	}
	var (
		settled int
		mu      sync.Mutex
	)
	for ctx.Err() == nil {
		now := s.cfg.Now()
		batch, err := rs.ClaimDueRefunds(ctx, now, now.Add(s.cfg.ClaimLease), 2*s.cfg.InquiryConcurrency)
		if err != nil {
			return settled, err
		}
		if len(batch) == 0 {
			break
		}
		var wg sync.WaitGroup
		sem := make(chan struct{}, s.cfg.InquiryConcurrency)
		for _, r := range batch {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				if s.settleRefund(ctx, rs, ref, r) {
					mu.Lock()
					settled++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
	}
	return settled, nil
}

// settleRefund asks about one claimed refund and writes what the answer
// allows; it reports whether the refund is settled.
func (s *Service) settleRefund(ctx context.Context, rs RefundStore, ref Refunder, r Refund) bool {
	if r.Status == RefundPending {
		cur, err := rs.TransitionRefund(ctx, r.ID, RefundPending, RefundUnknown,
			reason(ReasonRecovered, "still PENDING %s after it was created; the call may have reached the institution", s.cfg.ApprovalTimeout+s.cfg.TakeoverMargin))
		if err != nil {
			return errors.Is(err, ErrStaleStatus)
		}
		r = cur
	}
	ictx, cancel := context.WithTimeout(ctx, s.cfg.InquiryTimeout)
	q, err := ref.InquireRefund(ictx, r.ExternalKey, r.PaymentKey)
	cancel()
	var (
		to  RefundStatus
		why string
	)
	switch {
	case err != nil:
	case q.Found && q.Succeeded:
		to, why = RefundSucceeded, reason(ReasonInquiryRefunded, "a status inquiry found the refund carried out")
	case q.Found:
		to, why = RefundFailed, reason(ReasonInquiryDeclined, "a status inquiry found the refund declined")
	case q.Definitive && !s.cfg.Now().Before(r.UpdatedAt.Add(q.NotFoundWindow)):
		to, why = RefundFailed, reason(ReasonInquiryNotFound, "a status inquiry did not find it %s after our last request (the institution's not-found window)", q.NotFoundWindow)
	}
	if to != "" {
		_, err := rs.TransitionRefund(ctx, r.ID, RefundUnknown, to, why)
		return err == nil || errors.Is(err, ErrStaleStatus)
	}
	if err != nil && !errors.Is(err, ErrInquiryUnavailable) {
		s.cfg.Logger.Warn("pay: refund inquiry failed", "refund", r.ID, "err", err)
	}
	n := r.Inquiries + 1
	_, derr := rs.DeferRefundInquiry(ctx, r.ID, RefundUnknown, s.cfg.Now().Add(s.cfg.ReconcileEvery<<min(n, 6)))
	return errors.Is(derr, ErrStaleStatus)
}
