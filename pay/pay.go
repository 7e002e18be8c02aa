// Package pay is the payment domain: a Payment and its statuses, the
// append-only status history, idempotency records, the transactional
// outbox of payment events, the Store interface every storage adapter
// implements (pay/sqlite, pay/postgres; conformance suite in pay/paytest),
// the Service (idempotent creation, the approval call detached from the
// client, UNKNOWN settled by status inquiry, recovery, the reconciler),
// the outbox Relay, parity with the institution, and the error codes with
// the mapping of the Store's sentinel errors to them. It has no
// transport: its HTTP API is pay/api, its composition root pay/server.
//
// A payment is created PENDING (persisted before the institution is
// called) and moves to APPROVED, DECLINED, UNKNOWN (timeout or lost
// response: the money may have moved) or FAILED (known not processed).
// UNKNOWN is settled later by a status inquiry; APPROVED, DECLINED and
// FAILED are final.
package pay

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/stampede-lab/stampede/protocol"
)

// Status is a payment's status: the protocol's, which every service
// reads the same way.
type Status = protocol.PaymentStatus

// The payment statuses.
const (
	StatusPending  = protocol.StatusPending  // persisted, call to the institution in flight
	StatusApproved = protocol.StatusApproved // the institution approved it
	StatusDeclined = protocol.StatusDeclined // the institution declined it
	StatusUnknown  = protocol.StatusUnknown  // timeout or lost response: the money may have moved
	StatusFailed   = protocol.StatusFailed   // known not processed
)

// Statuses returns every status, in lifecycle order.
func Statuses() []Status { return protocol.PaymentStatuses() }

// The statuses of manual capture.
const (
	StatusAuthorized = protocol.StatusAuthorized // authorised, awaiting a capture or a void
	StatusVoided     = protocol.StatusVoided     // the authorisation was cancelled
)

// CanTransition reports whether a payment may move from one status to
// another: PENDING and UNKNOWN may move to any other status except back
// to PENDING and to VOIDED; AUTHORIZED only to APPROVED (captured) or
// VOIDED; a terminal status never moves. Nothing moves back to PENDING:
// the SQL store reads an idempotency record as in flight exactly while
// its payment is PENDING.
func CanTransition(from, to Status) bool {
	if !from.Valid() || !to.Valid() || from.Terminal() || from == to || to == StatusPending {
		return false
	}
	if from == StatusAuthorized {
		return to == StatusApproved || to == StatusVoided
	}
	return to != StatusVoided
}

// Payment is one payment request of a merchant.
type Payment struct {
	ID             string // a UUID (NewID: v7), canonical lower-case form
	MerchantID     string // UUID, canonical lower-case form
	OrderID        string // the merchant's order reference
	Amount         int64  // in minor units of Currency
	Currency       string // ISO 4217 code, one of Currencies()
	Status         Status
	ExternalKey    string // the key sent to the institution; equals ID
	IdempotencyKey string // the key of the idempotency record that created it (a ScopedKey)
	ManualReview   bool   // flagged for a person to look at
	ReviewReason   string // why, when ManualReview
	CreatedAt      time.Time
	UpdatedAt      time.Time
	// NextInquiryAt is when the payment is next due for a status
	// inquiry: for PENDING, when its approval call must have ended (after
	// it, a reconciler takes the payment over); for UNKNOWN, when it may
	// next be asked about (a reconciler's claim moves it forward as a
	// lease). Zero once the payment is final.
	NextInquiryAt time.Time
	// Inquiries counts the inconclusive status inquiries made so far.
	Inquiries int
	// CaptureMode is automatic (the approval takes the money) or manual
	// (the approval is an authorisation, AUTHORIZED until captured or
	// voided); "" reads as automatic.
	CaptureMode CaptureMode
	// Captured is the amount a manual-capture payment's capture took
	// (0 until then); the refundable amount of such a payment.
	Captured int64
	History  []StatusChange // oldest first; empty in list results
}

// Manual reports whether p's approval is an authorisation.
func (p Payment) Manual() bool { return p.CaptureMode == CaptureManual }

// Refundable is the amount refunds of p may add up to: the captured
// amount of a manual-capture payment, else its amount.
func (p Payment) Refundable() int64 {
	if p.Manual() {
		return p.Captured
	}
	return p.Amount
}

// StatusChange is one entry of a payment's append-only status history.
// The first entry of every payment has From "" and To PENDING.
type StatusChange struct {
	From   Status
	To     Status
	Reason string
	At     time.Time
}

// ReasonCreated is the reason of a payment's first history entry.
const ReasonCreated = "created"

