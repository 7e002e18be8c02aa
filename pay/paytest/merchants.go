package paytest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/pay"
)

// mustOrderExists checks that err is an *OrderExistsError naming id.
func mustOrderExists(t *testing.T, err error, id string) {
	t.Helper()
	oe, ok := errors.AsType[*pay.OrderExistsError](err)
	if !ok || oe.PaymentID != id {
		t.Fatalf("CreatePending for a taken order = %v, want *OrderExistsError naming %s", err, id)
	}
	if pay.ErrorCode(err) != pay.CodeOrderExists || stampede.ClassOf(pay.MapError(err)) != stampede.Conflict {
		t.Fatalf("order exists maps to %s (%s), want order_exists, a conflict", pay.ErrorCode(err), stampede.ClassOf(pay.MapError(err)))
	}
}

// testOneLivePerOrder: an order has at most one PENDING, UNKNOWN or
// APPROVED payment; a new key does not get around it, and nothing of the
// refused request is written; after DECLINED or FAILED the order may be
// paid again.
func testOneLivePerOrder(t *testing.T, s pay.Store) {
	ctx := context.Background()
	first, _ := create(t, s)
	again := func() (pay.Payment, pay.IdempotencyRecord, error) {
		p, idem := newPayment(), newIdem(t)
		p.MerchantID, p.OrderID = first.MerchantID, first.OrderID
		got, err := s.CreatePending(ctx, p, idem)
		if err != nil {
			got = p
		}
		return got, idem, err
	}
	p, idem, err := again()
	mustOrderExists(t, err, first.ID)
	if _, err := s.Get(ctx, p.ID); !errors.Is(err, pay.ErrNotFound) {
		t.Fatalf("the refused payment was stored: %v", err)
	}
	if _, err := s.Idempotency(ctx, idem.Key); !errors.Is(err, pay.ErrNotFound) {
		t.Fatalf("the refused request's idempotency key was stored: %v", err)
	}
	transition(t, s, first.ID, pay.StatusPending, pay.StatusUnknown, "timeout")
	_, _, err = again()
	mustOrderExists(t, err, first.ID)
	transition(t, s, first.ID, pay.StatusUnknown, pay.StatusDeclined, "declined")
	second, _, err := again()
	if err != nil {
		t.Fatalf("after DECLINED the order may be paid again: %v", err)
	}
	transition(t, s, second.ID, pay.StatusPending, pay.StatusApproved, "approved")
	_, _, err = again()
	mustOrderExists(t, err, second.ID)

	// Another merchant's order of the same name is another order.
	other, oidem := newPayment(), newIdem(t)
	other.MerchantID, other.OrderID = pay.NewID(), first.OrderID
	if _, err := s.CreatePending(ctx, other, oidem); err != nil {
		t.Fatalf("another merchant, same order_id: %v", err)
	}
}

// testConcurrentSameOrder: concurrent creates of one order under
// different keys: exactly one wins, the others name it.
func testConcurrentSameOrder(t *testing.T, s pay.Store) {
	ctx := context.Background()
	order := newPayment()
	const n = 8
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		won  []string
		errs []error
	)
	for range n {
		wg.Go(func() {
			p := newPayment()
			p.MerchantID, p.OrderID = order.MerchantID, order.OrderID
			got, err := s.CreatePending(ctx, p, newIdem(t))
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				won = append(won, got.ID)
			} else {
				errs = append(errs, err)
			}
		})
	}
	wg.Wait()
	if len(won) != 1 {
		t.Fatalf("%d creates of one order succeeded (%v), want exactly 1; errors: %v", len(won), won, errs)
	}
	for _, err := range errs {
		mustOrderExists(t, err, won[0])
	}
}

// testText: a NUL, a control character or invalid UTF-8 in a text field
// is refused as invalid, naming the field, before the database sees it.
func testText(t *testing.T, s pay.Store) {
	ctx := context.Background()
	cases := []struct {
		field string
		edit  func(p *pay.Payment, r *pay.IdempotencyRecord)
	}{
		{"order_id", func(p *pay.Payment, _ *pay.IdempotencyRecord) { p.OrderID = "order\x00-1" }},
		{"order_id", func(p *pay.Payment, _ *pay.IdempotencyRecord) { p.OrderID = "order\xff" }},
		{"order_id", func(p *pay.Payment, _ *pay.IdempotencyRecord) { p.OrderID = "order\n1" }},
		{"Idempotency-Key", func(_ *pay.Payment, r *pay.IdempotencyRecord) { r.Key += "\xc3\x28" }},
		{"Idempotency-Key", func(_ *pay.Payment, r *pay.IdempotencyRecord) { r.Key += "\x00" }},
	}
	for _, c := range cases {
		p, idem := newPayment(), newIdem(t)
		c.edit(&p, &idem)
		_, err := s.CreatePending(ctx, p, idem)
		if e, ok := errors.AsType[*pay.Error](err); !ok || e.Code != pay.CodeInvalid || e.Field != c.field {
			t.Errorf("CreatePending with %q/%q = %v, want invalid naming %s", p.OrderID, idem.Key, err, c.field)
		}
	}
	// Printable non-ASCII text is fine.
	p, idem := newPayment(), newIdem(t)
	p.OrderID += "-주문"
	if _, err := s.CreatePending(ctx, p, idem); err != nil {
		t.Errorf("a Korean order_id: %v", err)
	}
}

