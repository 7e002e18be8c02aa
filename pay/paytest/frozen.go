package paytest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stampede-lab/stampede/pay"
)

// Frozen is a store whose database can be made to stop answering, for
// RunFrozen.
type Frozen struct {
	// Store is the store under test; RunFrozen never closes it.
	Store pay.Store
	// OpTimeout is the deadline the store puts on every call.
	OpTimeout time.Duration
	// Freeze makes the database stop answering (a proxy that stops
	// forwarding, a lock held elsewhere); Thaw undoes it. RunFrozen calls
	// Thaw once, after Freeze.
	Freeze, Thaw func()
	// ReadsAnswer says that reads may still succeed while frozen (a
	// SQLite writer holding the write lock does not stop WAL readers);
	// writes must fail all the same.
	ReadsAnswer bool
}

// frozenSlack is how much later than its deadline a call on a frozen
// store may return: scheduling, a busy machine, the race detector.
const frozenSlack = time.Second

// RunFrozen freezes the database under f.Store and checks that every
// store call returns within f.OpTimeout (plus a second of slack) with
// CodeUnavailable, answered 503, never a hang; then that the store answers
// again once thawed, and that nothing the frozen calls tried was written.
func RunFrozen(t *testing.T, f Frozen) {
	t.Helper()
	s, ctx := f.Store, context.Background()
	p, idem := create(t, s)

	f.Freeze()
	thawed := false
	thaw := func() {
		if !thawed {
			thawed = true
			f.Thaw()
		}
	}
	defer thaw()

	type call struct {
		name  string
		write bool
		fn    func() error
	}
	calls := []call{
		{"CreatePending", true, func() error { _, err := s.CreatePending(ctx, newPayment(), newIdem(t)); return err }},
		{"Transition", true, func() error {
			_, err := s.Transition(ctx, p.ID, pay.StatusPending, pay.StatusUnknown, "frozen")
			return err
		}},
		{"FlagReview", true, func() error { return s.FlagReview(ctx, p.ID, "frozen") }},
		{"MarkPublished", true, func() error { return s.MarkPublished(ctx, []int64{1 << 60}, time.Now()) }},
		{"DeleteExpiredIdempotency", true, func() error {
			_, err := s.DeleteExpiredIdempotency(ctx, time.Date(1990, 1, 1, 0, 0, 0, 0, time.UTC))
			return err
		}},
		{"Get", false, func() error { _, err := s.Get(ctx, p.ID); return err }},
		{"Idempotency", false, func() error { _, err := s.Idempotency(ctx, idem.Key); return err }},
		{"ListByStatus", false, func() error { _, err := s.ListByStatus(ctx, pay.StatusPending, 10); return err }},
		{"List", false, func() error { _, err := s.List(ctx, "", 10); return err }},
		{"PendingOutbox", false, func() error { _, err := s.PendingOutbox(ctx, 10); return err }},
		{"Ping", false, func() error { return s.Ping(ctx) }},
	}
	// All at once: a store that serialises its calls (one write
	// connection, a bounded pool) must still answer each within its own
	// deadline.
	type result struct {
		err  error
		took time.Duration
	}
	results := make([]result, len(calls))
	var wg sync.WaitGroup
	for i, c := range calls {
		wg.Go(func() {
			start := time.Now()
			err := c.fn()
			results[i] = result{err, time.Since(start)}
		})
	}
	wg.Wait()
	for i, c := range calls {
		r := results[i]
		if limit := f.OpTimeout + frozenSlack; r.took > limit {
			t.Errorf("%s on a frozen store took %s, want at most %s (deadline %s)", c.name, r.took.Round(time.Millisecond), limit, f.OpTimeout)
		}
		if r.err == nil && f.ReadsAnswer && !c.write {
			continue
		}
		if pay.ErrorCode(r.err) != pay.CodeUnavailable {
			t.Errorf("%s on a frozen store = %v, want unavailable (503)", c.name, r.err)
		}
	}

	thaw()
	// The store answers again (a pool may first have to replace the
	// connections the freeze broke), and none of the frozen writes
	// happened.
	deadline := time.Now().Add(5*f.OpTimeout + 5*time.Second)
	var (
		got pay.Payment
		err error
	)
	for {
		if got, err = s.Get(ctx, p.ID); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("Get after the thaw: %v", err)
	}
	if got.Status != pay.StatusPending || got.ManualReview || len(got.History) != 1 {
		t.Errorf("after the thaw: %+v, want the payment as created", got)
	}
	if rec, err := s.Idempotency(ctx, idem.Key); err != nil || rec.State != pay.IdempotencyInFlight {
		t.Errorf("idempotency record after the thaw = %+v, %v; want it in flight", rec, err)
	}
	if _, err := s.Transition(ctx, p.ID, pay.StatusPending, pay.StatusUnknown, "thawed"); err != nil {
		t.Errorf("Transition after the thaw: %v", err)
	}
	if err := s.Ping(ctx); err != nil {
		t.Errorf("Ping after the thaw: %v", err)
	}
}
