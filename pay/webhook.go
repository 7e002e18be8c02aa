package pay

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/stampede-lab/stampede/protocol"
)

// DeliveryStatus is the state of a webhook delivery.
type DeliveryStatus string

// The webhook delivery states.
const (
	DeliveryPending   DeliveryStatus = "pending"   // not yet delivered; retried until it is, or given up
	DeliveryDelivered DeliveryStatus = "delivered" // the receiver answered 2xx
	DeliveryFailed    DeliveryStatus = "failed"    // given up after the retry period; may be re-sent
)

// Delivery is one webhook event for one merchant: written in the same
// transaction as the outbox row it reports (when the payment's merchant
// has a webhook), and delivered, at least once, by the webhook deliverer
// (package pay/webhook).
type Delivery struct {
	ID         string // the event id: a UUID, unique per event, the same on every attempt
	PaymentID  string
	Seq        int64 // the outbox row's per-payment sequence number
	MerchantID string
	Type       string // one of the Event* types
	Body       []byte // the JSON sent: see WebhookBody
	Status     DeliveryStatus
	Attempts   int    // attempts since Since
	LastError  string // the code of the last failed attempt, such as http_500 or timeout
	NextAt     time.Time
	Since      time.Time // when the current retry period began: creation or the last resend
	CreatedAt  time.Time
	UpdatedAt  time.Time

	// URL and Secret are the merchant's webhook, filled by DueDeliveries.
	URL    string
	Secret string
}

// WebhookBody is the JSON body of a webhook event.
type WebhookBody struct {
	ID        string          `json:"id"`         // the event id; receivers de-duplicate by it
	Type      string          `json:"type"`       // one of the Event* types
	CreatedAt time.Time       `json:"created_at"` // when the change happened
	Data      json.RawMessage `json:"data"`       // the Event
}

// NewDelivery builds the webhook delivery of outbox row e for merchant,
// with a new event id; the store fills the merchant's webhook at delivery
// time.
func NewDelivery(e OutboxEvent, merchantID string) Delivery {
	id := NewID()
	body, err := json.Marshal(WebhookBody{ID: id, Type: e.Type, CreatedAt: e.CreatedAt, Data: json.RawMessage(e.Payload)})
	if err != nil { // cannot happen: the payload is JSON written by NewEvent
		panic(fmt.Sprintf("pay: marshal webhook body: %v", err))
	}
	return Delivery{ID: id, PaymentID: e.PaymentID, Seq: e.Seq, MerchantID: merchantID, Type: e.Type, Body: body,
		Status: DeliveryPending, NextAt: e.CreatedAt, Since: e.CreatedAt, CreatedAt: e.CreatedAt, UpdatedAt: e.CreatedAt}
}

// Attempt is the outcome of one delivery attempt, for
// WebhookStore.RecordAttempt.
type Attempt struct {
	Status    DeliveryStatus // DeliveryDelivered, DeliveryPending (retry at NextAt) or DeliveryFailed (given up)
	LastError string         // the failure's code; "" when delivered
	NextAt    time.Time      // the next attempt, when Status is DeliveryPending
	At        time.Time      // when the attempt ended
}

// WebhookStore persists webhook deliveries. The SQL store implements it
// beside Store and MerchantStore.
type WebhookStore interface {
	// DueDeliveries returns up to limit pending deliveries due at now
	// (NextAt <= now) whose merchant has a webhook, with URL and Secret
	// filled, oldest due first. It returns at most one delivery per
	// payment, its pending one with the lowest Seq: a payment's event n+1
	// is never due while its event n is pending.
	DueDeliveries(ctx context.Context, now time.Time, limit int) ([]Delivery, error)
	// ClaimDelivery takes delivery id for an attempt if it is still
	// pending and due at now, by moving its NextAt to until (a lease: if
	// the claimer dies, the delivery is due again then). It reports
	// whether this call took it, so that two deliverers sharing a database
	// do not both send it.
	ClaimDelivery(ctx context.Context, id string, now, until time.Time) (bool, error)
	// RecordAttempt records an attempt's outcome: Attempts+1, the status,
	// the error code and the next attempt. ErrNotFound if there is no
	// such delivery.
	RecordAttempt(ctx context.Context, id string, a Attempt) error
	// Deliveries returns up to limit deliveries, newest first (by
	// CreatedAt, then Seq descending), of payment paymentID ("" for
	// every payment), without URL and Secret.
	Deliveries(ctx context.Context, paymentID string, limit int) ([]Delivery, error)
	// Delivery returns delivery id (without URL and Secret), or
	// ErrNotFound.
	Delivery(ctx context.Context, id string) (Delivery, error)
	// ResendDelivery makes delivery id pending again, due at now, with a
	// new retry period from now and no attempts; its event id and body
	// are unchanged. ErrNotFound if there is no such delivery.
	ResendDelivery(ctx context.Context, id string, now time.Time) error
}

// SignatureHeader is the header that carries a webhook's signature
// (protocol.HeaderSignature).
const SignatureHeader = protocol.HeaderSignature

// EventIDHeader is the header that carries a webhook's event id (also
// the body's "id"; protocol.HeaderEventID).
const EventIDHeader = protocol.HeaderEventID

// SignWebhook returns the Stampede-Signature value of body sent at t,
// in Stripe's scheme: "t=<unix seconds>,v1=<hex HMAC-SHA256 of
// "<unix seconds>.<body>" under secret>". It is protocol.Sign, which the
// fulfilment outlet signs with too.
func SignWebhook(secret string, t time.Time, body []byte) string {
	return protocol.Sign(secret, t, body)
}

// Errors of VerifyWebhook: protocol's, so errors.Is matches either name.
var (
	ErrBadSignature = protocol.ErrBadSignature
	ErrStaleWebhook = protocol.ErrStaleSignature
	ErrNoTolerance  = protocol.ErrNoTolerance
)

// DefaultWebhookTolerance is the tolerance a receiver should pass to
// VerifyWebhook: five minutes, as Stripe's libraries use.
const DefaultWebhookTolerance = protocol.DefaultSignatureTolerance

// VerifyWebhook checks a Stampede-Signature header value against body
// and secret, as a receiver should: one of its v1 signatures must match
// (compared in constant time), and its timestamp must be within
// tolerance of now (replay protection). tolerance must be positive
// (DefaultWebhookTolerance); 0 or less is refused with ErrNoTolerance,
// since no tolerance would accept a replay for ever. It is
// protocol.VerifySignature.
func VerifyWebhook(secret, header string, body []byte, now time.Time, tolerance time.Duration) error {
	return protocol.VerifySignature(secret, header, body, now, tolerance)
}
