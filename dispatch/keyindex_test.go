package dispatch

import (
	"context"
	"fmt"
	"testing"
)

func TestKeyIndex(t *testing.T) {
	x := newKeyIndex[int]()
	const n = 1000
	for i := range n {
		key := fmt.Sprintf("k%d", i)
		h := x.hash(key)
		if x.get(h, key) != nil {
			t.Fatalf("%s found before it was put", key)
		}
		x.put(h, &keyState[int]{key: key})
	}
	if x.len() != n || 2*x.len() > len(x.slots) {
		t.Fatalf("len %d in %d slots, want %d keys at most half full", x.len(), len(x.slots), n)
	}
	for i := range n {
		key := fmt.Sprintf("k%d", i)
		if ks := x.get(x.hash(key), key); ks == nil || ks.key != key {
			t.Fatalf("get(%s) = %v", key, ks)
		}
	}
	if x.get(x.hash("absent"), "absent") != nil {
		t.Error("an absent key was found")
	}

	// Remove all but every 100th key: the others are still found and the
	// table shrinks.
	x.removeIf(func(ks *keyState[int]) bool {
		var i int
		fmt.Sscanf(ks.key, "k%d", &i)
		return i%100 != 0
	})
	if x.len() != n/100 || len(x.slots) != minIndexSlots {
		t.Errorf("after removal: len %d in %d slots, want %d in %d", x.len(), len(x.slots), n/100, minIndexSlots)
	}
	for i := range n {
		key := fmt.Sprintf("k%d", i)
		if got := x.get(x.hash(key), key) != nil; got != (i%100 == 0) {
			t.Errorf("after removal, get(%s) found = %v", key, got)
		}
	}
}

// TestKeyIndexCollisions: keys with one hash, and keys whose hashes fall
// on one slot, are told apart by the key itself.
func TestKeyIndexCollisions(t *testing.T) {
	x := newKeyIndex[int]()
	for i := range 40 {
		h := uint64(7) // the same hash for every key
		if i%2 == 1 {
			h = 7 + uint64(minIndexSlots)*uint64(i) // another hash, the same slot
		}
		x.put(h, &keyState[int]{key: fmt.Sprintf("c%d", i)})
	}
	for i := range 40 {
		h, key := uint64(7), fmt.Sprintf("c%d", i)
		if i%2 == 1 {
			h = 7 + uint64(minIndexSlots)*uint64(i)
		}
		if ks := x.get(h, key); ks == nil || ks.key != key {
			t.Errorf("get(%d, %s) = %v", h, key, ks)
		}
		if ks := x.get(h+1, key); ks != nil {
			t.Errorf("get with a wrong hash found %s", ks.key)
		}
	}
	x.removeIf(func(ks *keyState[int]) bool { return ks.key != "c39" })
	if ks := x.get(7+uint64(minIndexSlots)*39, "c39"); ks == nil || x.len() != 1 {
		t.Errorf("after removing all others, c39 = %v, len %d", ks, x.len())
	}
}

// TestKeyedSweepKeepsOrder: past maxIdle idle keys, registering a new key
// sweeps the idle ones out of the index. Keys that come back after the
// sweep, and keys with work during it, keep exactly-once and per-key order.
func TestKeyedSweepKeepsOrder(t *testing.T) {
	ledger := NewLedger()
	d, err := New(config(Keyed, 3, 4), func(key string, seq uint64) {
		ledger.Start(key, seq)
		ledger.Done(key, seq)
	})
	if err != nil {
		t.Fatal(err)
	}
	const keys = 3 * maxIdle
	total := 0
	for round := range 3 {
		for i := range keys {
			// Key h0 gets an item in every step, so it is busy while
			// others are swept; the rest come back once per round.
			for _, key := range []string{fmt.Sprintf("k%d", i), "h0"} {
				if round > 0 && key == "h0" && i%7 != 0 {
					continue
				}
				if err := d.Submit(context.Background(), key, ledger.Submit(key)); err != nil {
					t.Fatal(err)
				}
				total++
			}
		}
	}
	d.Close()
	rep := ledger.Report()
	if int(rep.Completed) != total || rep.Duplicates != 0 || rep.Outstanding() != 0 || rep.Violations != 0 || rep.Overlaps != 0 {
		t.Fatalf("report %+v, want %d completed once, in order, no overlap", rep, total)
	}
	if n := d.eng.(*keyedEngine[uint64]).keys.len(); n > maxIdle+1 {
		t.Errorf("the index holds %d keys of %d: idle keys were never swept", n, keys)
	}
	if st := d.Stats(); st.BackloggedKeys != 0 || st.Queued != 0 {
		t.Errorf("after Close, stats %+v: want no backlog", st)
	}
}
