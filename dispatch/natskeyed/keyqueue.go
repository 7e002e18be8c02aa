package natskeyed

import (
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// entryState is where a held message stands.
type entryState uint8

const (
	// queued: waiting for its turn behind its key (or for the barrier).
	queued entryState = iota
	// running: in a handler.
	running
	// away: its handler failed, it was negatively acknowledged with a delay
	// and the server will deliver it again; its key waits for it.
	away
)

// entry is one message held by a partition.
type entry struct {
	msg       jetstream.Msg
	seq       uint64 // stream sequence: the message's identity and its order
	ord       uint64 // session.ord of its latest delivery
	delivered uint64 // NumDelivered of the latest delivery
	published time.Time
	state     entryState
	touched   time.Time // last delivery or progress report
	kq        *keyQueue
	draining  bool // running when its session ended: counted in partition.draining
}

// keyQueue is one key's held messages within a session, in stream order.
// At most one dispatcher token per keyQueue is outstanding (scheduled), and
// at most one of its messages runs at a time (running).
type keyQueue struct {
	p         *partition
	sess      *session
	key       string
	items     []*entry // items[head:] are live, sorted by seq
	head      int
	running   bool
	scheduled bool
	redrive   bool   // a redrive of the key's parked events is its next turn
	lastDone  uint64 // highest stream sequence of the key completed in this session
}

func (q *keyQueue) len() int { return len(q.items) - q.head }

func (q *keyQueue) front() *entry {
	if q.head == len(q.items) {
		return nil
	}
	return q.items[q.head]
}

func (q *keyQueue) popFront() {
	q.items[q.head] = nil
	q.head++
	if q.head == len(q.items) {
		q.items, q.head = q.items[:0], 0
	} else if q.head >= 32 && q.head*2 >= len(q.items) {
		n := copy(q.items, q.items[q.head:])
		clear(q.items[n:])
		q.items, q.head = q.items[:n], 0
	}
}

// insert places e in stream order. Messages of a partition arrive in stream
// order except redeliveries, so the common case is an append.
func (q *keyQueue) insert(e *entry) {
	live := q.items[q.head:]
	if len(live) == 0 || live[len(live)-1].seq < e.seq {
		q.items = append(q.items, e)
		return
	}
	i := q.head + sort.Search(len(live), func(i int) bool { return live[i].seq > e.seq })
	q.items = append(q.items, nil)
	copy(q.items[i+1:], q.items[i:])
	q.items[i] = e
}

// remove takes e out of the queue wherever it is. It is the head unless a
// message of the key arrived late, after a later one had started.
func (q *keyQueue) remove(e *entry) {
	if q.front() == e {
		q.popFront()
		return
	}
	live := q.items[q.head:]
	for i, x := range live {
		if x == e {
			copy(live[i:], live[i+1:])
			live[len(live)-1] = nil
			q.items = q.items[:len(q.items)-1]
			return
		}
	}
}

// find returns the live entry with stream sequence seq, or nil.
func (q *keyQueue) find(seq uint64) *entry {
	live := q.items[q.head:]
	if len(live) == 0 || live[len(live)-1].seq < seq {
		return nil // the common case: a new message comes after all held
	}
	i := sort.Search(len(live), func(i int) bool { return live[i].seq >= seq })
	if i < len(live) && live[i].seq == seq {
		return live[i]
	}
	return nil
}

// doneRing remembers the stream sequences a partition completed recently,
// so that a redelivery of a message whose acknowledgement was lost in
// transit is acknowledged again instead of run twice. Only redeliveries
// are looked up, and they are rare, so a lookup scans the ring and adding
// costs one store.
type doneRing struct {
	ring []uint64
	next int
}

func newDoneRing(size int) doneRing { return doneRing{ring: make([]uint64, size)} }

func (d *doneRing) has(seq uint64) bool {
	for _, s := range d.ring {
		if s == seq {
			return true
		}
	}
	return false
}

func (d *doneRing) add(seq uint64) {
	d.ring[d.next] = seq
	d.next++
	if d.next == len(d.ring) {
		d.next = 0
	}
}
