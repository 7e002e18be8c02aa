package dispatch

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stampede-lab/stampede"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// job is the test item: which key, and its per-key sequence number from a
// Ledger.
type job struct{ seq uint64 }

func newDispatcher(t *testing.T, cfg Config, h Handler[job]) *Dispatcher[job] {
	t.Helper()
	d, err := New(cfg, h)
	if err != nil {
		t.Fatalf("New(%+v): %v", cfg, err)
	}
	return d
}

func config(s Strategy, workers, queue int) Config {
	c := DefaultConfig()
	c.Strategy, c.Workers, c.QueueSize = s, workers, queue
	return c
}

// keysInPartition returns n distinct keys that hash to partition p of parts.
func keysInPartition(p, parts, n int) []string {
	var keys []string
	for i := 0; len(keys) < n; i++ {
		k := fmt.Sprintf("key-%d", i)
		if partitionOf(k, parts) == p {
			keys = append(keys, k)
		}
	}
	return keys
}

func TestConfigValidateNamesTheField(t *testing.T) {
	cases := []struct {
		mutate func(*Config)
		field  string
	}{
		{func(c *Config) { c.Strategy = "fifo" }, "strategy"},
		{func(c *Config) { c.Workers = 0 }, "workers"},
		{func(c *Config) { c.QueueSize = 0 }, "queue_size"},
		{func(c *Config) { c.Strategy, c.StealAfter = Steal, 0 }, "steal_after"},
	}
	for _, tc := range cases {
		c := DefaultConfig()
		tc.mutate(&c)
		err := c.Validate()
		if fe := stampede.FieldErrors(err); len(fe) != 1 || fe[0].Field != tc.field {
			t.Errorf("Validate() = %v, want an error naming %s", err, tc.field)
		}
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Errorf("DefaultConfig().Validate() = %v", err)
	}
	if _, err := New[job](DefaultConfig(), nil); err == nil {
		t.Error("New with a nil handler succeeded")
	}
}

func TestConfigValidateNamesEveryBadField(t *testing.T) {
	c := DefaultConfig()
	c.Workers, c.QueueSize = 0, 0
	var got []string
	for _, e := range stampede.FieldErrors(c.Validate()) {
		got = append(got, e.Field)
	}
	if want := []string{"workers", "queue_size"}; !slices.Equal(got, want) {
		t.Errorf("bad fields = %v, want %v", got, want)
	}
}

func TestParseStrategy(t *testing.T) {
	for _, s := range Strategies() {
		got, err := ParseStrategy(string(s))
		if err != nil || got != s {
			t.Errorf("ParseStrategy(%q) = %q, %v", s, got, err)
		}
	}
	if _, err := ParseStrategy("round-robin"); err == nil {
		t.Error(`ParseStrategy("round-robin") succeeded`)
	}
}

// TestEveryItemRunsExactlyOnce submits from several goroutines with small
// queues (so submitters block) and checks that Close drains everything.
func TestEveryItemRunsExactlyOnce(t *testing.T) {
	for _, s := range Strategies() {
		t.Run(string(s), func(t *testing.T) {
			const submitters, perSubmitter = 4, 500
			ledger := NewLedger()
			var mu sync.Mutex
			runs := map[string]int{}
			d := newDispatcher(t, config(s, 3, 4), func(key string, j job) {
				ledger.Start(key, j.seq)
				mu.Lock()
				runs[fmt.Sprintf("%s/%d", key, j.seq)]++
				mu.Unlock()
				ledger.Done(key, j.seq)
			})
			var wg sync.WaitGroup
			for g := range submitters {
				wg.Go(func() {
					for i := range perSubmitter {
						key := fmt.Sprintf("g%d-k%d", g, i%7) // each submitter owns its keys
						if err := d.Submit(context.Background(), key, job{ledger.Submit(key)}); err != nil {
							t.Errorf("Submit: %v", err)
						}
					}
				})
			}
			wg.Wait()
			d.Close()
			rep := ledger.Report()
			if rep.Submitted != submitters*perSubmitter || rep.Completed != rep.Submitted || rep.Duplicates != 0 {
				t.Fatalf("ledger = %+v, want %d submitted, all completed once", rep, submitters*perSubmitter)
			}
			for item, n := range runs {
				if n != 1 {
					t.Errorf("item %s ran %d times", item, n)
				}
			}
			st := d.Stats()
			if st.Submitted != uint64(rep.Submitted) || st.Completed != st.Submitted || st.Queued != 0 {
				t.Errorf("stats = %+v after Close", st)
			}
		})
	}
}

