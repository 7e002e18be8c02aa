package pay

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/stampede-lab/stampede"
)

// Publisher sends outbox rows to the event broker. An adapter over NATS
// JetStream lives in pay/natspub.
type Publisher interface {
	// Publish sends one outbox row and returns nil only once the broker
	// has stored it durably (for JetStream: the publish was
	// acknowledged). Publishing a row twice must not deliver it twice
	// (the broker de-duplicates by the row's payment id and seq).
	Publish(ctx context.Context, e OutboxEvent) error
}

// AsyncPublisher is a Publisher that can have several publishes awaiting
// the broker's acknowledgement at once. The Relay uses PublishAsync when
// its Publisher implements it.
type AsyncPublisher interface {
	Publisher
	// PublishAsync sends e and returns without waiting for the broker.
	// An error means e was not sent. Otherwise the returned PublishAck
	// reports the outcome, with the same guarantees as Publish.
	PublishAsync(ctx context.Context, e OutboxEvent) (PublishAck, error)
}

// PublishAck is the pending outcome of an asynchronous publish.
type PublishAck interface {
	// Wait blocks until the broker has answered or the publish timed
	// out, or ctx ends. It returns nil only once the broker has stored
	// the row durably, as Publish does.
	Wait(ctx context.Context) error
}

// RelayConfig configures a Relay.
type RelayConfig struct {
	// Batch is how many outbox rows one pass reads.
	Batch int
	// InFlight is how many rows an AsyncPublisher may have awaiting
	// their acknowledgement at once (at most one per payment). A
	// Publisher that is not an AsyncPublisher publishes one row at a
	// time whatever InFlight says.
	InFlight int
	// Every is how often the relay looks for new rows.
	Every time.Duration
	// MaxBackoff caps the wait after a failed pass: failures back off
	// from Every, doubling, up to MaxBackoff.
	MaxBackoff time.Duration
	// GiveUpAfter is how long passes may keep failing, with no pass
	// succeeding, before Run gives up and returns the error: a transient
	// failure is retried; one that lasts this long is permanent.
	GiveUpAfter time.Duration
	// Now is the clock.
	Now func() time.Time
	// Logger receives the relay's logs.
	Logger *slog.Logger
}

// DefaultRelayConfig returns batches of 500 every 100 ms with up to 128
// publishes in flight, a backoff up to 5 s after failures, and giving up
// after 5 minutes of failures.
func DefaultRelayConfig() RelayConfig {
	return RelayConfig{Batch: 500, InFlight: 128, Every: 100 * time.Millisecond, MaxBackoff: 5 * time.Second,
		GiveUpAfter: 5 * time.Minute, Now: time.Now, Logger: slog.Default()}
}

// Validate reports every unusable field at once, each named in
// snake_case (give_up_after is serve pay's --give-up-after).
func (c RelayConfig) Validate() error {
	var f stampede.Fields
	if c.Batch < 1 {
		f.Add("batch", "must be at least 1, got %d", c.Batch)
	}
	if c.InFlight < 1 {
		f.Add("in_flight", "must be at least 1, got %d", c.InFlight)
	}
	if c.Every <= 0 {
		f.Add("every", "must be positive, got %s", c.Every)
	}
	if c.MaxBackoff < c.Every {
		f.Add("max_backoff", "must be at least every (%s), got %s", c.Every, c.MaxBackoff)
	}
	if c.GiveUpAfter <= 0 {
		f.Add("give_up_after", "must be positive, got %s", c.GiveUpAfter)
	}
	if c.Now == nil {
		f.Add("now", "must not be nil")
	}
	if c.Logger == nil {
		f.Add("logger", "must not be nil")
	}
	return f.Err()
}

// Relay publishes the outbox: every unpublished row, marking a row
// published only after the broker acknowledged it; a row published but
// not marked (a crash between the two) is published again and
// de-duplicated by the broker.
//
// A payment's events reach the broker in seq order. With a plain
// Publisher the relay publishes one row at a time, in outbox order, and
// a failed publish ends the pass. With an AsyncPublisher it keeps up to
// InFlight rows awaiting acknowledgement, but never two rows of one
// payment: a payment's next row is sent only once the broker
// acknowledged the previous one. It does not rely on the broker storing
// one connection's messages in the order they were sent. That holds for
// JetStream while every publish succeeds, but when row n's publish fails
// or times out (unstored) and row n+1's succeeds, the stream holds n+1
// before n, and retrying n appends it after n+1. With one row in flight
// per payment, a failed row has no successor in flight: its payment
// stops there, and the next pass starts again from that row.
type Relay struct {
	store Store
	pub   Publisher
	cfg   RelayConfig
}

// NewRelay returns a Relay from store to pub.
func NewRelay(store Store, pub Publisher, cfg RelayConfig) (*Relay, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if store == nil {
		return nil, Invalid("Store", "must not be nil")
	}
	if pub == nil {
		return nil, Invalid("Publisher", "must not be nil")
	}
	return &Relay{store: store, pub: pub, cfg: cfg}, nil
}

