package dispatch

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// scaleWorkers are the worker counts of BenchmarkWorkerScaling.
var scaleWorkers = []int{1, 2, 4, 8}

// scaleIOWait is how long the "io" workload's handler waits per item, as
// a call to another service would. (Go's timers on Linux sleep at least
// about a millisecond, so shorter waits would measure the timer.)
const scaleIOWait = time.Millisecond

// BenchmarkWorkerScaling measures items per second against the number of
// workers, for the keyed strategy and for a plain buffered-channel pool
// of as many workers, over benchKeys keys, b.N items per run. Two
// workloads:
//
//   - noop: the handler does nothing, so the rate is the dispatcher's
//     own per-item cost; on a machine with few cores more workers only
//     add contention.
//   - io: the handler waits scaleIOWait, so the rate is bounded by
//     workers ÷ scaleIOWait; a dispatcher that scales follows that bound.
//
// Sub-benchmarks are named <workload>/<keyed|plain>/workers=<n> and report
// items/s (and, for io, x-bound: items/s over the bound workers ÷
// scaleIOWait), so that cmd/benchchart draws one line per workload and
// strategy against workers.
func BenchmarkWorkerScaling(b *testing.B) {
	workloads := []struct {
		name    string
		handler func(string, int)
	}{
		{"noop", func(string, int) {}},
		{"io", func(string, int) { time.Sleep(scaleIOWait) }},
	}
	for _, wl := range workloads {
		for _, pool := range []string{"keyed", "plain"} {
			for _, w := range scaleWorkers {
				b.Run(fmt.Sprintf("%s/%s/workers=%d", wl.name, pool, w), func(b *testing.B) {
					start := time.Now()
					if pool == "keyed" {
						scaleKeyed(b, w, b.N, wl.handler)
					} else {
						scalePlain(w, b.N, wl.handler)
					}
					rate := float64(b.N) / time.Since(start).Seconds()
					b.ReportMetric(rate, "items/s")
					if wl.name == "io" {
						b.ReportMetric(rate/(float64(w)/scaleIOWait.Seconds()), "x-bound")
					}
				})
			}
		}
	}
}

// scaleKeyed runs n items over benchKeys keys through a keyed dispatcher
// of the given workers and waits until every item has run.
func scaleKeyed(b *testing.B, workers, n int, h func(string, int)) {
	cfg := DefaultConfig()
	cfg.Strategy, cfg.Workers, cfg.QueueSize = Keyed, workers, benchQueue
	d, err := New(cfg, h)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for i := range n {
		if err := d.Submit(ctx, benchKeyNames[i%benchKeys], i); err != nil {
			b.Fatal(err)
		}
	}
	d.Close()
}

// scalePlain is plainPool with a number of workers and a handler: one
// buffered channel of benchQueue items, workers ranging over it.
func scalePlain(workers, n int, h func(string, int)) {
	type item struct {
		key string
		v   int
	}
	ch := make(chan item, benchQueue)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for it := range ch {
				h(it.key, it.v)
			}
		})
	}
	for i := range n {
		ch <- item{benchKeyNames[i%benchKeys], i}
	}
	close(ch)
	wg.Wait()
}
