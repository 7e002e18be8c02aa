package pay

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"
)

// DefaultAuthWindow is how long an authorisation waits for its capture
// before the reconciler voids it: 7 days, what card networks commonly
// hold an authorisation (Stripe's card authorisations expire after 7
// days too).
const DefaultAuthWindow = 7 * 24 * time.Hour

// Origins of an operation, for the metrics and the log.
const (
	originMerchant   = "merchant"
	originAuthWindow = "auth_window"
)

// operations returns the store's OperationStore and the institution's
// Capturer, or the error that captures and voids are not available.
func (s *Service) operations(kind OperationKind) (OperationStore, Capturer, error) {
	os, ok := s.store.(OperationStore)
	if !ok {
		return nil, nil, &Error{Code: CodeNotSupported, Kind: CodeConflict, Message: "this payment store keeps no captures or voids"}
	}
	c, ok := s.inst.(Capturer)
	caps := CapabilitiesOf(s.inst)
	if !ok || !caps.ManualCapture || (kind == OpVoid && !caps.Void) {
		return nil, nil, errUnsupported(s.inst, string(kind)+"s")
	}
	return os, c, nil
}

// Capture captures b.Amount (0: all) of the AUTHORIZED payment paymentID
// of merchant merchantID under an idempotency key (scoped to the
// merchant). The capture is recorded PENDING before the institution is
// asked and is returned as the answer left it: SUCCEEDED (the payment is
// then APPROVED, its refundable amount the captured one), FAILED, or
// UNKNOWN when the answer was lost (an inquiry settles it; it is never
// sent again). A repeated key returns the operation as it stands with
// replayed true (CodeConflict while in flight, CodeMismatch for another
// request). A payment that is not AUTHORIZED is CodeNotAuthorized; one
// whose authorisation another capture or void holds, CodeOperationExists:
// of concurrent captures and voids of one payment, exactly one is
// recorded.
func (s *Service) Capture(ctx context.Context, merchantID, paymentID, key string, b CaptureBody) (Operation, bool, error) {
	if err := b.Validate(); err != nil {
		return Operation{}, false, err
	}
	return s.operate(ctx, merchantID, paymentID, key, OpCapture, b.Amount, originMerchant)
}

// Void cancels the AUTHORIZED payment paymentID of merchant merchantID
// under an idempotency key, as Capture captures it: a SUCCEEDED void
// makes the payment VOIDED.
func (s *Service) Void(ctx context.Context, merchantID, paymentID, key string) (Operation, bool, error) {
	return s.operate(ctx, merchantID, paymentID, key, OpVoid, 0, originMerchant)
}

// operate records and sends one capture or void.
func (s *Service) operate(ctx context.Context, merchantID, paymentID, key string, kind OperationKind, amount int64, origin string) (Operation, bool, error) {
	if err := ValidateIdempotencyKey(key); err != nil {
		return Operation{}, false, err
	}
	pid, err := ParseUUID(paymentID)
	if err != nil {
		return Operation{}, false, Invalid("id", "must be a UUID")
	}
	mid, err := ParseUUID(merchantID)
	if err != nil {
		return Operation{}, false, Invalid("merchant_id", "must be a UUID")
	}
	os, c, err := s.operations(kind)
	if err != nil {
		return Operation{}, false, err
	}
	now := s.cfg.Now()
	op := Operation{ID: NewID(), PaymentID: pid.String(), MerchantID: mid.String(), Kind: kind, Amount: amount,
		IdempotencyKey: ScopedKey(mid.String(), key), RequestHash: OperationHash(kind, pid.String(), amount),
		NextInquiryAt: now.Add(s.cfg.ApprovalTimeout + s.cfg.TakeoverMargin), CreatedAt: now}
	hash := op.RequestHash
	op, err = os.CreateOperation(ctx, op)
	if c, ok := errors.AsType[*OperationConflict](err); ok {
		got := c.Operation
		switch {
		case got.RequestHash != hash:
			return Operation{}, false, &Error{Code: CodeMismatch, Field: "Idempotency-Key", Message: "this key was used with a different request"}
		case got.Status == RefundPending:
			return Operation{}, false, &Error{Code: CodeConflict, Field: "Idempotency-Key", Message: "a request with this key is still in flight; retry later", RetryAfter: time.Second}
		}
		return got, true, nil
	}
	if err != nil {
		return Operation{}, false, err
	}
	to, why := s.sendOperation(ctx, c, op)
	s.cfg.Metrics.operation(kind, to, origin)
	op, err = s.finishOperation(context.WithoutCancel(ctx), os, op, to, why)
	return op, false, err
}

