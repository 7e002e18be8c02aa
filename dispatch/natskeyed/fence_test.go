package natskeyed

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/stampede-lab/stampede"
)

// TestFencedEndsSessionAndHandsBack: a handler that reports ErrFenced (the
// effect store refused its epoch) makes the consumer hand the message back
// and end its session of the partition; the message comes back in a new
// session with a larger Event.Epoch and runs in its key's order, and the
// other events of the key wait for it.
func TestFencedEndsSessionAndHandsBack(t *testing.T) {
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			f := newFixture(t, tg, 1)
			const n = 300
			f.publish(keysFor(n, 10, 0))
			prog := newProgress()
			rec := orderHandler(f, prog, func(string) time.Duration { return 0 })
			var mu sync.Mutex
			var fencedID string
			var fencedEpoch, retryEpoch uint64
			epochs := map[uint64]bool{}
			c, err := New(context.Background(), f.js, f.cfg, func(ctx context.Context, e Event) error {
				if e.Epoch == 0 {
					t.Errorf("event %s has epoch 0", e.ID)
				}
				mu.Lock()
				epochs[e.Epoch] = true
				if fencedID == "" && e.Sequence == 100 {
					fencedID, fencedEpoch = e.ID, e.Epoch
					mu.Unlock()
					return fmt.Errorf("store: %w", ErrFenced)
				}
				if e.ID == fencedID {
					retryEpoch = e.Epoch
				}
				mu.Unlock()
				return rec(ctx, e)
			})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			prog.waitFor(t, n, 60*time.Second)
			st := c.Stats()
			c.Close()
			checkLedger(t, f.ledger)
			mu.Lock()
			defer mu.Unlock()
			if fencedID == "" {
				t.Fatal("no event was fenced: the test exercised nothing")
			}
			if st.Fenced != 1 {
				t.Errorf("Stats.Fenced = %d, want 1", st.Fenced)
			}
			if s := st.Partitions[0].Sessions; s < 2 {
				t.Errorf("%d sessions: the fenced session did not end", s)
			}
			if retryEpoch <= fencedEpoch {
				t.Errorf("the fenced event ran again with epoch %d, not above its fenced epoch %d", retryEpoch, fencedEpoch)
			}
			t.Logf("fenced %s at epoch %d, ran again at epoch %d; %d epochs seen, %d sessions", fencedID, fencedEpoch, retryEpoch, len(epochs), st.Partitions[0].Sessions)
		})
	}
}

// TestSilentOwnerIsUnpinned: A owns the partitions, then goes silent (its
// connection closes under it, as a killed or stopped process's would) with
// a PinnedTTL far longer than the test. B, with an OwnerTimeout, unpins
// the partitions A held and finishes every event, in order, well before
// the PinnedTTL would have moved them.
func TestSilentOwnerIsUnpinned(t *testing.T) {
	tg := targets(t)[0]
	f := newFixture(t, tg, 2)
	if !f.cfg.Pinned {
		t.Skipf("nats-server %s has no pinned-client priority groups", f.version)
	}
	f.cfg.PinnedTTL, f.cfg.AckWait, f.cfg.InProgressEvery = time.Minute, time.Second, 300*time.Millisecond
	f.cfg.OwnerTimeout = 300 * time.Millisecond
	f.cfg.DrainTimeout = time.Second
	const n = 2000
	f.publish(keysFor(n, 40, 0))
	prog := newProgress()
	h := orderHandler(f, prog, func(string) time.Duration { return time.Millisecond })
	ctx := context.Background()
	ncA, jsA := connect(t, f.url)
	a, err := New(ctx, jsA, f.cfg, h)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	waitUntil(t, 30*time.Second, "A owns every partition", func() bool {
		for _, p := range a.Stats().Partitions {
			if !p.Owned {
				return false
			}
		}
		return true
	})
	_, jsB := connect(t, f.url)
	b, err := New(ctx, jsB, f.cfg, h)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	prog.waitFor(t, n/4, 60*time.Second)
	silent := time.Now()
	ncA.Close()
	// Wait on the ledger's distinct completions: the progress counter also
	// counts B's re-runs of events A finished but could not acknowledge, so
	// it can reach n while one event is still outstanding.
	waitUntil(t, 30*time.Second, "every event completed once", func() bool {
		return f.ledger.Report().Outstanding() == 0
	})
	took := time.Since(silent)
	st := b.Stats()
	b.Close()
	// A's handlers that finished after its connection closed could not
	// acknowledge: B runs them again (at least once; an inbox makes the
	// effect once). Order, overlaps and losses are what this test checks.
	r := f.ledger.Report()
	if r.Violations != 0 || r.Overlaps != 0 || r.Outstanding() != 0 || r.Vacuous() {
		t.Errorf("ledger: %d violations, %d overlaps, %d lost of %d (vacuous: %v)", r.Violations, r.Overlaps, r.Outstanding(), r.Submitted, r.Vacuous())
	}
	if st.Unpins == 0 {
		t.Error("B unpinned nothing")
	}
	if took >= f.cfg.PinnedTTL/2 {
		t.Errorf("B finished %s after A went silent, not well within the %s PinnedTTL", took, f.cfg.PinnedTTL)
	}
	t.Logf("B finished %s after A went silent; %d unpins, %d acked by B, %d run again", took, st.Unpins, st.Acked, r.Duplicates)
}

// TestOwnerTimeoutValidated names the field.
func TestOwnerTimeoutValidated(t *testing.T) {
	c := DefaultConfig()
	c.OwnerTimeout = time.Millisecond
	if err := c.Validate(); err == nil || stampede.As(err).Field != "owner_timeout" {
		t.Errorf("Validate() = %v, want an error naming owner_timeout", err)
	}
	c = DefaultConfig()
	c.Serve, c.Prefer = []int{0, 1}, []int{2}
	if err := c.Validate(); err == nil || stampede.As(err).Field != "prefer" {
		t.Errorf("Validate() = %v, want an error naming prefer", err)
	}
}

// TestLostDeliveryKeepsOrder loses one delivery on its way to the process,
// as a NATS node that dies while it forwards a message does: the server
// counts the message as delivered and pending, and sends the key's next
// messages. Those must wait until the lost one comes back (after AckWait)
// and runs first.
func TestLostDeliveryKeepsOrder(t *testing.T) {
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			f := newFixture(t, tg, 1)
			f.cfg.AckWait, f.cfg.InProgressEvery = 500*time.Millisecond, 100*time.Millisecond
			const n = 40
			keys := keysFor(n, 4, 0)
			var dropped atomic.Bool
			dropDelivery = func(msg jetstream.Msg, md *jetstream.MsgMetadata) bool {
				key, seq := parse(t, msg.Data())
				return key == "k1" && seq == 2 && md.NumDelivered == 1 && dropped.CompareAndSwap(false, true)
			}
			t.Cleanup(func() { dropDelivery = nil })
			prog := newProgress()
			c, err := New(context.Background(), f.js, f.cfg, orderHandler(f, prog, func(string) time.Duration { return 0 }))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			f.publish(keys)
			prog.waitFor(t, n, 30*time.Second)
			st := c.Stats()
			c.Close()
			if !dropped.Load() {
				t.Fatal("no delivery was lost: the test exercised nothing")
			}
			checkLedger(t, f.ledger)
			if st.Rebarriers == 0 || st.Late != 0 {
				t.Errorf("Stats: %d rebarriers, %d late; want at least 1 and 0", st.Rebarriers, st.Late)
			}
			t.Logf("%d events, one delivery lost; %d rebarriers, %d redeliveries", n, st.Rebarriers, st.Redelivered)
		})
	}
}
