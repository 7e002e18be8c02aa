package dispatch

import (
	"context"
	"sync"
)

// keyState is one key's FIFO under the Keyed strategy.
type keyState[T any] struct {
	key     string
	items   deque[T]
	running bool   // an item of this key is in a handler
	space   signal // broadcast when an item leaves items
}

// keyedEngine is the Keyed strategy. Each key with work has its own FIFO; a
// key is "ready" when it has queued items and none running. Ready keys wait
// in one FIFO, and any idle worker takes the next ready key, runs that key's
// oldest item, and puts the key back at the end of the ready FIFO if more of
// its items wait. So a key never has two items in flight (per-key order), a
// hot key occupies at most one worker (isolation), and keys take turns.
//
// Invariant, under mu: a key is in ready exactly when it is not running and
// has queued items. A key whose work is done stays in keys (idle), so that a
// key that comes back costs no map insertion; idle keys are swept when they
// outnumber maxIdle.
type keyedEngine[T any] struct {
	cfg     Config
	handler Handler[T]
	workers sync.WaitGroup
	closing chan struct{}

	mu        sync.Mutex
	work      *sync.Cond // signalled when a key becomes ready, broadcast on close
	keys      map[string]*keyState[T]
	ready     deque[*keyState[T]]
	idle      int // keys in keys with nothing queued or running
	waiting   int // workers blocked in work.Wait
	queued    int
	closed    bool
	submitted uint64
	completed uint64
}

// maxIdle bounds the idle key states kept in keys. Past it, submitting a
// new key sweeps the idle ones out, so memory follows the keys with work,
// not every key ever seen.
const maxIdle = 4096

func newKeyed[T any](cfg Config, h Handler[T]) *keyedEngine[T] {
	e := &keyedEngine[T]{cfg: cfg, handler: h, closing: make(chan struct{}), keys: make(map[string]*keyState[T])}
	e.work = sync.NewCond(&e.mu)
	for range cfg.Workers {
		e.workers.Go(e.run)
	}
	return e
}

func (e *keyedEngine[T]) submit(ctx context.Context, key string, item T) error {
	e.mu.Lock()
	for {
		if e.closed {
			e.mu.Unlock()
			return ErrClosed
		}
		ks := e.keys[key]
		if ks == nil {
			ks = e.newKey(key)
		}
		if ks.items.len() < e.cfg.QueueSize {
			ks.items.pushBack(item)
			e.queued++
			e.submitted++
			if !ks.running && ks.items.len() == 1 {
				e.idle--
				e.ready.pushBack(ks)
				if e.waiting > 0 {
					e.work.Signal()
				}
			}
			e.mu.Unlock()
			return nil
		}
		// Only this key's queue is full: wait for it alone, so that a
		// backlogged key never blocks submitters of other keys.
		full := ks.space.wait()
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
}

// newKey registers an idle state for key; the caller makes it busy. Called
// with mu held.
func (e *keyedEngine[T]) newKey(key string) *keyState[T] {
	if e.idle >= maxIdle {
		for k, ks := range e.keys {
			if !ks.running && ks.items.len() == 0 {
				delete(e.keys, k)
			}
		}
		e.idle = 0
	}
	ks := &keyState[T]{key: key}
	e.keys[key] = ks
	e.idle++
	return ks
}

// run is a worker's loop.
func (e *keyedEngine[T]) run() {
	e.mu.Lock()
	for {
		ks, ok := e.ready.popFront()
		if !ok {
			if e.closed {
				// Nothing is ready. Items still queued belong to running
				// keys, whose workers take them when they finish.
				e.mu.Unlock()
				return
			}
			e.waiting++
			e.work.Wait()
			e.waiting--
			continue
		}
		item, _ := ks.items.popFront()
		e.queued--
		ks.running = true
		ks.space.broadcast()
		e.mu.Unlock()

		e.handler(ks.key, item)

		e.mu.Lock()
		ks.running = false
		e.completed++
		if ks.items.len() > 0 {
			e.ready.pushBack(ks)
			if e.ready.len() > 1 && e.waiting > 0 {
				// This worker takes the front; someone else may take the rest.
				e.work.Signal()
			}
			continue
		}
		e.idle++
	}
}

func (e *keyedEngine[T]) close() {
	e.mu.Lock()
	if !e.closed {
		e.closed = true
		close(e.closing)
		e.work.Broadcast()
	}
	e.mu.Unlock()
	e.workers.Wait()
}

func (e *keyedEngine[T]) stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	return Stats{Submitted: e.submitted, Completed: e.completed, Queued: e.queued, BackloggedKeys: len(e.keys) - e.idle}
}