// RunOnce publishes up to one batch of unpublished rows, keeping each
// payment's rows in seq order, and marks published the rows the
// publisher confirmed. It returns how many rows the broker acknowledged
// in this pass, and the first error: a failed publish (the pass ends
// after the publishes already in flight are answered, and their rows are
// marked) or a failure to read or mark rows.
func (r *Relay) RunOnce(ctx context.Context) (int, error) {
	events, err := r.store.PendingOutbox(ctx, r.cfg.Batch)
	if err != nil {
		return 0, err
	}
	if apub, ok := r.pub.(AsyncPublisher); ok && r.cfg.InFlight > 1 {
		return r.runAsync(ctx, apub, events)
	}
	for i, e := range events {
		if err := r.pub.Publish(ctx, e); err != nil {
			// Stop here: publishing later rows now could put a payment's
			// events out of order.
			return i, publishError(e, err)
		}
		if err := r.store.MarkPublished(ctx, []int64{e.ID}, r.cfg.Now()); err != nil {
			// Published but not marked: the next pass publishes it again
			// and the broker drops the duplicate.
			return i + 1, err
		}
	}
	return len(events), nil
}

func publishError(e OutboxEvent, err error) error {
	return fmt.Errorf("publish outbox row %d (%s seq %d): %w", e.ID, e.PaymentID, e.Seq, err)
}

// runAsync publishes events (in outbox order, so each payment's rows in
// seq order) through pub with up to InFlight awaiting acknowledgement and
// at most one per payment, then marks the acknowledged rows in one call.
//
// Rows wait in two places. ready holds, in outbox order of becoming
// ready, the rows that may be sent now: the oldest unsent row of each
// payment with nothing in flight. later holds each payment's rows behind
// that one. An acknowledged row moves its payment's next row to ready. A
// failed row leaves its payment's later rows unsent, and stops all
// sending; the rows still in flight are waited for, since a row the
// broker stored is worth marking.
func (r *Relay) runAsync(ctx context.Context, pub AsyncPublisher, events []OutboxEvent) (int, error) {
	type flight struct {
		e   *OutboxEvent
		ack PublishAck
	}
	ready := make([]*OutboxEvent, 0, len(events))
	later := make(map[string][]*OutboxEvent)
	for i := range events {
		e := &events[i]
		if q, seen := later[e.PaymentID]; seen {
			later[e.PaymentID] = append(q, e)
		} else {
			later[e.PaymentID] = nil
			ready = append(ready, e)
		}
	}
	var (
		inflight []flight // oldest first: JetStream answers in sending order
		acked    = make([]int64, 0, len(events))
		firstErr error
	)
	for len(inflight) > 0 || (firstErr == nil && len(ready) > 0) {
		for firstErr == nil && len(ready) > 0 && len(inflight) < r.cfg.InFlight {
			e := ready[0]
			ready = ready[1:]
			ack, err := pub.PublishAsync(ctx, *e)
			if err != nil {
				firstErr = publishError(*e, err)
				break
			}
			inflight = append(inflight, flight{e, ack})
		}
		if len(inflight) == 0 {
			break
		}
		f := inflight[0]
		inflight = inflight[1:]
		if err := f.ack.Wait(ctx); err != nil {
			if firstErr == nil {
				firstErr = publishError(*f.e, err)
			}
			continue
		}
		acked = append(acked, f.e.ID)
		if q := later[f.e.PaymentID]; len(q) > 0 {
			ready = append(ready, q[0])
			later[f.e.PaymentID] = q[1:]
		}
	}
	if len(acked) > 0 {
		if err := r.store.MarkPublished(ctx, acked, r.cfg.Now()); err != nil {
			// Published but not marked: the next pass publishes them
			// again and the broker drops the duplicates.
			return len(acked), err
		}
	}
	return len(acked), firstErr
}

// Run relays until ctx ends (then it returns nil). A failed pass is
// logged and retried after a backoff; when passes have kept failing for
// GiveUpAfter, Run returns the last error.
func (r *Relay) Run(ctx context.Context) error {
	var (
		failingSince time.Time // zero while passes succeed
		failures     int
	)
	wait := r.cfg.Every
	for {
		for {
			n, err := r.RunOnce(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				now := r.cfg.Now()
				if failures == 0 {
					failingSince = now
				}
				failures++
				if elapsed := now.Sub(failingSince); elapsed >= r.cfg.GiveUpAfter {
					return fmt.Errorf("pay: relay gave up after %d failed passes in %s: %w", failures, elapsed.Round(time.Millisecond), err)
				}
				wait = min(r.cfg.Every<<min(failures, 16), r.cfg.MaxBackoff)
				r.cfg.Logger.Warn("pay: relay pass failed; retrying", "err", err, "failures", failures, "retry_in", wait)
				break
			}
			if failures > 0 {
				r.cfg.Logger.Info("pay: relay recovered", "failures", failures)
				failures, wait = 0, r.cfg.Every
			}
			if n < r.cfg.Batch {
				break
			}
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}
