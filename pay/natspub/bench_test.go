package natspub_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/stampede-lab/stampede/pay"
	"github.com/stampede-lab/stampede/pay/natspub"
)

// The relay benchmark pushes the same number of outbox rows three ways,
// one after the other in each chunk, on one embedded nats-server and one
// connection: through pay.Relay with the default configuration and
// natspub.Publisher (and, for comparison, with InFlight 1: one row at a
// time, the relay before asynchronous publishing), through a raw loop of synchronous PublishMsg calls,
// and through a raw window of PublishMsgAsync calls as wide as the relay's
// InFlight. The raw publishes carry the same subject, payload and headers
// (message id, expected stream) as the relay's. The outbox is an in-memory
// store, so the figure is the relay's own cost, not a database's.

const benchChunk = 2000

// benchRows are outbox rows in memory: the two methods of pay.Store the
// relay uses.
type benchRows struct {
	pay.Store
	rows   []pay.OutboxEvent
	marked []bool
	lo     int // rows before lo are all marked
}

func (s *benchRows) PendingOutbox(_ context.Context, limit int) ([]pay.OutboxEvent, error) {
	var out []pay.OutboxEvent
	for i := s.lo; i < len(s.rows) && len(out) < limit; i++ {
		if !s.marked[i] {
			out = append(out, s.rows[i])
		}
	}
	return out, nil
}

func (s *benchRows) MarkPublished(_ context.Context, ids []int64, _ time.Time) error {
	first := s.rows[0].ID
	for _, id := range ids {
		s.marked[id-first] = true
	}
	for s.lo < len(s.rows) && s.marked[s.lo] {
		s.lo++
	}
	return nil
}

var benchPayload = []byte(`{"payment_id":"00000000-0000-0000-0000-000000000000","seq":1,"type":"payment.status_changed","from":"PENDING","to":"APPROVED","reason":"approved","amount":1000,"currency":"KRW"}`)

// benchPayments counts the payments made so far, so that message ids stay
// unique across chunks and runs.
var benchPayments int

// makeRows returns n rows of payments with 3 events each. spread puts a
// payment's events 100 rows apart (100 payments under way at once);
// otherwise its 3 events are adjacent, the worst case for one row in flight
// per payment.
func makeRows(n int, spread bool) []pay.OutboxEvent {
	rows := make([]pay.OutboxEvent, n)
	base := benchPayments
	for i := range rows {
		p, seq := i/3, i%3+1
		if spread {
			p, seq = (i/300)*100+i%100, (i/100)%3+1
		}
		rows[i] = pay.OutboxEvent{ID: int64(i + 1), PaymentID: fmt.Sprintf("bench-%09d", base+p),
			Seq: int64(seq), Type: pay.EventStatusChanged, Payload: benchPayload}
	}
	benchPayments = base + n/3 + 101
	return rows
}

func rawMsg(cfg natspub.Config, e pay.OutboxEvent) (*nats.Msg, []natsjs.PublishOpt) {
	return &nats.Msg{Subject: cfg.Subject + "." + e.PaymentID, Data: e.Payload},
		[]natsjs.PublishOpt{natsjs.WithMsgID(natspub.MsgID(e)), natsjs.WithExpectStream(cfg.Stream)}
}

func BenchmarkRelay(b *testing.B) {
	e, err := natspub.StartEmbedded(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	nc, err := nats.Connect(e.URL())
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	ctx := context.Background()
	cfg := natspub.DefaultConfig()
	cfg.Stream, cfg.Subject = "BENCH", "bench"
	pub, err := natspub.NewPublisher(ctx, nc, cfg)
	if err != nil {
		b.Fatal(err)
	}
	js, err := natsjs.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	rcfg := pay.DefaultRelayConfig()

	relay := func(rows []pay.OutboxEvent, inFlight int) {
		store := &benchRows{rows: rows, marked: make([]bool, len(rows))}
		c := rcfg
		c.InFlight = inFlight
		r, err := pay.NewRelay(store, pub, c)
		if err != nil {
			b.Fatal(err)
		}
		for {
			n, err := r.RunOnce(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if n == 0 {
				return
			}
		}
	}
	rawSync := func(rows []pay.OutboxEvent) {
		for _, e := range rows {
			msg, opts := rawMsg(cfg, e)
			if _, err := js.PublishMsg(ctx, msg, opts...); err != nil {
				b.Fatal(err)
			}
		}
	}
	rawAsync := func(rows []pay.OutboxEvent) {
		window := make([]natsjs.PubAckFuture, 0, rcfg.InFlight)
		wait := func(f natsjs.PubAckFuture) {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				b.Fatal(err)
			}
		}
		for _, e := range rows {
			if len(window) == rcfg.InFlight {
				wait(window[0])
				window = window[1:]
			}
			msg, opts := rawMsg(cfg, e)
			f, err := js.PublishMsgAsync(msg, opts...)
			if err != nil {
				b.Fatal(err)
			}
			window = append(window, f)
		}
		for _, f := range window {
			wait(f)
		}
	}

	cases := []struct {
		name     string
		spread   bool
		inFlight int
	}{
		{"spread", true, rcfg.InFlight},
		{"adjacent", false, rcfg.InFlight},
		// The relay as it was: one row at a time.
		{"spread-inflight-1", true, 1},
	}
	for _, c := range cases {
		spread := c.spread
		b.Run(c.name, func(b *testing.B) {
			var tRelay, tSync, tAsync time.Duration
			var xRaw, xSync []float64
			for done := 0; done < b.N; {
				n := min(benchChunk, b.N-done)
				r1, r2, r3 := makeRows(n, spread), makeRows(n, spread), makeRows(n, spread)
				// Rotate which goes first, so that drift and the stream's
				// growth fall on each of the three alike.
				var d [3]time.Duration
				runs := []func(){
					func() { d[0] = timed(func() { relay(r1, c.inFlight) }) },
					func() { d[1] = timed(func() { rawAsync(r2) }) },
					func() { d[2] = timed(func() { rawSync(r3) }) },
				}
				k := len(xRaw) % 3
				for i := range 3 {
					runs[(k+i)%3]()
				}
				tRelay, tAsync, tSync = tRelay+d[0], tAsync+d[1], tSync+d[2]
				xRaw = append(xRaw, float64(d[1])/float64(d[0]))
				xSync = append(xSync, float64(d[1])/float64(d[2]))
				done += n
			}
			perMsg := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(b.N) }
			b.ReportMetric(perMsg(tRelay), "ns/row")
			b.ReportMetric(perMsg(tAsync), "async-ns/msg")
			b.ReportMetric(perMsg(tSync), "sync-ns/msg")
			// Rates relative to the raw asynchronous rate, medians of the
			// chunks' ratios: x-raw for the relay, sync-x-raw for the raw
			// synchronous loop.
			b.ReportMetric(median(xRaw), "x-raw")
			b.ReportMetric(median(xSync), "sync-x-raw")
		})
	}
}

// timed returns how long f took.
func timed(f func()) time.Duration {
	start := time.Now()
	f()
	return time.Since(start)
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
