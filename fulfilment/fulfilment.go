// Package fulfilment turns settled payments into their effects, exactly
// once: on APPROVED it issues one ticket for the payment's order, on
// DECLINED or FAILED it records the release of the order.
//
// Events come from the payment outbox as pay/natspub publishes it
// (DecodeEvent reads the body). They are delivered at least once, so the
// Handler makes their effects exactly-once with an inbox: in one database
// transaction it inserts the event id into the inbox and applies the
// effect. A redelivered event finds its id there and is skipped; a
// transaction that fails leaves neither the inbox row nor the effect, so
// the next delivery applies it.
//
// Two more guards make the outcome independent of delivery accidents:
//
//   - Per payment, the handler keeps the sequence number of the last event
//     it applied. An event at or below it is stale (it was overtaken): it
//     is recorded in the inbox with OutcomeStale and has no effect. A
//     DECLINED that arrives after the same payment's APPROVED therefore
//     never releases an issued ticket.
//   - Per order, at most one ticket, whatever the number of payments: the
//     first APPROVED payment of an order gets the ticket. A later APPROVED
//     payment of the same order (pay allows one live payment per order, so
//     this is a double charge) gets none; it is recorded with
//     OutcomeAlreadyTicketed and Parity lists it under OrderAlreadyTicketed
//     for a refund. A DECLINED or FAILED payment of an order that already
//     has a ticket (a failed attempt seen after the retry that succeeded)
//     releases nothing: OutcomeReleaseSuperseded.
//
// A cancellation takes the ticket back. When pay carries out a
// cancellation of an APPROVED payment as a refund (the merchant's
// cancellation, or pay's closure of an approval that no confirmed order
// holds: the checkout gave the seats back), the refund's events say so
// (protocol.RefundEvent.Cancellation), and the first of them revokes the
// ticket that payment's approval issued: the ticket moves to the
// revocations (Revocation) and the order becomes OrderRevoked, so that a
// seat sold again is never ticketed twice. A plain refund leaves the
// ticket alone.
//
// Effects follow the status an event carries (the payment as it stands
// after the change), not its type, so any event of a payment in a terminal
// status settles its order.
//
// The Store interface is implemented once over database/sql, for SQLite and
// PostgreSQL, in fulfilment/sqlstore; fulfilment/fulfilmenttest is the
// conformance suite every Store passes.
package fulfilment

import (
	"context"
	"errors"
	"time"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/protocol"
)

// Ticket is the one ticket issued for an order.
type Ticket struct {
	ID         string // random UUID (Config.NewTicketID)
	MerchantID string
	OrderID    string
	PaymentID  string // the APPROVED payment it was issued for
	EventID    string // the event that issued it
	Amount     int64  // in minor units; 0 when the event did not say
	Currency   string // "" when the event did not say
	IssuedAt   time.Time
}

// Revocation is a ticket taken back because its payment was cancelled.
type Revocation struct {
	Ticket
	RevokeEventID string // the cancellation's refund event that revoked it
	RevokedAt     time.Time
}

// Release records that a payment of an order ended DECLINED or FAILED and
// the order was released (its seats may go back on sale).
type Release struct {
	MerchantID string
	OrderID    string
	PaymentID  string
	EventID    string
	Status     protocol.PaymentStatus // DECLINED or FAILED
	ReleasedAt time.Time
}

// OrderState is what fulfilment has done with an order.
type OrderState string

// The order states. An order moves from open to released or ticketed,
// from released to ticketed (a retried payment succeeded), and from
// ticketed to revoked (the ticket's payment was cancelled); revoked is
// final.
const (
	OrderOpen     OrderState = "open"     // seen, nothing settled yet
	OrderReleased OrderState = "released" // its latest settled payment failed; no ticket
	OrderTicketed OrderState = "ticketed" // a ticket was issued
	OrderRevoked  OrderState = "revoked"  // its ticket was revoked: the payment was cancelled
)

// Order is the fulfilment state of one merchant order.
type Order struct {
	MerchantID string
	OrderID    string
	State      OrderState
	PaymentID  string // the payment that set State; "" when open
	UpdatedAt  time.Time
}

// Outcome is what processing one event did; the inbox keeps it.
type Outcome string

// The outcomes. Only OutcomeTicketIssued, OutcomeReleased and
// OutcomeTicketRevoked change an order; OutcomeDuplicate is never stored (the inbox already holds the
// event's first outcome).
const (
	OutcomeTicketIssued      Outcome = "ticket_issued"      // APPROVED: the order's ticket was issued
	OutcomeReleased          Outcome = "released"           // DECLINED or FAILED: the order was released
	OutcomeAlreadyTicketed   Outcome = "already_ticketed"   // APPROVED, but the order already has a ticket
	OutcomeReleaseSuperseded Outcome = "release_superseded" // DECLINED or FAILED, but the order already has a ticket
	OutcomeTicketRevoked     Outcome = "ticket_revoked"     // a cancellation's refund: the payment's ticket was revoked
	OutcomeNoEffect          Outcome = "no_effect"          // PENDING or UNKNOWN: nothing to do yet
	OutcomeStale             Outcome = "stale"              // the payment already applied an event at or after this seq
	OutcomeDuplicate         Outcome = "duplicate"          // the inbox already holds the event: skipped
)

// Applied reports whether the outcome changed an order.
func (o Outcome) Applied() bool {
	return o == OutcomeTicketIssued || o == OutcomeReleased || o == OutcomeTicketRevoked
}

