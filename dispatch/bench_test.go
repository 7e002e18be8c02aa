package dispatch

import (
	"context"
	"fmt"
	"sync"
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
// of the plain pool measured in the same run, and their ratio.
func BenchmarkDispatch(b *testing.B) {
	for _, s := range Strategies() {
		b.Run(string(s), func(b *testing.B) {
			b.ReportAllocs()
			var own, plain time.Duration
			for done := 0; done < b.N; {
				n := min(benchChunk, b.N-done)
				start := time.Now()
				runStrategy(b, s, n)
				own += time.Since(start)
				start = time.Now()
				plainPool(n)
				plain += time.Since(start)
				done += n
			}
			b.ReportMetric(float64(own.Nanoseconds())/float64(b.N), "ns/item")
			b.ReportMetric(float64(plain.Nanoseconds())/float64(b.N), "plain-ns/item")
			b.ReportMetric(float64(own)/float64(plain), "x-plain")
		})
	}
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