// sendOperation makes the one call of op (never retried: an operation
// whose answer was lost is settled by inquiry) and returns the status op
// moves to and the public reason why.
func (s *Service) sendOperation(ctx context.Context, c Capturer, op Operation) (RefundStatus, string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ApprovalTimeout)
	defer cancel()
	req := OperationRequest{ExternalKey: op.ExternalKey, PaymentKey: op.PaymentKey, Amount: op.Amount, Currency: op.Currency}
	var (
		v   RefundVerdict
		err error
	)
	if op.Kind == OpCapture {
		v, err = c.Capture(ctx, req)
	} else {
		v, err = c.Void(ctx, req)
	}
	switch {
	case err == nil && v.Succeeded && op.Kind == OpCapture:
		return RefundSucceeded, reason(ReasonCaptured, "the institution captured %d %s", op.Amount, op.Currency)
	case err == nil && v.Succeeded:
		return RefundSucceeded, reason(ReasonVoided, "the institution cancelled the authorisation")
	case err == nil:
		return RefundFailed, reason(ReasonOpDeclined, "the institution declined the %s", op.Kind)
	case errors.Is(err, ErrNotSent):
		s.cfg.Logger.Warn("pay: operation not sent", "kind", op.Kind, "operation", op.ID, "err", err)
		return RefundFailed, reason(ReasonNotSent, "the %s could not be sent; nothing happened", op.Kind)
	case errors.Is(err, ErrRejected):
		s.cfg.Logger.Warn("pay: operation rejected", "kind", op.Kind, "operation", op.ID, "err", err)
		return RefundFailed, reason(ReasonRejected, "the institution refused the %s without processing it", op.Kind)
	default:
		s.cfg.Logger.Warn("pay: operation outcome unknown", "kind", op.Kind, "operation", op.ID, "err", err)
		return RefundUnknown, reason(ReasonOutcomeUnknown, "no answer to the %s; a status inquiry will settle it", op.Kind)
	}
}

// finishOperation writes the outcome of op's call, retrying a database
// failure for up to WriteRetryFor; an operation a reconciler took over
// meanwhile (UNKNOWN) is settled by the verdict.
func (s *Service) finishOperation(ctx context.Context, os OperationStore, op Operation, to RefundStatus, why string) (Operation, error) {
	start := s.cfg.Now()
	backoff := 10 * time.Millisecond
	for attempt := 1; ; attempt++ {
		cur, err := os.TransitionOperation(ctx, op.ID, RefundPending, to, why)
		if errors.Is(err, ErrStaleStatus) {
			if cur, err = os.GetOperation(ctx, op.ID); err == nil && cur.Status == RefundUnknown && to.Terminal() {
				cur, err = os.TransitionOperation(ctx, op.ID, RefundUnknown, to, why)
				if errors.Is(err, ErrStaleStatus) {
					cur, err = os.GetOperation(ctx, op.ID)
				}
			}
		}
		if err == nil || ErrorCode(err) != CodeUnavailable || attempt >= maxWriteAttempts || s.cfg.Now().Sub(start) >= s.cfg.WriteRetryFor {
			if err != nil {
				s.cfg.Logger.Error("pay: writing an operation's outcome failed; the reconciler will settle it", "operation", op.ID, "status", to, "err", err)
			}
			return cur, err
		}
		if err := s.cfg.Sleep(ctx, backoff); err != nil {
			return Operation{}, Unavailable(err)
		}
		backoff = min(2*backoff, time.Second)
	}
}

// OperationsFor returns the captures and voids of payment paymentID of
// merchant merchantID, oldest first; another merchant's payment is
// ErrNotFound.
func (s *Service) OperationsFor(ctx context.Context, merchantID, paymentID string) ([]Operation, error) {
	if _, err := ParseUUID(paymentID); err != nil {
		return nil, Invalid("id", "must be a UUID")
	}
	os, ok := s.store.(OperationStore)
	if !ok {
		return []Operation{}, nil
	}
	p, err := s.store.Get(ctx, strings.ToLower(paymentID))
	if err != nil {
		return nil, err
	}
	if !strings.EqualFold(p.MerchantID, merchantID) {
		return nil, ErrNotFound
	}
	return os.ListOperations(ctx, p.ID)
}

