package paytest

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stampede-lab/stampede/pay"
)

// refundStore returns s as a pay.RefundStore, or skips the test.
func refundStore(t *testing.T, s pay.Store) pay.RefundStore {
	t.Helper()
	rs, ok := s.(pay.RefundStore)
	if !ok {
		t.Skipf("%T keeps no refunds", s)
	}
	return rs
}

// approved creates a payment and approves it.
func approved(t *testing.T, s pay.Store) pay.Payment {
	t.Helper()
	p, _ := create(t, s)
	p, err := s.Transition(context.Background(), p.ID, pay.StatusPending, pay.StatusApproved, "approved: test")
	if err != nil {
		t.Fatalf("Transition: %v", err)
	}
	return p
}

// newRefund returns a refund of p for amount under a fresh key.
func newRefund(t *testing.T, p pay.Payment, amount int64) pay.Refund {
	return pay.Refund{ID: pay.NewID(), PaymentID: p.ID, MerchantID: p.MerchantID, Amount: amount,
		IdempotencyKey: pay.ScopedKey(p.MerchantID, newKey(t)), RequestHash: "hash-" + runTag}
}

// testConcurrentRefundsNeverExceed: 50 refunds of one payment at once,
// each under its own key: exactly as many as fit are written, and the
// refunds add up to at most the payment's amount.
func testConcurrentRefundsNeverExceed(t *testing.T, s pay.Store) {
	rs := refundStore(t, s)
	p := approved(t, s) // 12,000
	const n, amount = 50, 700
	var (
		wg                sync.WaitGroup
		mu                sync.Mutex
		written, exceeded int
		unavailable       int
		others            []error
	)
	for range n {
		r := newRefund(t, p, amount)
		wg.Go(func() {
			_, err := rs.CreateRefund(context.Background(), r)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				written++
			case pay.ErrorCode(err) == pay.CodeRefundExceeds:
				exceeded++
			case pay.ErrorCode(err) == pay.CodeUnavailable:
				// A database too slow for the operation deadline on a
				// loaded machine: the refund was not written (checked
				// below), which is allowed; the sum still must hold.
				unavailable++
			default:
				others = append(others, err)
			}
		})
	}
	wg.Wait()
	if len(others) > 0 {
		t.Fatalf("unexpected errors: %v", others)
	}
	list, err := rs.ListRefunds(context.Background(), p.ID)
	if err != nil {
		t.Fatal(err)
	}
	held, _ := pay.Refunded(list)
	want := int(p.Amount / amount)
	// An unavailable answer may still have committed.
	if len(list) < written || len(list) > written+unavailable || held > p.Amount || (unavailable == 0 && (written != want || exceeded != n-want)) {
		t.Fatalf("written %d, exceeded %d, unavailable %d, stored %d refunds holding %d of %d; want %d written", written, exceeded, unavailable, len(list), held, p.Amount, want)
	}
}

// testRefundRules: the refund of what is left, the key's conflict, a
// payment that is not approved, another merchant's, and a FAILED refund
// freeing its amount.
func testRefundRules(t *testing.T, s pay.Store) {
	ctx := context.Background()
	rs := refundStore(t, s)
	p := approved(t, s)
	first := newRefund(t, p, 2_000)
	r1, err := rs.CreateRefund(ctx, first)
	if err != nil || r1.Status != pay.RefundPending || r1.Currency != p.Currency || len(r1.History) != 1 {
		t.Fatalf("CreateRefund = %+v, %v", r1, err)
	}
	again := newRefund(t, p, 3_000)
	again.IdempotencyKey = first.IdempotencyKey
	if _, err := rs.CreateRefund(ctx, again); !isRefundConflict(err, r1.ID) {
		t.Fatalf("same key: %v, want a RefundConflict naming %s", err, r1.ID)
	}
	rest, err := rs.CreateRefund(ctx, newRefund(t, p, 0))
	if err != nil || rest.Amount != p.Amount-2_000 {
		t.Fatalf("refund of the rest = %+v, %v; want %d", rest, err, p.Amount-2_000)
	}
	if _, err := rs.CreateRefund(ctx, newRefund(t, p, 1)); pay.ErrorCode(err) != pay.CodeRefundExceeds {
		t.Fatalf("refund beyond the amount: %v, want %s", err, pay.CodeRefundExceeds)
	}
	if _, err := rs.TransitionRefund(ctx, rest.ID, pay.RefundPending, pay.RefundFailed, "refund_declined: test"); err != nil {
		t.Fatal(err)
	}
	if r, err := rs.CreateRefund(ctx, newRefund(t, p, 1)); err != nil || r.Amount != 1 {
		t.Fatalf("a FAILED refund frees its amount: %+v, %v", r, err)
	}
	pending, _ := create(t, s)
	if _, err := rs.CreateRefund(ctx, newRefund(t, pending, 1)); pay.ErrorCode(err) != pay.CodeNotRefundable {
		t.Fatalf("refund of a PENDING payment: %v, want %s", err, pay.CodeNotRefundable)
	}
	other := newRefund(t, p, 1)
	other.MerchantID = pay.NewID()
	if _, err := rs.CreateRefund(ctx, other); !errors.Is(err, pay.ErrNotFound) {
		t.Fatalf("another merchant's refund: %v, want ErrNotFound", err)
	}
	if _, err := rs.CreateRefund(ctx, newRefund(t, pay.Payment{ID: pay.NewID(), MerchantID: p.MerchantID}, 1)); !errors.Is(err, pay.ErrNotFound) {
		t.Fatalf("refund of no payment: %v, want ErrNotFound", err)
	}
}

