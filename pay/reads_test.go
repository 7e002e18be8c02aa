package pay_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stampede-lab/stampede/institution"
	"github.com/stampede-lab/stampede/pay"
	payapi "github.com/stampede-lab/stampede/pay/api"
	"github.com/stampede-lab/stampede/pay/sqlite"
)

// openSQLite opens a file database closed when the test ends, with a
// generous operation timeout: these tests load the store hard, and under
// the race detector on a small machine.
func openSQLite(t testing.TB) *sqlite.Store {
	t.Helper()
	cfg := sqlite.DefaultConfig()
	cfg.Path, cfg.OpTimeout, cfg.MaxReadConns = filepath.Join(t.TempDir(), "pay.db"), 10*time.Second, 8
	store, err := sqlite.OpenConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return store
}

// unknownPayment writes a payment that became UNKNOWN.
func unknownPayment(t testing.TB, store pay.Store, i int) pay.Payment {
	t.Helper()
	ctx := context.Background()
	p, err := store.CreatePending(ctx, pay.Payment{ID: pay.NewID(), MerchantID: merchant, OrderID: fmt.Sprint("u-", i), Amount: int64(100 + i), Currency: "KRW"},
		pay.IdempotencyRecord{Key: fmt.Sprint("unknown-key-", i)})
	if err != nil {
		t.Fatal(err)
	}
	if p, err = store.Transition(ctx, p.ID, pay.StatusPending, pay.StatusUnknown, "timeout"); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestConcurrentReadsAskOncePerInterval: 300 concurrent GETs of one
// UNKNOWN payment (the status API down, so that it stays UNKNOWN) make one
// status inquiry; once the backoff interval has passed on the service's
// clock, 300 more make one more.
func TestConcurrentReadsAskOncePerInterval(t *testing.T) {
	inst := newSimInst(t, 200*time.Millisecond, func(s *simInst) { s.statusDelay = 20 * time.Millisecond })
	b := institution.DefaultBehavior()
	b.StatusAPI = institution.StatusAPIDown
	if _, err := inst.admin.SetBehavior(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	store := openSQLite(t)
	p := unknownPayment(t, store, 0)
	_, apiKey := addMerchant(t, store, merchant)
	var now atomic.Int64
	now.Store(time.Now().Add(time.Second).UnixNano())
	cfg := pay.DefaultConfig()
	cfg.Logger, cfg.ReconcileEvery = quiet(), 50*time.Millisecond
	cfg.Now = func() time.Time { return time.Unix(0, now.Load()) }
	svc, err := pay.NewService(store, inst.adapter, cfg)
	if err != nil {
		t.Fatal(err)
	}
	h, err := payapi.New(svc, store, payapi.DefaultConfig(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	api := newServer(t, h)
	burst := func() {
		var wg sync.WaitGroup
		for range 300 {
			wg.Go(func() {
				req, _ := http.NewRequest(http.MethodGet, api+"/v1/payments/"+p.ID, nil)
				req.Header.Set("Authorization", "Bearer "+apiKey)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Errorf("GET = %d", resp.StatusCode)
				}
			})
		}
		wg.Wait()
	}
	burst()
	if got := inst.inquiries.Load(); got != 1 {
		t.Fatalf("300 concurrent GETs made %d inquiries, want 1", got)
	}
	if got, _ := store.Get(context.Background(), p.ID); got.Status != pay.StatusUnknown || got.Inquiries != 1 {
		t.Fatalf("after the GETs: %s with %d inquiries, want UNKNOWN with 1", got.Status, got.Inquiries)
	}
	// The next inquiry is due ReconcileEvery << 1 later.
	now.Add(int64(100 * time.Millisecond))
	burst()
	if got := inst.inquiries.Load(); got != 2 {
		t.Fatalf("300 more GETs one interval later made %d inquiries in all, want 2", got)
	}
	t.Logf("600 GETs in two bursts of 300, one backoff interval apart: %d status inquiries", inst.inquiries.Load())
}

// newServer serves h until the test ends and returns its URL.
func newServer(t testing.TB, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}
