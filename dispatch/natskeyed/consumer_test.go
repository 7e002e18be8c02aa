package natskeyed

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-lab/stampede"
)

// orderHandler records every event in the fixture's ledger, taking work
// per event, and counts completions.
func orderHandler(f *fixture, prog *progress, work func(key string) time.Duration) Handler {
	return func(ctx context.Context, e Event) error {
		key, seq := parse(f.t, e.Data)
		if key != e.Key {
			f.t.Errorf("event key %q, payload key %q", e.Key, key)
		}
		f.ledger.Start(key, seq)
		if d := work(key); d > 0 {
			time.Sleep(d)
		}
		f.ledger.Done(key, seq)
		prog.add()
		return nil
	}
}

// TestFailoverKeepsOrder runs two consumers of one durable set in one
// process. A owns every partition first; B waits; A closes mid-run and B
// takes over. Per-key order holds, nothing is lost and nothing runs twice.
func TestFailoverKeepsOrder(t *testing.T) {
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			f := newFixture(t, tg, 4)
			if !f.cfg.Pinned {
				t.Logf("nats-server %s has no pinned-client priority groups (2.11+): B starts only once A has closed (a static handover)", f.version)
			}
			f.cfg.MaxPending, f.cfg.PullBatch = 100, 50
			const n = 3000
			f.publish(keysFor(n, 50, 4))
			prog := newProgress()
			var byA, byB atomic.Int64
			work := func(key string) time.Duration {
				if key == "hot" {
					return 2 * time.Millisecond
				}
				return 0
			}
			h := orderHandler(f, prog, work)
			// Each run is noted, so that a failure names the event that ran
			// twice, where, and as which delivery.
			var runsMu sync.Mutex
			runs := map[string][]string{}
			noted := func(who string, h Handler) Handler {
				return func(ctx context.Context, e Event) error {
					runsMu.Lock()
					runs[e.ID] = append(runs[e.ID], fmt.Sprintf("%s: partition %d seq %d delivery %d epoch %d", who, e.Partition, e.Sequence, e.Delivery, e.Epoch))
					runsMu.Unlock()
					return h(ctx, e)
				}
			}
			defer func() {
				for id, v := range runs {
					if len(v) > 1 {
						t.Logf("%s ran %d times: %s", id, len(v), strings.Join(v, "; "))
					}
				}
			}()
			ctx := context.Background()
			_, jsA := connect(t, f.url)
			a, err := New(ctx, jsA, f.cfg, noted("A", func(ctx context.Context, e Event) error { byA.Add(1); return h(ctx, e) }))
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
			var b *Consumer
			startB := func() {
				_, jsB := connect(t, f.url)
				b, err = New(ctx, jsB, f.cfg, noted("B", func(ctx context.Context, e Event) error { byB.Add(1); return h(ctx, e) }))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(b.Close)
			}
			if f.cfg.Pinned {
				startB() // B asks for every partition and waits for its pin
			}
			prog.waitFor(t, n/3, 60*time.Second)
			a.Close()
			closedAt := byA.Load()
			if !f.cfg.Pinned {
				// Close hands queued messages back only once A's pull
				// requests have left the server (see the package
				// documentation for why): unpinned here means a server
				// before 2.11, which needs it.
				for i := range f.cfg.Partitions {
					info, err := f.js.Consumer(ctx, f.cfg.Stream, f.cfg.ConsumerName(i))
					if err != nil {
						t.Fatal(err)
					}
					if w := info.CachedInfo().NumWaiting; w != 0 {
						t.Errorf("partition %d: %d pull requests of A still waiting after Close", i, w)
					}
				}
			}
			if !f.cfg.Pinned {
				startB()
			}
			prog.waitFor(t, n, 60*time.Second)
			b.Close()

			r := checkLedger(t, f.ledger)
			if byA.Load() != closedAt {
				t.Errorf("A ran %d events after Close returned", byA.Load()-closedAt)
			}
			if byA.Load() == 0 || byB.Load() == 0 || byA.Load() >= n {
				t.Errorf("A ran %d and B %d events of %d: the failover was not exercised", byA.Load(), byB.Load(), n)
			}
			t.Logf("%d events over %d keys: A ran %d, B ran %d; B: %+v", r.Submitted, r.Keys, byA.Load(), byB.Load(), b.Stats().Partitions)
		})
	}
}

