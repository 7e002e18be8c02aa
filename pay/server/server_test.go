package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-lab/stampede/pay"
	payserver "github.com/stampede-lab/stampede/pay/server"
	"github.com/stampede-lab/stampede/pay/sqlite"
)

// approver is an institution that approves everything at once.
type approver struct{}

func (approver) Approve(context.Context, pay.ApprovalRequest) (pay.Verdict, error) {
	return pay.Verdict{Approved: true}, nil
}

func (approver) Inquire(context.Context, string) (pay.Inquiry, error) {
	return pay.Inquiry{Found: true, Approved: true}, nil
}

// memPublisher records what it is given; it fails while failing is set
// (failFirst counts down failures first).
type memPublisher struct {
	mu        sync.Mutex
	events    []pay.OutboxEvent
	failing   atomic.Bool
	failFirst atomic.Int32
}

func (m *memPublisher) Publish(_ context.Context, e pay.OutboxEvent) error {
	if m.failing.Load() || m.failFirst.Add(-1) >= 0 {
		return errors.New("broker unreachable")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.events = append(m.events, e)
	return nil
}

func (m *memPublisher) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.events)
}

// brokenList fails the reconciler's claims once broken is set: the store
// gone bad under the reconciler.
type brokenList struct {
	merchantStore
	broken atomic.Bool
}

// merchantStore is a payment store that also keeps merchants.
type merchantStore interface {
	pay.Store
	pay.MerchantStore
}

func (b *brokenList) ClaimDue(ctx context.Context, now, until time.Time, limit int) ([]pay.Payment, error) {
	if b.broken.Load() {
		return nil, errors.New("disk I/O error")
	}
	return b.merchantStore.ClaimDue(ctx, now, until, limit)
}

// runningServer is a pay/server Server run by a test.
type runningServer struct {
	base string
	key  string        // a merchant's API key
	done chan struct{} // closed when Run returned
	err  error         // Run's result, once done
	stop context.CancelFunc
}

// wait waits up to limit for Run to return and returns its error.
func (rs *runningServer) wait(t *testing.T, limit time.Duration) error {
	t.Helper()
	select {
	case <-rs.done:
		return rs.err
	case <-time.After(limit):
		t.Fatalf("Run did not return within %s", limit)
		return nil
	}
}

func startServer(t *testing.T, store pay.Store, pub pay.Publisher, mutate func(*payserver.Config)) *runningServer {
	t.Helper()
	cfg := payserver.DefaultConfig()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Store, cfg.Institution, cfg.Events, cfg.Listener = store, approver{}, pub, ln
	cfg.Relay.Every, cfg.Relay.MaxBackoff = 10*time.Millisecond, 50*time.Millisecond
	cfg.Service.ReconcileEvery = 10 * time.Millisecond
	cfg.DrainDelay = 500 * time.Millisecond
	cfg.Logger = slog.New(slog.NewTextHandler(tlog{t}, nil))
	if mutate != nil {
		mutate(&cfg)
	}
	srv, err := payserver.New(cfg)
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	_, apiKey := addMerchant(t, store, merchant)
	rs := &runningServer{base: "http://" + ln.Addr().String(), key: apiKey, done: make(chan struct{}), stop: cancel}
	go func() { rs.err = srv.Run(ctx); close(rs.done) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-rs.done:
		case <-time.After(10 * time.Second):
			t.Error("the server did not stop within 10s")
		}
	})
	return rs
}