func TestSubmitAfterCloseIsRefused(t *testing.T) {
	for _, s := range Strategies() {
		d := newDispatcher(t, config(s, 2, 2), func(string, job) {})
		d.Close()
		d.Close() // twice is fine
		if err := d.Submit(context.Background(), "k", job{}); !errors.Is(err, ErrClosed) {
			t.Errorf("%s: Submit after Close = %v, want ErrClosed", s, err)
		}
	}
}

// TestCloseWaitsForAcceptedItems: Close does not return while accepted items
// are still queued or running.
func TestCloseWaitsForAcceptedItems(t *testing.T) {
	for _, s := range Strategies() {
		t.Run(string(s), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				release := make(chan struct{})
				var mu sync.Mutex
				ran := 0
				d := newDispatcher(t, config(s, 2, 16), func(string, job) {
					<-release
					mu.Lock()
					ran++
					mu.Unlock()
				})
				for i := range 10 {
					if err := d.Submit(context.Background(), fmt.Sprint("k", i%3), job{}); err != nil {
						t.Fatal(err)
					}
				}
				closed := make(chan struct{})
				go func() { d.Close(); close(closed) }()
				synctest.Wait()
				select {
				case <-closed:
					t.Fatal("Close returned while items were still blocked")
				default:
				}
				close(release)
				<-closed
				if ran != 10 {
					t.Fatalf("ran %d items, want 10", ran)
				}
			})
		})
	}
}

// TestSubmitHonoursContextWhenFull: with the item's queue full, Submit waits
// and gives up when its context ends; the refused item never runs.
func TestSubmitHonoursContextWhenFull(t *testing.T) {
	for _, s := range Strategies() {
		t.Run(string(s), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				release := make(chan struct{})
				var mu sync.Mutex
				var seen []uint64
				d := newDispatcher(t, config(s, 1, 1), func(_ string, j job) {
					<-release
					mu.Lock()
					seen = append(seen, j.seq)
					mu.Unlock()
				})
				ctx := context.Background()
				// One item running, one queued: the queue is full.
				for i := range 2 {
					if err := d.Submit(ctx, "k", job{uint64(i)}); err != nil {
						t.Fatal(err)
					}
					synctest.Wait()
				}
				tctx, cancel := context.WithTimeout(ctx, time.Second)
				defer cancel()
				start := time.Now()
				err := d.Submit(tctx, "k", job{99})
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("Submit on a full queue = %v, want DeadlineExceeded", err)
				}
				if waited := time.Since(start); waited != time.Second {
					t.Errorf("Submit gave up after %s, want exactly the 1s deadline", waited)
				}
				close(release)
				d.Close()
				if len(seen) != 2 || seen[0] != 0 || seen[1] != 1 {
					t.Fatalf("ran %v, want [0 1] (the refused item must not run)", seen)
				}
			})
		})
	}
}

// TestCloseReleasesBlockedSubmitters: a submitter waiting on a full queue
// gets ErrClosed when Close starts, and its item never runs.
func TestCloseReleasesBlockedSubmitters(t *testing.T) {
	for _, s := range Strategies() {
		t.Run(string(s), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				release := make(chan struct{})
				d := newDispatcher(t, config(s, 1, 1), func(_ string, j job) {
					if j.seq == 99 {
						t.Error("the refused item ran")
					}
					<-release
				})
				for i := range 2 {
					if err := d.Submit(context.Background(), "k", job{uint64(i)}); err != nil {
						t.Fatal(err)
					}
					synctest.Wait()
				}
				errc := make(chan error, 1)
				go func() { errc <- d.Submit(context.Background(), "k", job{99}) }()
				synctest.Wait() // the submitter is blocked
				closed := make(chan struct{})
				go func() { d.Close(); close(closed) }()
				if err := <-errc; !errors.Is(err, ErrClosed) {
					t.Fatalf("blocked Submit during Close = %v, want ErrClosed", err)
				}
				close(release)
				<-closed
			})
		})
	}
}