// IdempotencyState is the state of an IdempotencyRecord.
type IdempotencyState string

// The idempotency record states.
const (
	IdempotencyInFlight  IdempotencyState = "in_flight" // the request is being processed
	IdempotencyCompleted IdempotencyState = "completed" // the outcome is written: a repeat is answered from the payment
)

// IdempotencyRecord remembers one Idempotency-Key: the request it came
// with, the payment it created and whether that payment's approval has
// been written; a repeated request is answered from the payment.
type IdempotencyRecord struct {
	Key         string // the stored key: ScopedKey(merchant, Idempotency-Key) for the API
	RequestHash string // hash of the request body; a different hash under the same key is a mismatch
	PaymentID   string
	State       IdempotencyState
	CreatedAt   time.Time
	ExpiresAt   time.Time
}

// Expired reports whether the record has expired at now. An expired
// record may be deleted (Store.DeleteExpiredIdempotency) or replaced by a
// new request with the same key.
func (r IdempotencyRecord) Expired(now time.Time) bool { return !now.Before(r.ExpiresAt) }

// DefaultIdempotencyTTL is how long an idempotency record lives when the
// caller does not set ExpiresAt.
const DefaultIdempotencyTTL = 24 * time.Hour

// DefaultPendingTakeover is how long after its creation a PENDING payment
// whose creator did not set NextInquiryAt may be taken over by a
// reconciler (PrepareCreate).
const DefaultPendingTakeover = time.Minute

// MaxIdempotencyKeyLen is the longest Idempotency-Key accepted.
const MaxIdempotencyKeyLen = 255

// OutboxEvent is one row of the transactional outbox: written in the same
// transaction as the payment change it reports, published later.
type OutboxEvent struct {
	ID          int64  // global, increasing in insertion order
	PaymentID   string // the payment it concerns
	Seq         int64  // per payment, from 1, without gaps
	Type        string // EventCreated, EventStatusChanged, EventReviewFlagged
	Payload     []byte // JSON of an Event
	CreatedAt   time.Time
	PublishedAt *time.Time // nil until published
}

// Outbox event types.
const (
	EventCreated       = protocol.EventCreated       // the payment was created PENDING
	EventStatusChanged = protocol.EventStatusChanged // the payment changed status
	EventReviewFlagged = protocol.EventReviewFlagged // the payment was flagged for manual review
)

// Event is the JSON payload of an outbox row: the protocol's payment
// event, the payment as it stands after the change, and the change.
type Event = protocol.PaymentEvent

// NewEvent builds the outbox row reporting a change of p (already applied
// to p): typ is one of the Event* types, seq the payment's event sequence
// number, from the previous status (for EventStatusChanged), reason why.
// Storage adapters call it so that every adapter writes the same payload.
func NewEvent(typ string, p Payment, seq int64, from Status, reason string, at time.Time) OutboxEvent {
	e := Event{
		Type: typ, PaymentID: p.ID, Seq: seq,
		MerchantID: p.MerchantID, OrderID: p.OrderID, Amount: p.Amount, Currency: p.Currency,
		From: from, Status: p.Status, Reason: reason, ManualReview: p.ManualReview, At: at,
	}
	payload, err := json.Marshal(e)
	if err != nil { // cannot happen: every field marshals
		panic(fmt.Sprintf("pay: marshal event: %v", err))
	}
	return OutboxEvent{PaymentID: p.ID, Seq: seq, Type: typ, Payload: payload, CreatedAt: at}
}

// Limits of a create request.
const (
	MaxOrderIDLen = 64
	MaxAmount     = 1_000_000_000_000 // in minor units
)

// Currencies returns the currencies accepted.
func Currencies() []string { return []string{"KRW", "USD", "EUR", "JPY", "GBP"} }

// NewID returns a new payment ID: a UUID v7 (RFC 9562), whose first 48
// bits are the time in milliseconds and whose other 74 bits are random.
func NewID() string { return uuid.Must(uuid.NewV7()).String() }

// ValidateCreate checks the fields of a create request. The error is an
// *Error with CodeInvalid whose Field is the JSON field at fault
// ("merchant_id", "order_id", "amount" or "currency").
func ValidateCreate(merchantID, orderID string, amount int64, currency string) error {
	if _, err := ParseUUID(merchantID); err != nil {
		return Invalid("merchant_id", "must be a UUID")
	}
	if err := ValidateText("order_id", orderID, MaxOrderIDLen); err != nil {
		return err
	}
	switch {
	case amount <= 0:
		return Invalid("amount", "must be positive")
	case amount > MaxAmount:
		return Invalid("amount", "must be at most %d", int64(MaxAmount))
	}
	if !slices.Contains(Currencies(), currency) {
		return Invalid("currency", "must be one of %v", Currencies())
	}
	return nil
}