// TestCrashFailoverKeepsOrder kills A's connection mid-run, as a process
// that dies: its held messages come back to B after AckWait, and B's
// barrier holds every partition until they do. Effects are recorded with
// an inbox of event ids, as a handler should, so that an event A finished
// but could not acknowledge is not applied twice.
func TestCrashFailoverKeepsOrder(t *testing.T) {
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			f := newFixture(t, tg, 2)
			if !f.cfg.Pinned {
				t.Logf("nats-server %s has no pinned-client priority groups (2.11+): B starts only once A has died (a static handover)", f.version)
			}
			// A window smaller than the backlog: B gets fresh messages of a
			// key while A's held ones wait for their AckWait, so only the
			// barrier keeps B from running them first.
			f.cfg.MaxPending, f.cfg.PullBatch = 100, 50
			// B is pinned (PinnedTTL after A's last pull) before A's held
			// messages reach their AckWait.
			f.cfg.AckWait, f.cfg.PinnedTTL = 5*time.Second, 2*time.Second
			const n = 2000
			f.publish(keysFor(n, 20, 3))
			prog := newProgress()
			var (
				mu      sync.Mutex
				inbox   = map[string]bool{} // the effects' table: processed event ids
				aDead   bool
				skipped int
			)
			apply := func(fromA bool, e Event) error {
				key, seq := parse(t, e.Data)
				time.Sleep(200 * time.Microsecond)
				mu.Lock()
				defer mu.Unlock()
				if fromA && aDead {
					return errors.New("dead") // a dead process commits nothing
				}
				if inbox[e.ID] {
					skipped++
					return nil
				}
				inbox[e.ID] = true
				f.ledger.Start(key, seq)
				f.ledger.Done(key, seq)
				prog.add()
				return nil
			}
			ctx := context.Background()
			ncA, jsA := connect(t, f.url)
			a, err := New(ctx, jsA, f.cfg, func(_ context.Context, e Event) error { return apply(true, e) })
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
			var b *Consumer
			startB := func() {
				_, jsB := connect(t, f.url)
				b, err = New(ctx, jsB, f.cfg, func(_ context.Context, e Event) error { return apply(false, e) })
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(b.Close)
			}
			if f.cfg.Pinned {
				startB()
			}
			prog.waitFor(t, n/3, 60*time.Second)
			mu.Lock()
			aDead = true
			mu.Unlock()
			ncA.Close()
			if !f.cfg.Pinned {
				startB()
			}
			prog.waitFor(t, n, 90*time.Second)
			b.Close()
			checkLedger(t, f.ledger)
			st := b.Stats()
			if st.Late != 0 {
				t.Errorf("B saw %d messages arrive after a later one of their key had started", st.Late)
			}
			t.Logf("B: %d delivered, %d redelivered, %d duplicates; %d events A had applied came again and were skipped; partitions %+v",
				st.Delivered, st.Redelivered, st.Duplicates, skipped, st.Partitions)
		})
	}
}

// TestQueuedBehindHotKeyNotRedelivered holds messages behind a hot key
// whose handler is slower than AckWait: progress reports keep every one of
// them from being redelivered.
func TestQueuedBehindHotKeyNotRedelivered(t *testing.T) {
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			f := newFixture(t, tg, 1)
			f.cfg.AckWait, f.cfg.InProgressEvery = time.Second, 250*time.Millisecond
			f.cfg.Workers = 4
			var keys []string
			for i := range 3 {
				keys = append(keys, "hot")
				keys = append(keys, keysFor(50, 10, 0)...)
				_ = i
			}
			f.publish(keys)
			hotCost := f.cfg.AckWait + 300*time.Millisecond
			prog := newProgress()
			var mu sync.Mutex
			deliveries := map[string]uint64{}
			rec := orderHandler(f, prog, func(key string) time.Duration {
				if key == "hot" {
					return hotCost
				}
				return 0
			})
			c, err := New(context.Background(), f.js, f.cfg, func(ctx context.Context, e Event) error {
				mu.Lock()
				deliveries[e.ID] = e.Delivery
				mu.Unlock()
				return rec(ctx, e)
			})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			prog.waitFor(t, len(keys), 60*time.Second)
			st := c.Stats()
			c.Close()
			checkLedger(t, f.ledger)
			mu.Lock()
			defer mu.Unlock()
			if len(deliveries) != len(keys) {
				t.Errorf("%d distinct events ran, want %d", len(deliveries), len(keys))
			}
			for id, d := range deliveries {
				if d != 1 {
					t.Errorf("event %s ran on delivery %d, want 1", id, d)
				}
			}
			if st.Redelivered != 0 {
				t.Errorf("%d redeliveries, want 0", st.Redelivered)
			}
			t.Logf("hot handler %s against AckWait %s: %d events, 3 hot; %d deliveries, %d redelivered", hotCost, f.cfg.AckWait, len(keys), st.Delivered, st.Redelivered)
		})
	}
}

