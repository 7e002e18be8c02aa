package fulfilment

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/protocol"
)

// Config configures a Handler.
type Config struct {
	// Now returns the current time; tests replace it with a fake clock.
	Now func() time.Time
	// NewTicketID returns a new ticket id; tests replace it to make ids
	// predictable.
	NewTicketID func() string
}

// DefaultConfig returns the wall clock and random UUID ticket ids.
func DefaultConfig() Config {
	return Config{Now: time.Now, NewTicketID: uuid.NewString}
}

// Validate reports every invalid field; each error names its field.
func (c Config) Validate() error {
	var f stampede.Fields
	if c.Now == nil {
		f.Add("now", "must not be nil (use time.Now)")
	}
	if c.NewTicketID == nil {
		f.Add("new_ticket_id", "must not be nil (use uuid.NewString)")
	}
	return f.Err()
}

// Handler applies payment events to a Store, exactly once each.
type Handler struct {
	store Store
	cfg   Config
}

// NewHandler returns a Handler writing to store.
func NewHandler(store Store, cfg Config) (*Handler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if store == nil {
		return nil, stampede.InvalidField("store", "must not be nil")
	}
	return &Handler{store: store, cfg: cfg}, nil
}

// Handle processes ev (see Process) and reports whether this call changed
// an order: issued its ticket or recorded its release. A redelivered,
// stale or effect-free event gives false and no error. An error with
// CodeUnavailable (Retryable) means nothing was written and the event
// should be delivered again; stampede.Invalid means it never will succeed.
func (h *Handler) Handle(ctx context.Context, ev Event) (applied bool, err error) {
	out, err := h.Process(ctx, ev)
	return out.Applied(), err
}

// Process processes ev in one transaction of the store and returns its
// outcome: when ev.Epoch is set, it first checks the partition's fence
// (ErrFenced, nothing written, for an epoch below the partition's); it
// claims ev.ID() in the inbox (OutcomeDuplicate, nothing written,
// if the inbox holds it already), ignores ev if its payment has applied
// an event at or after ev.Seq (OutcomeStale), and otherwise settles the
// order by ev.Status. The outcome is stored with the inbox entry.
func (h *Handler) Process(ctx context.Context, ev Event) (Outcome, error) {
	if err := ev.Validate(); err != nil {
		return "", err
	}
	now := h.cfg.Now().UTC().Truncate(time.Microsecond) // as the stores keep times
	var out Outcome
	err := h.store.Update(ctx, func(ctx context.Context, tx Tx) error {
		out = ""
		if ev.Epoch > 0 {
			current, err := tx.Fence(ctx, ev.Partition, ev.Epoch)
			if err != nil {
				return fmt.Errorf("fence partition %d: %w", ev.Partition, err)
			}
			if !current {
				return fmt.Errorf("%s: epoch %d of partition %d: %w", ev.ID(), ev.Epoch, ev.Partition, ErrFenced)
			}
		}
		fresh, err := tx.Claim(ctx, InboxEntry{EventID: ev.ID(), PaymentID: ev.PaymentID, Seq: ev.Seq, Outcome: OutcomeNoEffect, ProcessedAt: now})
		if err != nil {
			return fmt.Errorf("claim %s: %w", ev.ID(), err)
		}
		if !fresh {
			out = OutcomeDuplicate
			return nil
		}
		o, err := h.apply(ctx, tx, ev, now)
		if err != nil {
			return err
		}
		if err := tx.SetOutcome(ctx, ev.ID(), o); err != nil {
			return fmt.Errorf("outcome of %s: %w", ev.ID(), err)
		}
		out = o
		return nil
	})
	if err != nil {
		return "", err
	}
	return out, nil
}