// TestKeyedHotKeyDoesNotBlockOthers: while a hot key's item is stuck, items
// of every other key complete, and the hot key never has two items in
// flight.
func TestKeyedHotKeyDoesNotBlockOthers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		ledger := NewLedger()
		d := newDispatcher(t, config(Keyed, 2, 8), func(key string, j job) {
			ledger.Start(key, j.seq)
			if key == "hot" {
				<-release
			}
			ledger.Done(key, j.seq)
		})
		submit := func(key string) {
			if err := d.Submit(context.Background(), key, job{ledger.Submit(key)}); err != nil {
				t.Fatal(err)
			}
		}
		for range 5 {
			submit("hot")
		}
		for i := range 20 {
			submit(fmt.Sprint("cold-", i))
		}
		synctest.Wait()
		if got := ledger.Key("hot"); got.Completed != 0 {
			t.Fatalf("hot completed %d items while blocked", got.Completed)
		}
		rep := ledger.Report()
		if rep.Completed != 20 {
			t.Fatalf("completed %d cold items while hot was blocked, want all 20", rep.Completed)
		}
		if d.Stats().Queued != 4 {
			t.Errorf("queued = %d, want the 4 waiting hot items", d.Stats().Queued)
		}
		close(release)
		d.Close()
		rep = ledger.Report()
		if rep.Completed != 25 || rep.Violations != 0 || rep.Overlaps != 0 {
			t.Fatalf("report = %+v, want 25 completed, no violations, no overlaps", rep)
		}
	})
}

// TestKeyedFullKeyDoesNotBlockOtherSubmitters: a key whose queue is full
// blocks only its own submitters.
func TestKeyedFullKeyDoesNotBlockOtherSubmitters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		d := newDispatcher(t, config(Keyed, 2, 1), func(key string, _ job) {
			if key == "hot" {
				<-release
			}
		})
		ctx := context.Background()
		for range 2 { // one running, one queued: hot's queue is full
			if err := d.Submit(ctx, "hot", job{}); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
		}
		hotDone := make(chan error, 1)
		go func() { hotDone <- d.Submit(ctx, "hot", job{}) }()
		for i := range 50 {
			if err := d.Submit(ctx, fmt.Sprint("cold-", i), job{}); err != nil {
				t.Fatal(err)
			}
		}
		synctest.Wait()
		select {
		case err := <-hotDone:
			t.Fatalf("Submit to the full hot key returned %v before hot drained", err)
		default:
		}
		close(release)
		if err := <-hotDone; err != nil {
			t.Fatalf("hot Submit after release: %v", err)
		}
		d.Close()
		if st := d.Stats(); st.Completed != 53 {
			t.Fatalf("completed %d, want 53", st.Completed)
		}
	})
}

// TestPartitionHeadOfLineBlocking shows Partition's price: a key that hashes
// beside a stuck key waits behind it, while keys elsewhere run.
func TestPartitionHeadOfLineBlocking(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const parts = 4
		same := keysInPartition(0, parts, 2)
		other := keysInPartition(1, parts, 1)[0]
		release := make(chan struct{})
		var mu sync.Mutex
		done := map[string]bool{}
		d := newDispatcher(t, config(Partition, parts, 8), func(key string, _ job) {
			if key == same[0] {
				<-release
			}
			mu.Lock()
			done[key] = true
			mu.Unlock()
		})
		for _, k := range []string{same[0], same[1], other} {
			if err := d.Submit(context.Background(), k, job{}); err != nil {
				t.Fatal(err)
			}
		}
		synctest.Wait()
		if done[same[1]] {
			t.Error("a key in the stuck partition ran before the stuck item finished")
		}
		if !done[other] {
			t.Error("a key in another partition did not run")
		}
		close(release)
		d.Close()
	})
}

