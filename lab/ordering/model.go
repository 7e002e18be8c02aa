package ordering

import (
	"container/heap"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/stampede-lab/stampede/dispatch"
)

// ideal is what a strategy does with one arrival stream on an ideal
// machine: every handler takes exactly its item's cost, and nothing else
// (submitting, waking a worker, the dispatcher's own work) takes any time.
// A real machine only adds time to that, so the ideal figures of a run's
// own stream are the floor its measured figures stand on.
type ideal struct {
	// victimP99 is the p99 latency of the victims (every key but the hot
	// one), from intended arrival to completion.
	victimP99 time.Duration
	// hotViolations counts hot items that complete while an earlier hot
	// item has not (dispatch.Ledger's definition of a violation).
	hotViolations int
	// maxWait is the longest any item waited in a queue before its
	// handler started.
	maxWait time.Duration
}

// simulate runs plan through strategy s on an ideal machine. Steal is
// modelled only while it would not steal: as partition, when no item of
// partition's model waits as long as StealAfter; otherwise when it steals
// depends on the dispatcher's timing, and there is no model. keys are the
// key names by index, as Run names them.
func (e *Experiment) simulate(plan []arrival, s dispatch.Strategy, keys []string) (ideal, bool) {
	done, ok := e.complete(plan, s, keys)
	if !ok {
		return ideal{}, false
	}
	return summarizeIdeal(plan, plan, done), true
}

// complete returns when each item of plan completes under strategy s on an
// ideal machine (see simulate).
func (e *Experiment) complete(plan []arrival, s dispatch.Strategy, keys []string) ([]time.Duration, bool) {
	if s == dispatch.Steal {
		done, _ := e.complete(plan, dispatch.Partition, keys)
		if summarizeIdeal(plan, plan, done).maxWait >= e.cfg.StealAfter {
			return nil, false
		}
		return done, true
	}
	w := e.cfg.Workers
	done := make([]time.Duration, len(plan))
	switch s {
	case dispatch.Shared:
		free := make([]time.Duration, w)
		for i, a := range plan {
			k := 0
			for j := range free {
				if free[j] < free[k] {
					k = j
				}
			}
			done[i] = max(a.at, free[k]) + a.cost
			free[k] = done[i]
		}
	case dispatch.Partition:
		free := make([]time.Duration, w)
		part := make([]int, len(keys))
		for i, k := range keys {
			part[i] = dispatch.PartitionOf(k, w)
		}
		for i, a := range plan {
			p := part[a.key]
			done[i] = max(a.at, free[p]) + a.cost
			free[p] = done[i]
		}
	case dispatch.Keyed:
		simulateKeyed(plan, w, len(keys), done)
	default:
		return nil, false
	}
	return done, true
}

// summarizeIdeal reads the figures of a simulated run: ran is what went
// through the model (its arrival times and costs), plan the stream as
// scheduled, whose intended times latencies run from, and done each item's
// completion.
func summarizeIdeal(plan, ran []arrival, done []time.Duration) ideal {
	var victims []time.Duration
	var out ideal
	var hotLatest time.Duration
	for i, a := range plan {
		out.maxWait = max(out.maxWait, done[i]-ran[i].cost-ran[i].at)
		if a.key != 0 {
			victims = append(victims, done[i]-a.at)
			continue
		}
		if done[i] < hotLatest {
			out.hotViolations++
		}
		hotLatest = max(hotLatest, done[i])
	}
	if len(victims) > 0 {
		slices.Sort(victims)
		out.victimP99 = victims[int(math.Ceil(0.99*float64(len(victims))))-1]
	}
	return out
}