// OperationPass runs one reconciliation pass over captures and voids, as
// RefundPass does over refunds: a PENDING operation whose call must have
// ended is turned UNKNOWN, and each UNKNOWN one is asked about; one the
// institution has is settled SUCCEEDED or FAILED, one it does not have
// after its not-found window since our request FAILED (the
// authorisation is free again), anything else waits for the next
// inquiry. An operation is never sent again.
func (s *Service) OperationPass(ctx context.Context) (int, error) {
	os, ok := s.store.(OperationStore)
	c, ok2 := s.inst.(Capturer)
	if !ok || !ok2 {
		return 0, nil
	}
	var (
		settled int
		mu      sync.Mutex
	)
	for ctx.Err() == nil {
		now := s.cfg.Now()
		batch, err := os.ClaimDueOperations(ctx, now, now.Add(s.cfg.ClaimLease), 2*s.cfg.InquiryConcurrency)
		if err != nil {
			return settled, err
		}
		if len(batch) == 0 {
			break
		}
		var wg sync.WaitGroup
		sem := make(chan struct{}, s.cfg.InquiryConcurrency)
		for _, op := range batch {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				if s.settleOperation(ctx, os, c, op) {
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

// settleOperation asks about one claimed operation and writes what the
// answer allows; it reports whether the operation is settled.
func (s *Service) settleOperation(ctx context.Context, os OperationStore, c Capturer, op Operation) bool {
	if op.Status == RefundPending {
		cur, err := os.TransitionOperation(ctx, op.ID, RefundPending, RefundUnknown,
			reason(ReasonRecovered, "still PENDING %s after it was created; the call may have reached the institution", s.cfg.ApprovalTimeout+s.cfg.TakeoverMargin))
		if err != nil {
			return errors.Is(err, ErrStaleStatus)
		}
		op = cur
	}
	ictx, cancel := context.WithTimeout(ctx, s.cfg.InquiryTimeout)
	q, err := c.InquireOperation(ictx, op.Kind, op.ExternalKey, op.PaymentKey)
	cancel()
	var (
		to  RefundStatus
		why string
	)
	switch {
	case err != nil:
	case q.Found && q.Succeeded:
		to, why = RefundSucceeded, reason(ReasonInquiryDone, "a status inquiry found the %s carried out", op.Kind)
	case q.Found:
		to, why = RefundFailed, reason(ReasonInquiryDeclined, "a status inquiry found the %s declined", op.Kind)
	case q.Definitive && !s.cfg.Now().Before(op.UpdatedAt.Add(q.NotFoundWindow)):
		to, why = RefundFailed, reason(ReasonInquiryNotFound, "a status inquiry did not find it %s after our last request (the institution's not-found window)", q.NotFoundWindow)
	}
	if to != "" {
		_, err := os.TransitionOperation(ctx, op.ID, RefundUnknown, to, why)
		if err == nil {
			s.cfg.Metrics.operation(op.Kind, to, "inquiry")
		}
		return err == nil || errors.Is(err, ErrStaleStatus)
	}
	if err != nil && !errors.Is(err, ErrInquiryUnavailable) {
		s.cfg.Logger.Warn("pay: operation inquiry failed", "operation", op.ID, "err", err)
	}
	n := op.Inquiries + 1
	_, derr := os.DeferOperationInquiry(ctx, op.ID, RefundUnknown, s.cfg.Now().Add(s.cfg.ReconcileEvery<<min(n, 6)))
	return errors.Is(derr, ErrStaleStatus)
}

// AuthWindowKey is the idempotency key (scoped to the payment's
// merchant) under which the service voids an authorisation left
// uncaptured past AuthWindow: one key per payment, so that two instances'
// passes record one void.
func AuthWindowKey(paymentID string) string { return "auth-window:" + paymentID }

// AuthWindowPass voids the authorisations left uncaptured for longer
// than AuthWindow (none when it is 0), under the rules of a merchant's
// void: recorded before it is sent, a lost answer settled by inquiry,
// never two holding operations on one payment (a merchant's capture
// racing the pass wins or loses as a whole). A void that FAILED is left
// alone and the payment flagged for manual review. It returns how many
// voids it recorded.
func (s *Service) AuthWindowPass(ctx context.Context) (int, error) {
	os, ok := s.store.(OperationStore)
	if !ok || s.cfg.AuthWindow <= 0 {
		return 0, nil
	}
	if _, _, err := s.operations(OpVoid); err != nil {
		return 0, nil
	}
	n := 0
	for ctx.Err() == nil {
		ps, err := os.ExpiredAuthorizations(ctx, s.cfg.Now().Add(-s.cfg.AuthWindow), 64)
		if err != nil {
			return n, err
		}
		if len(ps) == 0 {
			break
		}
		progress := false
		for _, p := range ps {
			op, replayed, err := s.operate(ctx, p.MerchantID, p.ID, AuthWindowKey(p.ID), OpVoid, 0, originAuthWindow)
			switch {
			case err != nil && (ErrorCode(err) == CodeOperationExists || ErrorCode(err) == CodeNotAuthorized):
				// A merchant's capture or void got there first.
				progress = true
			case err != nil:
				s.cfg.Logger.Warn("pay: voiding an expired authorisation failed", "payment", p.ID, "err", err)
			case replayed:
				// Our own earlier void: FAILED (ExpiredAuthorizations
				// skips payments with a void of their own otherwise).
			default:
				n++
				progress = true
				s.cfg.Logger.Info("pay: voided an authorisation left uncaptured past the window", "payment", p.ID,
					"window", s.cfg.AuthWindow, "status", op.Status)
				if op.Status == RefundFailed {
					_ = s.store.FlagReview(ctx, p.ID, reason(ReasonAuthExpired, "not captured within %s, and the institution declined its void", s.cfg.AuthWindow))
					s.cfg.Metrics.flag()
				}
			}
		}
		if !progress {
			break
		}
	}
	return n, nil
}
