package pay_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-lab/stampede/institution"
	instclient "github.com/stampede-lab/stampede/institution/client"
	"github.com/stampede-lab/stampede/pay"
	"github.com/stampede-lab/stampede/pay/institutionclient"
)

// TestCrashLeavesPendingThenRecovers: a service that died mid-call leaves
// PENDING payments, some of which the institution charged and some it
// never saw. A new service, once their approval must have ended, takes
// them over as UNKNOWN, the reconciler settles every one, and parity
// finds nothing wrong. Before then it leaves them alone.
func TestCrashLeavesPendingThenRecovers(t *testing.T) {
	r := newRig(t, nil)
	ctx := context.Background()
	client := institutionclient.New(instclient.NewClient(r.instURL, http.DefaultClient))
	const n = 10
	var ids []string
	for i := range n {
		p, err := r.store.CreatePending(ctx, pay.Payment{ID: pay.NewID(), MerchantID: merchant, OrderID: fmt.Sprint("crash-", i), Amount: 1200, Currency: "KRW"},
			pay.IdempotencyRecord{Key: fmt.Sprint("crash-key-", i)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, p.ID)
		if i%2 == 0 { // the call reached the institution before the crash
			if _, err := client.Approve(ctx, pay.ApprovalRequest{ExternalKey: p.ExternalKey, Amount: p.Amount, Currency: p.Currency}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The restarted service, its clock first at once, then past the
	// payments' takeover time (pay.DefaultPendingTakeover, as the store
	// wrote them without one).
	var skew atomic.Int64
	svc, err := pay.NewService(r.store, client, func() pay.Config {
		c := pay.DefaultConfig()
		c.ReconcileEvery = 20 * time.Millisecond
		c.Now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
		return c
	}())
	if err != nil {
		t.Fatal(err)
	}
	if got, err := svc.Recover(ctx); err != nil || got != 0 {
		t.Fatalf("Recover before the takeover time = %d, %v; want nothing touched", got, err)
	}
	skew.Store(int64(pay.DefaultPendingTakeover + time.Second))
	if got, err := svc.Recover(ctx); err != nil || got != n {
		t.Fatalf("Recover = %d, %v; want all %d PENDING payments turned UNKNOWN", got, err, n)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		left, err := r.store.ListByStatus(ctx, pay.StatusUnknown, 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d payments still UNKNOWN after 10s", len(left))
		}
		if _, err := svc.Reconcile(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for i, id := range ids {
		p, err := r.store.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		want := pay.StatusFailed
		if i%2 == 0 {
			want = pay.StatusApproved
		}
		if p.Status != want {
			t.Errorf("payment %d: %s, want %s", i, p.Status, want)
		}
	}
	ledger, err := r.inst.Approvals(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var charges []pay.Charge
	for _, rec := range ledger.Records {
		charges = append(charges, pay.Charge{ExternalKey: rec.ExternalKey, Approved: rec.Status == institution.StatusApproved, Amount: rec.Amount, Currency: rec.Currency, Times: rec.Charges})
	}
	rep, err := pay.Parity(ctx, r.store, charges)
	if err != nil || rep.Mismatches() != 0 || rep.Matched != n/2 {
		t.Fatalf("parity = %v, %v; want %d matched and no mismatch", rep, err, n/2)
	}
}

// FuzzCreateBody posts arbitrary bodies: never a 5xx, always JSON.
func FuzzCreateBody(f *testing.F) {
	f.Add([]byte(payment("o", 100)))
	f.Add([]byte(`{"merchant_id":1}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`{"amount":1e309}`))
	r := newRig(f, nil)
	f.Fuzz(func(t *testing.T, body []byte) {
		req, _ := http.NewRequest(http.MethodPost, r.api.URL+"/v1/payments", strings.NewReader(string(body)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", pay.NewID())
		req.Header.Set("Authorization", "Bearer "+r.key)
		resp, err := r.v.Client(t).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode >= 500 {
			t.Fatalf("body %q answered %d", body, resp.StatusCode)
		}
	})
}
