package pay

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/stampede-lab/stampede/protocol"
)

// RefundStatus is a refund's status. Its lifecycle is a payment's:
// PENDING (persisted, call in flight), then SUCCEEDED or FAILED (final),
// or UNKNOWN (the answer was lost: the money may have moved back) until an
// inquiry settles it.
type RefundStatus string

// The refund statuses.
const (
	RefundPending   RefundStatus = "PENDING"   // persisted, call to the institution in flight
	RefundSucceeded RefundStatus = "SUCCEEDED" // the institution refunded
	RefundFailed    RefundStatus = "FAILED"    // declined, or known not processed
	RefundUnknown   RefundStatus = "UNKNOWN"   // timeout or lost answer: the money may have moved back
)

// RefundStatuses returns every refund status, in lifecycle order.
func RefundStatuses() []RefundStatus {
	return []RefundStatus{RefundPending, RefundSucceeded, RefundFailed, RefundUnknown}
}

// Valid reports whether s is one of the refund statuses.
func (s RefundStatus) Valid() bool { return slices.Contains(RefundStatuses(), s) }

// Terminal reports whether s is final: SUCCEEDED or FAILED.
func (s RefundStatus) Terminal() bool { return s == RefundSucceeded || s == RefundFailed }

// Holds reports whether a refund in status s counts against the
// payment's refundable amount: every refund but a FAILED one, since a
// PENDING or UNKNOWN refund may have moved money.
func (s RefundStatus) Holds() bool { return s != RefundFailed }

// CanTransitionRefund reports whether a refund may move from one status
// to another: as a payment's (CanTransition).
func CanTransitionRefund(from, to RefundStatus) bool {
	return from.Valid() && to.Valid() && !from.Terminal() && from != to && to != RefundPending
}

// Refund is one refund of a payment.
type Refund struct {
	ID         string // a UUID (NewID: v7); also the key sent to the institution
	PaymentID  string
	MerchantID string
	Amount     int64 // in minor units of Currency
	Currency   string
	// Reason is the merchant's reason, as given ("" when none).
	Reason      string
	Status      RefundStatus
	ExternalKey string // the key sent to the institution; equals ID
	// PaymentKey is the payment's external key at the institution, set
	// by CreateRefund from the payment (not stored with the refund).
	PaymentKey     string
	IdempotencyKey string // ScopedKey(merchant, Idempotency-Key)
	RequestHash    string // the request's hash: a repeat with another body is a mismatch
	CreatedAt      time.Time
	UpdatedAt      time.Time
	// NextInquiryAt and Inquiries mean what a payment's do.
	NextInquiryAt time.Time
	Inquiries     int
	History       []RefundChange // oldest first
}

// RefundChange is one entry of a refund's append-only history.
type RefundChange struct {
	From   RefundStatus
	To     RefundStatus
	Reason string
	At     time.Time
}

// Limits of a refund request.
const MaxRefundReasonLen = 255

// RefundBody is a merchant's refund request (the body of POST
// /v1/payments/{id}/refunds).
type RefundBody struct {
	// Amount is the amount to refund; 0 refunds what is left.
	Amount int64 `json:"amount"`
	// Reason is the merchant's reason, optional.
	Reason string `json:"reason"`
}

// Hash identifies a refund request for idempotency: the payment, the
// amount as asked (0 for "the rest") and the reason.
func (b RefundBody) Hash(paymentID string) string {
	raw, _ := json.Marshal(struct {
		PaymentID string `json:"payment_id"`
		RefundBody
	}{paymentID, b})
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:])
}

// Validate checks a refund request's fields, naming the one at fault.
func (b RefundBody) Validate() error {
	switch {
	case b.Amount < 0:
		return Invalid("amount", "must be positive (or left out to refund what is left)")
	case b.Amount > MaxAmount:
		return Invalid("amount", "must be at most %d", int64(MaxAmount))
	}
	if b.Reason != "" {
		return ValidateText("reason", b.Reason, MaxRefundReasonLen)
	}
	return nil
}

// RefundStore is a Store that keeps refunds: written under the same
// rules as payments (each change with its history entry and an outbox row
// of the payment's, in one transaction, so that a payment's events and its
// refunds' are in one order). The SQL store implements it.
type RefundStore interface {
	// CreateRefund records refund r of payment r.PaymentID PENDING with
	// its first history entry and an outbox row (EventRefundCreated),
	// atomically, after completing it with PrepareRefund. Under the
	// payment's lock, it checks that the payment exists and is the
	// merchant's (ErrNotFound otherwise), that it is APPROVED
	// (CodeNotRefundable), and that the refunds holding money (every one
	// but FAILED) and r add up to at most the payment's amount
	// (CodeRefundExceeds); an Amount of 0 takes what is left. If r's
	// idempotency key is taken it returns *RefundConflict with the
	// refund that has it and writes nothing. Concurrent refunds of one
	// payment are serialised by the payment's lock, so their sum never
	// passes the amount.
	CreateRefund(ctx context.Context, r Refund) (Refund, error)
	// TransitionRefund moves refund id from `from` to `to` as Transition
	// moves a payment: compare-and-set (ErrStaleStatus), history, an
	// outbox row (EventRefundChanged) of its payment; UNKNOWN is due for
	// an inquiry at once, a final status never.
	TransitionRefund(ctx context.Context, id string, from, to RefundStatus, reason string) (Refund, error)
	// GetRefund returns refund id with its history, or ErrNotFound.
	GetRefund(ctx context.Context, id string) (Refund, error)
	// RefundByKey returns the refund of an idempotency key, or
	// ErrNotFound.
	RefundByKey(ctx context.Context, key string) (Refund, error)
	// ListRefunds returns the refunds of payment paymentID, oldest first,
	// with their histories.
	ListRefunds(ctx context.Context, paymentID string) ([]Refund, error)
	// ClaimDueRefunds claims up to limit PENDING or UNKNOWN refunds due
	// at now as ClaimDue claims payments.
	ClaimDueRefunds(ctx context.Context, now, until time.Time, limit int) ([]Refund, error)
	// DeferRefundInquiry records an inconclusive inquiry of refund id,
	// if still in status, as DeferInquiry does for a payment.
	DeferRefundInquiry(ctx context.Context, id string, status RefundStatus, next time.Time) (Refund, error)
}

