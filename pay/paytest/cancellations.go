package paytest

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/stampede-lab/stampede/pay"
)

// newCancellation returns a cancellation of p under a fresh key.
func newCancellation(t *testing.T, p pay.Payment) pay.Cancellation {
	return pay.Cancellation{PaymentID: p.ID, MerchantID: p.MerchantID, Reason: "event cancelled",
		IdempotencyKey: pay.ScopedKey(p.MerchantID, newKey(t)), RequestHash: "hash-" + runTag}
}

// testCancellationRules: one cancellation per payment, recorded
// REQUESTED whatever the payment's status; concurrent requests under ten
// keys record one; a pending payment's is not due, a settled one's is;
// closing is a compare-and-set; another merchant's payment is not found.
func testCancellationRules(t *testing.T, s pay.Store) {
	cs, ok := s.(pay.CancellationStore)
	if !ok {
		t.Skipf("%T keeps no cancellations", s)
	}
	ctx := context.Background()
	p, _ := create(t, s) // PENDING

	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		won       []pay.Cancellation
		conflicts int
		others    []error
	)
	for range 10 {
		c := newCancellation(t, p)
		wg.Go(func() {
			got, cur, err := cs.CreateCancellation(ctx, c)
			mu.Lock()
			defer mu.Unlock()
			var cf *pay.CancellationConflict
			switch {
			case err == nil:
				won = append(won, got)
				if cur.ID != p.ID || cur.Status != pay.StatusPending {
					others = append(others, errors.New("the payment returned is not the one cancelled, as it stands"))
				}
			case errors.As(err, &cf):
				conflicts++
			case pay.ErrorCode(err) == pay.CodeUnavailable:
				// A database too slow on a loaded machine: not written.
			default:
				others = append(others, err)
			}
		})
	}
	wg.Wait()
	if len(won) != 1 || len(others) > 0 {
		t.Fatalf("10 concurrent cancellations: %d recorded, %d conflicts, errors %v; want exactly one recorded", len(won), conflicts, others)
	}
	c := won[0]
	if c.Status != pay.CancelRequested || c.Action != "" || c.ActionID != "" {
		t.Fatalf("recorded %+v, want REQUESTED with no action", c)
	}
	if _, _, err := cs.CreateCancellation(ctx, c); !errors.As(err, new(*pay.CancellationConflict)) {
		t.Fatalf("the same key again: %v, want *CancellationConflict", err)
	}
	other := newCancellation(t, p)
	other.MerchantID = "0b6f1c2e-8d4a-4c3e-9b7a-1e2d3c4b5a69"
	if _, _, err := cs.CreateCancellation(ctx, other); !errors.Is(err, pay.ErrNotFound) {
		t.Fatalf("another merchant's payment: %v, want ErrNotFound", err)
	}
	if due, err := cs.DueCancellations(ctx, 100); err != nil || containsCancellation(due, p.ID) {
		t.Fatalf("DueCancellations while PENDING = %v, %v; want it left out", due, err)
	}
	if _, err := s.Transition(ctx, p.ID, pay.StatusPending, pay.StatusApproved, "approved: test"); err != nil {
		t.Fatal(err)
	}
	if due, err := cs.DueCancellations(ctx, 100); err != nil || !containsCancellation(due, p.ID) {
		t.Fatalf("DueCancellations once APPROVED = %v, %v; want it listed", due, err)
	}
	if _, err := cs.CloseCancellation(ctx, p.ID, pay.CancelCarriedOut, pay.CancelActionNone, "", "x"); pay.ErrorCode(err) != pay.CodeInvalid {
		t.Fatalf("CARRIED_OUT with no action: %v, want invalid", err)
	}
	refundID := pay.NewID()
	got, err := cs.CloseCancellation(ctx, p.ID, pay.CancelCarriedOut, pay.CancelActionRefund, refundID, "cancel_refund: test")
	if err != nil || got.Status != pay.CancelCarriedOut || got.ActionID != refundID || got.Outcome != "cancel_refund: test" {
		t.Fatalf("CloseCancellation = %+v, %v", got, err)
	}
	if _, err := cs.CloseCancellation(ctx, p.ID, pay.CancelClosed, pay.CancelActionNone, "", "again"); !errors.Is(err, pay.ErrStaleStatus) {
		t.Fatalf("closing twice: %v, want ErrStaleStatus", err)
	}
	if got, err := cs.GetCancellation(ctx, p.ID); err != nil || got.Status != pay.CancelCarriedOut || got.Reason != "event cancelled" {
		t.Fatalf("GetCancellation = %+v, %v", got, err)
	}
	if due, err := cs.DueCancellations(ctx, 100); err != nil || containsCancellation(due, p.ID) {
		t.Fatalf("DueCancellations once carried out = %v, %v; want it left out", due, err)
	}
	if _, err := cs.GetCancellation(ctx, pay.NewID()); !errors.Is(err, pay.ErrNotFound) {
		t.Fatalf("GetCancellation of a payment without one: %v, want ErrNotFound", err)
	}
}

func containsCancellation(cs []pay.Cancellation, paymentID string) bool {
	for _, c := range cs {
		if c.PaymentID == paymentID {
			return true
		}
	}
	return false
}
