package dispatch

import (
	"context"
	"sync"
)

// entry is an item in flight through a channel-based strategy.
type entry[T any] struct {
	key  string
	item T
}

// sharedEngine is the Shared strategy: one buffered channel read by every
// worker.
type sharedEngine[T any] struct {
	gate      *gate
	queue     chan entry[T]
	workers   sync.WaitGroup
	submitted counter   // written by submitters only; padded away from what workers read
	completed []counter // one per worker
}

func newShared[T any](cfg Config, h Handler[T]) *sharedEngine[T] {
	e := &sharedEngine[T]{gate: newGate(), queue: make(chan entry[T], cfg.QueueSize), completed: make([]counter, cfg.Workers)}
	for w := range cfg.Workers {
		e.workers.Go(func() {
			for it := range e.queue {
				h(it.key, it.item)
				e.completed[w].n.Add(1)
			}
		})
	}
	return e
}

func (e *sharedEngine[T]) submit(ctx context.Context, key string, item T) error {
	e.submitted.n.Add(1) // before the send, so Completed never passes Submitted
	if err := send(e.gate, ctx, e.queue, entry[T]{key, item}); err != nil {
		e.submitted.n.Add(^uint64(0))
		return err
	}
	return nil
}

func (e *sharedEngine[T]) close() {
	e.gate.shut(func() { close(e.queue) })
	e.workers.Wait()
}

func (e *sharedEngine[T]) stats() Stats {
	n := len(e.queue)
	return Stats{
		Submitted:   e.submitted.n.Load(),
		Completed:   sum(e.completed),
		Queued:      n,
		QueueDepths: []int{n},
	}
}
