package fulfilment

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/pay"
)

// Event is one payment event: the payment as it stands after a change.
type Event struct {
	// ID identifies the event in the inbox: EventID(PaymentID, Seq), the
	// JetStream message id the relay publishes it under.
	ID        string
	PaymentID string
	Seq       int64      // per payment, from 1
	Type      string     // pay.EventCreated, pay.EventStatusChanged, ...; may be empty
	Status    pay.Status // the payment's status after the change
	// MerchantID and OrderID name the order; required when Status is
	// terminal (APPROVED, DECLINED, FAILED).
	MerchantID string
	OrderID    string
	Amount     int64  // in minor units; 0 when absent
	Currency   string // "" when absent
	At         time.Time
	// Partition and Epoch fence the event when Epoch is positive: the
	// stream partition it came from and its consumer's ownership epoch
	// (dispatch/natskeyed Event.Partition and Event.Epoch). They are not
	// in the message body; the worker sets them.
	Partition int
	Epoch     uint64
}

// EventID returns the inbox id of a payment's seq-th event:
// "<payment id>-<seq>", as pay/natspub names the message.
func EventID(paymentID string, seq int64) string {
	return paymentID + "-" + strconv.FormatInt(seq, 10)
}

// Limits of an event.
const (
	MaxEventBytes = 64 << 10 // the largest body DecodeEvent reads
	MaxIDLen      = 255      // payment, merchant and order ids, in bytes; an event id may add "-<seq>"
	MaxCurrency   = 8
)

// wireEvent is the JSON body pay/natspub publishes (pay.Event). Every
// field is optional here; Validate says what an event needs. Unknown fields
// are ignored, so the relay may add fields.
type wireEvent struct {
	Type       string    `json:"type"`
	PaymentID  string    `json:"payment_id"`
	Seq        int64     `json:"seq"`
	MerchantID string    `json:"merchant_id"`
	OrderID    string    `json:"order_id"`
	Amount     int64     `json:"amount"`
	Currency   string    `json:"currency"`
	Status     string    `json:"status"`
	At         time.Time `json:"at"`
}

// DecodeEvent reads the body of a payment event as pay/natspub publishes
// it (a JSON pay.Event) and validates it (see Event.Validate). Its ID is
// EventID(payment_id, seq). Errors have CodeInvalid and name the field at
// fault: such a body will never be processed and should be set aside.
func DecodeEvent(body []byte) (Event, error) {
	if len(body) > MaxEventBytes {
		return Event{}, stampede.InvalidField("body", "must be at most %d bytes, got %d", MaxEventBytes, len(body))
	}
	var w wireEvent
	if err := json.Unmarshal(body, &w); err != nil {
		e := stampede.InvalidField("body", "is not a payment event: %v", err)
		if te, ok := err.(*json.UnmarshalTypeError); ok && te.Field != "" {
			e = stampede.InvalidField(te.Field, "has the wrong type: want %s", te.Type)
		}
		e.Err = err
		return Event{}, e
	}
	ev := Event{
		ID: EventID(w.PaymentID, w.Seq), PaymentID: w.PaymentID, Seq: w.Seq, Type: w.Type,
		Status: pay.Status(w.Status), MerchantID: w.MerchantID, OrderID: w.OrderID,
		Amount: w.Amount, Currency: w.Currency, At: w.At.UTC(),
	}
	if err := ev.Validate(); err != nil {
		return Event{}, err
	}
	return ev, nil
}

// Validate checks what processing needs: an ID, a payment id and a
// positive seq, a known status, and, for a terminal status, the merchant
// and order ids. The error has CodeInvalid and names the JSON field.
func (e Event) Validate() error {
	if err := checkID("payment_id", e.PaymentID, true); err != nil {
		return err
	}
	if err := checkID("id", e.ID, true); err != nil {
		return err
	}
	if e.Seq < 1 {
		return stampede.InvalidField("seq", "must be at least 1, got %d", e.Seq)
	}
	if !e.Status.Valid() {
		return stampede.InvalidField("status", "must be one of %v, got %q", pay.Statuses(), e.Status)
	}
	terminal := e.Status.Terminal()
	if err := checkID("merchant_id", e.MerchantID, terminal); err != nil {
		return err
	}
	if err := checkID("order_id", e.OrderID, terminal); err != nil {
		return err
	}
	if e.Amount < 0 {
		return stampede.InvalidField("amount", "must not be negative, got %d", e.Amount)
	}
	if len(e.Currency) > MaxCurrency || checkID("currency", e.Currency, false) != nil {
		return stampede.InvalidField("currency", "must be a currency code, got %q", e.Currency)
	}
	if y := e.At.UTC().Year(); !e.At.IsZero() && (y < 1 || y > 9999) {
		return stampede.InvalidField("at", "must be a time between the years 1 and 9999")
	}
	if err := checkID("type", e.Type, false); err != nil {
		return err
	}
	return nil
}

// checkID checks an identifier: valid UTF-8 without control characters,
// at most MaxIDLen bytes (an event id may add its "-<seq>"), and present
// when required.
func checkID(field, v string, required bool) error {
	limit := MaxIDLen
	if field == "id" {
		limit += len("-9223372036854775807")
	}
	switch {
	case v == "" && required:
		return stampede.InvalidField(field, "is required")
	case len(v) > limit:
		return stampede.InvalidField(field, "must be at most %d bytes", limit)
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