func merchantStore(t *testing.T, s pay.Store) pay.MerchantStore {
	t.Helper()
	ms, ok := s.(pay.MerchantStore)
	if !ok {
		t.Fatalf("%T does not implement pay.MerchantStore", s)
	}
	return ms
}

// newMerchant creates a merchant and returns it with its API key.
func newMerchant(t *testing.T, ms pay.MerchantStore) (pay.Merchant, string) {
	t.Helper()
	key := pay.NewAPIKey()
	m := pay.Merchant{ID: pay.NewID(), Name: "shop " + runTag, KeyHash: pay.HashAPIKey(key), CreatedAt: time.Now()}
	if err := ms.CreateMerchant(context.Background(), m); err != nil {
		t.Fatalf("CreateMerchant: %v", err)
	}
	return m, key
}

// testMerchants: create, find by key hash, list, revoke, webhook.
func testMerchants(t *testing.T, s pay.Store) {
	ctx := context.Background()
	ms := merchantStore(t, s)
	m, key := newMerchant(t, ms)
	got, err := ms.MerchantByKeyHash(ctx, pay.HashAPIKey(key))
	if err != nil || got.ID != m.ID || got.Name != m.Name || got.Revoked() {
		t.Fatalf("MerchantByKeyHash = %+v, %v; want %s, not revoked", got, err, m.ID)
	}
	if _, err := ms.MerchantByKeyHash(ctx, pay.HashAPIKey(pay.NewAPIKey())); !errors.Is(err, pay.ErrNotFound) {
		t.Fatalf("an unknown key = %v, want ErrNotFound", err)
	}
	bad := pay.Merchant{ID: pay.NewID(), Name: "nul\x00", KeyHash: pay.HashAPIKey(pay.NewAPIKey())}
	if err := ms.CreateMerchant(ctx, bad); pay.ErrorCode(err) != pay.CodeInvalid {
		t.Fatalf("a name with NUL = %v, want invalid", err)
	}
	all, err := ms.Merchants(ctx)
	found := false
	for _, a := range all {
		found = found || a.ID == m.ID
	}
	if err != nil || !found {
		t.Fatalf("Merchants = %d merchants, %v; want %s among them", len(all), err, m.ID)
	}
	if err := ms.SetWebhook(ctx, m.ID, "http://example.com/hook", "s"); pay.ErrorCode(err) != pay.CodeInvalid {
		t.Fatalf("a plain-http webhook off loopback = %v, want invalid", err)
	}
	if err := ms.SetWebhook(ctx, m.ID, "https://example.com/hook", "whsec_x"); err != nil {
		t.Fatalf("SetWebhook: %v", err)
	}
	if got, err := ms.Merchant(ctx, m.ID); err != nil || got.WebhookURL != "https://example.com/hook" || got.WebhookSecret != "whsec_x" {
		t.Fatalf("Merchant after SetWebhook = %+v, %v", got, err)
	}
	if err := ms.SetWebhook(ctx, pay.NewID(), "https://example.com/hook", "s"); !errors.Is(err, pay.ErrNotFound) {
		t.Fatalf("SetWebhook of an unknown merchant = %v, want ErrNotFound", err)
	}
	for range 2 { // revoking twice is fine
		if err := ms.RevokeMerchant(ctx, m.ID, time.Now()); err != nil {
			t.Fatalf("RevokeMerchant: %v", err)
		}
	}
	if _, err := ms.MerchantByKeyHash(ctx, pay.HashAPIKey(key)); !errors.Is(err, pay.ErrNotFound) {
		t.Fatalf("a revoked key = %v, want ErrNotFound", err)
	}
	if err := ms.RevokeMerchant(ctx, pay.NewID(), time.Now()); !errors.Is(err, pay.ErrNotFound) {
		t.Fatalf("RevokeMerchant of an unknown merchant = %v, want ErrNotFound", err)
	}
}