// TestSharedRunsOneKeyConcurrently shows that Shared gives no per-key
// guarantee: two items of one key run at the same time.
func TestSharedRunsOneKeyConcurrently(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ledger := NewLedger()
		both := make(chan struct{})
		var once sync.Once
		var mu sync.Mutex
		started := 0
		d := newDispatcher(t, config(Shared, 2, 8), func(key string, j job) {
			ledger.Start(key, j.seq)
			mu.Lock()
			started++
			if started == 2 {
				once.Do(func() { close(both) })
			}
			mu.Unlock()
			<-both
			ledger.Done(key, j.seq)
		})
		for range 2 {
			if err := d.Submit(context.Background(), "k", job{ledger.Submit("k")}); err != nil {
				t.Fatal(err)
			}
		}
		d.Close()
		if rep := ledger.Report(); rep.Overlaps != 1 {
			t.Fatalf("overlaps = %d, want 1 (both items of k in flight together)", rep.Overlaps)
		}
	})
}

// TestStealMovesStaleBacklog: nothing moves before a head has waited
// StealAfter; then an idle worker takes the back half, and keeps taking the
// back half while the head stays stale, running the items while the owner is
// still stuck, and per-key order breaks.
func TestStealMovesStaleBacklog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const parts = 2
		hot := keysInPartition(0, parts, 1)[0]
		release := make(chan struct{})
		ledger := NewLedger()
		cfg := config(Steal, parts, 16)
		cfg.StealAfter = 500 * time.Millisecond
		d := newDispatcher(t, cfg, func(key string, j job) {
			ledger.Start(key, j.seq)
			if j.seq == 0 {
				<-release // the owner is stuck on the first item
			} else {
				time.Sleep(10 * time.Millisecond)
			}
			ledger.Done(key, j.seq)
		})
		for range 5 { // item 0 runs; items 1-4 wait in partition 0
			if err := d.Submit(context.Background(), hot, job{ledger.Submit(hot)}); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(cfg.StealAfter - time.Millisecond)
		synctest.Wait()
		if st := d.Stats(); st.Stolen != 0 {
			t.Fatalf("stole %d items before StealAfter", st.Stolen)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if st := d.Stats(); st.Stolen != 2 || st.QueueDepths[0] != 2 {
			t.Fatalf("stolen = %d, depths = %v: want the back half (2) of the 4 waiting items moved", st.Stolen, st.QueueDepths)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if st := d.Stats(); st.Stolen != 4 || ledger.Key(hot).Completed != 4 {
			t.Fatalf("stolen = %d, completed = %d: want every waiting item taken and run while the owner is stuck",
				st.Stolen, ledger.Key(hot).Completed)
		}
		close(release)
		d.Close()
		rep := ledger.Report()
		if rep.Completed != 5 || rep.Violations == 0 || rep.Overlaps == 0 {
			t.Fatalf("report = %+v: want all 5 completed, and stealing to have broken order", rep)
		}
	})
}

func TestStealKeepsOrderWithoutStaleHeads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ledger := NewLedger()
		cfg := config(Steal, 4, 64)
		d := newDispatcher(t, cfg, func(key string, j job) {
			ledger.Start(key, j.seq)
			time.Sleep(time.Millisecond)
			ledger.Done(key, j.seq)
		})
		for i := range 200 {
			key := fmt.Sprint("k", i%20)
			if err := d.Submit(context.Background(), key, job{ledger.Submit(key)}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(2 * time.Millisecond) // well under capacity: no head ever waits 500ms
		}
		d.Close()
		if rep := ledger.Report(); rep.Violations != 0 || rep.Completed != 200 || d.Stats().Stolen != 0 {
			t.Fatalf("report = %+v, stolen = %d: want plain partition behaviour", rep, d.Stats().Stolen)
		}
	})
}