// RefundConflict is CreateRefund's error when the idempotency key is
// already taken: Refund is the refund that took it.
type RefundConflict struct {
	Refund Refund
}

func (e *RefundConflict) Error() string {
	return fmt.Sprintf("pay: idempotency key %q already used by refund %s (%s)", e.Refund.IdempotencyKey, e.Refund.ID, e.Refund.Status)
}

// PrepareRefund checks and completes a refund for RefundStore.CreateRefund;
// storage adapters call it so that they all store the same thing. It
// requires canonical UUIDs, a scoped idempotency key and a request hash;
// it sets Status PENDING, ExternalKey to ID (unless set), CreatedAt
// (unless set) and UpdatedAt, NextInquiryAt (unless set:
// DefaultPendingTakeover later), Inquiries 0 and the first history entry.
// Amount and Currency are left for the store, which reads the payment.
func PrepareRefund(r Refund, now time.Time) (Refund, error) {
	for _, id := range []struct{ field, v string }{{"id", r.ID}, {"payment_id", r.PaymentID}, {"merchant_id", r.MerchantID}} {
		if u, err := ParseUUID(id.v); err != nil || u.String() != id.v {
			return r, Invalid(id.field, "must be a lower-case hyphenated UUID")
		}
	}
	if err := (RefundBody{Amount: r.Amount, Reason: r.Reason}).Validate(); err != nil {
		return r, err
	}
	if err := ValidateText("Idempotency-Key", r.IdempotencyKey, maxScopedKeyLen); err != nil {
		return r, err
	}
	if r.RequestHash == "" {
		return r, Invalid("request_hash", "is required")
	}
	r.Status = RefundPending
	if r.ExternalKey == "" {
		r.ExternalKey = r.ID
	}
	if r.CreatedAt.IsZero() {
		r.CreatedAt = now
	}
	r.CreatedAt = StoreTime(r.CreatedAt)
	r.UpdatedAt = r.CreatedAt
	if r.NextInquiryAt.IsZero() {
		r.NextInquiryAt = r.CreatedAt.Add(DefaultPendingTakeover)
	}
	r.NextInquiryAt = StoreTime(r.NextInquiryAt)
	r.Inquiries = 0
	r.History = []RefundChange{{From: "", To: RefundPending, Reason: ReasonCreated, At: r.CreatedAt}}
	return r, nil
}

// CheckRefundTransition validates the arguments of
// RefundStore.TransitionRefund; adapters call it.
func CheckRefundTransition(from, to RefundStatus) error {
	if !CanTransitionRefund(from, to) {
		return Invalid("status", "a refund cannot move from %q to %q", from, to)
	}
	return nil
}

// NewRefundEvent builds the outbox row reporting a change of refund r
// (already applied) of payment p: typ is EventRefundCreated or
// EventRefundChanged, seq the payment's event sequence number, from the
// refund's previous status. A refund made under one of the payment's
// cancellation keys (CancelRefundKey: the carrying out of a cancellation,
// the merchant's or a closure's) is marked as such (Cancellation).
func NewRefundEvent(typ string, p Payment, r Refund, seq int64, from RefundStatus, reason string, at time.Time) OutboxEvent {
	e := NewEvent(typ, p, seq, "", reason, at)
	var ev Event
	_ = json.Unmarshal(e.Payload, &ev)
	ev.Reason = ""
	ev.Refund = &protocol.RefundEvent{ID: r.ID, Amount: r.Amount, From: string(from), Status: string(r.Status), Reason: reason,
		Cancellation: IsCancelRefund(r)}
	payload, err := json.Marshal(ev)
	if err != nil { // cannot happen: every field marshals
		panic(fmt.Sprintf("pay: marshal refund event: %v", err))
	}
	e.Payload = payload
	return e
}

// Refund event types.
const (
	EventRefundCreated = protocol.EventRefundCreated
	EventRefundChanged = protocol.EventRefundChanged
)

// Refunded sums the amounts of the refunds that hold money (every one
// but FAILED) and of those SUCCEEDED.
func Refunded(rs []Refund) (held, succeeded int64) {
	for _, r := range rs {
		if r.Status.Holds() {
			held += r.Amount
		}
		if r.Status == RefundSucceeded {
			succeeded += r.Amount
		}
	}
	return held, succeeded
}
