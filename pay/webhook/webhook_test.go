package webhook_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stampede-lab/stampede/pay"
	"github.com/stampede-lab/stampede/pay/sqlite"
	"github.com/stampede-lab/stampede/pay/webhook"
)

// clock is a fake clock the test moves by hand.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *clock) Advance(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

const secret = "whsec_test_secret"

// setup returns a store with a merchant whose webhook is url, and that
// merchant's ID.
func setup(t *testing.T, url string) (*sqlite.Store, string) {
	t.Helper()
	store, err := sqlite.Open(sqlite.Memory)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	m := pay.Merchant{ID: pay.NewID(), Name: "shop", KeyHash: pay.HashAPIKey(pay.NewAPIKey()), CreatedAt: time.Now()}
	if err := store.CreateMerchant(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	if err := store.SetWebhook(context.Background(), m.ID, url, secret); err != nil {
		t.Fatal(err)
	}
	return store, m.ID
}

// payments makes n payments of merchant, each created, UNKNOWN then
// APPROVED: three events each. It returns their IDs.
func payments(t *testing.T, store pay.Store, merchant string, n int) []string {
	t.Helper()
	ctx := context.Background()
	var ids []string
	for i := range n {
		p := pay.Payment{ID: pay.NewID(), MerchantID: merchant, OrderID: "order-" + string(rune('a'+i)), Amount: 100, Currency: "KRW"}
		p, err := store.CreatePending(ctx, p, pay.IdempotencyRecord{Key: pay.ScopedKey(merchant, pay.NewID()), RequestHash: "h"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.Transition(ctx, p.ID, pay.StatusPending, pay.StatusUnknown, "timeout"); err != nil {
			t.Fatal(err)
		}
		if _, err := store.Transition(ctx, p.ID, pay.StatusUnknown, pay.StatusApproved, "approved"); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, p.ID)
	}
	return ids
}

func config(c *clock) webhook.Config {
	cfg := webhook.DefaultConfig()
	cfg.Now, cfg.Jitter = c.Now, func() float64 { return 0.5 }
	cfg.BaseBackoff, cfg.MaxBackoff, cfg.Timeout, cfg.Lease = time.Second, 8*time.Second, 2*time.Second, 3*time.Second
	return cfg
}

// received is one request the receiver got.
type received struct {
	id, payment string
	seq         int64
	accepted    bool
}

// TestRecoveringReceiverGetsEveryEventInOrder: a receiver that fails the
// first three deliveries and then recovers gets every event, each once
// accepted, in per-payment order (no event n+1 of a payment is even sent
// before event n was accepted), with valid signatures and unique event
// ids.
func TestRecoveringReceiverGetsEveryEventInOrder(t *testing.T) {
	c := &clock{t: time.Now().Add(time.Second)} // after the events below
	var (
		mu  sync.Mutex
		got []received
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := pay.VerifyWebhook(secret, r.Header.Get(pay.SignatureHeader), body, c.Now(), 5*time.Minute); err != nil {
			t.Errorf("signature: %v", err)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		var b pay.WebhookBody
		var ev pay.Event
		if err := json.Unmarshal(body, &b); err != nil || json.Unmarshal(b.Data, &ev) != nil || b.ID != r.Header.Get(pay.EventIDHeader) {
			t.Errorf("body %s: %v", body, err)
		}
		mu.Lock()
		defer mu.Unlock()
		rec := received{id: b.ID, payment: ev.PaymentID, seq: ev.Seq, accepted: len(got) >= 3}
		got = append(got, rec)
		if !rec.accepted {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	defer srv.Close()
	store, merchant := setup(t, srv.URL+"/hook")
	ids := payments(t, store, merchant, 3)
	d, err := webhook.New(store, config(c))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 50 {
		if _, err := d.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		c.Advance(10 * time.Second)
	}

	mu.Lock()
	defer mu.Unlock()
	last := map[string]int64{} // per payment, the last accepted seq
	eventIDs := map[string]bool{}
	for _, r := range got {
		if r.seq > last[r.payment]+1 || r.seq <= last[r.payment] {
			t.Errorf("payment %s: event %d sent after event %d was accepted", r.payment, r.seq, last[r.payment])
		}
		if r.accepted {
			last[r.payment] = r.seq
			if eventIDs[r.id] {
				t.Errorf("event id %s accepted twice", r.id)
			}
			eventIDs[r.id] = true
		}
	}
	for _, id := range ids {
		if last[id] != 3 {
			t.Errorf("payment %s: last accepted event %d, want 3", id, last[id])
		}
		ds, err := store.Deliveries(ctx, id, 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, del := range ds {
			if del.Status != pay.DeliveryDelivered {
				t.Errorf("delivery %s (seq %d) is %s, want delivered", del.ID, del.Seq, del.Status)
			}
		}
	}
	if len(eventIDs) != 9 || len(got) != 12 {
		t.Errorf("%d events accepted in %d requests, want 9 in 12 (3 failed first)", len(eventIDs), len(got))
	}
}

// TestReceiverDownForGoodEndsFailed: a receiver that always fails gets
// retries for MaxAge, then every delivery is marked failed with the last
// error code.
func TestReceiverDownForGoodEndsFailed(t *testing.T) {
	c := &clock{t: time.Now().Add(time.Second)} // after the events below
	var (
		mu       sync.Mutex
		attempts int
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		attempts++
		mu.Unlock()
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	store, merchant := setup(t, srv.URL)
	ids := payments(t, store, merchant, 2)
	cfg := config(c)
	cfg.MaxAge = time.Minute
	d, err := webhook.New(store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 40 {
		if _, err := d.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		c.Advance(5 * time.Second)
	}
	for _, id := range ids {
		ds, err := store.Deliveries(ctx, id, 10)
		if err != nil || len(ds) != 3 {
			t.Fatalf("deliveries = %+v, %v; want 3", ds, err)
		}
		for _, del := range ds {
			if del.Status != pay.DeliveryFailed || del.LastError != "http_503" || del.Attempts < 1 {
				t.Errorf("delivery seq %d = %s after %d attempts (%q), want failed with http_503", del.Seq, del.Status, del.Attempts, del.LastError)
			}
		}
		if ds[2].Attempts < 5 { // seq 1 was retried through the minute
			t.Errorf("seq 1 was attempted %d times in a minute of backoff, want several", ds[2].Attempts)
		}
	}
	// A resend makes it pending again; a receiver back up gets it.
	mu.Lock()
	before := attempts
	mu.Unlock()
	if err := store.ResendDelivery(ctx, mustDeliveries(t, store, ids[0])[2].ID, c.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := d.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if attempts != before+1 {
		t.Errorf("a resend made %d attempts, want 1", attempts-before)
	}
}

func mustDeliveries(t *testing.T, store pay.WebhookStore, payment string) []pay.Delivery {
	t.Helper()
	ds, err := store.Deliveries(context.Background(), payment, 10)
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

// TestRedirectsAreNotFollowed: a receiver that redirects elsewhere fails
// the attempt (code redirect); the other host gets nothing.
func TestRedirectsAreNotFollowed(t *testing.T) {
	c := &clock{t: time.Now().Add(time.Second)} // after the events below
	var hits int
	var mu sync.Mutex
	elsewhere := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		mu.Lock()
		hits++
		mu.Unlock()
	}))
	defer elsewhere.Close()
	srv := httptest.NewServer(http.RedirectHandler(elsewhere.URL, http.StatusTemporaryRedirect))
	defer srv.Close()
	store, merchant := setup(t, srv.URL)
	ids := payments(t, store, merchant, 1)
	d, err := webhook.New(store, config(c))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	ds := mustDeliveries(t, store, ids[0])
	if ds[2].LastError != "redirect" || ds[2].Status != pay.DeliveryPending {
		t.Errorf("delivery after a redirect = %s %q, want pending with redirect", ds[2].Status, ds[2].LastError)
	}
	mu.Lock()
	defer mu.Unlock()
	if hits != 0 {
		t.Errorf("the redirect target got %d requests, want 0", hits)
	}
}

// TestBackoffGrowsWithJitterAndCap: the wait doubles from BaseBackoff,
// stays within [w/2, w], and never passes MaxBackoff.
func TestBackoffGrowsWithJitterAndCap(t *testing.T) {
	for _, j := range []float64{0, 0.999} {
		cfg := webhook.DefaultConfig()
		cfg.Jitter = func() float64 { return j }
		d, err := webhook.New(noStore{}, cfg)
		if err != nil {
			t.Fatal(err)
		}
		for n, w := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 5: 16 * time.Second, 13: time.Hour, 100: time.Hour} {
			got := d.Backoff(n)
			if got < w/2 || got > w {
				t.Errorf("Backoff(%d) with jitter %v = %s, want within [%s, %s]", n, j, got, w/2, w)
			}
		}
	}
	bad := webhook.DefaultConfig()
	bad.Lease = bad.Timeout
	if _, err := webhook.New(noStore{}, bad); pay.ErrorCode(err) != pay.CodeInvalid {
		t.Errorf("Lease <= Timeout = %v, want invalid", err)
	}
}

// noStore is a WebhookStore that is never called.
type noStore struct{ pay.WebhookStore }
