package dispatch

import (
	"context"
	"sync"
	"sync/atomic"
)

// deque is a growable ring buffer whose size is always a power of two, so
// that positions wrap with a mask instead of a division. It is not safe for
// concurrent use; its owner guards it with a mutex.
type deque[T any] struct {
	buf  []T
	head int
	n    int
}

func (q *deque[T]) len() int { return q.n }

func (q *deque[T]) pushBack(v T) {
	if q.n == len(q.buf) {
		q.grow()
	}
	q.buf[(q.head+q.n)&(len(q.buf)-1)] = v
	q.n++
}

func (q *deque[T]) popFront() (T, bool) {
	var zero T
	if q.n == 0 {
		return zero, false
	}
	v := q.buf[q.head]
	q.buf[q.head] = zero // let the garbage collector have it
	q.head = (q.head + 1) & (len(q.buf) - 1)
	q.n--
	return v, true
}

func (q *deque[T]) popBack() (T, bool) {
	var zero T
	if q.n == 0 {
		return zero, false
	}
	i := (q.head + q.n - 1) & (len(q.buf) - 1)
	v := q.buf[i]
	q.buf[i] = zero
	q.n--
	return v, true
}

// front returns the oldest element without removing it.
func (q *deque[T]) front() (T, bool) {
	if q.n == 0 {
		var zero T
		return zero, false
	}
	return q.buf[q.head], true
}

func (q *deque[T]) grow() {
	size := 2 * len(q.buf)
	if size == 0 {
		size = 8
	}
	buf := make([]T, size)
	for i := 0; i < q.n; i++ {
		buf[i] = q.buf[(q.head+i)&(len(q.buf)-1)]
	}
	q.buf, q.head = buf, 0
}

// signal is a broadcast that waiters can select on. Both methods must be
// called with the owner's mutex held.
type signal struct{ ch chan struct{} }

// wait returns a channel that is closed by the next broadcast.
func (s *signal) wait() <-chan struct{} {
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

// broadcast wakes every current waiter.
func (s *signal) broadcast() {
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
}

// gate guards the channel-based strategies (Shared, Partition) against a
// send on a closed channel: submitters hold the read lock while they send,
// and Close first wakes blocked submitters through closing, then takes the
// write lock before it closes the channels.
type gate struct {
	mu      sync.RWMutex
	closed  bool
	closing chan struct{}
	once    sync.Once
}

func newGate() *gate { return &gate{closing: make(chan struct{})} }

// send delivers e on ch unless ctx ends or the gate closes first.
func send[E any](g *gate, ctx context.Context, ch chan E, e E) error {
	g.mu.RLock()
	defer g.mu.RUnlock()
	if g.closed {
		return ErrClosed
	}
	select {
	case ch <- e: // fast path: room in the queue
		return nil
	default:
	}
	select {
	case ch <- e:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-g.closing:
		return ErrClosed
	}
}

// shut stops new sends and runs closeQueues once no send is in progress.
// It reports whether this call did the shutting.
func (g *gate) shut(closeQueues func()) bool {
	did := false
	g.once.Do(func() {
		close(g.closing)
		g.mu.Lock()
		g.closed = true
		closeQueues()
		g.mu.Unlock()
		did = true
	})
	return did
}

// at returns the i-th element from the front.
func (q *deque[T]) at(i int) T { return q.buf[(q.head+i)&(len(q.buf)-1)] }

// dropBack removes the newest n elements.
func (q *deque[T]) dropBack(n int) {
	for range n {
		q.popBack()
	}
}

// counter is a per-worker completion counter padded to its own cache line,
// so that workers finishing items do not contend on one shared word.
type counter struct {
	n atomic.Uint64
	_ [56]byte
}

// sum adds up per-worker counters.
func sum(cs []counter) uint64 {
	var t uint64
	for i := range cs {
		t += cs[i].n.Load()
	}
	return t
}