func sqliteStore(t *testing.T) pay.Store {
	t.Helper()
	s, err := sqlite.Open(filepath.Join(t.TempDir(), "pay.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func (rs *runningServer) post(t *testing.T, key string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, rs.base+"/v1/payments", strings.NewReader(payment("order-"+key, 1000)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Authorization", "Bearer "+rs.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// readyz returns /readyz's status and its checks' statuses.
func (rs *runningServer) readyz(t *testing.T) (int, map[string]string) {
	t.Helper()
	resp, err := http.Get(rs.base + "/readyz")
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	var body struct {
		Checks map[string]struct {
			Status string `json:"status"`
		} `json:"checks"`
	}
	b, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(b, &body)
	out := map[string]string{}
	for k, v := range body.Checks {
		out[k] = v.Status
	}
	return resp.StatusCode, out
}

func waitFor(t *testing.T, what string, limit time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", limit, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestServerServesRelaysAndStops: payments are answered and their events
// published; /readyz names every component; cancelling ends Run with nil.
func TestServerServesRelaysAndStops(t *testing.T) {
	pub := &memPublisher{}
	pub.failFirst.Store(3) // transient: retried with backoff, not fatal
	rs := startServer(t, sqliteStore(t), pub, nil)
	for _, key := range []string{"a", "b", "c"} {
		if code := rs.post(t, key); code != http.StatusCreated {
			t.Fatalf("POST = %d, want 201", code)
		}
	}
	waitFor(t, "6 events published", 5*time.Second, func() bool { return pub.count() == 6 })
	code, checks := rs.readyz(t)
	if code != http.StatusOK || checks["store"] != "ok" || checks["reconciler"] != "ok" || checks["relay"] != "ok" {
		t.Fatalf("/readyz = %d %v, want 200 with store, reconciler and relay ok", code, checks)
	}
	rs.stop()
	if err := rs.wait(t, 10*time.Second); err != nil {
		t.Fatalf("Run after cancel = %v, want nil", err)
	}
}

// TestServerStopsWhenTheRelayFailsForGood: the broker stays unreachable
// past the relay's GiveUpAfter; /readyz reports the relay, then Run
// returns its error.
func TestServerStopsWhenTheRelayFailsForGood(t *testing.T) {
	pub := &memPublisher{}
	pub.failing.Store(true)
	rs := startServer(t, sqliteStore(t), pub, func(c *payserver.Config) {
		c.Relay.GiveUpAfter = 300 * time.Millisecond
		c.DrainDelay = 2 * time.Second
	})
	if code := rs.post(t, "x"); code != http.StatusCreated {
		t.Fatalf("POST = %d, want 201", code)
	}
	waitFor(t, "/readyz to report the relay", 5*time.Second, func() bool {
		code, checks := rs.readyz(t)
		return code == http.StatusServiceUnavailable && checks["relay"] == "failed" && checks["reconciler"] == "ok"
	})
	if err := rs.wait(t, 10*time.Second); err == nil || !strings.Contains(err.Error(), "relay") || !strings.Contains(err.Error(), "broker unreachable") {
		t.Fatalf("Run = %v, want the relay's error", err)
	}
	if _, err := http.Get(rs.base + "/healthz"); err == nil {
		t.Error("the HTTP server still answers after Run returned")
	}
}

// TestServerStopsWhenTheReconcilerFailsForGood: the store fails every
// reconciliation pass past GiveUpAfter; /readyz reports the reconciler,
// then Run returns its error.
func TestServerStopsWhenTheReconcilerFailsForGood(t *testing.T) {
	store := &brokenList{merchantStore: sqliteStore(t).(merchantStore)}
	rs := startServer(t, store, &memPublisher{}, func(c *payserver.Config) {
		c.Service.GiveUpAfter = 200 * time.Millisecond
		c.DrainDelay = 2 * time.Second
	})
	waitFor(t, "the server to be ready", 5*time.Second, func() bool { code, _ := rs.readyz(t); return code == http.StatusOK })
	store.broken.Store(true)
	waitFor(t, "/readyz to report the reconciler", 5*time.Second, func() bool {
		code, checks := rs.readyz(t)
		return code == http.StatusServiceUnavailable && checks["reconciler"] == "failed"
	})
	if err := rs.wait(t, 10*time.Second); err == nil || !strings.Contains(err.Error(), "reconciler") || !strings.Contains(err.Error(), "disk I/O error") {
		t.Fatalf("Run = %v, want the reconciler's error", err)
	}
}

func TestServerConfigValidateNamesTheField(t *testing.T) {
	base := payserver.DefaultConfig()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	base.Store, base.Institution, base.Events, base.Listener = sqliteStore(t), approver{}, &memPublisher{}, ln
	if err := base.Validate(); err != nil {
		t.Fatalf("a complete config: %v", err)
	}
	for field, mutate := range map[string]func(*payserver.Config){
		"store":                 func(c *payserver.Config) { c.Store = nil },
		"events":                func(c *payserver.Config) { c.Events = nil },
		"listener":              func(c *payserver.Config) { c.Listener = nil },
		"relay.batch":           func(c *payserver.Config) { c.Relay.Batch = 0 },
		"relay.give_up_after":   func(c *payserver.Config) { c.Relay.GiveUpAfter = 0 },
		"service.give_up_after": func(c *payserver.Config) { c.Service.GiveUpAfter = -time.Second },
		"service.timeout":       func(c *payserver.Config) { c.Service.ApprovalTimeout = 0 },
		"http.write_timeout":    func(c *payserver.Config) { c.HTTP.WriteTimeout = c.Service.ApprovalTimeout },
		"drain_delay":           func(c *payserver.Config) { c.DrainDelay = -1 },
	} {
		cfg := base
		mutate(&cfg)
		err := cfg.Validate()
		if e, ok := errors.AsType[*pay.Error](err); !ok || e.Field != field {
			t.Errorf("%s: Validate() = %v, want an error naming it", field, err)
		}
	}
}

// tlog writes log lines to the test's log.
type tlog struct{ t *testing.T }

func (w tlog) Write(b []byte) (int, error) { w.t.Log(strings.TrimSpace(string(b))); return len(b), nil }

// merchant is the test merchant's ID.
const merchant = "7b0a3c5e-1111-4a4a-9b9b-0123456789ab"

// addMerchant creates the merchant id in store and returns its ID and
// API key.
func addMerchant(t testing.TB, store pay.Store, id string) (string, string) {
	t.Helper()
	key := pay.NewAPIKey()
	m := pay.Merchant{ID: id, Name: "test shop", KeyHash: pay.HashAPIKey(key), CreatedAt: time.Now()}
	if err := store.(pay.MerchantStore).CreateMerchant(context.Background(), m); err != nil {
		t.Fatalf("CreateMerchant: %v", err)
	}
	return id, key
}

// payment is the body of a payment of the test merchant.
func payment(order string, amount int64) string {
	b, _ := json.Marshal(order) // JSON escapes, not Go's
	return fmt.Sprintf(`{"merchant_id":%q,"order_id":%s,"amount":%d,"currency":"KRW"}`, merchant, b, amount)
}
