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

// CaptureMode says whether a payment's approval takes the money at once
// (automatic) or only authorises it, to be captured or voided later
// (manual).
type CaptureMode string

// The capture modes.
const (
	CaptureAutomatic CaptureMode = "automatic"
	CaptureManual    CaptureMode = "manual"
)

// CaptureModes returns the capture modes.
func CaptureModes() []CaptureMode { return []CaptureMode{CaptureAutomatic, CaptureManual} }

// Valid reports whether m is a capture mode.
func (m CaptureMode) Valid() bool { return slices.Contains(CaptureModes(), m) }

// OperationKind is what an operation of an authorisation does.
type OperationKind string

// The operation kinds.
const (
	OpCapture OperationKind = "capture" // take (part of) the authorised amount
	OpVoid    OperationKind = "void"    // cancel the authorisation: nothing is taken
)

// Valid reports whether k is an operation kind.
func (k OperationKind) Valid() bool { return k == OpCapture || k == OpVoid }

// Operation is a capture or a void of an AUTHORIZED payment. It lives as
// a refund does: recorded PENDING before the institution is asked, then
// SUCCEEDED or FAILED, or UNKNOWN (the answer was lost) until an inquiry
// settles it; it is never sent twice. Every operation but a FAILED one
// holds its payment: no other capture or void of it may start, so a
// capture and a void of one authorisation never both happen. A succeeded
// capture makes the payment APPROVED with Captured set; a succeeded void
// makes it VOIDED, in the same transaction.
type Operation struct {
	ID         string // a UUID (NewID: v7); also the key sent to the institution
	PaymentID  string
	MerchantID string
	Kind       OperationKind
	// Amount is what a capture takes (0 asks for the whole
	// authorisation: the store fills it in); 0 for a void.
	Amount   int64
	Currency string
	Status   RefundStatus // PENDING, SUCCEEDED, FAILED, UNKNOWN
	// Reason is the public reason of the last change.
	Reason      string
	ExternalKey string // the key sent to the institution; equals ID
	// PaymentKey is the payment's external key at the institution, set
	// from the payment (not stored with the operation).
	PaymentKey     string
	IdempotencyKey string // ScopedKey(merchant, Idempotency-Key)
	RequestHash    string
	CreatedAt      time.Time
	UpdatedAt      time.Time
	NextInquiryAt  time.Time
	Inquiries      int
}

// CaptureBody is a merchant's capture request (the body of POST
// /v1/payments/{id}/capture).
type CaptureBody struct {
	// Amount is what to capture, at most the authorised amount; 0 (or
	// left out) captures all of it.
	Amount int64 `json:"amount"`
}

// Validate checks a capture request, naming the field at fault.
func (b CaptureBody) Validate() error {
	switch {
	case b.Amount < 0:
		return Invalid("amount", "must be positive (or left out to capture the whole authorisation)")
	case b.Amount > MaxAmount:
		return Invalid("amount", "must be at most %d", int64(MaxAmount))
	}
	return nil
}

// OperationHash identifies an operation request for idempotency: its
// kind, the payment and the amount as asked.
func OperationHash(kind OperationKind, paymentID string, amount int64) string {
	raw, _ := json.Marshal(struct {
		Kind      OperationKind `json:"kind"`
		PaymentID string        `json:"payment_id"`
		Amount    int64         `json:"amount"`
	}{kind, paymentID, amount})
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:])
}

// OperationStore is a Store that keeps captures and voids, under the
// rules of refunds: each change with an outbox row of the payment's in
// one transaction. The SQL store implements it.
type OperationStore interface {
	// CreateOperation records op PENDING with an outbox row
	// (capture.created or void.created), atomically, after completing it
	// with PrepareOperation. Under the payment's lock it checks that the
	// payment exists and is the merchant's (ErrNotFound), that it is
	// AUTHORIZED (CodeNotAuthorized, naming the status), that no other
	// operation holds it (CodeOperationExists: every one but FAILED
	// holds it), and for a capture that the amount is at most the
	// payment's (CodeCaptureExceeds; 0 takes all). A taken idempotency
	// key is *OperationConflict, with nothing written. The database
	// enforces "one holding operation per payment" with a unique index
	// as well, so concurrent captures and voids of one payment cannot
	// both be recorded.
	CreateOperation(ctx context.Context, op Operation) (Operation, error)
	// TransitionOperation moves operation id from `from` to `to`
	// (compare-and-set: ErrStaleStatus) with an outbox row; a move to
	// SUCCEEDED moves the payment as well, in the same transaction: to
	// APPROVED with Captured = the capture's amount, or to VOIDED, with
	// its history entry and its own status_changed outbox row. UNKNOWN
	// is due for an inquiry at once, a final status never.
	TransitionOperation(ctx context.Context, id string, from, to RefundStatus, reason string) (Operation, error)
	// GetOperation returns operation id, or ErrNotFound.
	GetOperation(ctx context.Context, id string) (Operation, error)
	// OperationByKey returns the operation of an idempotency key, or
	// ErrNotFound.
	OperationByKey(ctx context.Context, key string) (Operation, error)
	// ListOperations returns the operations of a payment, oldest first.
	ListOperations(ctx context.Context, paymentID string) ([]Operation, error)
	// ClaimDueOperations claims up to limit PENDING or UNKNOWN
	// operations due at now, as ClaimDue claims payments.
	ClaimDueOperations(ctx context.Context, now, until time.Time, limit int) ([]Operation, error)
	// DeferOperationInquiry records an inconclusive inquiry of operation
	// id, if still in status.
	DeferOperationInquiry(ctx context.Context, id string, status RefundStatus, next time.Time) (Operation, error)
	// ExpiredAuthorizations returns up to limit AUTHORIZED payments
	// created before `before` that no operation holds, oldest first,
	// without history.
	ExpiredAuthorizations(ctx context.Context, before time.Time, limit int) ([]Payment, error)
}