// testDeliveries: every outbox row of a merchant with a webhook gets a
// delivery in the same transaction; a payment's next delivery is due only
// once the previous one is no longer pending; claims are exclusive;
// resend makes a delivery pending again with the same event id.
func testDeliveries(t *testing.T, s pay.Store) {
	ctx := context.Background()
	ms := merchantStore(t, s)
	ws, ok := s.(pay.WebhookStore)
	if !ok {
		t.Fatalf("%T does not implement pay.WebhookStore", s)
	}
	m, _ := newMerchant(t, ms)
	if err := ms.SetWebhook(ctx, m.ID, "http://127.0.0.1:1/hook", "whsec_test"); err != nil {
		t.Fatalf("SetWebhook: %v", err)
	}
	p, idem := newPayment(), newIdem(t)
	p.MerchantID = m.ID
	p, err := s.CreatePending(ctx, p, idem)
	if err != nil {
		t.Fatalf("CreatePending: %v", err)
	}
	transition(t, s, p.ID, pay.StatusPending, pay.StatusApproved, "approved")
	ds, err := ws.Deliveries(ctx, p.ID, 10)
	if err != nil || len(ds) != 2 || ds[0].Seq != 2 || ds[1].Seq != 1 || ds[0].ID == ds[1].ID {
		t.Fatalf("Deliveries = %+v, %v; want seq 2 then 1, distinct ids", ds, err)
	}
	// The payment of a merchant without a webhook has no delivery.
	plain, _ := create(t, s)
	if ds, err := ws.Deliveries(ctx, plain.ID, 10); err != nil || len(ds) != 0 {
		t.Fatalf("Deliveries without a webhook = %+v, %v; want none", ds, err)
	}

	now := time.Now().Add(time.Minute)
	due := func() []pay.Delivery {
		t.Helper()
		all, err := ws.DueDeliveries(ctx, now, 1000)
		if err != nil {
			t.Fatalf("DueDeliveries: %v", err)
		}
		var mine []pay.Delivery
		for _, d := range all {
			if d.PaymentID == p.ID {
				mine = append(mine, d)
			}
		}
		return mine
	}
	d := due()
	if len(d) != 1 || d[0].Seq != 1 || d[0].URL != "http://127.0.0.1:1/hook" || d[0].Secret != "whsec_test" {
		t.Fatalf("due = %+v; want seq 1 only, with the webhook", d)
	}
	first := d[0]
	if ok, err := ws.ClaimDelivery(ctx, first.ID, now, now.Add(time.Minute)); !ok || err != nil {
		t.Fatalf("ClaimDelivery = %v, %v; want taken", ok, err)
	}
	if ok, err := ws.ClaimDelivery(ctx, first.ID, now, now.Add(time.Minute)); ok || err != nil {
		t.Fatalf("a second ClaimDelivery = %v, %v; want not taken", ok, err)
	}
	if d := due(); len(d) != 0 {
		t.Fatalf("due while seq 1 is claimed = %+v; want none (seq 2 waits)", d)
	}
	if err := ws.RecordAttempt(ctx, first.ID, pay.Attempt{Status: pay.DeliveryPending, LastError: "http_500", NextAt: now, At: now}); err != nil {
		t.Fatalf("RecordAttempt: %v", err)
	}
	if d := due(); len(d) != 1 || d[0].ID != first.ID || d[0].Attempts != 1 || d[0].LastError != "http_500" {
		t.Fatalf("due after a failed attempt = %+v; want seq 1 again, 1 attempt, http_500", d)
	}
	if err := ws.RecordAttempt(ctx, first.ID, pay.Attempt{Status: pay.DeliveryDelivered, At: now}); err != nil {
		t.Fatalf("RecordAttempt: %v", err)
	}
	d = due()
	if len(d) != 1 || d[0].Seq != 2 {
		t.Fatalf("due after seq 1 was delivered = %+v; want seq 2", d)
	}
	if err := ws.RecordAttempt(ctx, d[0].ID, pay.Attempt{Status: pay.DeliveryFailed, LastError: "timeout", At: now}); err != nil {
		t.Fatalf("RecordAttempt: %v", err)
	}
	if got, err := ws.Delivery(ctx, d[0].ID); err != nil || got.Status != pay.DeliveryFailed || got.Attempts != 1 {
		t.Fatalf("Delivery after giving up = %+v, %v; want failed after 1 attempt", got, err)
	}
	if err := ws.ResendDelivery(ctx, d[0].ID, now); err != nil {
		t.Fatalf("ResendDelivery: %v", err)
	}
	if again := due(); len(again) != 1 || again[0].ID != d[0].ID || again[0].Attempts != 0 || string(again[0].Body) != string(d[0].Body) {
		t.Fatalf("due after resend = %+v; want the same event, no attempts", again)
	}
	if err := ws.ResendDelivery(ctx, pay.NewID(), now); !errors.Is(err, pay.ErrNotFound) {
		t.Fatalf("ResendDelivery of an unknown id = %v, want ErrNotFound", err)
	}
}
