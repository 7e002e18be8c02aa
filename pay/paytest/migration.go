package paytest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stampede-lab/stampede/pay"
)

// MigrationMerchant is the merchant of the payments of the fixture
// CheckMigration10 reads.
const MigrationMerchant = "6f1c2b0e-8d4a-4c3e-9b7a-1e2d3c4b5a69"

// CheckMigration10 checks a store opened on a database that migration 10
// (the history moved into the outbox rows, the idempotency state read from
// the payment, the order kept on live_order) took from this fixture,
// written on the schema of migration 9: payment "a" of order "oa",
// created at second 1 (history entry ” > PENDING "created", event seq 1),
// flagged for review at second 2 (event seq 2, no history entry) and
// approved at second 3 (PENDING > APPROVED "approved", event seq 3), its
// idempotency record "ka" completed; payment "b" of order "ob", created
// at second 4 and still PENDING, its record "kb" in flight; both of
// MigrationMerchant. It leaves b DECLINED and one more payment, of order
// "ob", PENDING.
func CheckMigration10(t *testing.T, s pay.Store) {
	t.Helper()
	ctx := context.Background()
	a, err := s.Get(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	want := []pay.StatusChange{
		{From: "", To: pay.StatusPending, Reason: "created", At: time.Unix(1, 0)},
		{From: pay.StatusPending, To: pay.StatusApproved, Reason: "approved", At: time.Unix(3, 0)},
	}
	if len(a.History) != len(want) {
		t.Fatalf("history of a after the migration: %+v, want %+v", a.History, want)
	}
	for i := range want {
		g := a.History[i]
		if g.From != want[i].From || g.To != want[i].To || g.Reason != want[i].Reason || !g.At.Equal(want[i].At) {
			t.Fatalf("history of a after the migration: entry %d is %+v, want %+v", i, g, want[i])
		}
	}
	for key, state := range map[string]pay.IdempotencyState{"ka": pay.IdempotencyCompleted, "kb": pay.IdempotencyInFlight} {
		r, err := s.Idempotency(ctx, key)
		if err != nil || r.State != state {
			t.Fatalf("record %s after the migration: %+v, %v; want state %s", key, r, err, state)
		}
	}
	// The orders of a (APPROVED) and b (PENDING) are taken; b's is given
	// back when b is declined.
	newPayment := func(order string) error {
		_, err := s.CreatePending(ctx, pay.Payment{ID: pay.NewID(), MerchantID: MigrationMerchant, OrderID: order, Amount: 1, Currency: "KRW"},
			pay.IdempotencyRecord{Key: "k-" + order + "-" + pay.NewID(), RequestHash: "h"})
		return err
	}
	for order, holder := range map[string]string{"oa": "a", "ob": "b"} {
		var taken *pay.OrderExistsError
		if err := newPayment(order); !errors.As(err, &taken) || taken.PaymentID != holder {
			t.Fatalf("a new payment of order %s after the migration: %v, want the order taken by %s", order, err, holder)
		}
	}
	// The history goes on where it was.
	if _, err := s.Transition(ctx, "b", pay.StatusPending, pay.StatusDeclined, "declined"); err != nil {
		t.Fatal(err)
	}
	if b, err := s.Get(ctx, "b"); err != nil || len(b.History) != 2 || b.History[1].To != pay.StatusDeclined {
		t.Fatalf("history of b after its decline: %+v, %v", b.History, err)
	}
	if err := newPayment("ob"); err != nil {
		t.Fatalf("a new payment of order ob once b is declined: %v", err)
	}
	if r, err := s.Idempotency(ctx, "kb"); err != nil || r.State != pay.IdempotencyCompleted {
		t.Fatalf("record kb after b's decline: %+v, %v", r, err)
	}
}
