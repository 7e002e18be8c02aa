package natskeyed

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestPoisonParksKeyAndRedrives: one event of one key always fails. After
// MaxAttempts deliveries it is parked with every later event of its key,
// including events published while the key is parked; every other key
// completes meanwhile. Listing shows the key and its count; a redrive
// once the handler is healed runs the parked events in order, exactly
// once, and unparks the key, whose new events then run as usual.
func TestPoisonParksKeyAndRedrives(t *testing.T) {
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			f := newFixture(t, tg, 2)
			f.cfg.MaxAttempts = 3
			const keys, per = 10, 30
			f.publish(keysFor(keys*per, keys, 0))
			prog := newProgress()
			rec := orderHandler(f, prog, func(string) time.Duration { return 0 })
			var healed atomic.Bool
			var mu sync.Mutex
			attempts := map[uint64]int{} // deliveries of the poison event
			ran := map[string]int{}      // successful runs per event id
			c, err := New(context.Background(), f.js, f.cfg, func(ctx context.Context, e Event) error {
				key, seq := parse(t, e.Data)
				if key == "k3" && seq == 5 && !healed.Load() {
					mu.Lock()
					attempts[e.Delivery]++
					mu.Unlock()
					return errors.New("poison")
				}
				mu.Lock()
				ran[e.ID]++
				mu.Unlock()
				return rec(ctx, e)
			})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			// Every event but k3's from sequence 5 on.
			prog.waitFor(t, keys*per-(per-5), 30*time.Second)
			pk, err := OpenParking(context.Background(), f.js, f.cfg)
			if err != nil {
				t.Fatal(err)
			}
			waitUntil(t, 10*time.Second, "k3 parked with its 25 events", func() bool {
				l, err := pk.List(context.Background())
				return err == nil && len(l) == 1 && l[0].Events == per-5
			})
			// Published while parked: k3's join the parked ones, the
			// others run.
			f.publish([]string{"k3", "k1", "k3", "k2"})
			prog.waitFor(t, keys*per-(per-5)+2, 10*time.Second)
			waitUntil(t, 10*time.Second, "k3's new events parked", func() bool {
				l, err := pk.List(context.Background())
				return err == nil && len(l) == 1 && l[0].Events == per-5+2
			})
			l, _ := pk.List(context.Background())
			if l[0].Key != "k3" || l[0].Attempts != 3 || l[0].Reason != "poison" || l[0].Partition != PartitionOf("k3", 2) {
				t.Errorf("parked key = %+v, want k3 after 3 attempts for poison", l[0])
			}
			mu.Lock()
			if len(attempts) != 3 || attempts[1] != 1 || attempts[3] != 1 {
				t.Errorf("the poison event's deliveries = %v, want 1, 2 and 3 once each", attempts)
			}
			mu.Unlock()
			if st := c.Stats(); st.Parked != per-5+2 || st.ParkedKeys != 1 {
				t.Errorf("Stats: Parked %d, ParkedKeys %d; want %d and 1", st.Parked, st.ParkedKeys, per-5+2)
			}

			healed.Store(true)
			if err := pk.Redrive(context.Background(), "k3"); err != nil {
				t.Fatal(err)
			}
			if err := pk.Redrive(context.Background(), "nope"); !errors.Is(err, ErrNotParked) {
				t.Errorf("Redrive of a key never parked: %v, want ErrNotParked", err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			left, err := pk.Wait(ctx, []string{"k3"})
			cancel()
			if err != nil || len(left) != 0 {
				t.Fatalf("Wait: %v still parked, %v", left, err)
			}
			prog.waitFor(t, keys*per+4, 10*time.Second)
			// Unparked: a new event of k3 runs at once.
			f.publish([]string{"k3"})
			prog.waitFor(t, keys*per+5, 10*time.Second)
			st := c.Stats()
			c.Close()
			checkLedger(t, f.ledger)
			mu.Lock()
			for id, n := range ran {
				if n != 1 {
					t.Errorf("event %s ran %d times", id, n)
				}
			}
			mu.Unlock()
			if st.Redriven != per-5+2 || st.ParkedKeys != 0 {
				t.Errorf("Stats after the redrive: Redriven %d, ParkedKeys %d; want %d and 0", st.Redriven, st.ParkedKeys, per-5+2)
			}
			if l, err := pk.List(context.Background()); err != nil || len(l) != 0 {
				t.Errorf("List after the redrive: %v, %v; want nothing", l, err)
			}
		})
	}
}

// TestPermanentErrorParksAtOnce: an error wrapping ErrPermanent parks on
// its first delivery; a redrive whose handler still fails leaves the key
// parked with the new reason and its events in place.
func TestPermanentErrorParksAtOnce(t *testing.T) {
	tg := targets(t)[0]
	f := newFixture(t, tg, 1)
	f.cfg.MaxAttempts = 5
	f.publish([]string{"a", "b", "a", "b"})
	var runs atomic.Int64
	prog := newProgress()
	c, err := New(context.Background(), f.js, f.cfg, func(ctx context.Context, e Event) error {
		if e.Key == "a" {
			runs.Add(1)
			return fmt.Errorf("receiver said 422: %w", ErrPermanent)
		}
		prog.add()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	prog.waitFor(t, 2, 10*time.Second)
	pk, err := OpenParking(context.Background(), f.js, f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "a parked with 2 events", func() bool {
		l, err := pk.List(context.Background())
		return err == nil && len(l) == 1 && l[0].Events == 2
	})
	if n := runs.Load(); n != 1 {
		t.Errorf("a permanent failure ran %d times before parking, want 1", n)
	}
	if err := pk.Redrive(context.Background(), "a"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	left, err := pk.Wait(ctx, []string{"a"})
	if err != nil || len(left) != 1 {
		t.Fatalf("Wait after a failing redrive: %v, %v; want a still parked", left, err)
	}
	l, _ := pk.List(context.Background())
	if len(l) != 1 || l[0].Redrive || l[0].Events != 2 {
		t.Errorf("after a failing redrive: %+v; want a parked, no redrive asked, 2 events", l)
	}
}
