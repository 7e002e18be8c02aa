package protocol

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/stampede-lab/stampede"
)

// PaymentStatus is a payment's status.
type PaymentStatus string

// The payment statuses.
const (
	StatusPending  PaymentStatus = "PENDING"  // persisted, call to the institution in flight
	StatusApproved PaymentStatus = "APPROVED" // the institution approved it
	StatusDeclined PaymentStatus = "DECLINED" // the institution declined it
	StatusUnknown  PaymentStatus = "UNKNOWN"  // timeout or lost response: the money may have moved
	StatusFailed   PaymentStatus = "FAILED"   // known not processed
	// StatusAuthorized: the institution authorised a payment made with
	// manual capture; the money is held, not taken, until a capture
	// (then APPROVED) or a void (then VOIDED).
	StatusAuthorized PaymentStatus = "AUTHORIZED"
	// StatusVoided: an authorisation was cancelled; nothing was taken.
	StatusVoided PaymentStatus = "VOIDED"
)

// PaymentStatuses returns every status, in lifecycle order.
func PaymentStatuses() []PaymentStatus {
	return []PaymentStatus{StatusPending, StatusApproved, StatusDeclined, StatusUnknown, StatusFailed, StatusAuthorized, StatusVoided}
}

// Valid reports whether s is one of the statuses.
func (s PaymentStatus) Valid() bool { return slices.Contains(PaymentStatuses(), s) }

// Terminal reports whether s is final: APPROVED, DECLINED, FAILED or
// VOIDED. PENDING and UNKNOWN still await an answer; AUTHORIZED awaits a
// capture or a void.
func (s PaymentStatus) Terminal() bool {
	return s == StatusApproved || s == StatusDeclined || s == StatusFailed || s == StatusVoided
}

// Settled reports whether the institution's answer to the approval is
// known: a terminal status, or AUTHORIZED.
func (s PaymentStatus) Settled() bool { return s.Terminal() || s == StatusAuthorized }

// The types of payment events.
const (
	EventCreated        = "payment.created"        // the payment was created PENDING
	EventStatusChanged  = "payment.status_changed" // the payment changed status
	EventReviewFlagged  = "payment.review_flagged" // the payment was flagged for manual review
	EventRefundCreated  = "refund.created"         // a refund of the payment was recorded PENDING
	EventRefundChanged  = "refund.status_changed"  // a refund of the payment changed status
	EventCaptureCreated = "capture.created"        // a capture of the authorisation was recorded PENDING
	EventCaptureChanged = "capture.status_changed" // a capture changed status
	EventVoidCreated    = "void.created"           // a void of the authorisation was recorded PENDING
	EventVoidChanged    = "void.status_changed"    // a void changed status
)

// OperationEvent is what a capture or void event says about the
// operation; the payment's members of PaymentEvent are the payment's as
// the operation's change left it (a succeeded capture makes it APPROVED,
// a succeeded void VOIDED, in the same event).
type OperationEvent struct {
	ID     string `json:"id"`
	Kind   string `json:"kind"`   // "capture" or "void"
	Amount int64  `json:"amount"` // in minor units of the payment's currency; 0 for a void
	From   string `json:"from,omitempty"`
	Status string `json:"status"`
	Reason string `json:"reason,omitempty"`
}

// RefundEvent is what a refund event (EventRefundCreated,
// EventRefundChanged) says about the refund; the payment's members of
// PaymentEvent are the payment's, whose status a refund does not change.
type RefundEvent struct {
	ID     string `json:"id"`
	Amount int64  `json:"amount"` // in minor units of the payment's currency
	From   string `json:"from,omitempty"`
	Status string `json:"status"`
	Reason string `json:"reason,omitempty"`
	// Cancellation is true when the refund carries out a cancellation of
	// the payment (the merchant's POST /v1/payments/{id}/cancel, or pay's
	// closure of an approval no confirmed order holds): the payment's
	// order does not go on, and what was given for it (a ticket) is taken
	// back. A plain refund (POST /v1/payments/{id}/refunds) gives money
	// back and leaves the order alone.
	Cancellation bool `json:"cancellation,omitempty"`
}

