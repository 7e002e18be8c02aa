package pay

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Closing money that no order holds.
//
// A payment can be approved (or authorised) and yet have no order that
// the merchant went on with: its approval came late, after the buyer's
// hold had expired and the seats went back; or the institution approved
// an order twice, and parity found the second. Such money must go back to
// the buyer, once. The contract is one call: the merchant confirms the
// order of a payment (POST /v1/payments/{id}/confirm, ConfirmOrder) once
// it goes on with it, and with Config.CloseAfter set, the reconciler's
// ClosurePass cancels every APPROVED or AUTHORIZED payment still
// unconfirmed that long after its creation: a cancellation under the key
// ClosureKey, carried out as every cancellation is (a void of an
// authorisation, a refund of an approved payment, under CancelKey: once,
// however many passes run). A confirmation and a closure exclude each
// other under the payment's lock: a confirmed payment is never closed, a
// payment being closed can no longer be confirmed (CodeCancelExists).

// Confirmation records that the merchant went on with the order of a
// payment: the closure pass leaves it alone.
type Confirmation struct {
	PaymentID   string    `json:"payment_id"`
	MerchantID  string    `json:"merchant_id"`
	OrderID     string    `json:"order_id"`
	ConfirmedAt time.Time `json:"confirmed_at"`
}

// ConfirmationStore is a Store that keeps confirmations (and a
// CancellationStore). The SQL store implements it.
type ConfirmationStore interface {
	// Confirm records under the payment's lock that merchant merchantID
	// confirmed payment paymentID's order, at at, and returns the
	// confirmation (the first one, when it was confirmed before) with
	// the payment. ErrNotFound for no payment or another merchant's;
	// *CancellationConflict when the payment has a cancellation (a
	// closure or the merchant's own); *NotConfirmableError when it is
	// neither APPROVED nor AUTHORIZED. Nothing is written on an error.
	Confirm(ctx context.Context, merchantID, paymentID string, at time.Time) (Confirmation, Payment, error)
	// Confirmation returns payment paymentID's confirmation, or
	// ErrNotFound.
	Confirmation(ctx context.Context, paymentID string) (Confirmation, error)
	// Unconfirmed returns up to limit APPROVED or AUTHORIZED payments
	// created at or after after and before before, with neither a
	// confirmation nor a cancellation, oldest first, without history.
	Unconfirmed(ctx context.Context, after, before time.Time, limit int) ([]Payment, error)
	// CreateClosure records c as CreateCancellation does, unless the
	// payment is confirmed (ErrConfirmed, nothing written), checked under
	// the same lock.
	CreateClosure(ctx context.Context, c Cancellation) (Cancellation, Payment, error)
}

// ErrConfirmed is CreateClosure's answer for a payment whose order was
// confirmed: it is not closed.
var ErrConfirmed = errors.New("pay: the payment's order is confirmed")

// NotConfirmableError is Confirm's answer for a payment neither
// APPROVED nor AUTHORIZED.
type NotConfirmableError struct {
	Status Status
}

// Error implements error.
func (e *NotConfirmableError) Error() string {
	return fmt.Sprintf("pay: a %s payment's order cannot be confirmed", e.Status)
}

// CodeNotConfirmable is the error code of a confirmation of a payment
// that is neither APPROVED nor AUTHORIZED.
const CodeNotConfirmable Code = "not_confirmable"

// ClosureKey is the idempotency key (scoped to the payment's merchant)
// of the cancellation the closure pass records for a payment: one per
// payment.
func ClosureKey(paymentID string) string { return "closure:" + paymentID }

// ReasonClosure is the code of a closure's reason.
const ReasonClosure = "closure"

