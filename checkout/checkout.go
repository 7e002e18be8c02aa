// Package checkout is the minimal checkout behind the gate: it holds seat
// inventory per event, puts seats on hold for an admitted buyer, pays for
// a hold through pay and then confirms the sale or releases the seats.
//
// The one rule that matters: no seat is sold twice, and no more seats are
// sold than exist. The Store enforces it, in SQL, in the transaction that
// writes the hold: a conditional update (seats_left = seats_left - n WHERE
// seats_left >= n) on the event row, and a seat row per seat whose holder
// is set only while it has none (checkout/sqlstore). The lab's counter-
// example (lab/unsafeinventory) wraps a Store with a read-then-write hold
// without that guard: it oversells under concurrency, which is what it is
// for.
//
// Life of a purchase:
//
//	POST /v1/events/{event}/holds   hold n seats: state held, expiring with the admission
//	POST /v1/holds/{id}/purchase    held → paying: an order with an idempotency key per order,
//	                                 then POST /v1/payments on pay
//	  APPROVED                      paying → sold; order paid; Stampede-Release: done
//	  DECLINED, FAILED, refused     paying → released, seats back; order failed; Stampede-Release: done
//	  UNKNOWN, no answer            the order stays pending and the seats stay held, whatever
//	                                 the hold's expiry, until the payment settles
//
// An UNKNOWN payment may still become APPROVED, so its seats are never
// given back on a timer: the sweeper (Service.Run) asks pay (GET /v1/payments/{id}, or
// the same POST again under the same idempotency key when no payment id
// came back) every Config.SettleEvery until the payment is final, and a
// buyer's GET /v1/orders/{id} asks too. Holds that were never paid for are
// released by the sweeper once their admission has expired.
//
// Identity: the buyer is the Stampede-User header and the admission the
// Stampede-Admission header, both set by the gate, which removes them from
// what the buyer sends. The checkout does not take the gate's word for
// them: before it holds seats or pays for a hold it verifies the
// admission (Config.Admissions, a protocol.AdmissionVerifier): the token
// signed by a key of the waiting room's JWKS, for the checkout's room,
// its subject the Stampede-User, and, with the online check, still
// holding its slot. The hold expires with the verified token. A request
// that reaches the checkout without the gate, with forged headers, is
// refused (401 or 403 naming the header). Reading a hold or an order
// (GET) takes the Stampede-User header alone, so that a buyer whose slot
// was released at the end of the payment can still read the outcome:
// their ids are random UUIDs, known only to their buyer.
//
// The HTTP API is checkout/api; pay's client is checkout/payclient.
package checkout

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/pay"
)

// Event is a sale of a fixed number of seats, numbered 1 to Seats.
type Event struct {
	ID        string
	Seats     int    // seats that exist
	SeatsLeft int    // seats neither held nor sold
	Sold      int    // seats sold (their hold's payment was approved)
	Price     int64  // per seat, in minor units of Currency
	Currency  string // ISO 4217, one of pay.Currencies()
	CreatedAt time.Time
}

// Held returns the seats on hold: neither free nor sold.
func (e Event) Held() int { return e.Seats - e.SeatsLeft - e.Sold }

// HoldState is where a hold is in its life.
type HoldState string

// The hold states. held → paying → sold | released; held → released
// (expiry); sold and released are final.
const (
	HoldHeld     HoldState = "held"     // seats reserved, not yet paid for
	HoldPaying   HoldState = "paying"   // an order exists; its payment has not settled
	HoldSold     HoldState = "sold"     // paid: the seats are sold
	HoldReleased HoldState = "released" // expired, declined or failed: the seats went back
)

// Hold is seats reserved for one buyer, tied to the buyer's admission.
type Hold struct {
	ID        string // random UUID
	EventID   string
	User      string // the Stampede-User the gate sent
	Seats     []int  // the seat numbers, ascending
	Amount    int64  // Price × len(Seats)
	Currency  string
	State     HoldState
	Reason    string    // why it was released: expired, declined, failed, rejected
	ExpiresAt time.Time // the admission's expiry (or the cap); only a held hold expires
	CreatedAt time.Time
	UpdatedAt time.Time
}

// OrderStatus is where an order's payment is.
type OrderStatus string

// The order statuses.
const (
	OrderPending OrderStatus = "pending" // paying: the payment has not ended (in flight, UNKNOWN)
	OrderPaid    OrderStatus = "paid"    // APPROVED: the seats are sold
	OrderFailed  OrderStatus = "failed"  // DECLINED, FAILED or refused by pay: the seats went back
)

// Ended reports whether the order's payment has ended, one way or the
// other: the moment the gate may release the buyer's slot.
func (s OrderStatus) Ended() bool { return s == OrderPaid || s == OrderFailed }

