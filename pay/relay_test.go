package pay_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stampede-lab/stampede/pay"
)

// memOutbox is an outbox in memory: the only part of pay.Store the relay
// uses. MarkPublished fails the test when asked to mark a row the broker
// has not acknowledged.
type memOutbox struct {
	pay.Store
	t      *testing.T
	rows   []pay.OutboxEvent
	marked map[int64]bool
	broker *scriptedBroker
}

func (m *memOutbox) PendingOutbox(_ context.Context, limit int) ([]pay.OutboxEvent, error) {
	var out []pay.OutboxEvent
	for _, e := range m.rows {
		if !m.marked[e.ID] && len(out) < limit {
			out = append(out, e)
		}
	}
	return out, nil
}

func (m *memOutbox) MarkPublished(_ context.Context, ids []int64, _ time.Time) error {
	for _, id := range ids {
		if !m.broker.acked[id] {
			m.t.Errorf("row %d marked published before its acknowledgement", id)
		}
		m.marked[id] = true
	}
	return nil
}

// outcome is what the scripted broker does with one publish attempt.
type outcome int

const (
	stored  outcome = iota // stored and acknowledged
	lost                   // not stored; the acknowledgement reports a failure
	ackLost                // stored, but the acknowledgement reports a failure
	refused                // PublishAsync itself fails: nothing sent
)

// scriptedBroker is an AsyncPublisher whose answers follow a script,
// keyed by row ID and attempt, and that records what a JetStream stream
// would hold. It answers nothing before Wait, so how many publishes are in
// flight is up to the relay alone, and the test does not depend on timing.
type scriptedBroker struct {
	t        *testing.T
	script   map[int64][]outcome // per row, the outcome of each attempt (then: stored)
	attempts map[int64]int
	stream   []pay.OutboxEvent // stored messages, duplicates dropped
	held     map[int64]bool    // row IDs in stream
	acked    map[int64]bool    // rows acknowledged as stored
	inflight map[string]int64  // payment -> its row awaiting acknowledgement
	maxIn    int               // most publishes awaiting acknowledgement at once
}

func (b *scriptedBroker) Publish(context.Context, pay.OutboxEvent) error {
	b.t.Fatal("the relay used the synchronous Publish of an AsyncPublisher")
	return nil
}

func (b *scriptedBroker) PublishAsync(_ context.Context, e pay.OutboxEvent) (pay.PublishAck, error) {
	if id, busy := b.inflight[e.PaymentID]; busy {
		b.t.Errorf("row %d of %s sent while row %d of the same payment awaits its acknowledgement", e.ID, e.PaymentID, id)
	}
	n := b.attempts[e.ID]
	b.attempts[e.ID]++
	o := stored
	if n < len(b.script[e.ID]) {
		o = b.script[e.ID][n]
	}
	if o == refused {
		return nil, errors.New("connection closed")
	}
	if (o == stored || o == ackLost) && !b.held[e.ID] {
		b.held[e.ID] = true
		b.stream = append(b.stream, e)
	}
	b.inflight[e.PaymentID] = e.ID
	b.maxIn = max(b.maxIn, len(b.inflight))
	return &scriptedAck{b: b, e: e, o: o}, nil
}

type scriptedAck struct {
	b *scriptedBroker
	e pay.OutboxEvent
	o outcome
}

func (a *scriptedAck) Wait(context.Context) error {
	delete(a.b.inflight, a.e.PaymentID)
	if a.o != stored {
		return fmt.Errorf("no acknowledgement for row %d", a.e.ID)
	}
	a.b.acked[a.e.ID] = true
	return nil
}

// TestRelayAsyncKeepsPaymentOrderThroughFailures: 8 payments with 25
// events each, interleaved in the outbox in a fixed pseudo-random order
// (so a payment's rows are sometimes adjacent, sometimes far apart), published with up to 16 in
// flight while the broker loses some publishes, stores others without
// acknowledging them, and refuses to send one. Every row ends up in the
// stream exactly once, each payment's events in seq order; no payment
// ever has two rows in flight; no row is marked before its
// acknowledgement; several rows were in flight at once.
func TestRelayAsyncKeepsPaymentOrderThroughFailures(t *testing.T) {
	const payments, perPayment = 8, 25
	broker := &scriptedBroker{t: t, script: map[int64][]outcome{}, attempts: map[int64]int{},
		held: map[int64]bool{}, acked: map[int64]bool{}, inflight: map[string]int64{}}
	store := &memOutbox{t: t, marked: map[int64]bool{}, broker: broker}
	rng := rand.New(rand.NewPCG(1, 2))
	seqs := make([]int64, payments)
	for id := int64(1); id <= payments*perPayment; id++ {
		p := rng.IntN(payments)
		for seqs[p] == perPayment {
			p = (p + 1) % payments
		}
		seqs[p]++
		store.rows = append(store.rows, pay.OutboxEvent{ID: id, PaymentID: fmt.Sprintf("pay-%02d", p), Seq: seqs[p]})
	}
	// Failures spread over payments and seqs, some twice for one row.
	for _, r := range store.rows {
		switch r.ID % 7 {
		case 1:
			broker.script[r.ID] = []outcome{lost}
		case 3:
			broker.script[r.ID] = []outcome{ackLost, lost}
		}
	}
	broker.script[55] = []outcome{refused}

	cfg := pay.DefaultRelayConfig()
	cfg.Batch, cfg.InFlight = 64, 16
	relay, err := pay.NewRelay(store, broker, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	failed := 0
	for pass := 0; ; pass++ {
		if pass > 1000 {
			t.Fatal("the relay made no progress")
		}
		n, err := relay.RunOnce(ctx)
		if err != nil {
			failed++
			continue
		}
		if n == 0 {
			break
		}
	}
	if failed == 0 {
		t.Fatal("no pass failed: the script injected no failure")
	}
	if broker.maxIn < 2 {
		t.Fatalf("at most %d publish in flight; want several", broker.maxIn)
	}
	if len(broker.stream) != payments*perPayment {
		t.Fatalf("the stream holds %d rows, want %d", len(broker.stream), payments*perPayment)
	}
	next := map[string]int64{}
	for _, e := range broker.stream {
		if e.Seq != next[e.PaymentID]+1 {
			t.Fatalf("%s: seq %d stored after seq %d", e.PaymentID, e.Seq, next[e.PaymentID])
		}
		next[e.PaymentID] = e.Seq
	}
	if left, _ := store.PendingOutbox(ctx, 1); len(left) != 0 {
		t.Fatalf("row %d left unpublished", left[0].ID)
	}
}