// OperationConflict is CreateOperation's error when the idempotency key
// is taken: Operation is the operation that took it.
type OperationConflict struct {
	Operation Operation
}

func (e *OperationConflict) Error() string {
	return fmt.Sprintf("pay: idempotency key %q already used by %s %s (%s)", e.Operation.IdempotencyKey, e.Operation.Kind, e.Operation.ID, e.Operation.Status)
}

// PrepareOperation checks and completes an operation for
// OperationStore.CreateOperation, as PrepareRefund does a refund.
func PrepareOperation(op Operation, now time.Time) (Operation, error) {
	for _, id := range []struct{ field, v string }{{"id", op.ID}, {"payment_id", op.PaymentID}, {"merchant_id", op.MerchantID}} {
		if u, err := ParseUUID(id.v); err != nil || u.String() != id.v {
			return op, Invalid(id.field, "must be a lower-case hyphenated UUID")
		}
	}
	if !op.Kind.Valid() {
		return op, Invalid("kind", "must be capture or void, got %q", op.Kind)
	}
	if err := (CaptureBody{Amount: op.Amount}).Validate(); err != nil {
		return op, err
	}
	if op.Kind == OpVoid && op.Amount != 0 {
		return op, Invalid("amount", "a void has no amount")
	}
	if err := ValidateText("Idempotency-Key", op.IdempotencyKey, maxScopedKeyLen); err != nil {
		return op, err
	}
	if op.RequestHash == "" {
		return op, Invalid("request_hash", "is required")
	}
	op.Status = RefundPending
	op.Reason = ReasonCreated
	if op.ExternalKey == "" {
		op.ExternalKey = op.ID
	}
	if op.CreatedAt.IsZero() {
		op.CreatedAt = now
	}
	op.CreatedAt = StoreTime(op.CreatedAt)
	op.UpdatedAt = op.CreatedAt
	if op.NextInquiryAt.IsZero() {
		op.NextInquiryAt = op.CreatedAt.Add(DefaultPendingTakeover)
	}
	op.NextInquiryAt = StoreTime(op.NextInquiryAt)
	op.Inquiries = 0
	return op, nil
}

// Operation event types.
const (
	EventCaptureCreated = protocol.EventCaptureCreated
	EventCaptureChanged = protocol.EventCaptureChanged
	EventVoidCreated    = protocol.EventVoidCreated
	EventVoidChanged    = protocol.EventVoidChanged
)

// OperationEventType is the event type of an operation of kind k being
// created (created true) or changing status.
func OperationEventType(k OperationKind, created bool) string {
	switch {
	case k == OpCapture && created:
		return EventCaptureCreated
	case k == OpCapture:
		return EventCaptureChanged
	case created:
		return EventVoidCreated
	default:
		return EventVoidChanged
	}
}

// NewOperationEvent builds the outbox row reporting a change of operation
// op (already applied) of payment p (as it stands after the change).
func NewOperationEvent(p Payment, op Operation, seq int64, from RefundStatus, reason string, at time.Time) OutboxEvent {
	typ := OperationEventType(op.Kind, from == "")
	e := NewEvent(typ, p, seq, "", reason, at)
	var ev Event
	_ = json.Unmarshal(e.Payload, &ev)
	ev.Reason = ""
	ev.Operation = &protocol.OperationEvent{ID: op.ID, Kind: string(op.Kind), Amount: op.Amount, From: string(from), Status: string(op.Status), Reason: reason}
	payload, err := json.Marshal(ev)
	if err != nil { // cannot happen: every field marshals
		panic(fmt.Sprintf("pay: marshal operation event: %v", err))
	}
	e.Payload = payload
	return e
}

// Capturer is a Connector that can capture and void an authorisation
// (it declares ManualCapture and Void). Each call carries the
// operation's own key, so that an inquiry can find it after a lost
// answer; errors mean what Refund's do: ErrNotSent and ErrRejected
// (nothing happened), ErrOutcomeUnknown (it may have happened: settle by
// InquireOperation, never by sending it again); a nil error carries the
// institution's verdict.
type Capturer interface {
	// Authorize asks for an authorisation only: the approval of a
	// manual-capture payment. Its errors are Approve's.
	Authorize(ctx context.Context, req ApprovalRequest) (Verdict, error)
	// Capture takes req.Amount of the authorisation req.PaymentKey.
	Capture(ctx context.Context, req OperationRequest) (RefundVerdict, error)
	// Void cancels the authorisation req.PaymentKey.
	Void(ctx context.Context, req OperationRequest) (RefundVerdict, error)
	// InquireOperation asks what became of an operation's external key;
	// ErrInquiryUnavailable when the status API is down.
	InquireOperation(ctx context.Context, kind OperationKind, externalKey, paymentKey string) (RefundInquiry, error)
}

// OperationRequest is a capture or void sent to the institution.
type OperationRequest struct {
	ExternalKey string // the operation's own key
	PaymentKey  string // the authorisation's external key
	Amount      int64  // a capture's amount; 0 for a void
	Currency    string
}