// TestBackpressureBoundsHeldMessages consumes a backlog of 100,000 events
// and checks that no more than MaxPending messages per partition are ever
// held, on the client (exact peak) and at the server (sampled).
func TestBackpressureBoundsHeldMessages(t *testing.T) {
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			f := newFixture(t, tg, 2)
			f.cfg.MaxPending, f.cfg.PullBatch, f.cfg.Workers = 100, 50, 4
			const n = 100_000
			f.publish(keysFor(n, 1000, 10))
			prog := newProgress()
			c, err := New(context.Background(), f.js, f.cfg, orderHandler(f, prog, func(string) time.Duration { return 0 }))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			var serverPeak, lagPeak uint64
			stop := make(chan struct{})
			sampled := make(chan struct{})
			go func() {
				defer close(sampled)
				stream, _ := f.js.Stream(context.Background(), f.cfg.Stream)
				for {
					select {
					case <-stop:
						return
					case <-time.After(20 * time.Millisecond):
					}
					for p := range f.cfg.Partitions {
						cons, err := stream.Consumer(context.Background(), f.cfg.ConsumerName(p))
						if err != nil {
							continue
						}
						info := cons.CachedInfo()
						serverPeak = max(serverPeak, uint64(info.NumAckPending))
					}
					for _, p := range c.Stats().Partitions {
						lagPeak = max(lagPeak, p.Lag)
					}
				}
			}()
			prog.waitFor(t, n, 5*time.Minute)
			close(stop)
			<-sampled
			st := c.Stats()
			c.Close()
			checkLedger(t, f.ledger)
			for _, p := range st.Partitions {
				if p.HeldPeak > f.cfg.MaxPending {
					t.Errorf("partition %d held %d messages at its peak, bound %d", p.Partition, p.HeldPeak, f.cfg.MaxPending)
				}
				if p.HeldPeak < f.cfg.PullBatch {
					t.Errorf("partition %d held at most %d messages: the bound was never approached", p.Partition, p.HeldPeak)
				}
			}
			if serverPeak > uint64(f.cfg.MaxPending) {
				t.Errorf("the server counted %d unacknowledged messages on one partition, bound %d", serverPeak, f.cfg.MaxPending)
			}
			if lagPeak == 0 {
				t.Error("no partition ever reported lag, with a backlog of 100,000")
			}
			t.Logf("%d events: peak held per partition %v (bound %d), server peak %d, peak lag %d", n, peaks(st), f.cfg.MaxPending, serverPeak, lagPeak)
		})
	}
}

func peaks(st Stats) []int {
	var out []int
	for _, p := range st.Partitions {
		out = append(out, p.HeldPeak)
	}
	return out
}

// TestHandlerErrorRedeliversInOrder fails the first delivery of some
// events: each is redelivered (Delivery 2) and its key waits for it.
func TestHandlerErrorRedeliversInOrder(t *testing.T) {
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			f := newFixture(t, tg, 2)
			const n = 400
			f.publish(keysFor(n, 20, 0))
			prog := newProgress()
			rec := orderHandler(f, prog, func(string) time.Duration { return 0 })
			var mu sync.Mutex
			failed := map[string]bool{}
			retried := map[string]uint64{}
			c, err := New(context.Background(), f.js, f.cfg, func(ctx context.Context, e Event) error {
				_, seq := parse(t, e.Data)
				if seq%7 == 3 {
					mu.Lock()
					defer mu.Unlock()
					if e.Delivery == 1 {
						failed[e.ID] = true
						return errors.New("transient")
					}
					retried[e.ID] = e.Delivery
				} else if e.Delivery != 1 {
					t.Errorf("event %s (not failed) ran on delivery %d", e.ID, e.Delivery)
				}
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
			if len(failed) == 0 {
				t.Fatal("no event failed: the test exercised nothing")
			}
			for id := range failed {
				if retried[id] != 2 {
					t.Errorf("failed event %s ran again on delivery %d, want 2", id, retried[id])
				}
			}
			if st.Failed != uint64(len(failed)) {
				t.Errorf("Stats.Failed = %d, want %d", st.Failed, len(failed))
			}
			t.Logf("%d events, %d failed once and were redelivered; %d redeliveries", n, len(failed), st.Redelivered)
		})
	}
}

