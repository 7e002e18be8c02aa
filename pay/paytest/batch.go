package paytest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stampede-lab/stampede/pay"
)

// batcher returns s as a pay.BatchTransitioner, or skips the test.
func batcher(t *testing.T, s pay.Store) pay.BatchTransitioner {
	t.Helper()
	bt, ok := s.(pay.BatchTransitioner)
	if !ok {
		t.Skipf("%T does not implement pay.BatchTransitioner (optional)", s)
	}
	return bt
}

// testTransitionBatch: a batch writes each transition as Transition does
// (history, outbox row with the same event, NextInquiryAt cleared, the
// idempotency record completed), and a stale or missing payment gets its
// error and writes nothing while the others commit.
func testTransitionBatch(t *testing.T, s pay.Store) {
	ctx := context.Background()
	bt := batcher(t, s)
	approved, approvedIdem := create(t, s)
	transition(t, s, approved.ID, pay.StatusPending, pay.StatusUnknown, "timeout")
	failed, _ := create(t, s)
	transition(t, s, failed.ID, pay.StatusPending, pay.StatusUnknown, "timeout")
	stale, _ := create(t, s) // still PENDING
	// twin is settled the single way, for comparison.
	twin, _ := create(t, s)
	transition(t, s, twin.ID, pay.StatusPending, pay.StatusUnknown, "timeout")
	transition(t, s, twin.ID, pay.StatusUnknown, pay.StatusFailed, "inquiry: not found")
	missing := pay.NewID()

	errs, err := bt.TransitionBatch(ctx, []pay.TransitionRequest{
		{ID: approved.ID, From: pay.StatusUnknown, To: pay.StatusApproved, Reason: "inquiry: approved"},
		{ID: stale.ID, From: pay.StatusUnknown, To: pay.StatusDeclined, Reason: "inquiry: declined"},
		{ID: failed.ID, From: pay.StatusUnknown, To: pay.StatusFailed, Reason: "inquiry: not found"},
		{ID: missing, From: pay.StatusUnknown, To: pay.StatusApproved, Reason: "inquiry: approved"},
	})
	if err != nil {
		t.Fatalf("TransitionBatch: %v", err)
	}
	if len(errs) != 4 || errs[0] != nil || !errors.Is(errs[1], pay.ErrStaleStatus) || errs[2] != nil || !errors.Is(errs[3], pay.ErrNotFound) {
		t.Fatalf("TransitionBatch errors = %v; want nil, ErrStaleStatus, nil, ErrNotFound", errs)
	}

	a := get(t, s, approved.ID)
	if a.Status != pay.StatusApproved || len(a.History) != 3 || a.History[2].Reason != "inquiry: approved" ||
		a.History[2].From != pay.StatusUnknown || !a.NextInquiryAt.IsZero() {
		t.Errorf("after the batch: %+v; want APPROVED with its history entry and no next inquiry", a)
	}
	rec, err := s.Idempotency(ctx, approvedIdem.Key)
	if err != nil || rec.State != pay.IdempotencyCompleted {
		t.Errorf("idempotency record after the batch = %+v, %v; want completed", rec, err)
	}
	evs := outboxOf(t, s, approved.ID)
	if len(evs) != 3 || evs[2].Seq != 3 || evs[2].Type != pay.EventStatusChanged {
		t.Fatalf("outbox of the approved payment = %+v; want 3 rows, the last a status change with seq 3", evs)
	}
	if ev := decodeEvent(t, evs[2]); ev.Status != pay.StatusApproved || ev.From != pay.StatusUnknown || ev.Reason != "inquiry: approved" ||
		ev.PaymentID != approved.ID || ev.Amount != approved.Amount || !ev.At.Equal(a.UpdatedAt) {
		t.Errorf("outbox event = %+v; want the change to APPROVED at %v", ev, a.UpdatedAt)
	}

	// The batch's FAILED is the single path's FAILED, event included.
	f, tw := get(t, s, failed.ID), get(t, s, twin.ID)
	if f.Status != tw.Status || len(f.History) != len(tw.History) || f.History[2].Reason != tw.History[2].Reason || !f.NextInquiryAt.IsZero() {
		t.Errorf("batch FAILED %+v differs from single-path FAILED %+v", f, tw)
	}
	fe, te := outboxOf(t, s, failed.ID), outboxOf(t, s, twin.ID)
	if len(fe) != len(te) {
		t.Fatalf("outbox: batch %d rows, single path %d", len(fe), len(te))
	}
	for i := range fe {
		x, y := decodeEvent(t, fe[i]), decodeEvent(t, te[i])
		if fe[i].Seq != te[i].Seq || fe[i].Type != te[i].Type || x.Status != y.Status || x.From != y.From || x.Reason != y.Reason || x.Seq != y.Seq {
			t.Errorf("outbox[%d]: batch %+v, single path %+v", i, x, y)
		}
	}

	if got := get(t, s, stale.ID); got.Status != pay.StatusPending || len(got.History) != 1 || !got.UpdatedAt.Equal(stale.UpdatedAt) {
		t.Errorf("the stale payment after the batch: %+v; want it unchanged", got)
	}
	if evs := outboxOf(t, s, stale.ID); len(evs) != 1 {
		t.Errorf("outbox of the stale payment = %+v; want only the created row", evs)
	}

	// An empty batch writes nothing and fails nothing.
	if errs, err := bt.TransitionBatch(ctx, nil); err != nil || len(errs) != 0 {
		t.Errorf("TransitionBatch(nil) = %v, %v", errs, err)
	}
}

