package paytest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stampede-lab/stampede/pay"
)

// operationStore returns s as a pay.OperationStore, or skips the test.
func operationStore(t *testing.T, s pay.Store) pay.OperationStore {
	t.Helper()
	os, ok := s.(pay.OperationStore)
	if !ok {
		t.Skipf("%T keeps no captures or voids", s)
	}
	return os
}

// authorized creates a manual-capture payment of merchant mid ("" for
// the suite's) and authorises it.
func authorized(t *testing.T, s pay.Store, mid string) pay.Payment {
	t.Helper()
	p := newPayment()
	p.CaptureMode = pay.CaptureManual
	if mid != "" {
		p.MerchantID = mid
	}
	p, err := s.CreatePending(context.Background(), p, newIdem(t))
	if err != nil {
		t.Fatalf("CreatePending: %v", err)
	}
	if p.CaptureMode != pay.CaptureManual {
		t.Fatalf("CreatePending: capture mode %q, want manual", p.CaptureMode)
	}
	return transition(t, s, p.ID, pay.StatusPending, pay.StatusAuthorized, "authorized: test")
}

// newOp returns an operation of p under a fresh key.
func newOp(t *testing.T, p pay.Payment, kind pay.OperationKind, amount int64) pay.Operation {
	return pay.Operation{ID: pay.NewID(), PaymentID: p.ID, MerchantID: p.MerchantID, Kind: kind, Amount: amount,
		IdempotencyKey: pay.ScopedKey(p.MerchantID, newKey(t)), RequestHash: "hash-" + runTag}
}