// PaymentEvent is the body of a payment event, as pay's outbox publishes
// it and every consumer reads it: the payment as it stands after a change,
// and the change. Its message id is EventID(PaymentID, Seq).
type PaymentEvent struct {
	Type         string        `json:"type"`
	PaymentID    string        `json:"payment_id"`
	Seq          int64         `json:"seq"` // per payment, from 1
	MerchantID   string        `json:"merchant_id"`
	OrderID      string        `json:"order_id"`
	Amount       int64         `json:"amount"` // in minor units of Currency
	Currency     string        `json:"currency"`
	From         PaymentStatus `json:"from,omitempty"`
	Status       PaymentStatus `json:"status"`
	Reason       string        `json:"reason,omitempty"`
	ManualReview bool          `json:"manual_review"`
	At           time.Time     `json:"at"`
	// Refund is set on a refund event only: the payment is unchanged,
	// the refund moved.
	Refund *RefundEvent `json:"refund,omitempty"`
	// Operation is set on a capture or void event only.
	Operation *OperationEvent `json:"operation,omitempty"`
}

// EventID returns the id of a payment's seq-th event, "<payment id>-<seq>":
// the message id it is published under, and the inbox id a consumer
// records it by.
func EventID(paymentID string, seq int64) string {
	return paymentID + "-" + strconv.FormatInt(seq, 10)
}

// ID returns the event's id (see EventID).
func (e PaymentEvent) ID() string { return EventID(e.PaymentID, e.Seq) }

// Limits of an event a consumer reads.
const (
	MaxEventBytes = 64 << 10 // the largest body DecodePaymentEvent reads
	MaxIDLen      = 255      // payment, merchant and order ids, in bytes
	MaxCurrency   = 8
)

// DecodePaymentEvent reads the body of a payment event and validates it
// (see PaymentEvent.Validate). Unknown members are ignored, so a publisher
// may add members. Its errors are Invalid and name the member at fault:
// such a body will never be processed and should be set aside.
func DecodePaymentEvent(body []byte) (PaymentEvent, error) {
	if len(body) > MaxEventBytes {
		return PaymentEvent{}, stampede.InvalidField("body", "must be at most %d bytes, got %d", MaxEventBytes, len(body))
	}
	var ev PaymentEvent
	if err := json.Unmarshal(body, &ev); err != nil {
		e := stampede.InvalidField("body", "is not a payment event: %v", err)
		if te, ok := err.(*json.UnmarshalTypeError); ok && te.Field != "" {
			e = stampede.InvalidField(te.Field, "has the wrong type: want %s", te.Type)
		}
		e.Err = err
		return PaymentEvent{}, e
	}
	ev.At = ev.At.UTC()
	if err := ev.Validate(); err != nil {
		return PaymentEvent{}, err
	}
	return ev, nil
}

// Validate checks what processing an event needs: a payment id and a
// positive seq, a known status, and, for a terminal status, the merchant
// and order ids. Every bad member is reported, each by an Invalid error
// naming it, in the order of the event's members: errors.As on the result
// finds the first, which a consumer rejecting the event can log.
func (e PaymentEvent) Validate() error {
	var f stampede.Fields
	f.Check("", checkID("payment_id", e.PaymentID, true))
	if e.Seq < 1 {
		f.Add("seq", "must be at least 1, got %d", e.Seq)
	}
	if !e.Status.Valid() {
		f.Add("status", "must be one of %v, got %q", PaymentStatuses(), e.Status)
	}
	if e.From != "" && !e.From.Valid() {
		f.Add("from", "must be one of %v, got %q", PaymentStatuses(), e.From)
	}
	// An invalid status is not terminal: the two IDs are then checked
	// only for their form.
	terminal := e.Status.Terminal()
	f.Check("", checkID("merchant_id", e.MerchantID, terminal))
	f.Check("", checkID("order_id", e.OrderID, terminal))
	if e.Amount < 0 {
		f.Add("amount", "must not be negative, got %d", e.Amount)
	}
	if len(e.Currency) > MaxCurrency || checkID("currency", e.Currency, false) != nil {
		f.Add("currency", "must be a currency code, got %q", e.Currency)
	}
	if y := e.At.UTC().Year(); !e.At.IsZero() && (y < 1 || y > 9999) {
		f.Add("at", "must be a time between the years 1 and 9999")
	}
	f.Check("", checkID("type", e.Type, false))
	return f.Err()
}

// checkID checks an identifier: valid UTF-8 without control characters,
// at most MaxIDLen bytes, and present when required.
func checkID(field, v string, required bool) error {
	switch {
	case v == "" && required:
		return stampede.InvalidField(field, "is required")
	case len(v) > MaxIDLen:
		return stampede.InvalidField(field, "must be at most %d bytes", MaxIDLen)
	case !utf8.ValidString(v):
		return stampede.InvalidField(field, "must be UTF-8")
	}
	for _, r := range v {
		if r < 0x20 || r == 0x7f {
			return stampede.InvalidField(field, "must not contain control characters, got %s", fmt.Sprintf("%q", v))
		}
	}
	return nil
}