// testTransitionBatchInvalid: a batch with a bad request — an illegal
// transition, a payment named twice — is refused
// as a whole (CodeInvalid) and writes nothing.
func testTransitionBatchInvalid(t *testing.T, s pay.Store) {
	ctx := context.Background()
	bt := batcher(t, s)
	p, _ := create(t, s)
	transition(t, s, p.ID, pay.StatusPending, pay.StatusUnknown, "timeout")
	q, _ := create(t, s)
	transition(t, s, q.ID, pay.StatusPending, pay.StatusUnknown, "timeout")
	ok := pay.TransitionRequest{ID: p.ID, From: pay.StatusUnknown, To: pay.StatusApproved, Reason: "found"}
	for name, bad := range map[string]pay.TransitionRequest{
		"illegal": {ID: q.ID, From: pay.StatusApproved, To: pay.StatusDeclined, Reason: "x"},
		"unknown": {ID: q.ID, From: pay.StatusUnknown, To: "SETTLED", Reason: "x"},
		"twice":   {ID: p.ID, From: pay.StatusUnknown, To: pay.StatusDeclined, Reason: "x"},
	} {
		errs, err := bt.TransitionBatch(ctx, []pay.TransitionRequest{ok, bad})
		if pay.ErrorCode(err) != pay.CodeInvalid || errs != nil {
			t.Errorf("%s: TransitionBatch = %v, %v; want CodeInvalid", name, errs, err)
		}
	}
	for _, id := range []string{p.ID, q.ID} {
		if got := get(t, s, id); got.Status != pay.StatusUnknown || len(got.History) != 2 {
			t.Errorf("after refused batches: %+v; want it UNKNOWN, unchanged", got)
		}
		if evs := outboxOf(t, s, id); len(evs) != 2 {
			t.Errorf("outbox after refused batches = %d rows, want 2", len(evs))
		}
	}
}

// testConcurrentBatchAndSingle: batches and single transitions racing to
// settle the same UNKNOWN payments: each payment moves exactly once, with
// one history entry and one outbox row for its one winner.
func testConcurrentBatchAndSingle(t *testing.T, s pay.Store) {
	ctx := context.Background()
	bt := batcher(t, s)
	const payments, racers = 8, 6
	ps := make([]pay.Payment, payments)
	for i := range ps {
		ps[i], _ = create(t, s)
		transition(t, s, ps[i].ID, pay.StatusPending, pay.StatusUnknown, "timeout")
	}
	var (
		mu   sync.Mutex
		wins = map[string][]string{}
		wg   sync.WaitGroup
	)
	won := func(id, who string) {
		mu.Lock()
		wins[id] = append(wins[id], who)
		mu.Unlock()
	}
	start := make(chan struct{})
	for r := range racers {
		wg.Go(func() {
			<-start
			who := fmt.Sprintf("racer %d", r)
			if r%2 == 0 {
				// Batches in opposite orders: the store locks in its
				// own order, so they cannot deadlock.
				reqs := make([]pay.TransitionRequest, payments)
				for i, p := range ps {
					reqs[i] = pay.TransitionRequest{ID: p.ID, From: pay.StatusUnknown, To: pay.StatusApproved, Reason: who}
				}
				if r%4 == 2 {
					for i, j := 0, len(reqs)-1; i < j; i, j = i+1, j-1 {
						reqs[i], reqs[j] = reqs[j], reqs[i]
					}
				}
				errs, err := bt.TransitionBatch(ctx, reqs)
				if err != nil {
					t.Errorf("%s: TransitionBatch: %v", who, err)
					return
				}
				for i, e := range errs {
					switch {
					case e == nil:
						won(reqs[i].ID, who)
					case !errors.Is(e, pay.ErrStaleStatus):
						t.Errorf("%s: %s: %v, want success or ErrStaleStatus", who, reqs[i].ID, e)
					}
				}
				return
			}
			for _, p := range ps {
				_, err := s.Transition(ctx, p.ID, pay.StatusUnknown, pay.StatusDeclined, who)
				switch {
				case err == nil:
					won(p.ID, who)
				case !errors.Is(err, pay.ErrStaleStatus):
					t.Errorf("%s: Transition %s: %v, want success or ErrStaleStatus", who, p.ID, err)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	for _, p := range ps {
		w := wins[p.ID]
		if len(w) != 1 {
			t.Errorf("payment %s moved by %v; want exactly one winner", p.ID, w)
			continue
		}
		got := get(t, s, p.ID)
		if len(got.History) != 3 || got.History[2].Reason != w[0] || !got.Status.Terminal() {
			t.Errorf("payment %s after the race: %+v; want the winner's (%s) change only", p.ID, got, w[0])
		}
		if evs := outboxOf(t, s, p.ID); len(evs) != 3 || evs[2].Seq != 3 {
			t.Errorf("outbox of %s after the race = %d rows; want 3", p.ID, len(evs))
		}
	}
}
