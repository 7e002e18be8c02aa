package pay

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// Publisher sends outbox rows to the event broker. An adapter over NATS
// JetStream lives in pay/jetstream.
type Publisher interface {
	// Publish sends one outbox row and returns nil only once the broker
	// has stored it durably (for JetStream: the publish was
	// acknowledged). Publishing a row twice must not deliver it twice
	// (the broker de-duplicates by the row's payment id and seq).
	Publish(ctx context.Context, e OutboxEvent) error
}

// RelayConfig configures a Relay.
type RelayConfig struct {
	// Batch is how many outbox rows one pass reads.
	Batch int
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

// DefaultRelayConfig returns batches of 100 every 100 ms, a backoff up
// to 5 s after failures, and giving up after 5 minutes of failures.
func DefaultRelayConfig() RelayConfig {
	return RelayConfig{Batch: 100, Every: 100 * time.Millisecond, MaxBackoff: 5 * time.Second,
		GiveUpAfter: 5 * time.Minute, Now: time.Now, Logger: slog.Default()}
}

// Validate reports the first unusable field.
func (c RelayConfig) Validate() error {
	switch {
	case c.Batch < 1:
		return Invalid("Batch", "must be at least 1, got %d", c.Batch)
	case c.Every <= 0:
		return Invalid("Every", "must be positive, got %s", c.Every)
	case c.MaxBackoff < c.Every:
		return Invalid("MaxBackoff", "must be at least Every (%s), got %s", c.Every, c.MaxBackoff)
	case c.GiveUpAfter <= 0:
		return Invalid("GiveUpAfter", "must be positive, got %s", c.GiveUpAfter)
	case c.Now == nil:
		return Invalid("Now", "must not be nil")
	case c.Logger == nil:
		return Invalid("Logger", "must not be nil")
	}
	return nil
}

// Relay publishes the outbox: every unpublished row, in outbox order, one
// at a time, marking a row published only after the Publisher confirmed
// it. A failed publish stops the pass, so a payment's events never
// overtake each other; a row published but not marked (a crash between
// the two) is published again and de-duplicated by the broker.
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

// RunOnce publishes up to one batch of unpublished rows, in order, and
// marks each published once the publisher confirmed it. It returns how
// many it published.
func (r *Relay) RunOnce(ctx context.Context) (int, error) {
	events, err := r.store.PendingOutbox(ctx, r.cfg.Batch)
	if err != nil {
		return 0, err
	}
	for i, e := range events {
		if err := r.pub.Publish(ctx, e); err != nil {
			// Stop here: publishing later rows now could put a payment's
			// events out of order.
			return i, fmt.Errorf("publish outbox row %d (%s seq %d): %w", e.ID, e.PaymentID, e.Seq, err)
		}
		if err := r.store.MarkPublished(ctx, []int64{e.ID}, r.cfg.Now()); err != nil {
			// Published but not marked: the next pass publishes it again
			// and the broker drops the duplicate.
			return i + 1, err
		}
	}
	return len(events), nil
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