// TestStreamTransformMatchesPartitionOf checks that the server's
// partition(n, id) and PartitionOf agree.
func TestStreamTransformMatchesPartitionOf(t *testing.T) {
	tg := targets(t)[0]
	f := newFixture(t, tg, 7)
	ids := []string{"a", "b", "payment-1", "0b6f0c4e-8d7b-4c44-9f3e-5d1d2c7a9e11", "hot"}
	f.publish(ids)
	stream, err := f.js.Stream(context.Background(), f.cfg.Stream)
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range ids {
		m, err := stream.GetMsg(context.Background(), uint64(i+1))
		if err != nil {
			t.Fatal(err)
		}
		if want := PartitionedSubject(f.cfg.Subject, id, 7); m.Subject != want {
			t.Errorf("id %q stored as %s, PartitionedSubject says %s", id, m.Subject, want)
		}
	}
}

func TestConfigValidateNamesTheField(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("default config: %v", err)
	}
	cases := map[string]func(*Config){
		"stream":            func(c *Config) { c.Stream = "" },
		"partitions":        func(c *Config) { c.Partitions = 0 },
		"serve":             func(c *Config) { c.Serve = []int{0, 8} },
		"pinned_ttl":        func(c *Config) { c.PinnedTTL = c.PullExpiry },
		"concurrency":       func(c *Config) { c.Workers = 0 },
		"max_pending":       func(c *Config) { c.MaxPending = 0 },
		"pull_batch":        func(c *Config) { c.PullBatch = c.MaxPending + 1 },
		"ack_wait":          func(c *Config) { c.AckWait = 0 },
		"in_progress_every": func(c *Config) { c.InProgressEvery = c.AckWait },
		"max_nak_delay":     func(c *Config) { c.MaxNakDelay = c.NakDelay / 2 },
		"shutdown_timeout":  func(c *Config) { c.DrainTimeout = 0 },
		"logger":            func(c *Config) { c.Logger = nil },
	}
	all := DefaultConfig()
	for field, mutate := range cases {
		c := DefaultConfig()
		mutate(&c)
		mutate(&all)
		var got []string
		for _, e := range stampede.FieldErrors(c.Validate()) {
			got = append(got, e.Field)
		}
		if len(got) == 0 || got[0] != field {
			t.Errorf("%s: Validate() named %v, want %s first", field, got, field)
		}
	}
	named := map[string]bool{}
	for _, e := range stampede.FieldErrors(all.Validate()) {
		named[e.Field] = true
	}
	for field := range cases {
		if !named[field] {
			t.Errorf("every field wrong: Validate() did not name %s (named %v)", field, named)
		}
	}
}

func TestSubjectToken(t *testing.T) {
	for _, tc := range []struct {
		subject string
		i       int
		want    string
	}{
		{"payments.3.abc", -1, "abc"},
		{"payments.3.abc", -2, "3"},
		{"payments.3.abc", -3, "payments"},
		{"payments.3.abc", 0, "payments"},
		{"payments.3.abc", 2, "abc"},
		{"payments.3.abc", 5, "payments.3.abc"},
		{"payments.3.abc", -4, "payments.3.abc"},
		{"abc", -1, "abc"},
	} {
		if got := subjectToken(tc.subject, tc.i); got != tc.want {
			t.Errorf("subjectToken(%q, %d) = %q, want %q", tc.subject, tc.i, got, tc.want)
		}
	}
}

func TestKeyQueueKeepsStreamOrder(t *testing.T) {
	q := &keyQueue{}
	for _, s := range []uint64{5, 7, 9, 6, 1, 8} {
		q.insert(&entry{seq: s})
	}
	var got []uint64
	for q.len() > 0 {
		got = append(got, q.front().seq)
		q.popFront()
	}
	want := []uint64{1, 5, 6, 7, 8, 9}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("order %v, want %v", got, want)
		}
	}
}

func TestNakDelayDoubles(t *testing.T) {
	c := DefaultConfig()
	c.NakDelay, c.MaxNakDelay = time.Second, 5*time.Second
	for n, want := range map[uint64]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 4: 5 * time.Second, 40: 5 * time.Second} {
		if got := c.nakDelay(n); got != want {
			t.Errorf("nakDelay(%d) = %s, want %s", n, got, want)
		}
	}
}