// ValidateIdempotencyKey checks an Idempotency-Key header value:
// printable UTF-8 (see ValidateText), 1 to MaxIdempotencyKeyLen bytes.
func ValidateIdempotencyKey(key string) error {
	return ValidateText("Idempotency-Key", key, MaxIdempotencyKeyLen)
}

// ParseUUID accepts the hyphenated 36-character form only, in either case.
func ParseUUID(s string) (uuid.UUID, error) {
	if len(s) != 36 {
		return uuid.UUID{}, fmt.Errorf("not a hyphenated UUID: %q", s)
	}
	return uuid.Parse(s)
}

// PrepareCreate checks and completes a payment and its idempotency record
// for Store.CreatePending; storage adapters call it so that they all store
// the same thing. It requires a canonical (lower-case, hyphenated) UUID ID
// and valid create fields; it lower-cases MerchantID, sets Status PENDING,
// ExternalKey to ID (unless set), CreatedAt (unless set), NextInquiryAt
// (unless set: DefaultPendingTakeover after CreatedAt), Inquiries to 0 and UpdatedAt to
// now, History to the single created entry, the idempotency record's
// PaymentID and in-flight state, its CreatedAt (unless set) and ExpiresAt
// (unless set: DefaultIdempotencyTTL later). Times are UTC, truncated to
// the microsecond every adapter can store.
func PrepareCreate(p Payment, idem IdempotencyRecord, now time.Time) (Payment, IdempotencyRecord, error) {
	if id, err := ParseUUID(p.ID); err != nil || id.String() != p.ID {
		return p, idem, Invalid("id", "must be a lower-case hyphenated UUID")
	}
	if err := ValidateCreate(p.MerchantID, p.OrderID, p.Amount, p.Currency); err != nil {
		return p, idem, err
	}
	if p.CaptureMode == "" {
		p.CaptureMode = CaptureAutomatic
	}
	if !p.CaptureMode.Valid() {
		return p, idem, Invalid("capture", "must be one of %v, got %q", CaptureModes(), p.CaptureMode)
	}
	p.Captured = 0
	if p.Status != "" && p.Status != StatusPending {
		return p, idem, Invalid("status", "a new payment is PENDING, not %s", p.Status)
	}
	// The stored key is normally a ScopedKey, longer than a client's.
	if err := ValidateText("Idempotency-Key", idem.Key, maxScopedKeyLen); err != nil {
		return p, idem, err
	}
	if p.IdempotencyKey != "" && p.IdempotencyKey != idem.Key {
		return p, idem, Invalid("Idempotency-Key", "the payment's key %q differs from the record's %q", p.IdempotencyKey, idem.Key)
	}
	if idem.PaymentID != "" && idem.PaymentID != p.ID {
		return p, idem, Invalid("payment_id", "the idempotency record names payment %s, not %s", idem.PaymentID, p.ID)
	}
	mid, _ := ParseUUID(p.MerchantID)
	p.MerchantID = mid.String()
	p.Status = StatusPending
	p.IdempotencyKey = idem.Key
	if p.ExternalKey == "" {
		p.ExternalKey = p.ID
	}
	if p.CreatedAt.IsZero() {
		p.CreatedAt = now
	}
	p.CreatedAt = StoreTime(p.CreatedAt)
	p.UpdatedAt = p.CreatedAt
	if p.NextInquiryAt.IsZero() {
		p.NextInquiryAt = p.CreatedAt.Add(DefaultPendingTakeover)
	}
	p.NextInquiryAt = StoreTime(p.NextInquiryAt)
	p.Inquiries = 0
	p.History = []StatusChange{{From: "", To: StatusPending, Reason: ReasonCreated, At: p.CreatedAt}}

	idem.PaymentID = p.ID
	idem.State = IdempotencyInFlight
	if idem.CreatedAt.IsZero() {
		idem.CreatedAt = now
	}
	idem.CreatedAt = StoreTime(idem.CreatedAt)
	if idem.ExpiresAt.IsZero() {
		idem.ExpiresAt = idem.CreatedAt.Add(DefaultIdempotencyTTL)
	}
	idem.ExpiresAt = StoreTime(idem.ExpiresAt)
	if !idem.ExpiresAt.After(idem.CreatedAt) {
		return p, idem, Invalid("expires_at", "the idempotency record must expire after it is created")
	}
	return p, idem, nil
}

// StoreTime is t as every adapter stores it: UTC, truncated to the
// microsecond, without a monotonic reading.
func StoreTime(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }
