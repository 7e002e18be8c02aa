package worker_test

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/stampede-lab/stampede"
	dispatchjs "github.com/stampede-lab/stampede/dispatch/natskeyed"
	"github.com/stampede-lab/stampede/fulfilment"
	"github.com/stampede-lab/stampede/fulfilment/sqlstore"
	"github.com/stampede-lab/stampede/fulfilment/worker"
	"github.com/stampede-lab/stampede/internal/testenv"
	"github.com/stampede-lab/stampede/pay"
	"github.com/stampede-lab/stampede/pay/natspub"
	"github.com/stampede-lab/stampede/pay/sqlite"
)

// TestTwoWorkersSettleEveryPaymentOnce: payments of every final status go
// through pay's outbox and relay onto the partitioned stream, with one
// invalid body among them; two workers consume into one fulfilment store.
// Every event is processed, the invalid one is set aside (acknowledged,
// counted, not retried), and the tickets match the APPROVED payments
// exactly (fulfilment.Parity). On the embedded server (2.10+: transform,
// 2.11+: pinned partitions) and on the real one named by
// STAMPEDE_NATS_URL (on 2.9: the publisher partitions, and each worker
// serves half of the partitions statically).
func TestTwoWorkersSettleEveryPaymentOnce(t *testing.T) {
	for _, real := range []bool{false, true} {
		name := "embedded"
		if real {
			name = "real"
		}
		t.Run(name, func(t *testing.T) { twoWorkers(t, real) })
	}
}

