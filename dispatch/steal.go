package dispatch

import (
	"context"
	"sync"
	"time"
)

// stamped is an item with the time it was accepted.
type stamped[T any] struct {
	key  string
	item T
	at   time.Time
}

// stealEngine is the Steal strategy: the partitions of Partition, each a
// deque owned by one worker, and a worker whose own partition is empty takes
// the back half of the partition whose head has waited longest, once that
// head has waited at least StealAfter. One mutex guards every partition; the
// strategy exists to be measured at a few hundred items per second, not to
// be fast.
type stealEngine[T any] struct {
	cfg     Config
	handler Handler[T]
	workers sync.WaitGroup
	closing chan struct{}

	mu        sync.Mutex
	queues    []deque[stamped[T]] // one per partition, owned by the worker of the same index
	space     []signal            // per partition: broadcast when a slot frees
	wake      []chan struct{}     // per worker, capacity 1
	busy      []bool              // per worker: running a handler
	sleeping  []bool              // per worker: waiting for work or a stale head
	until     []time.Time         // per sleeping worker: when its timer fires (zero: no timer)
	queued    int
	closed    bool
	submitted uint64
	completed uint64
	stolen    uint64
}

func newSteal[T any](cfg Config, h Handler[T]) *stealEngine[T] {
	n := cfg.Workers
	e := &stealEngine[T]{
		cfg:      cfg,
		handler:  h,
		closing:  make(chan struct{}),
		queues:   make([]deque[stamped[T]], n),
		space:    make([]signal, n),
		wake:     make([]chan struct{}, n),
		busy:     make([]bool, n),
		sleeping: make([]bool, n),
		until:    make([]time.Time, n),
	}
	for i := range n {
		e.wake[i] = make(chan struct{}, 1)
	}
	for i := range n {
		e.workers.Go(func() { e.work(i) })
	}
	return e
}

func (e *stealEngine[T]) submit(ctx context.Context, key string, item T) error {
	p := partitionOf(key, len(e.queues))
	e.mu.Lock()
	for !e.closed && e.queues[p].len() >= e.cfg.QueueSize {
		full := e.space[p].wait()
		e.mu.Unlock()
		select {
		case <-full:
		case <-ctx.Done():
			return ctx.Err()
		case <-e.closing:
			return ErrClosed
		}
		e.mu.Lock()
	}
	if e.closed {
		e.mu.Unlock()
		return ErrClosed
	}
	wasEmpty := e.queues[p].len() == 0
	now := time.Now()
	e.queues[p].pushBack(stamped[T]{key: key, item: item, at: now})
	e.queued++
	e.submitted++
	e.kick(p)
	if wasEmpty && e.busy[p] {
		e.headWaits(now)
	}
	e.mu.Unlock()
	return nil
}

// work is worker w's loop: run its own partition's items in order; when it
// has none, steal; when there is nothing to steal yet, sleep until the
// oldest waiting head becomes stealable or someone wakes it.
func (e *stealEngine[T]) work(w int) {
	e.mu.Lock()
	for {
		if it, ok := e.queues[w].popFront(); ok {
			e.queued--
			e.space[w].broadcast()
			e.busy[w] = true
			if head, ok := e.queues[w].front(); ok {
				e.headWaits(head.at)
			}
			e.mu.Unlock()
			e.handler(it.key, it.item)
			e.mu.Lock()
			e.busy[w] = false
			e.completed++
			if e.closed && e.queued == 0 {
				e.kickAll() // let idle workers see that the drain is over
			}
			continue
		}
		victim, wait := e.victim(w, time.Now())
		if victim >= 0 {
			e.stealInto(w, victim)
			continue
		}
		if e.closed && e.queued == 0 {
			e.mu.Unlock()
			return
		}
		e.sleeping[w] = true
		e.until[w] = time.Time{}
		if wait >= 0 {
			e.until[w] = time.Now().Add(wait)
		}
		e.mu.Unlock()
		if wait < 0 {
			<-e.wake[w]
		} else {
			t := time.NewTimer(wait)
			select {
			case <-e.wake[w]:
			case <-t.C:
			}
			t.Stop()
		}
		e.mu.Lock()
		e.sleeping[w] = false
	}
}

// victim returns the partition (other than w) whose head has waited longest,
// if that head has waited at least StealAfter; otherwise -1 and how long
// until the oldest head becomes stealable (negative when every other
// partition is empty).
func (e *stealEngine[T]) victim(w int, now time.Time) (int, time.Duration) {
	best := -1
	var oldest time.Time
	for i := range e.queues {
		if i == w {
			continue
		}
		head, ok := e.queues[i].front()
		if !ok {
			continue
		}
		if best < 0 || head.at.Before(oldest) {
			best, oldest = i, head.at
		}
	}
	if best < 0 {
		return -1, -1
	}
	waited := now.Sub(oldest)
	if waited >= e.cfg.StealAfter {
		return best, 0
	}
	return -1, e.cfg.StealAfter - waited
}

// stealInto moves the back half (rounded up) of partition v to the end of
// worker w's partition, keeping their relative order.
func (e *stealEngine[T]) stealInto(w, v int) {
	q := &e.queues[v]
	n := (q.len() + 1) / 2
	for i := q.len() - n; i < q.len(); i++ {
		e.queues[w].pushBack(q.at(i))
	}
	q.dropBack(n)
	e.stolen += uint64(n)
	e.space[v].broadcast()
}

// kick wakes worker w if it sleeps. Called with mu held.
func (e *stealEngine[T]) kick(w int) {
	select {
	case e.wake[w] <- struct{}{}:
	default:
	}
}

// headWaits is called when a head accepted at `at` starts waiting behind a
// busy owner. It wakes every sleeping worker whose timer would fire later
// than that head becomes stealable, so that one of them is awake in time.
// Called with mu held.
func (e *stealEngine[T]) headWaits(at time.Time) {
	stealable := at.Add(e.cfg.StealAfter)
	for w, asleep := range e.sleeping {
		if asleep && (e.until[w].IsZero() || e.until[w].After(stealable)) {
			e.kick(w)
		}
	}
}

func (e *stealEngine[T]) kickAll() {
	for w := range e.wake {
		e.kick(w)
	}
}

func (e *stealEngine[T]) close() {
	e.mu.Lock()
	if !e.closed {
		e.closed = true
		close(e.closing)
		e.kickAll()
	}
	e.mu.Unlock()
	e.workers.Wait()
}

func (e *stealEngine[T]) stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := Stats{Submitted: e.submitted, Completed: e.completed, Stolen: e.stolen, Queued: e.queued, QueueDepths: make([]int, len(e.queues))}
	for i := range e.queues {
		s.QueueDepths[i] = e.queues[i].len()
	}
	return s
}
