package jetstream

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// BenchmarkKeyedConsumer measures events/s through the keyed consumer with
// an empty handler, against a raw JetStream pull consumer that acknowledges
// each message at once, on the same stream and server in the same run:
// b.N events over 1,000 keys in 4 partitions are published first (not
// timed); then raw durable consumers, one per partition, read them all;
// then the keyed consumer (pinned, 8 workers) reads them all through its
// own durables. Both pull with the same batch and MaxAckPending. ns/op is
// the keyed consumer's time per event; x-raw is keyed events/s ÷ raw
// events/s (target ≥ 0.5).
func BenchmarkKeyedConsumer(b *testing.B) {
	for _, tg := range targets(b) {
		b.Run(tg.name, func(b *testing.B) {
			b.StopTimer()
			f := newFixture(b, tg, 4)
			f.cfg.AckWait, f.cfg.InProgressEvery = 30*time.Second, 10*time.Second
			f.cfg.PinnedTTL, f.cfg.PullExpiry = 10*time.Second, 5*time.Second
			n := b.N
			f.publish(keysFor(n, 1000, 0))

			raw := rawConsume(b, f, n)

			var done atomic.Int64
			finished := make(chan struct{})
			start := time.Now()
			b.StartTimer()
			c, err := New(context.Background(), f.js, f.cfg, func(context.Context, Event) error {
				if done.Add(1) == int64(n) {
					close(finished)
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
			select {
			case <-finished:
			case <-time.After(5 * time.Minute):
				b.Fatalf("keyed: %d of %d events in 5 minutes", done.Load(), n)
			}
			keyed := time.Since(start)
			b.StopTimer()
			c.Close()

			keyedRate := float64(n) / keyed.Seconds()
			rawRate := float64(n) / raw.Seconds()
			b.ReportMetric(keyedRate, "events/s")
			b.ReportMetric(rawRate, "raw-events/s")
			b.ReportMetric(keyedRate/rawRate, "x-raw")
		})
	}
}

// rawConsume reads n events with one plain pull consumer per partition,
// acknowledging each in the callback, and returns how long it took.
func rawConsume(b *testing.B, f *fixture, n int) time.Duration {
	ctx := context.Background()
	stream, err := f.js.Stream(ctx, f.cfg.Stream)
	if err != nil {
		b.Fatal(err)
	}
	var done atomic.Int64
	finished := make(chan struct{})
	start := time.Now()
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
			if done.Add(1) == int64(n) {
				close(finished)
			}
		}, jetstream.PullMaxMessages(f.cfg.PullBatch), jetstream.PullExpiry(f.cfg.PullExpiry))
		if err != nil {
			b.Fatal(err)
		}
		ccs = append(ccs, cc)
	}
	select {
	case <-finished:
	case <-time.After(5 * time.Minute):
		b.Fatalf("raw: %d of %d events in 5 minutes", done.Load(), n)
	}
	elapsed := time.Since(start)
	for _, cc := range ccs {
		cc.Stop()
	}
	return elapsed
}