func twoWorkers(t *testing.T, real bool) {
	ctx := context.Background()
	url := ""
	if real {
		url = testenv.URL(t, testenv.NATSURL)
	} else {
		emb, err := natspub.StartEmbedded(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		defer emb.Close()
		url = emb.URL()
	}
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// A stream of its own, so that a shared real server keeps nothing.
	stream := fmt.Sprintf("WORKERTEST_%d", time.Now().UnixNano())
	subject := "wt" + stream[len("WORKERTEST"):]
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), stream) })

	ps, err := sqlite.Open(sqlite.Memory)
	if err != nil {
		t.Fatal(err)
	}
	defer ps.Close()
	final := []pay.Status{pay.StatusApproved, pay.StatusDeclined, pay.StatusFailed, pay.StatusApproved}
	merchant := pay.NewID()
	const n = 200
	for i := range n {
		p, err := ps.CreatePending(ctx, pay.Payment{ID: pay.NewID(), MerchantID: merchant, OrderID: fmt.Sprintf("o-%d", i), Amount: int64(100 + i), Currency: "EUR"},
			pay.IdempotencyRecord{Key: fmt.Sprintf("k-%d", i), RequestHash: "h"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ps.Transition(ctx, p.ID, pay.StatusPending, final[i%len(final)], "test"); err != nil {
			t.Fatal(err)
		}
	}
	pcfg := natspub.DefaultConfig()
	pcfg.Stream, pcfg.Subject = stream, subject
	pub, err := natspub.NewPublisher(ctx, nc, pcfg)
	if err != nil {
		t.Fatal(err)
	}
	relay, err := pay.NewRelay(ps, pub, pay.DefaultRelayConfig())
	if err != nil {
		t.Fatal(err)
	}
	rows := 0
	for {
		k, err := relay.RunOnce(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if k == 0 {
			break
		}
		rows += k
	}
	// Not a payment event: set aside, never retried. (Without a server
	// transform, producers publish to the partitioned subject themselves.)
	bad := pcfg.Subject + ".not-a-payment"
	if !pub.ServerPartitions() {
		bad = dispatchjs.PartitionedSubject(pcfg.Subject, "not-a-payment", pcfg.Partitions)
	}
	if _, err := js.Publish(ctx, bad, []byte(`{"seq":"x"}`)); err != nil {
		t.Fatal(err)
	}

	fcfg := sqlstore.DefaultConfig()
	fcfg.SQLitePath = filepath.Join(t.TempDir(), "fulfilment.db")
	store, err := sqlstore.Open(ctx, fcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	var workers []*worker.Worker
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 2)
	for i := range 2 {
		cfg := worker.DefaultConfig()
		cfg.JetStream, cfg.Store = js, store
		cfg.Consumer.Stream, cfg.Consumer.Subject = stream, subject
		cfg.Consumer.Logger = slog.New(slog.DiscardHandler).With("worker", i)
		if !dispatchjs.PinningSupported(nc.ConnectedServerVersion()) {
			cfg.Consumer.Pinned = false
			for p := range cfg.Consumer.Partitions {
				if p%2 == i {
					cfg.Consumer.Serve = append(cfg.Consumer.Serve, p)
				}
			}
		}
		w, err := worker.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Alive(ctx); err == nil {
			t.Errorf("Alive before Run = nil, want an error")
		}
		go func() { done <- w.Run(runCtx) }()
		select {
		case <-w.Started():
		case err := <-done:
			t.Fatalf("Run: %v", err)
		}
		workers = append(workers, w)
	}
	// Wait for every event: the valid ones in the inbox, the invalid one
	// counted.
	deadline := time.Now().Add(60 * time.Second)
	for {
		c, err := store.Counts(ctx)
		if err != nil {
			t.Fatal(err)
		}
		invalid := workers[0].Invalid() + workers[1].Invalid()
		if c.Inbox == int64(rows) && invalid == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 60s: %d of %d events in the inbox, %d invalid set aside", c.Inbox, rows, invalid)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, w := range workers {
		if err := w.Alive(ctx); err != nil {
			t.Errorf("Alive: %v", err)
		}
	}
	stop()
	for range workers {
		if err := <-done; err != nil {
			t.Errorf("Run = %v, want nil when its context ends", err)
		}
	}
	for _, w := range workers {
		if err := w.Alive(ctx); err == nil {
			t.Errorf("Alive after Run = nil, want an error")
		}
		if s := w.Stats(); s.Late != 0 {
			t.Errorf("per-key order lost: %+v", s)
		}
	}
	if workers[0].Invalid()+workers[1].Invalid() != 1 {
		t.Errorf("invalid events counted %d, %d; want 1 in all (acknowledged once)", workers[0].Invalid(), workers[1].Invalid())
	}
	payments, err := ps.List(ctx, "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	var records []fulfilment.PaymentRecord
	approved := 0
	for _, p := range payments {
		records = append(records, fulfilment.PaymentRecord{PaymentID: p.ID, MerchantID: p.MerchantID, OrderID: p.OrderID, Status: p.Status})
		if p.Status == pay.StatusApproved {
			approved++
		}
	}
	rep, err := fulfilment.CheckParity(ctx, store, records)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Mismatches() != 0 || rep.Matched != approved || approved != n/2 {
		t.Fatalf("parity = %v, want %d matched and nothing else", rep, approved)
	}
	c, err := store.Counts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c.Tickets != int64(approved) || c.Releases != int64(n-approved) {
		t.Fatalf("counts %+v; want %d tickets, %d releases", c, approved, n-approved)
	}
}

// TestConfigValidateNamesEveryField: every bad field at once, the
// consumer's under the names of serve worker's flags, the handler's
// prefixed "fulfilment.".
func TestConfigValidateNamesEveryField(t *testing.T) {
	cfg := worker.DefaultConfig()
	cfg.Consumer.Partitions = 0
	cfg.Consumer.Workers = 0
	cfg.Fulfilment.Now = nil
	var got []string
	for _, e := range stampede.FieldErrors(cfg.Validate()) {
		got = append(got, e.Field)
	}
	want := []string{"jetstream", "store", "partitions", "concurrency", "fulfilment.now"}
	if !slices.Equal(got, want) {
		t.Errorf("Validate() named %v, want %v", got, want)
	}
	if _, err := worker.New(cfg); err == nil {
		t.Errorf("New(bad config) = nil error")
	}
}
