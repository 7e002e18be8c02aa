package pay

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// CancellationStatus is where a cancellation stands.
type CancellationStatus string

// The cancellation statuses.
const (
	// CancelRequested: recorded, not carried out yet (the payment is
	// still PENDING or UNKNOWN, or its void or refund could not be
	// recorded yet).
	CancelRequested CancellationStatus = "REQUESTED"
	// CancelCarriedOut: the void or refund that carries it out is
	// recorded (ActionID names it; its own status says how it went).
	CancelCarriedOut CancellationStatus = "CARRIED_OUT"
	// CancelClosed: nothing was left to do (the payment was declined,
	// never happened, was voided, or is refunded in full already).
	CancelClosed CancellationStatus = "CLOSED"
)

// CancelAction is what carried a cancellation out.
type CancelAction string

// The cancellation actions.
const (
	CancelActionNone   CancelAction = "none"   // nothing to do
	CancelActionVoid   CancelAction = "void"   // the authorisation was voided
	CancelActionRefund CancelAction = "refund" // what is left of the payment was refunded
)

// Cancellation is a merchant's request to cancel a payment whatever its
// status: one per payment. It is recorded at once; while the payment is
// PENDING or UNKNOWN it waits (REQUESTED), and once the payment has
// settled it is carried out: an AUTHORIZED payment is voided, an APPROVED
// one refunded (what is left of it), anything else needs nothing. The
// void or refund is made under CancelKey(payment), so that however many
// instances carry the cancellation out, the institution is asked once.
type Cancellation struct {
	PaymentID      string
	MerchantID     string
	IdempotencyKey string // ScopedKey(merchant, Idempotency-Key)
	RequestHash    string
	// Reason is the merchant's reason, as given ("" when none).
	Reason string
	Status CancellationStatus
	// Action and ActionID say what carried it out: the refund's or the
	// void's id ("" for none or while REQUESTED).
	Action   CancelAction
	ActionID string
	// Outcome is the public reason of the last change.
	Outcome   string
	CreatedAt time.Time
	UpdatedAt time.Time
}

// CancelBody is a merchant's cancellation request (the body of POST
// /v1/payments/{id}/cancel).
type CancelBody struct {
	// Reason is the merchant's reason, optional.
	Reason string `json:"reason"`
}

// MaxCancelReasonLen is the longest cancellation reason accepted.
const MaxCancelReasonLen = MaxRefundReasonLen

// Validate checks a cancellation request, naming the field at fault.
func (b CancelBody) Validate() error {
	if b.Reason != "" {
		return ValidateText("reason", b.Reason, MaxCancelReasonLen)
	}
	return nil
}

// Hash identifies a cancellation request for idempotency.
func (b CancelBody) Hash(paymentID string) string {
	raw, _ := json.Marshal(struct {
		PaymentID string `json:"payment_id"`
		CancelBody
	}{paymentID, b})
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:])
}

// CancelKey is the idempotency key (scoped to the payment's merchant)
// under which a cancellation's void or refund is made: one per payment,
// so that it is made once.
func CancelKey(paymentID string) string { return "cancel:" + paymentID }

// MaxCancelRefunds is how many refunds the carrying out of a cancellation
// of an APPROVED payment makes while the institution declines them; after
// the last decline the payment is flagged for review.
const MaxCancelRefunds = 5

// CancelRefundKey returns the key (scoped to the payment's merchant) of
// the attempt-th refund (from 1) that carries out payment paymentID's
// cancellation: CancelKey for the first, then CancelKey + ":2" and so on,
// one more after each refund the institution declined. Each attempt is
// made once, whoever carries it out.
func CancelRefundKey(paymentID string, attempt int) string {
	if attempt <= 1 {
		return CancelKey(paymentID)
	}
	return CancelKey(paymentID) + ":" + strconv.Itoa(attempt)
}

// IsCancelRefund reports whether refund r carries out its payment's
// cancellation: its key is one of CancelRefundKey's.
func IsCancelRefund(r Refund) bool {
	first := ScopedKey(r.MerchantID, CancelKey(r.PaymentID))
	return r.IdempotencyKey == first || strings.HasPrefix(r.IdempotencyKey, first+":")
}

// CancellationStore is a Store that keeps cancellations. The SQL store
// implements it.
type CancellationStore interface {
	// CreateCancellation records c REQUESTED (after PrepareCancellation)
	// under the payment's lock and returns it with the payment as it
	// stands. The payment must exist and be the merchant's
	// (ErrNotFound). If the payment already has a cancellation, or c's
	// key is taken, it returns *CancellationConflict with that one and
	// writes nothing.
	CreateCancellation(ctx context.Context, c Cancellation) (Cancellation, Payment, error)
	// GetCancellation returns payment paymentID's cancellation, or
	// ErrNotFound.
	GetCancellation(ctx context.Context, paymentID string) (Cancellation, error)
	// DueCancellations returns up to limit REQUESTED cancellations whose
	// payment is no longer PENDING or UNKNOWN, oldest first.
	DueCancellations(ctx context.Context, limit int) ([]Cancellation, error)
	// CloseCancellation moves payment paymentID's cancellation from
	// REQUESTED to `to` (CancelCarriedOut or CancelClosed) with its
	// action (compare-and-set: ErrStaleStatus when it is no longer
	// REQUESTED, nothing written).
	CloseCancellation(ctx context.Context, paymentID string, to CancellationStatus, action CancelAction, actionID, outcome string) (Cancellation, error)
}

// CancellationConflict is CreateCancellation's error when the payment
// already has a cancellation or the key is taken: Cancellation is that one.
type CancellationConflict struct {
	Cancellation Cancellation
}

func (e *CancellationConflict) Error() string {
	return fmt.Sprintf("pay: payment %s already has a cancellation (%s) under key %q", e.Cancellation.PaymentID, e.Cancellation.Status, e.Cancellation.IdempotencyKey)
}

// PrepareCancellation checks and completes a cancellation for
// CancellationStore.CreateCancellation; storage adapters call it.
func PrepareCancellation(c Cancellation, now time.Time) (Cancellation, error) {
	for _, id := range []struct{ field, v string }{{"payment_id", c.PaymentID}, {"merchant_id", c.MerchantID}} {
		if u, err := ParseUUID(id.v); err != nil || u.String() != id.v {
			return c, Invalid(id.field, "must be a lower-case hyphenated UUID")
		}
	}
	if err := (CancelBody{Reason: c.Reason}).Validate(); err != nil {
		return c, err
	}
	if err := ValidateText("Idempotency-Key", c.IdempotencyKey, maxScopedKeyLen); err != nil {
		return c, err
	}
	if c.RequestHash == "" {
		return c, Invalid("request_hash", "is required")
	}
	c.Status, c.Action, c.ActionID, c.Outcome = CancelRequested, "", "", ReasonCancelRequested
	if c.CreatedAt.IsZero() {
		c.CreatedAt = now
	}
	c.CreatedAt = StoreTime(c.CreatedAt)
	c.UpdatedAt = c.CreatedAt
	return c, nil
}

// CheckCancellationClose validates the arguments of
// CancellationStore.CloseCancellation; adapters call it.
func CheckCancellationClose(to CancellationStatus, action CancelAction, actionID string) error {
	switch {
	case to == CancelCarriedOut && (action == CancelActionVoid || action == CancelActionRefund) && actionID != "":
	case to == CancelClosed && action == CancelActionNone && actionID == "":
	default:
		return Invalid("status", "a cancellation cannot close as %s with action %q (%q)", to, action, actionID)
	}
	return nil
}
