package natskeyed

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/internal/tcpproxy"
)

// leaseFixture is a fixture whose consumers hold their partitions by
// leases, on any server (pinning off even where the server has it).
func leaseFixture(t *testing.T, tg target, partitions int) *fixture {
	f := newFixture(t, tg, partitions)
	f.cfg.Pinned = false
	f.cfg.Lease = time.Second
	f.cfg.AckWait, f.cfg.InProgressEvery = 1500*time.Millisecond, 300*time.Millisecond
	f.cfg.MaxPending, f.cfg.PullBatch = 100, 50
	f.cfg.Workers = 4
	return f
}

// store is an effect store with an inbox and the fence of the package
// documentation: per partition the largest epoch written, and a write
// with a smaller one refused with ErrFenced.
type store struct {
	mu      sync.Mutex
	f       *fixture
	prog    *progress
	epoch   map[int]uint64
	inbox   map[string]bool
	refused []string
	skipped int
}

func newStore(f *fixture, prog *progress) *store {
	return &store{f: f, prog: prog, epoch: map[int]uint64{}, inbox: map[string]bool{}}
}

// apply writes e's effect in one "transaction".
func (s *store) apply(who string, e Event) error {
	key, seq := parse(s.f.t, e.Data)
	s.mu.Lock()
	defer s.mu.Unlock()
	if e.Epoch < s.epoch[e.Partition] {
		s.refused = append(s.refused, fmt.Sprintf("%s: %s epoch %d < %d", who, e.ID, e.Epoch, s.epoch[e.Partition]))
		return fmt.Errorf("store: %w", ErrFenced)
	}
	s.epoch[e.Partition] = e.Epoch
	if s.inbox[e.ID] {
		s.skipped++
		return nil
	}
	s.inbox[e.ID] = true
	s.f.ledger.Start(key, seq)
	s.f.ledger.Done(key, seq)
	s.prog.add()
	return nil
}

func leasedParts(c *Consumer) map[int]bool {
	m := map[int]bool{}
	for _, p := range c.Stats().Partitions {
		if p.Leased {
			m[p.Partition] = true
		}
	}
	return m
}

// TestLeaseTakeoverAfterKill: A's own share is partitions 0 and 1, B's 2
// and 3; while both live, each holds its own share and nothing else.
// A dies mid-run (its connection closes under it and it commits nothing
// more); B takes its partitions within Lease plus Lease/3 and finishes
// every event, each key in order, none lost.
func TestLeaseTakeoverAfterKill(t *testing.T) {
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			f := leaseFixture(t, tg, 4)
			const n = 1500
			prog := newProgress()
			st := newStore(f, prog)
			var mu sync.Mutex
			aDead := false
			ctx := context.Background()
			ncA, jsA := connect(t, f.url)
			cfgA := f.cfg
			cfgA.Serve = []int{0, 1}
			a, err := New(ctx, jsA, cfgA, func(_ context.Context, e Event) error {
				time.Sleep(2 * time.Millisecond)
				mu.Lock()
				dead := aDead
				mu.Unlock()
				if dead {
					return errors.New("dead") // a dead process commits nothing
				}
				return st.apply("A", e)
			})
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			_, jsB := connect(t, f.url)
			cfgB := f.cfg
			cfgB.Serve = []int{2, 3}
			b, err := New(ctx, jsB, cfgB, func(_ context.Context, e Event) error {
				time.Sleep(2 * time.Millisecond)
				return st.apply("B", e)
			})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			waitUntil(t, 10*time.Second, "each process holds its own share", func() bool {
				la, lb := leasedParts(a), leasedParts(b)
				return len(la) == 2 && la[0] && la[1] && len(lb) == 2 && lb[2] && lb[3]
			})
			f.publish(keysFor(n, 40, 3))
			prog.waitFor(t, n/3, 60*time.Second)
			if la, lb := leasedParts(a), leasedParts(b); len(la) != 2 || len(lb) != 2 {
				t.Errorf("with both alive the layout moved: A leases %v, B %v", la, lb)
			}
			mu.Lock()
			aDead = true
			mu.Unlock()
			ncA.Close()
			killed := time.Now()
			bound := f.cfg.Lease + f.cfg.Lease/3
			waitUntil(t, 3*bound, "B leases A's partitions", func() bool { return len(leasedParts(b)) == 4 })
			took := time.Since(killed)
			// Lease + Lease/3 is the bound; allow for the look itself (a
			// KV read and write on a loaded machine).
			if took > bound+500*time.Millisecond {
				t.Errorf("B took A's partitions %s after the kill, bound %s", took, bound)
			}
			prog.waitFor(t, n, 60*time.Second)
			stB := b.Stats()
			b.Close()
			checkLedger(t, f.ledger)
			if stB.Takeovers != 2 {
				t.Errorf("B counted %d takeovers, want 2", stB.Takeovers)
			}
			if stB.Late != 0 {
				t.Errorf("B saw %d messages arrive after a later one of their key had started", stB.Late)
			}
			t.Logf("B took A's partitions %s after the kill (bound %s); B: %d delivered, %d redelivered, %d duplicates; %d effects A had written came again and were skipped",
				took, bound, stB.Delivered, stB.Redelivered, stB.Duplicates, st.skipped)
		})
	}
}

