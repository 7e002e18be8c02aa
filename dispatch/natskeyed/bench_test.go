package natskeyed

import (
	"context"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// benchChunk is how many events each alternation of the benchmark moves.
const benchChunk = 25_000

// BenchmarkKeyedConsumer measures events/s through the keyed consumer with
// an empty handler, against a raw JetStream pull consumer that acknowledges
// each message in its callback, on the same server in the same run. The
// b.N events go in chunks: for each chunk a fresh stream of 4 partitions
// gets the chunk's events over 1,000 keys (not timed); then the raw
// consumers (one plain durable per partition) and the keyed consumer
// (pinned, 8 workers, its own durables) each read the whole chunk, taking
// turns at going first, so that both see the same load on a shared
// machine. Both pull with the same batch and MaxAckPending. Throughput is
// timed from each consumer's first event to its last (steady state); the
// time from creating the consumers to the first event is reported apart,
// per chunk (keyed-startup-ms includes the barrier, which asks the server
// for consumer info: once per process start or failover in production,
// once per chunk here). ns/op is the keyed consumer's steady time per
// event; x-raw is keyed events/s ÷ raw events/s over the whole run (target
// ≥ 0.5), and x-raw-chunk-p50 the median of that ratio over the chunks,
// which a burst of load from elsewhere on the machine moves less.
//
// For tuning: BENCH_WORKERS and BENCH_BATCH override Config.Workers and
// Config.PullBatch; BENCH_DEBUG=1 logs each chunk's cumulative times and
// the keyed consumer's barrier waits.
func BenchmarkKeyedConsumer(b *testing.B) {
	for _, tg := range targets(b) {
		b.Run(tg.name, func(b *testing.B) {
			b.StopTimer()
			var keyed, raw, keyedStart, rawStart time.Duration
			chunks := 0
			var ratios []float64 // per chunk: keyed events/s ÷ raw events/s
			for done, turn := 0, 0; done < b.N; turn++ {
				n := min(benchChunk, b.N-done)
				f := newFixture(b, tg, 4)
				f.cfg.AckWait, f.cfg.InProgressEvery = 30*time.Second, 10*time.Second
				f.cfg.PinnedTTL, f.cfg.PullExpiry = 10*time.Second, 5*time.Second
				if v := os.Getenv("BENCH_WORKERS"); v != "" {
					f.cfg.Workers, _ = strconv.Atoi(v)
				}
				if v := os.Getenv("BENCH_BATCH"); v != "" {
					f.cfg.PullBatch, _ = strconv.Atoi(v)
				}
				f.publish(keysFor(n, 1000, 0))
				var r, k *clock
				if turn%2 == 0 {
					r = rawConsume(b, f, n)
					k = keyedConsume(b, f, n)
				} else {
					k = keyedConsume(b, f, n)
					r = rawConsume(b, f, n)
				}
				raw, keyed = raw+r.steady(), keyed+k.steady()
				rawStart, keyedStart = rawStart+r.startup(), keyedStart+k.startup()
				if k.steady() > 0 {
					ratios = append(ratios, r.steady().Seconds()/k.steady().Seconds())
				}
				if os.Getenv("BENCH_DEBUG") != "" {
					b.Logf("chunk %d: raw %s keyed %s", turn, raw, keyed)
				}
				_ = f.js.DeleteStream(context.Background(), f.cfg.Stream)
				done += n
				chunks++
			}
			keyedRate := float64(b.N) / keyed.Seconds()
			rawRate := float64(b.N) / raw.Seconds()
			b.ReportMetric(float64(keyed.Nanoseconds())/float64(b.N), "ns/op")
			b.ReportMetric(keyedRate, "events/s")
			b.ReportMetric(rawRate, "raw-events/s")
			b.ReportMetric(keyedRate/rawRate, "x-raw")
			b.ReportMetric(float64(keyedStart.Milliseconds())/float64(chunks), "keyed-startup-ms")
			b.ReportMetric(float64(rawStart.Milliseconds())/float64(chunks), "raw-startup-ms")
			if len(ratios) > 0 {
				slices.Sort(ratios)
				b.ReportMetric(ratios[len(ratios)/2], "x-raw-chunk-p50")
			}
		})
	}
}

// clock times a consumer: from its creation to its first event (startup),
// and from its first event to its last (steady).
type clock struct {
	start, first, last time.Time
	once               sync.Once
	done               atomic.Int64
	n                  int64
	finished           chan struct{}
}

func newClock(n int) *clock {
	return &clock{start: time.Now(), n: int64(n), finished: make(chan struct{})}
}

// event records one handled event.
func (c *clock) event() {
	c.once.Do(func() { c.first = time.Now() })
	if c.done.Add(1) == c.n {
		c.last = time.Now()
		close(c.finished)
	}
}

func (c *clock) wait(b *testing.B, what string) {
	select {
	case <-c.finished:
	case <-time.After(5 * time.Minute):
		b.Fatalf("%s: %d of %d events in 5 minutes", what, c.done.Load(), c.n)
	}
}

func (c *clock) startup() time.Duration { return c.first.Sub(c.start) }
func (c *clock) steady() time.Duration  { return c.last.Sub(c.first) }

// keyedConsume reads n events with a keyed Consumer and an empty handler.
func keyedConsume(b *testing.B, f *fixture, n int) *clock {
	clk := newClock(n)
	c, err := New(context.Background(), f.js, f.cfg, func(context.Context, Event) error {
		clk.event()
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	clk.wait(b, "keyed")
	if os.Getenv("BENCH_DEBUG") != "" {
		for _, p := range c.Stats().Partitions {
			b.Logf("keyed partition %d: %d barrier waits, %s", p.Partition, p.BarrierWaits, p.BarrierTime)
		}
	}
	c.Close()
	return clk
}

// rawConsume reads n events with one plain pull consumer per partition,
// acknowledging each in the callback.
func rawConsume(b *testing.B, f *fixture, n int) *clock {
	ctx := context.Background()
	clk := newClock(n)
	stream, err := f.js.Stream(ctx, f.cfg.Stream)
	if err != nil {
		b.Fatal(err)
	}
	var ccs []jetstream.ConsumeContext
	for p := range f.cfg.Partitions {
		cons, err := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
			Durable: "raw-" + f.cfg.ConsumerName(p), FilterSubject: f.cfg.FilterSubject(p),
			AckPolicy: jetstream.AckExplicitPolicy, AckWait: f.cfg.AckWait, MaxAckPending: f.cfg.MaxPending,
		})
		if err != nil {
			b.Fatal(err)
		}
		cc, err := cons.Consume(func(m jetstream.Msg) {
			_ = m.Ack()
			clk.event()
		}, jetstream.PullMaxMessages(f.cfg.PullBatch), jetstream.PullExpiry(f.cfg.PullExpiry))
		if err != nil {
			b.Fatal(err)
		}
		ccs = append(ccs, cc)
	}
	clk.wait(b, "raw")
	for _, cc := range ccs {
		cc.Stop()
	}
	return clk
}