// Order is the purchase of one hold: one payment attempt.
type Order struct {
	ID             string // random UUID; pay's order_id
	HoldID         string
	EventID        string
	User           string
	Seats          []int
	Amount         int64
	Currency       string
	Status         OrderStatus
	IdempotencyKey string     // sent to pay with every attempt of this order
	PaymentID      string     // "" until pay answered with a payment
	PaymentStatus  pay.Status // the payment's last known status
	Reason         string     // why it failed (declined, failed, a pay error code)
	CreatedAt      time.Time
	UpdatedAt      time.Time
}

// Store keeps events, holds and orders. Every method is one transaction;
// implementations must be safe for concurrent use by many processes on
// one database. checkout/sqlstore implements it over SQLite and
// PostgreSQL.
type Store interface {
	// CreateEvent stores a new event with all its seats free; an
	// existing id is a CodeConflict error.
	CreateEvent(ctx context.Context, e Event) (Event, error)
	// Event returns an event, or ErrNotFound.
	Event(ctx context.Context, id string) (Event, error)
	// Hold reserves n seats for h: in one transaction it takes n from
	// the event's seats_left only if that many are left, gives the lowest free seat numbers to the hold and
	// inserts it. Not enough seats is a *SoldOutError; an unknown event
	// ErrNotFound. It returns h with Seats set.
	Hold(ctx context.Context, h Hold, n int) (Hold, error)
	// GetHold returns a hold, or ErrNotFound.
	GetHold(ctx context.Context, id string) (Hold, error)
	// StartOrder moves hold o.HoldID from held to paying and inserts o,
	// in one transaction, if the hold is still held and unexpired at
	// now. A hold that is not (any longer) is an *StateError with its
	// current state.
	StartOrder(ctx context.Context, o Order, now time.Time) (Order, error)
	// GetOrder returns an order, or ErrNotFound.
	GetOrder(ctx context.Context, id string) (Order, error)
	// OrderOfHold returns the order of a hold, or ErrNotFound.
	OrderOfHold(ctx context.Context, holdID string) (Order, error)
	// RecordPayment records what pay said about a pending order's
	// payment (its id and a non-final status) and returns the order.
	RecordPayment(ctx context.Context, orderID, paymentID string, status pay.Status, now time.Time) (Order, error)
	// Settle ends a pending order in one transaction: paid (its hold
	// sold, the event's sold count up) or failed (its hold released,
	// its seats free again), with the payment's id, status and reason.
	// An order already ended is returned unchanged.
	Settle(ctx context.Context, orderID string, paid bool, paymentID string, status pay.Status, reason string, now time.Time) (Order, error)
	// ReleaseExpired releases up to limit holds still held whose
	// ExpiresAt is at or before now (of event, or of every event when
	// event is ""), and returns how many it released.
	ReleaseExpired(ctx context.Context, event string, now time.Time, limit int) (int, error)
	// PendingOrders returns up to limit pending orders last updated at
	// or before before, oldest first.
	PendingOrders(ctx context.Context, before time.Time, limit int) ([]Order, error)
	// Ping checks that the database answers.
	Ping(ctx context.Context) error
	// Close releases the store.
	Close() error
}

// PaymentRequest is what the checkout asks pay to charge for an order.
type PaymentRequest struct {
	OrderID        string
	IdempotencyKey string
	Amount         int64
	Currency       string
	// Admission is the buyer's admission token, passed on to pay (header
	// Stampede-Admission) so that pay can check it (--require-admission);
	// "" when the checkout has none (a re-sent request of the sweeper).
	Admission string
	// Manual asks for an authorisation (pay's "capture": "manual"): the
	// money is held, and taken only by Payer.Capture.
	Manual bool
}

// Payment is what pay answered: the payment and its status.
type Payment struct {
	ID     string
	Status pay.Status
}

// Payer charges orders: the payment service, through its HTTP API
// (checkout/payclient). Errors:
//   - a *RejectedError: pay refused the request and made no payment (a
//     4xx answer other than 409): the order fails;
//   - anything else (no answer, 5xx, a 409 for a request in flight): the
//     outcome is unknown, the order stays pending and is asked about
//     again.
type Payer interface {
	// Pay creates (or, for a repeated idempotency key, replays) the
	// payment of an order.
	Pay(ctx context.Context, req PaymentRequest) (Payment, error)
	// Payment returns a payment's current status; for an UNKNOWN one pay
	// settles it by a status inquiry first.
	Payment(ctx context.Context, id string) (Payment, error)
	// PaymentOfOrder finds the payment made for an order, if any (found
	// false when pay has none).
	PaymentOfOrder(ctx context.Context, orderID string) (p Payment, found bool, err error)
	// Capture captures an AUTHORIZED payment in full under an
	// idempotency key (a repeat answers the same capture) and returns
	// the capture's status: SUCCEEDED, FAILED (declined: nothing taken),
	// or PENDING or UNKNOWN (asked again later).
	Capture(ctx context.Context, paymentID, key string) (OperationStatus, error)
	// Confirm tells pay that the checkout goes on with the payment's
	// order, so that pay's closure pass leaves the payment alone; a
	// *RejectedError with code cancellation_exists says pay cancelled it
	// first (its money goes back).
	Confirm(ctx context.Context, paymentID string) error
	// Cancel cancels a payment under an idempotency key, whatever its
	// status: pay voids an authorisation, refunds an approval, and waits
	// for an UNKNOWN payment to settle first.
	Cancel(ctx context.Context, paymentID, key string) error
}