// testOperationRules: a capture of an authorisation takes all of it by
// default and knows the authorisation's key; it holds the payment (no
// second capture or void); its key is its own; SUCCEEDED makes the
// payment APPROVED with the captured amount, which bounds its refunds;
// an APPROVED payment cannot be captured or voided again; a capture over
// the authorised amount is refused; another merchant's payment is not
// found; a FAILED operation frees the authorisation; a succeeded void
// makes the payment VOIDED.
func testOperationRules(t *testing.T, s pay.Store) {
	os := operationStore(t, s)
	ctx := context.Background()
	p := authorized(t, s, "") // 12,000

	if _, err := os.CreateOperation(ctx, newOp(t, p, pay.OpCapture, 12_001)); pay.ErrorCode(err) != pay.CodeCaptureExceeds {
		t.Fatalf("capture over the authorisation: %v, want capture_exceeds", err)
	}
	other := newOp(t, p, pay.OpVoid, 0)
	other.MerchantID = pay.NewID()
	if _, err := os.CreateOperation(ctx, other); !errors.Is(err, pay.ErrNotFound) {
		t.Fatalf("another merchant's void: %v, want ErrNotFound", err)
	}

	declined, err := os.CreateOperation(ctx, newOp(t, p, pay.OpCapture, 5000))
	if err != nil {
		t.Fatalf("CreateOperation: %v", err)
	}
	if declined.Status != pay.RefundPending || declined.PaymentKey != p.ExternalKey || declined.Currency != p.Currency {
		t.Fatalf("created %+v, want PENDING with the payment's key and currency", declined)
	}
	if _, err := os.CreateOperation(ctx, newOp(t, p, pay.OpVoid, 0)); pay.ErrorCode(err) != pay.CodeOperationExists {
		t.Fatalf("a void while a capture is PENDING: %v, want operation_exists", err)
	}
	if _, err := os.TransitionOperation(ctx, declined.ID, pay.RefundPending, pay.RefundFailed, "operation_declined: test"); err != nil {
		t.Fatalf("TransitionOperation: %v", err)
	}
	if got := get(t, s, p.ID); got.Status != pay.StatusAuthorized {
		t.Fatalf("after a FAILED capture the payment is %s, want AUTHORIZED", got.Status)
	}

	op := newOp(t, p, pay.OpCapture, 0)
	c, err := os.CreateOperation(ctx, op)
	if err != nil || c.Amount != p.Amount {
		t.Fatalf("capture of all: %+v, %v; want amount %d", c, err, p.Amount)
	}
	var conflict *pay.OperationConflict
	if _, err := os.CreateOperation(ctx, op); !errors.As(err, &conflict) || conflict.Operation.ID != c.ID {
		t.Fatalf("same key again: %v, want OperationConflict naming %s", err, c.ID)
	}
	if _, err := os.TransitionOperation(ctx, c.ID, pay.RefundPending, pay.RefundUnknown, "outcome_unknown: test"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.TransitionOperation(ctx, c.ID, pay.RefundPending, pay.RefundSucceeded, "captured: test"); !errors.Is(err, pay.ErrStaleStatus) {
		t.Fatalf("stale compare-and-set: %v, want ErrStaleStatus", err)
	}
	if _, err := os.TransitionOperation(ctx, c.ID, pay.RefundUnknown, pay.RefundSucceeded, "captured: test"); err != nil {
		t.Fatal(err)
	}
	got := get(t, s, p.ID)
	if got.Status != pay.StatusApproved || got.Captured != p.Amount || got.Refundable() != p.Amount {
		t.Fatalf("after the capture: %s captured %d, want APPROVED %d", got.Status, got.Captured, p.Amount)
	}
	if _, err := os.CreateOperation(ctx, newOp(t, p, pay.OpVoid, 0)); pay.ErrorCode(err) != pay.CodeNotAuthorized {
		t.Fatalf("a void after the capture: %v, want not_authorized", err)
	}
	ops, err := os.ListOperations(ctx, p.ID)
	if err != nil || len(ops) != 2 || ops[0].ID != declined.ID || ops[1].Status != pay.RefundSucceeded {
		t.Fatalf("ListOperations = %+v, %v", ops, err)
	}

	// A partial capture bounds the refunds.
	q := authorized(t, s, "")
	pc, err := os.CreateOperation(ctx, newOp(t, q, pay.OpCapture, 4000))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.TransitionOperation(ctx, pc.ID, pay.RefundPending, pay.RefundSucceeded, "captured: test"); err != nil {
		t.Fatal(err)
	}
	if rs, ok := s.(pay.RefundStore); ok {
		if _, err := rs.CreateRefund(ctx, newRefund(t, q, 4001)); pay.ErrorCode(err) != pay.CodeRefundExceeds {
			t.Fatalf("a refund over the captured amount: %v, want refund_exceeds", err)
		}
	}

	// A void.
	v := authorized(t, s, "")
	vo, err := os.CreateOperation(ctx, newOp(t, v, pay.OpVoid, 0))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.TransitionOperation(ctx, vo.ID, pay.RefundPending, pay.RefundSucceeded, "voided: test"); err != nil {
		t.Fatal(err)
	}
	if got := get(t, s, v.ID); got.Status != pay.StatusVoided || len(got.History) != 3 {
		t.Fatalf("after the void: %s with %d history entries, want VOIDED with 3", got.Status, len(got.History))
	}
}

// testConcurrentCaptureVoidOneRecorded: 20 captures and voids of one
// authorisation at once, each under its own key: exactly one is
// written, every other is refused operation_exists.
func testConcurrentCaptureVoidOneRecorded(t *testing.T, s pay.Store) {
	os := operationStore(t, s)
	p := authorized(t, s, "")
	var (
		wg               sync.WaitGroup
		mu               sync.Mutex
		written, refused int
		others           []error
	)
	for i := range 20 {
		kind := pay.OpCapture
		if i%2 == 1 {
			kind = pay.OpVoid
		}
		op := newOp(t, p, kind, 0)
		wg.Go(func() {
			_, err := os.CreateOperation(context.Background(), op)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				written++
			case pay.ErrorCode(err) == pay.CodeOperationExists:
				refused++
			case pay.ErrorCode(err) == pay.CodeUnavailable:
				// Too slow on a loaded machine: nothing written (checked below).
			default:
				others = append(others, err)
			}
		})
	}
	wg.Wait()
	ops, err := os.ListOperations(context.Background(), p.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(others) > 0 || written != 1 || len(ops) != 1 {
		t.Fatalf("written %d (listed %d), refused %d, others %v; want exactly one", written, len(ops), refused, others)
	}
}

// testClaimDueOperations: a PENDING operation is claimed once due (and
// not again within its lease), its inquiry deferred; a final one never.
func testClaimDueOperations(t *testing.T, s pay.Store) {
	os := operationStore(t, s)
	ctx := context.Background()
	p := authorized(t, s, "")
	op := newOp(t, p, pay.OpVoid, 0)
	op.NextInquiryAt = time.Now().Add(-time.Second)
	op, err := os.CreateOperation(ctx, op)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	claimed := claimOp(t, os, op.ID, now, now.Add(time.Minute))
	if claimed == nil || claimed.PaymentKey != p.ExternalKey || claimed.Kind != pay.OpVoid {
		t.Fatalf("claim = %+v, want the void with its payment's key", claimed)
	}
	if again := claimOp(t, os, op.ID, now, now.Add(time.Minute)); again != nil {
		t.Fatalf("claimed again within the lease: %+v", again)
	}
	if _, err := os.TransitionOperation(ctx, op.ID, pay.RefundPending, pay.RefundUnknown, "outcome_unknown: test"); err != nil {
		t.Fatal(err)
	}
	d, err := os.DeferOperationInquiry(ctx, op.ID, pay.RefundUnknown, now.Add(time.Hour))
	if err != nil || d.Inquiries != 1 {
		t.Fatalf("DeferOperationInquiry = %+v, %v; want 1 inquiry", d, err)
	}
	if _, err := os.DeferOperationInquiry(ctx, op.ID, pay.RefundPending, now.Add(time.Hour)); !errors.Is(err, pay.ErrStaleStatus) {
		t.Fatalf("defer of a stale status: %v, want ErrStaleStatus", err)
	}
	if c := claimOp(t, os, op.ID, now.Add(2*time.Hour), now.Add(3*time.Hour)); c == nil || c.Status != pay.RefundUnknown {
		t.Fatalf("claim after the deferral = %+v, want the UNKNOWN void", c)
	}
	if _, err := os.TransitionOperation(ctx, op.ID, pay.RefundUnknown, pay.RefundSucceeded, "voided: test"); err != nil {
		t.Fatal(err)
	}
	if c := claimOp(t, os, op.ID, now.Add(24*time.Hour), now.Add(25*time.Hour)); c != nil {
		t.Fatalf("a final operation was claimed: %+v", c)
	}
}

// claimOp claims the due operations and returns id's, or nil.
func claimOp(t *testing.T, os pay.OperationStore, id string, now, until time.Time) *pay.Operation {
	t.Helper()
	ops, err := os.ClaimDueOperations(context.Background(), now, until, 1000)
	if err != nil {
		t.Fatalf("ClaimDueOperations: %v", err)
	}
	for _, op := range ops {
		if op.ID == id {
			return &op
		}
	}
	return nil
}

// testExpiredAuthorizations: an authorisation created before the bound
// and held by no operation is listed; one held by a capture, or with a
// void of its own, is not.
func testExpiredAuthorizations(t *testing.T, s pay.Store) {
	os := operationStore(t, s)
	ctx := context.Background()
	free := authorized(t, s, "")
	held := authorized(t, s, "")
	if _, err := os.CreateOperation(ctx, newOp(t, held, pay.OpCapture, 0)); err != nil {
		t.Fatal(err)
	}
	voidFailed := authorized(t, s, "")
	vf, err := os.CreateOperation(ctx, newOp(t, voidFailed, pay.OpVoid, 0))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.TransitionOperation(ctx, vf.ID, pay.RefundPending, pay.RefundFailed, "operation_declined: test"); err != nil {
		t.Fatal(err)
	}
	listed := func(before time.Time) map[string]bool {
		ps, err := os.ExpiredAuthorizations(ctx, before, 10_000)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, p := range ps {
			if p.Status != pay.StatusAuthorized {
				t.Fatalf("listed a %s payment", p.Status)
			}
			out[p.ID] = true
		}
		return out
	}
	if got := listed(free.CreatedAt); got[free.ID] {
		t.Fatal("listed an authorisation created at the bound, not before it")
	}
	got := listed(time.Now().Add(time.Hour))
	if !got[free.ID] || got[held.ID] || got[voidFailed.ID] {
		t.Fatalf("listed free %v, held %v, void failed %v; want only the free one", got[free.ID], got[held.ID], got[voidFailed.ID])
	}
}

// testMerchantEvents: the feed returns a merchant's events only, in the
// order written, a page at a time from a cursor.
func testMerchantEvents(t *testing.T, s pay.Store) {
	feed, ok := s.(pay.EventFeed)
	if !ok {
		t.Skipf("%T has no events feed", s)
	}
	ctx := context.Background()
	a, b := pay.NewID(), pay.NewID()
	pa := authorized(t, s, a) // created, status_changed
	authorized(t, s, b)
	transition(t, s, pa.ID, pay.StatusAuthorized, pay.StatusVoided, "voided: test")
	var all []pay.OutboxEvent
	var after int64
	for range 10 {
		page, err := feed.MerchantEvents(ctx, a, after, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		all = append(all, page...)
		after = page[len(page)-1].ID
	}
	if len(all) != 3 {
		t.Fatalf("merchant a has %d events, want 3", len(all))
	}
	for i, e := range all {
		if e.PaymentID != pa.ID || e.Seq != int64(i+1) || (i > 0 && e.ID <= all[i-1].ID) {
			t.Fatalf("event %d = %+v, want payment %s seq %d in order", i, e, pa.ID, i+1)
		}
	}
	if all[2].Type != pay.EventStatusChanged {
		t.Fatalf("last event %s, want %s", all[2].Type, pay.EventStatusChanged)
	}
	if none, err := feed.MerchantEvents(ctx, pay.NewID(), 0, 100); err != nil || len(none) != 0 {
		t.Fatalf("an unknown merchant's feed = %d events, %v", len(none), err)
	}
}
