package dispatch

import "sync"

// Ledger checks per-key order from the outside: the code under test records
// when each item is submitted, starts and completes, and the Ledger counts
// what went wrong. It knows nothing of the dispatcher, so it checks any
// strategy the same way.
//
// A violation is an item that completes while an earlier-submitted item of
// the same key has not completed yet (one count per overtaking item). An
// overlap is an item that starts while another item of the same key is
// running. A Ledger is safe for concurrent use.
type Ledger struct {
	mu   sync.Mutex
	keys map[string]*keyRecord
}

// keyRecord is the Ledger's view of one key.
type keyRecord struct {
	next       uint64          // sequence number of the next submitted item
	low        uint64          // lowest sequence number not completed
	done       map[uint64]bool // completed sequence numbers above low
	running    int
	completed  uint64
	violations uint64
	overlaps   uint64
	duplicates uint64
}

// NewLedger returns an empty Ledger.
func NewLedger() *Ledger { return &Ledger{keys: make(map[string]*keyRecord)} }

// Submit records that an item of key was accepted and returns its per-key
// sequence number, which the caller passes to Start and Done. Call it in the
// order items are submitted.
func (l *Ledger) Submit(key string) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.keys[key]
	if r == nil {
		r = &keyRecord{done: make(map[uint64]bool)}
		l.keys[key] = r
	}
	seq := r.next
	r.next++
	return seq
}

// Start records that item seq of key began running.
func (l *Ledger) Start(key string, seq uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.keys[key]
	if r == nil {
		return
	}
	r.running++
	if r.running > 1 {
		r.overlaps++
	}
}

// Done records that item seq of key completed.
func (l *Ledger) Done(key string, seq uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.keys[key]
	if r == nil || seq >= r.next {
		return
	}
	if r.running > 0 {
		r.running--
	}
	if seq < r.low || r.done[seq] {
		r.duplicates++
		return
	}
	r.completed++
	if seq > r.low {
		r.violations++ // an earlier item of this key is still outstanding
		r.done[seq] = true
		return
	}
	r.low++
	for r.done[r.low] {
		delete(r.done, r.low)
		r.low++
	}
}

// KeyReport is the Ledger's account of one key, or of all keys together.
type KeyReport struct {
	// Submitted and Completed count items (duplicates excluded).
	Submitted, Completed uint64
	// Violations counts items that completed before an earlier item of the
	// same key.
	Violations uint64
	// Overlaps counts items that started while another item of the same
	// key was running.
	Overlaps uint64
	// Duplicates counts completions reported twice for one item.
	Duplicates uint64
}

// Outstanding is the number of submitted items that never completed: after
// a drain, these were lost.
func (k KeyReport) Outstanding() uint64 { return k.Submitted - k.Completed }

// Report is the Ledger's account of every key.
type Report struct {
	KeyReport
	// Keys counts distinct keys.
	Keys int
	// OrderedKeys counts keys with at least two items: only those can be
	// out of order.
	OrderedKeys int
}

// Vacuous reports whether the order check could not have failed because no
// key had two items.
func (r Report) Vacuous() bool { return r.OrderedKeys == 0 }

// Key returns the account of one key (zero if it never appeared).
func (l *Ledger) Key(key string) KeyReport {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := l.keys[key]; r != nil {
		return r.report()
	}
	return KeyReport{}
}

// Report sums the accounts of every key.
func (l *Ledger) Report() Report {
	l.mu.Lock()
	defer l.mu.Unlock()
	var rep Report
	for _, r := range l.keys {
		k := r.report()
		rep.Submitted += k.Submitted
		rep.Completed += k.Completed
		rep.Violations += k.Violations
		rep.Overlaps += k.Overlaps
		rep.Duplicates += k.Duplicates
		rep.Keys++
		if k.Submitted >= 2 {
			rep.OrderedKeys++
		}
	}
	return rep
}

func (r *keyRecord) report() KeyReport {
	return KeyReport{Submitted: r.next, Completed: r.completed, Violations: r.violations, Overlaps: r.overlaps, Duplicates: r.duplicates}
}
