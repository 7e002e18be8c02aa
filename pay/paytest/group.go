package paytest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stampede-lab/stampede/pay"
)

// The tests of this file hold for every store; on a store that commits
// the writes of concurrent callers together (pay/sqlite's group commit)
// they are what shows that batching changes nothing a caller can see:
// every write answered as committed is there with all of its rows, and a
// write that fails inside a batch leaves nothing and takes nothing else
// down with it.

// groupWriters is how many callers write at once in these tests: more
// than one batch's worth on SQLite's default configuration.
const groupWriters = 96

// testConcurrentWriters: many callers each create a payment and approve
// it at once; every one succeeds, with its history, both outbox rows and
// its idempotency record completed.
func testConcurrentWriters(t *testing.T, s pay.Store) {
	ctx := context.Background()
	payments, outbox := len(all(t, s, 1000)), len(pending(t, s))
	ids := make([]string, groupWriters)
	keys := make([]string, groupWriters)
	errs := make([]error, groupWriters)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range groupWriters {
		p, idem := newPayment(), newIdem(t)
		ids[i], keys[i] = p.ID, idem.Key
		wg.Go(func() {
			<-start
			if _, err := s.CreatePending(ctx, p, idem); err != nil {
				errs[i] = fmt.Errorf("CreatePending: %w", err)
				return
			}
			if _, err := s.Transition(ctx, p.ID, pay.StatusPending, pay.StatusApproved, "approved"); err != nil {
				errs[i] = fmt.Errorf("transition: %w", err)
			}
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("writer %d: %v", i, err)
		}
	}
	for i, id := range ids {
		p := get(t, s, id)
		if p.Status != pay.StatusApproved || len(p.History) != 2 {
			t.Errorf("payment %d = %s with %d history entries, want APPROVED with 2", i, p.Status, len(p.History))
		}
		if evs := outboxOf(t, s, id); len(evs) != 2 || evs[0].Seq != 1 || evs[1].Seq != 2 {
			t.Errorf("payment %d outbox = %+v, want seq 1 and 2", i, evs)
		}
		rec, err := s.Idempotency(ctx, keys[i])
		if err != nil || rec.State != pay.IdempotencyCompleted || rec.PaymentID != id {
			t.Errorf("payment %d idempotency record = %+v, %v; want its own, completed", i, rec, err)
		}
	}
	if got := len(all(t, s, 1000)); got != payments+groupWriters {
		t.Errorf("payments: %d before, %d after; want %d more", payments, got, groupWriters)
	}
	if got := len(pending(t, s)); got != outbox+2*groupWriters {
		t.Errorf("outbox rows: %d before, %d after; want %d more", outbox, got, 2*groupWriters)
	}
}

// testFailingWriterAlone: callers whose writes fail (an idempotency key
// another caller holds, an order with a live payment, a stale transition,
// a payment that does not exist) write at the same moment as callers whose
// writes succeed. Each failure writes nothing and every success commits.
func testFailingWriterAlone(t *testing.T, s pay.Store) {
	ctx := context.Background()
	order, _ := create(t, s) // its order is taken
	stale, _ := create(t, s)
	transition(t, s, stale.ID, pay.StatusPending, pay.StatusDeclined, "declined")
	sharedKey := newIdem(t)
	if _, err := s.CreatePending(ctx, newPayment(), sharedKey); err != nil {
		t.Fatalf("CreatePending: %v", err)
	}
	payments, outbox := len(all(t, s, 1000)), len(pending(t, s))

	type result struct {
		kind string
		p    pay.Payment
		idem pay.IdempotencyRecord
		err  error
	}
	results := make([]result, groupWriters)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range groupWriters {
		p, idem := newPayment(), newIdem(t)
		var kind string
		switch i % 5 {
		case 0:
			kind, idem = "key held", sharedKey
		case 1:
			kind, p.MerchantID, p.OrderID = "order taken", order.MerchantID, order.OrderID
		case 2:
			kind = "stale transition"
		case 3:
			kind = "no such payment"
		default:
			kind = "valid"
		}
		results[i] = result{kind: kind, p: p, idem: idem}
		wg.Go(func() {
			<-start
			var err error
			switch kind {
			case "stale transition":
				_, err = s.Transition(ctx, stale.ID, pay.StatusPending, pay.StatusApproved, "racer")
			case "no such payment":
				_, err = s.Transition(ctx, pay.NewID(), pay.StatusPending, pay.StatusApproved, "ghost")
			default:
				_, err = s.CreatePending(ctx, p, idem)
			}
			results[i].err = err
		})
	}
	close(start)
	wg.Wait()

	valid := 0
	for i, r := range results {
		var (
			conflict *pay.IdempotencyConflict
			exists   *pay.OrderExistsError
		)
		switch r.kind {
		case "key held":
			if !errors.As(r.err, &conflict) {
				t.Errorf("writer %d (%s) = %v, want *IdempotencyConflict", i, r.kind, r.err)
			}
		case "order taken":
			if !errors.As(r.err, &exists) || exists.PaymentID != order.ID {
				t.Errorf("writer %d (%s) = %v, want *OrderExistsError naming %s", i, r.kind, r.err, order.ID)
			}
			if _, err := s.Idempotency(ctx, r.idem.Key); !errors.Is(err, pay.ErrNotFound) {
				t.Errorf("writer %d (%s): its idempotency key was stored: %v", i, r.kind, err)
			}
		case "stale transition":
			if !errors.Is(r.err, pay.ErrStaleStatus) {
				t.Errorf("writer %d (%s) = %v, want ErrStaleStatus", i, r.kind, r.err)
			}
		case "no such payment":
			if !errors.Is(r.err, pay.ErrNotFound) {
				t.Errorf("writer %d (%s) = %v, want ErrNotFound", i, r.kind, r.err)
			}
		default:
			valid++
			if r.err != nil {
				t.Errorf("writer %d (%s) = %v, want success", i, r.kind, r.err)
			} else if got := get(t, s, r.p.ID); got.Status != pay.StatusPending || len(got.History) != 1 {
				t.Errorf("writer %d (%s): stored %+v", i, r.kind, got)
			}
			continue
		}
		if r.kind == "key held" || r.kind == "order taken" {
			if _, err := s.Get(ctx, r.p.ID); !errors.Is(err, pay.ErrNotFound) {
				t.Errorf("writer %d (%s): its payment was stored: %v", i, r.kind, err)
			}
		}
	}
	if got := len(all(t, s, 1000)); got != payments+valid {
		t.Errorf("payments: %d before, %d after; want %d more (the valid writers')", payments, got, valid)
	}
	if got := len(pending(t, s)); got != outbox+valid {
		t.Errorf("outbox rows: %d before, %d after; want %d more", outbox, got, valid)
	}
	if got := get(t, s, stale.ID); got.Status != pay.StatusDeclined || len(got.History) != 2 {
		t.Errorf("the stale payment = %s with %d history entries, want DECLINED with 2", got.Status, len(got.History))
	}
}

// CrashSafety checks that every write a store answered as committed
// survives a crash: writers write on s concurrently, then crashed
// returns a store over what a crash at that moment leaves (for a file
// database, a copy of its files taken while s is open and writing), and
// every payment answered before crashed was called must be there with
// all of its rows. crashed owns the store it returns.
func CrashSafety(t *testing.T, s pay.Store, crashed func(t *testing.T) pay.Store) {
	ctx := context.Background()
	var (
		mu       sync.Mutex
		answered []string
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				p, err := s.CreatePending(ctx, newPayment(), newIdem(t))
				if err != nil {
					t.Errorf("CreatePending: %v", err)
					return
				}
				mu.Lock()
				answered = append(answered, p.ID)
				mu.Unlock()
			}
		})
	}
	// Let the writers commit a few hundred payments, in batches.
	for {
		mu.Lock()
		n := len(answered)
		mu.Unlock()
		if n >= 300 || t.Failed() {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	mu.Lock()
	before := append([]string(nil), answered...)
	mu.Unlock()
	c := crashed(t) // the writers still run
	close(stop)
	wg.Wait()
	for _, id := range before {
		p, err := c.Get(ctx, id)
		if err != nil {
			t.Fatalf("payment %s was answered as committed before the crash but is gone: %v", id, err)
		}
		if p.Status != pay.StatusPending || len(p.History) != 1 {
			t.Errorf("payment %s after the crash = %s with %d history entries", id, p.Status, len(p.History))
		}
	}
	// Nothing half-written: every payment there has its outbox row.
	ps := all(t, c, 1000)
	rows := map[string]int{}
	for _, e := range pending(t, c) {
		rows[e.PaymentID]++
	}
	for _, p := range ps {
		if rows[p.ID] != 1 {
			t.Errorf("payment %s after the crash has %d outbox rows, want 1", p.ID, rows[p.ID])
		}
	}
	if len(ps) < len(before) {
		t.Errorf("%d payments after the crash, fewer than the %d answered", len(ps), len(before))
	}
}
