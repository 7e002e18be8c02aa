package dispatch

import (
	"context"
	"sync"
)

// partitionEngine is the Partition strategy: one buffered channel and one
// worker per partition, the partition chosen by an FNV-1a hash of the key.
type partitionEngine[T any] struct {
	gate      *gate
	queues    []chan entry[T]
	workers   sync.WaitGroup
	submitted counter   // written by submitters only; padded away from what workers read
	completed []counter // one per worker
}

func newPartition[T any](cfg Config, h Handler[T]) *partitionEngine[T] {
	e := &partitionEngine[T]{gate: newGate(), queues: make([]chan entry[T], cfg.Workers), completed: make([]counter, cfg.Workers)}
	for i := range e.queues {
		q := make(chan entry[T], cfg.QueueSize)
		e.queues[i] = q
		e.workers.Go(func() {
			for it := range q {
				h(it.key, it.item)
				e.completed[i].n.Add(1)
			}
		})
	}
	return e
}

func (e *partitionEngine[T]) submit(ctx context.Context, key string, item T) error {
	q := e.queues[partitionOf(key, len(e.queues))]
	e.submitted.n.Add(1) // before the send, so Completed never passes Submitted
	if err := send(e.gate, ctx, q, entry[T]{key, item}); err != nil {
		e.submitted.n.Add(^uint64(0))
		return err
	}
	return nil
}

func (e *partitionEngine[T]) close() {
	e.gate.shut(func() {
		for _, q := range e.queues {
			close(q)
		}
	})
	e.workers.Wait()
}

func (e *partitionEngine[T]) stats() Stats {
	s := Stats{Submitted: e.submitted.n.Load(), Completed: sum(e.completed), QueueDepths: make([]int, len(e.queues))}
	for i, q := range e.queues {
		s.QueueDepths[i] = len(q)
		s.Queued += len(q)
	}
	return s
}