// TestLeasePausedHolderIsFenced: A holds partition 0 (its own) and
// stops, as under SIGSTOP, in the middle of an event X: no lease
// renewals, no progress reports. B takes partition 0 over once the lease
// ran out, runs X and everything after it with a larger epoch; A starts
// nothing of partition 0 meanwhile. When A wakes, its late write of X
// is refused by the fence (ErrFenced); A finds its lease lost, asks for
// its partition back, and B hands it back.
func TestLeasePausedHolderIsFenced(t *testing.T) {
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			f := leaseFixture(t, tg, 2)
			const n = 600
			prog := newProgress()
			st := newStore(f, prog)
			var (
				mu       sync.Mutex
				x        string
				xEpoch   uint64
				bStarted bool // B has started an event of partition 0
				aLate    []string
			)
			blocked, resume := make(chan struct{}), make(chan struct{})
			ctx := context.Background()
			// A reaches the server through a proxy that can freeze its
			// traffic, as a process stopped by SIGSTOP: no renewals, no
			// progress reports, its pull requests run out at the server.
			px, err := tcpproxy.Start(strings.TrimPrefix(f.url, "nats://"))
			if err != nil {
				t.Fatal(err)
			}
			defer px.Close()
			_, jsA := connect(t, "nats://"+px.Addr())
			cfgA := f.cfg
			cfgA.Serve = []int{0}
			a, err := New(ctx, jsA, cfgA, func(_ context.Context, e Event) error {
				mu.Lock()
				if e.Partition == 0 && bStarted {
					aLate = append(aLate, e.ID)
				}
				stop := x == "" && e.Partition == 0 && prog.count() >= n/4
				if stop {
					x, xEpoch = e.ID, e.Epoch
					px.Freeze() // A stops here
				}
				mu.Unlock()
				if stop {
					close(blocked)
					<-resume
				}
				return st.apply("A", e)
			})
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			waitUntil(t, 10*time.Second, "A leases partition 0", func() bool { return leasedParts(a)[0] })
			_, jsB := connect(t, f.url)
			cfgB := f.cfg
			cfgB.Serve = []int{1}
			b, err := New(ctx, jsB, cfgB, func(_ context.Context, e Event) error {
				if e.Partition == 0 {
					mu.Lock()
					bStarted = true
					mu.Unlock()
				}
				return st.apply("B", e)
			})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			f.publish(keysFor(n, 30, 0))
			select {
			case <-blocked:
			case <-time.After(30 * time.Second):
				t.Fatal("A never reached the event it stops in")
			}
			prog.waitFor(t, n, 60*time.Second) // B runs X and the rest of partition 0
			close(resume)
			waitUntil(t, 10*time.Second, "A's late write is refused", func() bool { return a.Stats().Fenced == 1 })
			px.Thaw()
			waitUntil(t, 10*time.Second, "B hands partition 0 back to A", func() bool { return leasedParts(a)[0] && !leasedParts(b)[0] })
			stA, stB := a.Stats(), b.Stats()
			checkLedger(t, f.ledger)
			mu.Lock()
			defer mu.Unlock()
			st.mu.Lock()
			defer st.mu.Unlock()
			if len(st.refused) != 1 {
				t.Errorf("refused writes %v, want A's write of X alone", st.refused)
			}
			if len(aLate) != 0 {
				t.Errorf("A started %d events of partition 0 after B had started it: %v", len(aLate), aLate)
			}
			if stB.Takeovers != 1 || stB.Handbacks != 1 {
				t.Errorf("B: %d takeovers and %d handbacks, want 1 and 1", stB.Takeovers, stB.Handbacks)
			}
			if stA.LeaseLosses != 1 {
				t.Errorf("A lost %d leases, want 1", stA.LeaseLosses)
			}
			t.Logf("X=%s stopped at epoch %d; refused: %v; partition 0's epoch now %d", x, xEpoch, st.refused, st.epoch[0])
		})
	}
}

// TestLeaseValidated: a negative or too short Lease is refused by name.
func TestLeaseValidated(t *testing.T) {
	for _, d := range []time.Duration{-time.Second, 100 * time.Millisecond} {
		cfg := DefaultConfig()
		cfg.Lease = d
		if err := cfg.Validate(); err == nil || stampede.As(err).Field != "lease" {
			t.Errorf("Lease %s: %v, want a field error on lease", d, err)
		}
	}
	cfg := DefaultConfig()
	cfg.Lease = 0
	if err := cfg.Validate(); err != nil {
		t.Errorf("Lease 0 (off): %v", err)
	}
}
