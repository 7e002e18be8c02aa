// Package dispatch hands keyed items to a pool of workers.
//
// A ticket sale produces events that belong to a key (a user, an order, a
// seat) and must be processed in per-key order, while one hot key must not
// stall everyone else. The two pull in opposite directions: per-key order
// wants every item of a key in one place, isolation wants a slow key's items
// away from its neighbours. This package implements four ways to resolve the
// tension, so that they can be compared under the same load (see the
// ordering experiment in lab/ordering):
//
//   - Shared: one queue, any worker takes any item. Best isolation, no
//     per-key order once a key arrives faster than one worker serves it.
//   - Partition: an FNV-1a hash of the key picks one queue and one worker.
//     Per-key order, but every key hashed beside a hot key waits behind it
//     (head-of-line blocking).
//   - Steal: Partition, plus: when a queue's head has waited longer than
//     Config.StealAfter, an idle worker takes the back part of that queue.
//     Neighbours are rescued, per-key order is lost.
//   - Keyed: one FIFO per key, at most one item of a key in flight, and any
//     idle worker takes the next ready key. Per-key order and isolation.
//
// Submit blocks when the item's queue is full (backpressure) and honours its
// context; Close stops accepting and drains every accepted item: none is lost
// and none runs twice.
//
// Time (the steal strategy's waiting and timers) comes from package time, so
// tests run the dispatcher inside testing/synctest bubbles to control it.
package dispatch

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/stampede-lab/stampede"
)

// Strategy names a way of handing keyed items to workers.
type Strategy string

// The four strategies; see the package documentation.
const (
	Shared    Strategy = "shared"
	Partition Strategy = "partition"
	Steal     Strategy = "steal"
	Keyed     Strategy = "keyed"
)

// Strategies returns every strategy in the order the lab reports them.
func Strategies() []Strategy { return []Strategy{Shared, Partition, Steal, Keyed} }

// ParseStrategy turns a name such as "keyed" into a Strategy.
func ParseStrategy(name string) (Strategy, error) {
	for _, s := range Strategies() {
		if string(s) == name {
			return s, nil
		}
	}
	names := make([]string, 0, 4)
	for _, s := range Strategies() {
		names = append(names, string(s))
	}
	return "", fmt.Errorf("unknown strategy %q (want one of %s)", name, strings.Join(names, ", "))
}

// ErrClosed is returned by Submit once Close has been called.
var ErrClosed = errors.New("dispatch: dispatcher is closed")

// Handler processes one item. It runs on a worker goroutine; under the
// Partition and Keyed strategies no two calls for the same key overlap.
type Handler[T any] func(key string, item T)

// Config configures a Dispatcher.
type Config struct {
	// Strategy selects how items reach workers.
	Strategy Strategy
	// Workers is the number of worker goroutines (and of partitions for
	// Partition and Steal).
	Workers int
	// QueueSize bounds accepted items that have not started yet, per queue:
	// the one queue of Shared, each partition of Partition and Steal, each
	// key of Keyed. Submit blocks while the item's queue is full.
	QueueSize int
	// StealAfter is how long a partition's head may wait before an idle
	// worker steals the back part of that partition (Steal only).
	StealAfter time.Duration
}

// DefaultConfig returns the configuration the ordering lab starts from,
// that of the published dispatcher write-up: 8 workers, keyed strategy,
// 1,024 queued items per queue, steal after 500 ms.
func DefaultConfig() Config {
	return Config{Strategy: Keyed, Workers: 8, QueueSize: 1024, StealAfter: 500 * time.Millisecond}
}

// Validate reports every invalid field at once, each named in snake_case
// (strategy, workers, queue_size, steal_after).
func (c Config) Validate() error {
	var f stampede.Fields
	_, serr := ParseStrategy(string(c.Strategy))
	f.Check("strategy", serr)
	if c.Workers < 1 {
		f.Add("workers", "must be at least 1, got %d", c.Workers)
	}
	if c.QueueSize < 1 {
		f.Add("queue_size", "must be at least 1, got %d", c.QueueSize)
	}
	if serr == nil && c.Strategy == Steal && c.StealAfter <= 0 {
		f.Add("steal_after", "must be positive for the steal strategy, got %s", c.StealAfter)
	}
	return f.Err()
}

// Stats is a snapshot of a dispatcher's counters.
type Stats struct {
	// Submitted counts accepted items.
	Submitted uint64
	// Completed counts items whose handler returned.
	Completed uint64
	// Stolen counts items moved from one partition to another (Steal only).
	Stolen uint64
	// Queued counts accepted items that have not started.
	Queued int
	// QueueDepths holds the backlog of each queue: one entry for Shared, one
	// per partition for Partition and Steal, nil for Keyed.
	QueueDepths []int
	// BackloggedKeys counts keys with queued or running items (Keyed only).
	BackloggedKeys int
}

// engine is one strategy's implementation.
type engine[T any] interface {
	submit(ctx context.Context, key string, item T) error
	close()
	stats() Stats
}

// Dispatcher hands keyed items to workers according to its Strategy.
type Dispatcher[T any] struct {
	cfg Config
	eng engine[T]
}

// New starts a dispatcher and its workers. Close must be called to stop them.
func New[T any](cfg Config, h Handler[T]) (*Dispatcher[T], error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if h == nil {
		return nil, errors.New("dispatch: handler: must not be nil")
	}
	d := &Dispatcher[T]{cfg: cfg}
	switch cfg.Strategy {
	case Shared:
		d.eng = newShared(cfg, h)
	case Partition:
		d.eng = newPartition(cfg, h)
	case Steal:
		d.eng = newSteal(cfg, h)
	case Keyed:
		d.eng = newKeyed(cfg, h)
	}
	return d, nil
}

// Config returns the configuration the dispatcher was started with.
func (d *Dispatcher[T]) Config() Config { return d.cfg }

// Submit hands item to the dispatcher. It blocks while the item's queue is
// full and returns ctx.Err() if ctx ends first, or ErrClosed once Close has
// started; in both cases the item was not accepted and will not run.
// A nil error means the item will run exactly once.
func (d *Dispatcher[T]) Submit(ctx context.Context, key string, item T) error {
	return d.eng.submit(ctx, key, item)
}

// Close stops accepting items, waits until every accepted item has run, and
// stops the workers. Submitters blocked on a full queue return ErrClosed.
// Close is safe to call more than once.
func (d *Dispatcher[T]) Close() { d.eng.close() }

// Stats returns a snapshot of the dispatcher's counters.
func (d *Dispatcher[T]) Stats() Stats { return d.eng.stats() }

// PartitionOf returns the partition, of n, that the Partition and Steal
// strategies give key: what a model of those strategies needs to know
// which keys share a queue. n must be positive.
func PartitionOf(key string, n int) int { return partitionOf(key, n) }

// partitionOf maps a key to one of n partitions with 32-bit FNV-1a. It is
// written out rather than taken from hash/fnv so that hashing a string
// allocates nothing.
func partitionOf(key string, n int) int {
	const (
		offset32 = 2166136261
		prime32  = 16777619
	)
	h := uint32(offset32)
	for i := 0; i < len(key); i++ {
		h ^= uint32(key[i])
		h *= prime32
	}
	return int(h % uint32(n))
}