// ConfirmOrder records that merchant merchantID goes on with the order of
// payment paymentID (APPROVED, or AUTHORIZED before its capture): the
// closure pass leaves it alone. Confirming again returns the first
// confirmation. Errors: CodeInvalid naming id; CodeNotFound;
// CodeCancelExists when the payment has a cancellation (the closure pass,
// or the merchant, cancelled it first: the order must not go on);
// CodeNotConfirmable with payment_status for any other status.
func (s *Service) ConfirmOrder(ctx context.Context, merchantID, paymentID string) (Confirmation, Payment, error) {
	pid, err := ParseUUID(paymentID)
	if err != nil {
		return Confirmation{}, Payment{}, Invalid("id", "must be a UUID")
	}
	mid, err := ParseUUID(merchantID)
	if err != nil {
		return Confirmation{}, Payment{}, Invalid("merchant_id", "must be a UUID")
	}
	cs, ok := s.store.(ConfirmationStore)
	if !ok {
		return Confirmation{}, Payment{}, &Error{Code: CodeNotSupported, Kind: CodeConflict, Message: "this payment store keeps no confirmations"}
	}
	c, p, err := cs.Confirm(ctx, mid.String(), pid.String(), s.cfg.Now())
	if cf, ok := errors.AsType[*CancellationConflict](err); ok {
		return Confirmation{}, Payment{}, &Error{Code: CodeCancelExists, Kind: CodeConflict,
			Message: fmt.Sprintf("the payment has a cancellation (%s): its order must not go on", cf.Cancellation.Status),
			Extra:   map[string]any{"cancellation_status": cf.Cancellation.Status}, Err: err}
	}
	if nc, ok := errors.AsType[*NotConfirmableError](err); ok {
		return Confirmation{}, Payment{}, &Error{Code: CodeNotConfirmable, Kind: CodeConflict,
			Message: fmt.Sprintf("the payment is %s: only an APPROVED or AUTHORIZED payment's order can be confirmed", nc.Status),
			Extra:   map[string]any{"payment_status": nc.Status}, Err: err}
	}
	return c, p, err
}

// ClosureLookback is how far back, before the closure window, the
// closure pass looks for unconfirmed payments: its cost is bounded by the
// payments of that span, not by the whole history. A payment left
// unconfirmed longer (pay stopped for more than a day) is not closed
// automatically; `stampede pay close-out` reports it.
const ClosureLookback = 24 * time.Hour

// ClosurePass closes the payments that no confirmed order holds: every
// APPROVED or AUTHORIZED payment still unconfirmed Config.CloseAfter after
// its creation (none when it is 0) gets a cancellation under ClosureKey,
// carried out at once where it can be (CarryOut: a void or a refund under
// CancelKey) and otherwise by the next CancellationPass. Each closure is
// logged and counted (stampede_pay_closures_total); its void or refund
// is an event of the payment as every one is (refund.created with the
// closure's reason, void.created). It returns how many it recorded.
func (s *Service) ClosurePass(ctx context.Context) (int, error) {
	cs, ok := s.store.(ConfirmationStore)
	if !ok || s.cfg.CloseAfter <= 0 {
		return 0, nil
	}
	n := 0
	for ctx.Err() == nil {
		before := s.cfg.Now().Add(-s.cfg.CloseAfter)
		ps, err := cs.Unconfirmed(ctx, before.Add(-ClosureLookback), before, 64)
		if err != nil || len(ps) == 0 {
			return n, err
		}
		progress := false
		for _, p := range ps {
			why := reason(ReasonClosure, "no confirmed order within %s of the payment", s.cfg.CloseAfter)
			b := CancelBody{Reason: why}
			c, _, err := cs.CreateClosure(ctx, Cancellation{PaymentID: p.ID, MerchantID: p.MerchantID, Reason: why,
				IdempotencyKey: ScopedKey(p.MerchantID, ClosureKey(p.ID)), RequestHash: b.Hash(p.ID), CreatedAt: s.cfg.Now()})
			if _, conflict := errors.AsType[*CancellationConflict](err); conflict || errors.Is(err, ErrConfirmed) {
				progress = true // confirmed or cancelled meanwhile
				continue
			}
			if err != nil {
				s.cfg.Logger.Warn("pay: closing an unconfirmed payment failed", "payment", p.ID, "err", err)
				continue
			}
			n++
			progress = true
			action := "refund"
			if p.Status == StatusAuthorized {
				action = "void"
			}
			s.cfg.Metrics.closure(action)
			s.cfg.Logger.Warn("pay: closing a payment no confirmed order holds", "payment", p.ID, "order", p.OrderID,
				"merchant", p.MerchantID, "status", p.Status, "amount", p.Amount, "currency", p.Currency, "action", action, "after", s.cfg.CloseAfter)
			if _, err := s.CarryOut(ctx, c); err != nil {
				s.cfg.Logger.Warn("pay: carrying out a closure failed; the reconciler will retry", "payment", p.ID, "err", err)
			}
		}
		if !progress {
			return n, nil
		}
	}
	return n, nil
}