// apply takes the steps of a claimed event inside its transaction.
func (h *Handler) apply(ctx context.Context, tx Tx, ev Event, now time.Time) (Outcome, error) {
	last, err := tx.LockPayment(ctx, ev.PaymentID, now)
	if err != nil {
		return "", fmt.Errorf("lock payment %s: %w", ev.PaymentID, err)
	}
	if ev.Seq <= last {
		return OutcomeStale, nil
	}
	if err := tx.AdvancePayment(ctx, ev.PaymentID, ev.Seq, ev.Status, now); err != nil {
		return "", fmt.Errorf("advance payment %s: %w", ev.PaymentID, err)
	}
	if ev.Refund != nil && ev.Refund.Cancellation {
		return h.revoke(ctx, tx, ev, now)
	}
	// Any other refund event leaves the payment's status as it was, and a capture
	// or void event repeats what the payment's own status event says: the order
	// and its ticket are not its business. A voided authorisation is not
	// handled here yet (its order is the checkout's to release; the
	// releases table records DECLINED and FAILED payments only).
	if !ev.Status.Terminal() || ev.Refund != nil || ev.Operation != nil || ev.Status == protocol.StatusVoided {
		return OutcomeNoEffect, nil
	}
	o, err := tx.LockOrder(ctx, ev.MerchantID, ev.OrderID, now)
	if err != nil {
		return "", fmt.Errorf("lock order %s/%s: %w", ev.MerchantID, ev.OrderID, err)
	}
	if o.State == OrderTicketed || o.State == OrderRevoked { // a revoked order is final: no second ticket
		if ev.Status == protocol.StatusApproved {
			return OutcomeAlreadyTicketed, nil
		}
		return OutcomeReleaseSuperseded, nil
	}
	o.PaymentID, o.UpdatedAt = ev.PaymentID, now
	var out Outcome
	if ev.Status == protocol.StatusApproved {
		t := Ticket{
			ID: h.cfg.NewTicketID(), MerchantID: ev.MerchantID, OrderID: ev.OrderID, PaymentID: ev.PaymentID,
			EventID: ev.ID(), Amount: ev.Amount, Currency: ev.Currency, IssuedAt: now,
		}
		if err := tx.IssueTicket(ctx, t); err != nil {
			return "", fmt.Errorf("issue ticket for %s/%s: %w", ev.MerchantID, ev.OrderID, err)
		}
		o.State, out = OrderTicketed, OutcomeTicketIssued
	} else {
		r := Release{
			MerchantID: ev.MerchantID, OrderID: ev.OrderID, PaymentID: ev.PaymentID,
			EventID: ev.ID(), Status: ev.Status, ReleasedAt: now,
		}
		if err := tx.RecordRelease(ctx, r); err != nil {
			return "", fmt.Errorf("release %s/%s: %w", ev.MerchantID, ev.OrderID, err)
		}
		o.State, out = OrderReleased, OutcomeReleased
	}
	if err := tx.SaveOrder(ctx, o); err != nil {
		return "", fmt.Errorf("save order %s/%s: %w", ev.MerchantID, ev.OrderID, err)
	}
	return out, nil
}

// revoke takes back the ticket of a cancelled payment's order: the first
// event of the cancellation's refund moves the ticket to the revocations
// and marks the order revoked. An order whose ticket is not this
// payment's, or that has none, is left alone (OutcomeNoEffect), as is a
// later event of the same refund.
func (h *Handler) revoke(ctx context.Context, tx Tx, ev Event, now time.Time) (Outcome, error) {
	o, err := tx.LockOrder(ctx, ev.MerchantID, ev.OrderID, now)
	if err != nil {
		return "", fmt.Errorf("lock order %s/%s: %w", ev.MerchantID, ev.OrderID, err)
	}
	if o.State != OrderTicketed || o.PaymentID != ev.PaymentID {
		return OutcomeNoEffect, nil
	}
	if _, err := tx.RevokeTicket(ctx, ev.MerchantID, ev.OrderID, ev.ID(), now); err != nil {
		return "", fmt.Errorf("revoke the ticket of %s/%s: %w", ev.MerchantID, ev.OrderID, err)
	}
	o.State, o.UpdatedAt = OrderRevoked, now
	if err := tx.SaveOrder(ctx, o); err != nil {
		return "", fmt.Errorf("save order %s/%s: %w", ev.MerchantID, ev.OrderID, err)
	}
	return OutcomeTicketRevoked, nil
}
