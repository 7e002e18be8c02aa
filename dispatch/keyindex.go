package dispatch

import "hash/maphash"

// keyIndex maps keys to their states under the Keyed strategy. It is an
// open-addressing hash table with linear probing whose slots hold a key's
// hash beside a pointer to its state, which holds the key.
//
// It replaces a map[string]*keyState on the submit path, where the lookup
// was about 40 % of the strategy's CPU time per item (BenchmarkDispatch,
// 1,000 keys): a Go map finds a key through its group's control word and
// then the slot's key, two cache lines apart, before the state itself,
// where this table reads one 16-byte slot and then the state, which the
// caller reads anyway. The hash is computed by the caller, before it takes
// the engine's lock.
//
// The table is at most half full, so probes stay short; it has no
// tombstones: removal (the sweep of idle keys) rebuilds it. Not safe for
// concurrent use; the engine's mutex guards it.
type keyIndex[T any] struct {
	seed  maphash.Seed
	slots []keySlot[T] // len is a power of two
	n     int
}

// keySlot is one slot of a keyIndex; ks is nil in an empty slot.
type keySlot[T any] struct {
	hash uint64
	ks   *keyState[T]
}

// minIndexSlots is the size of a new keyIndex.
const minIndexSlots = 64

func newKeyIndex[T any]() keyIndex[T] {
	return keyIndex[T]{seed: maphash.MakeSeed(), slots: make([]keySlot[T], minIndexSlots)}
}

// hash returns key's hash, to pass to get and put.
func (x *keyIndex[T]) hash(key string) uint64 { return maphash.String(x.seed, key) }

// len returns the number of keys.
func (x *keyIndex[T]) len() int { return x.n }

// get returns the state of key, whose hash is h, or nil.
func (x *keyIndex[T]) get(h uint64, key string) *keyState[T] {
	mask := uint64(len(x.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		s := &x.slots[i]
		if s.ks == nil {
			return nil
		}
		if s.hash == h && s.ks.key == key {
			return s.ks
		}
	}
}

// put adds ks, whose key has hash h and is not in x.
func (x *keyIndex[T]) put(h uint64, ks *keyState[T]) {
	if 2*(x.n+1) > len(x.slots) {
		x.rebuild(2*len(x.slots), nil)
	}
	x.insert(h, ks)
	x.n++
}

// insert places ks in the first empty slot from its hash on.
func (x *keyIndex[T]) insert(h uint64, ks *keyState[T]) {
	mask := uint64(len(x.slots) - 1)
	i := h & mask
	for x.slots[i].ks != nil {
		i = (i + 1) & mask
	}
	x.slots[i] = keySlot[T]{h, ks}
}

// removeIf removes every key whose state drop reports true.
func (x *keyIndex[T]) removeIf(drop func(*keyState[T]) bool) {
	x.rebuild(len(x.slots), drop)
}

// rebuild moves the keys that drop does not report (all of them if drop
// is nil) into a new table of size slots, shrunk while it would be at
// most a quarter full.
func (x *keyIndex[T]) rebuild(size int, drop func(*keyState[T]) bool) {
	kept := make([]keySlot[T], 0, x.n)
	for _, s := range x.slots {
		if s.ks != nil && (drop == nil || !drop(s.ks)) {
			kept = append(kept, s)
		}
	}
	for size > minIndexSlots && 4*len(kept) <= size/2 {
		size /= 2
	}
	x.slots, x.n = make([]keySlot[T], size), len(kept)
	for _, s := range kept {
		x.insert(s.hash, s.ks)
	}
}
