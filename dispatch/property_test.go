package dispatch

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"

	"pgregory.net/rapid"
)

// TestPropertyOrderAndExactlyOnce drives each strategy with random workers,
// queue sizes, keys, submitter goroutines and handler durations. Every
// strategy must run every accepted item exactly once; Keyed and Partition
// must also never break per-key order nor run two items of a key at once.
func TestPropertyOrderAndExactlyOnce(t *testing.T) {
	for _, s := range Strategies() {
		t.Run(string(s), func(t *testing.T) {
			rapid.Check(t, func(rt *rapid.T) {
				cfg := config(s, rapid.IntRange(1, 6).Draw(rt, "workers"), rapid.IntRange(1, 8).Draw(rt, "queue"))
				keys := rapid.IntRange(1, 12).Draw(rt, "keys")
				submitters := rapid.IntRange(1, 4).Draw(rt, "submitters")
				// One schedule per submitter: the key of each item and how
				// long its handler yields. Submitter g owns keys g, g+n, ...
				// so every key's submission order is well defined.
				type step struct{ key, yields int }
				plans := make([][]step, submitters)
				for g := range plans {
					plans[g] = rapid.SliceOfN(rapid.Custom(func(t *rapid.T) step {
						return step{rapid.IntRange(0, keys-1).Draw(t, "key"), rapid.IntRange(0, 20).Draw(t, "yields")}
					}), 0, 60).Draw(rt, fmt.Sprint("plan", g))
				}

				type work struct {
					seq    uint64
					yields int
					id     int
				}
				ledger := NewLedger()
				var mu sync.Mutex
				ran := map[int]int{}
				d, err := New(cfg, func(key string, w work) {
					ledger.Start(key, w.seq)
					for range w.yields {
						runtime.Gosched()
					}
					mu.Lock()
					ran[w.id]++
					mu.Unlock()
					ledger.Done(key, w.seq)
				})
				if err != nil {
					rt.Fatal(err)
				}
				var wg sync.WaitGroup
				total := 0
				for g, plan := range plans {
					base := total
					total += len(plan)
					wg.Go(func() {
						for i, st := range plan {
							key := fmt.Sprint("k", st.key*submitters+g)
							w := work{seq: ledger.Submit(key), yields: st.yields, id: base + i}
							if err := d.Submit(context.Background(), key, w); err != nil {
								rt.Errorf("Submit: %v", err)
							}
						}
					})
				}
				wg.Wait()
				d.Close()

				rep := ledger.Report()
				if int(rep.Completed) != total || rep.Duplicates != 0 || rep.Outstanding() != 0 {
					rt.Fatalf("%s lost or duplicated items: %+v, want %d completed once", s, rep, total)
				}
				for id, n := range ran {
					if n != 1 {
						rt.Fatalf("item %d ran %d times", id, n)
					}
				}
				if s == Keyed || s == Partition {
					if rep.Violations != 0 || rep.Overlaps != 0 {
						rt.Fatalf("%s broke per-key order: %+v", s, rep)
					}
				}
			})
		})
	}
}