// OperationStatus is the status of a capture at pay.
type OperationStatus string

// The capture statuses the checkout reads.
const (
	OperationSucceeded OperationStatus = "SUCCEEDED"
	OperationFailed    OperationStatus = "FAILED"
)

// CaptureMode is how the checkout takes the money: at once, or held at
// the purchase and taken once the order is confirmed.
type CaptureMode string

// The capture modes.
const (
	// CaptureAutomatic: the payment is approved and captured in one step
	// (pay's default).
	CaptureAutomatic CaptureMode = "automatic"
	// CaptureManual: the purchase authorises (AUTHORIZED), the checkout
	// captures while the order is still pending and confirms the sale
	// once the capture succeeded; an order that ends another way cancels
	// its payment (a void).
	CaptureManual CaptureMode = "manual"
)

// Keys of the checkout's calls to pay, fixed per order so that every
// retry, from any instance, is the same request.
func captureKey(orderID string) string { return "checkout-capture-" + orderID }
func cancelKey(orderID string) string  { return "checkout-cancel-" + orderID }

// RejectedError is a Payer's answer when pay refused the request without
// making a payment.
type RejectedError struct {
	Code    string // pay's problem code, such as invalid or forbidden
	Status  int    // the HTTP status
	Message string
}

// Error implements error.
func (e *RejectedError) Error() string {
	return fmt.Sprintf("pay refused the payment: HTTP %d %s: %s", e.Status, e.Code, e.Message)
}

// Error is checkout's error type: every Stampede service's (a code mapped
// to one HTTP status, a field, a safe message, a logged cause).
type Error = stampede.Error

// ErrNotFound is the error of a read that finds nothing.
var ErrNotFound = errors.New("checkout: not found")

// SoldOutError is Store.Hold's answer when fewer seats are left than
// asked for. Nothing was written.
type SoldOutError struct {
	Left int // the seats left when it was refused
	Held int // the seats on hold then, which may yet come back
}

// Error implements error.
func (e *SoldOutError) Error() string {
	return fmt.Sprintf("checkout: sold out: %d seats left", e.Left)
}

// StateError is Store.StartOrder's answer when the hold is no longer
// held (or has expired).
type StateError struct {
	State   HoldState
	Expired bool // the hold is held but its admission expired
}

// Error implements error.
func (e *StateError) Error() string {
	if e.Expired {
		return "checkout: the hold expired with its admission"
	}
	return fmt.Sprintf("checkout: the hold is %s", e.State)
}

// Unavailable wraps a storage failure that a retry may cure: 503 with
// Retry-After.
func Unavailable(err error) *Error {
	return &Error{Code: stampede.Unavailable, Message: "the checkout store is unavailable, try again shortly", Err: err}
}

// MapError turns checkout's errors into *Error for the HTTP layer:
// ErrNotFound is 404, *SoldOutError 409 conflict with seats_left and
// held (seats on hold that may come back: sold out for good when 0),
// *StateError 409 conflict with the hold's state; an *Error passes
// through and anything else is left to httpapi.As.
func MapError(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := errors.AsType[*Error](err); ok {
		return err
	}
	if errors.Is(err, ErrNotFound) {
		return &Error{Code: stampede.NotFound, Message: "not found", Err: err}
	}
	if so, ok := errors.AsType[*SoldOutError](err); ok {
		return &Error{Code: stampede.Conflict, Field: "seats", Message: fmt.Sprintf("sold out: %d seats left", so.Left),
			Extra: map[string]any{"seats_left": so.Left, "held": so.Held}, Err: err}
	}
	if se, ok := errors.AsType[*StateError](err); ok {
		msg := "the hold is " + string(se.State)
		if se.Expired {
			msg = "the hold expired with its admission"
		}
		return &Error{Code: stampede.Conflict, Message: msg, Extra: map[string]any{"hold_state": string(se.State)}, Err: err}
	}
	return err
}