// simulateKeyed is the Keyed strategy on an ideal machine: each key has a
// FIFO and at most one item in a handler; a key with queued items and none
// running waits in one FIFO of ready keys; a free worker takes the next
// ready key's oldest item, and the key goes back to the end of the ready
// FIFO when that item completes and more of its items wait. done receives
// each item's completion time, by plan index.
func simulateKeyed(plan []arrival, workers, keys int, done []time.Duration) {
	queued := make([][]int, keys) // plan indices per key, oldest first
	running := make([]bool, keys)
	var ready []int // keys, oldest first
	var busy completions
	idle := workers
	next := 0
	for next < len(plan) || busy.Len() > 0 {
		var now time.Duration
		if busy.Len() > 0 && (next == len(plan) || busy[0].at <= plan[next].at) {
			c := heap.Pop(&busy).(completion)
			now = c.at
			idle++
			running[c.key] = false
			if len(queued[c.key]) > 0 {
				ready = append(ready, c.key)
			}
		} else {
			a := plan[next]
			now = a.at
			queued[a.key] = append(queued[a.key], next)
			if !running[a.key] && len(queued[a.key]) == 1 {
				ready = append(ready, a.key)
			}
			next++
		}
		for idle > 0 && len(ready) > 0 {
			k := ready[0]
			ready = ready[1:]
			i := queued[k][0]
			queued[k] = queued[k][1:]
			running[k] = true
			idle--
			done[i] = now + plan[i].cost
			heap.Push(&busy, completion{at: done[i], key: k})
		}
	}
}

// completion is a handler finishing an item of key at a time.
type completion struct {
	at  time.Duration
	key int
}

// completions is a min-heap of completions by time.
type completions []completion

func (h completions) Len() int           { return len(h) }
func (h completions) Less(i, j int) bool { return h[i].at < h[j].at }
func (h completions) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *completions) Push(x any)        { *h = append(*h, x.(completion)) }
func (h *completions) Pop() any {
	old := *h
	c := old[len(old)-1]
	*h = old[:len(old)-1]
	return c
}

// hotPartition is the closed form of the partition the hot key hashes to,
// for one hot load: what its queue is offered and the backlog it must
// build while arrivals last.
type hotPartition struct {
	// Offered is the work offered to the partition's one worker, in
	// workers: the hot load plus its share of the victims' load.
	Offered float64
	// VictimShare is the fraction of victim keys that share the hot key's
	// partition.
	VictimShare float64
	// Backlog is the work the partition cannot have done when arrivals
	// stop: (Offered − 1) × the run's length, or 0 when Offered ≤ 1.
	Backlog time.Duration
	// Sigma is the standard deviation of the work that arrives at the
	// partition over the run (Poisson arrivals, uniform jitter): the
	// backlog a run builds by chance alone is of this order.
	Sigma time.Duration
}

// offered is the work offered to the whole pool at load, in workers: the
// hot load plus the victims'.
func (c Config) offered(load float64) float64 {
	return load + (c.Rate-c.Rate*c.hotShare(load))*c.NormalCost.Seconds()
}

// hotPartition returns the closed form of the hot key's partition at load.
func (c Config) hotPartition(load float64) hotPartition {
	hot := keyName(0)
	p := dispatch.PartitionOf(hot, c.Workers)
	share := 0
	for i := 1; i < c.Keys; i++ {
		if dispatch.PartitionOf(keyName(i), c.Workers) == p {
			share++
		}
	}
	f := float64(share) / float64(c.Keys-1)
	hotRate := c.Rate * c.hotShare(load)
	victimRate := (c.Rate - hotRate) * f
	offered := load + victimRate*c.NormalCost.Seconds()
	// E[cost²] of a cost uniform over mean·(1 ± jitter).
	sq := func(mean time.Duration) float64 { return mean.Seconds() * mean.Seconds() * (1 + c.Jitter*c.Jitter/3) }
	sigma := math.Sqrt(c.Duration.Seconds() * (hotRate*sq(c.HotCost) + victimRate*sq(c.NormalCost)))
	hp := hotPartition{Offered: offered, VictimShare: f, Sigma: seconds(sigma)}
	if offered > 1 {
		hp.Backlog = seconds((offered - 1) * c.Duration.Seconds())
	}
	return hp
}

// String reads like "offered 2.24 workers, backlog 5.0 s by the end of
// arrivals (σ 0.93 s)".
func (h hotPartition) String() string {
	return fmt.Sprintf("offered %.2f workers (%.0f %% of the victims share it), backlog (%.2f − 1) × run = %.1f s (chance: σ %.2f s)",
		h.Offered, 100*h.VictimShare, h.Offered, h.Backlog.Seconds(), h.Sigma.Seconds())
}

// keyName is the name of key i, as Run names it; key 0 is the hot key.
func keyName(i int) string { return fmt.Sprintf("key-%03d", i) }

// seconds converts seconds to a Duration.
func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
