package dispatch

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The benchmarks measure per-item overhead: 8 workers, 1,000 keys, a handler
// that does nothing. Each strategy's sub-benchmark also pushes the same
// number of items through a plain buffered-channel worker pool, alternating
// in chunks, and reports the ratio (x-plain) from that same run, because
// absolute times drift on a shared machine.

const (
	benchWorkers = 8
	benchKeys    = 1000
	benchQueue   = 1024
	benchChunk   = 100_000
)

var benchKeyNames = func() []string {
	keys := make([]string, benchKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("user-%04d", i)
	}
	return keys
}()

// plainPool is the baseline: one buffered channel, workers ranging over it.
func plainPool(n int) {
	type item struct {
		key string
		v   int
	}
	ch := make(chan item, benchQueue)
	var wg sync.WaitGroup
	for range benchWorkers {
		wg.Go(func() {
			for it := range ch {
				_ = it
			}
		})
	}
	for i := range n {
		ch <- item{benchKeyNames[i%benchKeys], i}
	}
	close(ch)
	wg.Wait()
}

func runStrategy(b *testing.B, s Strategy, n int) {
	cfg := DefaultConfig()
	cfg.Strategy, cfg.Workers, cfg.QueueSize = s, benchWorkers, benchQueue
	d, err := New(cfg, func(string, int) {})
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

func BenchmarkPlainPool(b *testing.B) {
	b.ReportAllocs()
	plainPool(b.N)
}

// BenchmarkDispatch reports, per strategy, ns/item of the strategy, ns/item
// of the plain pool measured in the same run, and their ratio x-plain: the
// median, over the chunks, of the chunk's strategy time over the plain
// pool's time for the chunk run beside it. Which of the two runs first
// alternates from chunk to chunk. On a shared machine a burst of other work
// lands on a few chunks; the median of paired ratios ignores it, where a
// ratio of sums would not.
func BenchmarkDispatch(b *testing.B) {
	for _, s := range Strategies() {
		b.Run(string(s), func(b *testing.B) {
			b.ReportAllocs()
			var own, plain, ownCPU, plainCPU time.Duration
			var ratios, cpuRatios []float64
			for done := 0; done < b.N; {
				n := min(benchChunk, b.N-done)
				var o, p, oc, pc time.Duration
				if len(ratios)%2 == 0 {
					o, oc = timed(func() { runStrategy(b, s, n) })
					p, pc = timed(func() { plainPool(n) })
				} else {
					p, pc = timed(func() { plainPool(n) })
					o, oc = timed(func() { runStrategy(b, s, n) })
				}
				own, plain, ownCPU, plainCPU = own+o, plain+p, ownCPU+oc, plainCPU+pc
				ratios = append(ratios, float64(o)/float64(p))
				cpuRatios = append(cpuRatios, float64(oc)/float64(pc))
				done += n
			}
			perItem := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(b.N) }
			b.ReportMetric(perItem(own), "ns/item")
			b.ReportMetric(perItem(plain), "plain-ns/item")
			b.ReportMetric(median(ratios), "x-plain")
			// CPU time of the whole process (every thread) per item, and
			// its ratio, for the model in docs/performance.md.
			b.ReportMetric(perItem(ownCPU), "cpu-ns/item")
			b.ReportMetric(perItem(plainCPU), "plain-cpu-ns/item")
			b.ReportMetric(median(cpuRatios), "cpu-x-plain")
		})
	}
}

// timed returns how long f took, in wall-clock time and in CPU time of
// the whole process (user + system, all threads).
func timed(f func()) (wall, cpu time.Duration) {
	cpu0 := processCPU()
	start := time.Now()
	f()
	return time.Since(start), processCPU() - cpu0
}

// processCPU returns the CPU time this process has used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// median returns the median of xs, which it sorts.
func median(xs []float64) float64 {
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// BenchmarkSteadyStateAllocs keeps one dispatcher alive across the timed
// loop, so allocs/op is the allocation per item in steady state (set-up
// excluded).
func BenchmarkSteadyStateAllocs(b *testing.B) {
	for _, s := range Strategies() {
		b.Run(string(s), func(b *testing.B) {
			cfg := DefaultConfig()
			cfg.Strategy, cfg.Workers, cfg.QueueSize = s, benchWorkers, benchQueue
			d, err := New(cfg, func(string, int) {})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			for i := range 10 * benchKeys { // warm up: queues and key states grown
				_ = d.Submit(ctx, benchKeyNames[i%benchKeys], i)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if err := d.Submit(ctx, benchKeyNames[i%benchKeys], i); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			d.Close()
		})
	}
}