// InboxEntry is one processed event.
type InboxEntry struct {
	EventID     string
	PaymentID   string
	Seq         int64
	Outcome     Outcome
	ProcessedAt time.Time
}

// Counts summarises a store.
type Counts struct {
	Inbox    int64 // processed events
	Tickets  int64 // live tickets (issued, not revoked)
	Revoked  int64 // revoked tickets
	Releases int64
	Orders   map[OrderState]int64
}

// Store keeps the inbox and the effects. Implementations must be safe for
// concurrent use. Every method bounds its own work with a deadline: a
// database that does not answer gives an error with CodeUnavailable (see
// Unavailable), never a hang.
type Store interface {
	// Update runs fn in one write transaction, committed when fn returns
	// nil and rolled back otherwise: everything fn wrote through tx
	// happens, or none of it.
	Update(ctx context.Context, fn func(ctx context.Context, tx Tx) error) error
	// Inbox returns the inbox entry of an event, or ErrNotFound.
	Inbox(ctx context.Context, eventID string) (InboxEntry, error)
	// Order returns the state of an order, or ErrNotFound.
	Order(ctx context.Context, merchantID, orderID string) (Order, error)
	// Ticket returns the live ticket of an order, or ErrNotFound (none
	// issued, or revoked).
	Ticket(ctx context.Context, merchantID, orderID string) (Ticket, error)
	// Revocation returns the revoked ticket of an order, or ErrNotFound.
	Revocation(ctx context.Context, merchantID, orderID string) (Revocation, error)
	// Releases returns the releases of an order, oldest first.
	Releases(ctx context.Context, merchantID, orderID string) ([]Release, error)
	// Tickets returns up to limit live tickets whose payment id sorts after
	// afterPaymentID (byte order), in that order: "" starts at the
	// beginning.
	Tickets(ctx context.Context, afterPaymentID string, limit int) ([]Ticket, error)
	// Counts counts the inbox, tickets, releases and orders by state.
	Counts(ctx context.Context) (Counts, error)
	// Ping checks that the database answers.
	Ping(ctx context.Context) error
	// Close releases the store; later calls fail with CodeUnavailable.
	Close() error
}

// Tx is the write transaction of Store.Update. Its methods are the steps
// of processing one event; the Handler decides which to take.
type Tx interface {
	// Claim inserts e into the inbox and reports true, or reports false
	// when the inbox already holds e.EventID (nothing written). A Claim
	// racing another transaction's Claim of the same event waits for it
	// and reports false once it commits.
	Claim(ctx context.Context, e InboxEntry) (bool, error)
	// SetOutcome sets the outcome of an event claimed in this transaction.
	SetOutcome(ctx context.Context, eventID string, o Outcome) error
	// Fence reports false, writing nothing, when the store holds a larger
	// epoch for the stream partition than epoch (a later owner of the
	// partition has written); otherwise it records epoch as the
	// partition's if larger, and keeps a later owner from recording a
	// larger one until the transaction ends.
	Fence(ctx context.Context, partition int, epoch uint64) (current bool, err error)
	// LockPayment returns the seq of the last event applied for the
	// payment (0 for none) and holds the payment until the transaction
	// ends, so that events of one payment are applied one at a time.
	LockPayment(ctx context.Context, paymentID string, now time.Time) (lastSeq int64, err error)
	// AdvancePayment records seq and status as the payment's last applied
	// event; the payment must be locked.
	AdvancePayment(ctx context.Context, paymentID string, seq int64, status protocol.PaymentStatus, now time.Time) error
	// LockOrder returns the order (OrderOpen when new, created as such)
	// and holds it until the transaction ends.
	LockOrder(ctx context.Context, merchantID, orderID string, now time.Time) (Order, error)
	// SaveOrder writes the state of a locked order.
	SaveOrder(ctx context.Context, o Order) error
	// IssueTicket inserts t; an order or a payment with a ticket already
	// is an error.
	IssueTicket(ctx context.Context, t Ticket) error
	// RecordRelease inserts r; a payment released already is an error.
	RecordRelease(ctx context.Context, r Release) error
	// RevokeTicket moves the live ticket of a locked order to the
	// revocations, recording the event that revoked it and when, and
	// returns it; ErrNotFound when the order has no live ticket.
	RevokeTicket(ctx context.Context, merchantID, orderID, eventID string, now time.Time) (Revocation, error)
}

// ErrFenced is the error of Handler.Process for an event whose Epoch is
// below the largest the store has seen for its Partition: the worker lost
// the partition (it was stopped or cut off while another took it over),
// nothing was written, and the event belongs to the partition's new owner.
var ErrFenced = errors.New("fulfilment: fenced: a later owner of the partition has written")

// ErrNotFound is the error of a Store read that finds nothing.
var ErrNotFound = errors.New("fulfilment: not found")

// Error is the error type of fulfilment: every Stampede service's (a code
// that maps to one HTTP status, a safe message, the cause for the log).
type Error = stampede.Error

// Unavailable wraps a storage failure that a retry may cure (connection
// refused or lost, database busy or frozen, store closed): CodeUnavailable,
// 503. A consumer should deliver the event again later.
func Unavailable(err error) *Error {
	return &Error{Code: stampede.Unavailable, Message: "the fulfilment store is unavailable, try again shortly", Err: err}
}

// Retryable reports whether a later delivery of the same event may
// succeed: the store was unavailable. An invalid event (class stampede.Invalid) will
// never succeed and should be set aside; anything else is a bug.
func Retryable(err error) bool { return stampede.ClassOf(err) == stampede.Unavailable }