// TestCloseCancelsHandlersAfterDrainTimeout: a handler that waits for its
// context makes Close give up after DrainTimeout; its message is not
// acknowledged, so the server still counts it pending.
func TestCloseCancelsHandlersAfterDrainTimeout(t *testing.T) {
	tg := targets(t)[0]
	f := newFixture(t, tg, 1)
	f.cfg.DrainTimeout = 200 * time.Millisecond
	f.publish([]string{"k"})
	started := make(chan struct{})
	c, err := New(context.Background(), f.js, f.cfg, func(ctx context.Context, e Event) error {
		close(started)
		<-ctx.Done()
		return ctx.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the handler did not start in 30s")
	}
	closed := make(chan struct{})
	go func() { c.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not return in 30s with a DrainTimeout of 200ms")
	}
	stream, err := f.js.Stream(context.Background(), f.cfg.Stream)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := stream.Consumer(context.Background(), f.cfg.ConsumerName(0))
	if err != nil {
		t.Fatal(err)
	}
	info := cons.CachedInfo()
	if info.AckFloor.Stream != 0 {
		t.Errorf("the cancelled event was acknowledged (ack floor %d)", info.AckFloor.Stream)
	}
	if st := c.Stats(); st.Acked != 0 || st.Failed != 1 {
		t.Errorf("Stats: %d acked, %d failed; want 0 and 1", st.Acked, st.Failed)
	}
}

// TestUnpinMidRunKeepsOrder unpins every partition while A owns them and B
// waits, as an operator or an expired PinnedTTL would: A learns from its
// next pull that its pin is gone, ends its sessions (running events finish,
// queued ones go back), and whoever the server pins next opens only behind
// its barrier.
func TestUnpinMidRunKeepsOrder(t *testing.T) {
	tg := targets(t)[0]
	f := newFixture(t, tg, 4)
	if !f.cfg.Pinned {
		t.Skipf("nats-server %s has no pinned-client priority groups", f.version)
	}
	f.cfg.MaxPending, f.cfg.PullBatch = 100, 50
	const n = 3000
	f.publish(keysFor(n, 50, 4))
	prog := newProgress()
	h := orderHandler(f, prog, func(key string) time.Duration {
		if key == "hot" {
			return time.Millisecond
		}
		return 0
	})
	ctx := context.Background()
	_, jsA := connect(t, f.url)
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
	prog.waitFor(t, n/3, 60*time.Second)
	stream, err := f.js.Stream(ctx, f.cfg.Stream)
	if err != nil {
		t.Fatal(err)
	}
	for p := range f.cfg.Partitions {
		if err := stream.UnpinConsumer(ctx, f.cfg.ConsumerName(p), f.cfg.Group); err != nil {
			t.Fatal(err)
		}
	}
	prog.waitFor(t, n, 60*time.Second)
	sa, sb := a.Stats(), b.Stats()
	a.Close()
	b.Close()
	checkLedger(t, f.ledger)
	var sessions uint64
	for _, p := range append(sa.Partitions, sb.Partitions...) {
		sessions += p.Sessions
	}
	if sessions <= uint64(f.cfg.Partitions) {
		t.Errorf("%d sessions over %d partitions: no pin moved", sessions, f.cfg.Partitions)
	}
	if sa.Late+sb.Late != 0 {
		t.Errorf("%d late arrivals", sa.Late+sb.Late)
	}
	t.Logf("A: %d acked, B: %d acked, %d sessions in all", sa.Acked, sb.Acked, sessions)
}

// TestCloseLeavesNoGoroutines: after Close, none of the consumer's
// goroutines (pulls, barrier, progress reports, dispatcher workers) runs.
// The embedded server's goroutines are not ours and are not counted.
func TestCloseLeavesNoGoroutines(t *testing.T) {
	tg := targets(t)[0]
	f := newFixture(t, tg, 2)
	f.publish(keysFor(200, 10, 0))
	_, js := connect(t, f.url)
	prog := newProgress()
	c, err := New(context.Background(), js, f.cfg, orderHandler(f, prog, func(string) time.Duration { return 0 }))
	if err != nil {
		t.Fatal(err)
	}
	prog.waitFor(t, 200, 30*time.Second)
	if ours := ourGoroutines(); len(ours) == 0 {
		t.Fatal("no goroutine of the consumer found while it runs: the check would be vacuous")
	}
	c.Close()
	var ours []string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if ours = ourGoroutines(); len(ours) == 0 {
			return
		}
	}
	t.Errorf("%d goroutines of the consumer left after Close:\n%s", len(ours), strings.Join(ours, "\n\n"))
}

// ourGoroutines returns the stacks of running goroutines that belong to a
// Consumer: this package's, the dispatcher's and nats.go's pull loops.
func ourGoroutines() []string {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	var ours []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "TestCloseLeavesNoGoroutines") || strings.Contains(g, "ourGoroutines") {
			continue
		}
		if strings.Contains(g, "stampede/dispatch/natskeyed.(*") || strings.Contains(g, "stampede/dispatch.(*keyedEngine") ||
			strings.Contains(g, "jetstream.(*pullSubscription)") {
			ours = append(ours, g)
		}
	}
	return ours
}