func isRefundConflict(err error, id string) bool {
	c, ok := errors.AsType[*pay.RefundConflict](err)
	return ok && c.Refund.ID == id
}

// testRefundEventsInPaymentOrder: a refund's changes append history and
// write outbox rows in the payment's own sequence, after its own events;
// a stale change writes nothing.
func testRefundEventsInPaymentOrder(t *testing.T, s pay.Store) {
	ctx := context.Background()
	rs := refundStore(t, s)
	p := approved(t, s)
	r, err := rs.CreateRefund(ctx, newRefund(t, p, 500))
	if err != nil {
		t.Fatal(err)
	}
	if r, err = rs.TransitionRefund(ctx, r.ID, pay.RefundPending, pay.RefundUnknown, "outcome_unknown: test"); err != nil || r.NextInquiryAt.IsZero() {
		t.Fatalf("to UNKNOWN: %+v, %v", r, err)
	}
	if _, err := rs.TransitionRefund(ctx, r.ID, pay.RefundPending, pay.RefundSucceeded, "refunded: test"); !errors.Is(err, pay.ErrStaleStatus) {
		t.Fatalf("stale transition: %v, want ErrStaleStatus", err)
	}
	if r, err = rs.TransitionRefund(ctx, r.ID, pay.RefundUnknown, pay.RefundSucceeded, "inquiry_refunded: test"); err != nil || len(r.History) != 3 || !r.NextInquiryAt.IsZero() {
		t.Fatalf("to SUCCEEDED: %+v, %v", r, err)
	}
	if _, err := rs.TransitionRefund(ctx, r.ID, pay.RefundSucceeded, pay.RefundFailed, "x: y"); pay.ErrorCode(err) != pay.CodeInvalid {
		t.Fatalf("from a final status: %v, want invalid", err)
	}
	evs := outboxOf(t, s, p.ID)
	wantTypes := []string{pay.EventCreated, pay.EventStatusChanged, pay.EventRefundCreated, pay.EventRefundChanged, pay.EventRefundChanged}
	if len(evs) != len(wantTypes) {
		t.Fatalf("outbox of the payment: %d rows, want %d", len(evs), len(wantTypes))
	}
	for i, e := range evs {
		var ev pay.Event
		if err := json.Unmarshal(e.Payload, &ev); err != nil {
			t.Fatal(err)
		}
		if e.Seq != int64(i+1) || e.Type != wantTypes[i] || ev.Seq != e.Seq {
			t.Errorf("row %d: seq %d type %s, want seq %d type %s", i, e.Seq, e.Type, i+1, wantTypes[i])
		}
		if i >= 2 && (ev.Refund == nil || ev.Refund.ID != r.ID || ev.Status != pay.StatusApproved || ev.Refund.Cancellation) {
			t.Errorf("row %d: refund event %+v (a plain refund is no cancellation)", i, ev)
		}
	}
	// A refund under the payment's cancellation key carries a
	// cancellation out: its events say so.
	q := approved(t, s)
	c := newRefund(t, q, 0)
	c.IdempotencyKey = pay.ScopedKey(q.MerchantID, pay.CancelKey(q.ID))
	if c, err = rs.CreateRefund(ctx, c); err != nil {
		t.Fatal(err)
	}
	if _, err := rs.TransitionRefund(ctx, c.ID, pay.RefundPending, pay.RefundSucceeded, "refunded: test"); err != nil {
		t.Fatal(err)
	}
	for i, e := range outboxOf(t, s, q.ID)[2:] {
		var ev pay.Event
		if err := json.Unmarshal(e.Payload, &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Refund == nil || !ev.Refund.Cancellation {
			t.Errorf("cancellation's refund event %d: %+v, want cancellation true", i, ev.Refund)
		}
	}
	got, err := rs.GetRefund(ctx, r.ID)
	if err != nil || got.Status != pay.RefundSucceeded || len(got.History) != 3 || got.History[2].From != pay.RefundUnknown {
		t.Fatalf("GetRefund = %+v, %v", got, err)
	}
}

// testClaimDueRefunds: a due UNKNOWN refund is claimed once per lease; a
// deferred inquiry counts and moves it on.
func testClaimDueRefunds(t *testing.T, s pay.Store) {
	ctx := context.Background()
	rs := refundStore(t, s)
	p := approved(t, s)
	r, err := rs.CreateRefund(ctx, newRefund(t, p, 100))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rs.TransitionRefund(ctx, r.ID, pay.RefundPending, pay.RefundUnknown, "outcome_unknown: test"); err != nil {
		t.Fatal(err)
	}
	now := time.Now().Add(time.Second)
	has := func(rs []pay.Refund) bool {
		for _, x := range rs {
			if x.ID == r.ID {
				return true
			}
		}
		return false
	}
	first, err := rs.ClaimDueRefunds(ctx, now, now.Add(time.Hour), 1000)
	if err != nil || !has(first) {
		t.Fatalf("ClaimDueRefunds: %v, claimed ours %v", err, has(first))
	}
	second, err := rs.ClaimDueRefunds(ctx, now, now.Add(time.Hour), 1000)
	if err != nil || has(second) {
		t.Fatalf("second claim within the lease: %v, claimed ours again %v", err, has(second))
	}
	d, err := rs.DeferRefundInquiry(ctx, r.ID, pay.RefundUnknown, now.Add(2*time.Hour))
	if err != nil || d.Inquiries != 1 {
		t.Fatalf("DeferRefundInquiry = %+v, %v", d, err)
	}
	if _, err := rs.DeferRefundInquiry(ctx, r.ID, pay.RefundPending, now); !errors.Is(err, pay.ErrStaleStatus) {
		t.Fatalf("defer in the wrong status: %v, want ErrStaleStatus", err)
	}
}

// testListForMerchant: filters, pagination by cursor, and another
// merchant's payments never listed.
func testListForMerchant(t *testing.T, s pay.Store) {
	ctx := context.Background()
	l, ok := s.(pay.MerchantLister)
	if !ok {
		t.Skipf("%T cannot list for a merchant", s)
	}
	mine := pay.NewID()
	var ids []string
	for i := range 5 {
		p := newPayment()
		p.MerchantID = mine
		p.CreatedAt = time.Now().Add(time.Duration(i) * time.Millisecond)
		p, err := s.CreatePending(ctx, p, newIdem(t))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, p.ID)
	}
	if _, err := s.Transition(ctx, ids[1], pay.StatusPending, pay.StatusApproved, "approved: test"); err != nil {
		t.Fatal(err)
	}
	var got []string
	q := pay.PaymentQuery{MerchantID: mine, Limit: 2}
	for range 10 {
		ps, err := l.ListForMerchant(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ps {
			got = append(got, p.ID)
		}
		if len(ps) < q.Limit {
			break
		}
		q.After = pay.CursorOf(ps[len(ps)-1])
	}
	if len(got) != 5 {
		t.Fatalf("paged listing = %d payments, want 5", len(got))
	}
	for i := range ids {
		if got[i] != ids[i] {
			t.Fatalf("paged listing order %v, want %v", got, ids)
		}
	}
	ps, err := l.ListForMerchant(ctx, pay.PaymentQuery{MerchantID: mine, Status: pay.StatusApproved, Limit: 10})
	if err != nil || len(ps) != 1 || ps[0].ID != ids[1] {
		t.Fatalf("status filter = %v, %v", ps, err)
	}
	p2 := get(t, s, ids[2])
	ps, err = l.ListForMerchant(ctx, pay.PaymentQuery{MerchantID: mine, OrderID: p2.OrderID, Limit: 10})
	if err != nil || len(ps) != 1 || ps[0].ID != ids[2] {
		t.Fatalf("order filter = %v, %v", ps, err)
	}
	ps, err = l.ListForMerchant(ctx, pay.PaymentQuery{MerchantID: mine, CreatedFrom: p2.CreatedAt, CreatedTo: p2.CreatedAt.Add(time.Microsecond), Limit: 10})
	if err != nil || len(ps) != 1 || ps[0].ID != ids[2] {
		t.Fatalf("created range = %v, %v", ps, err)
	}
	ps, err = l.ListForMerchant(ctx, pay.PaymentQuery{MerchantID: pay.NewID(), Limit: 10})
	if err != nil || len(ps) != 0 {
		t.Fatalf("another merchant's listing = %v, %v; want none", ps, err)
	}
}
