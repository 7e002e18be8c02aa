package api

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/stampede-lab/stampede/institution"
	"github.com/stampede-lab/stampede/institution/client"
	"github.com/stampede-lab/stampede/internal/httpapi/apitest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const testToken = "test-admin-token-0123456789"

// fakeClock is a settable clock for Config.Now.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// fixture is a server behind httptest, an HTTP client that validates
// every answer against the OpenAPI description, and an admin client over
// it.
type fixture struct {
	srv   *Server
	ts    *httptest.Server
	hc    *http.Client
	admin *client.Client
}

// newFixture starts a server with DefaultConfig changed by mutate (may be
// nil). Cleanup closes the server (releasing held requests) before the
// listener, which waits for them.
func newFixture(t *testing.T, mutate func(*Config)) *fixture {
	t.Helper()
	cfg := DefaultConfig()
	cfg.AdminToken = testToken
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	if mutate != nil {
		mutate(&cfg)
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	t.Cleanup(srv.Close)
	hc := &http.Client{Transport: validating(t, ts.Client().Transport)}
	return &fixture{srv: srv, ts: ts, hc: hc, admin: client.NewClient(ts.URL, hc).WithAdminToken(testToken)}
}

// validating wraps base (nil: http.DefaultTransport) in a transport that
// checks every answer against the simulator's OpenAPI description,
// failing t on a mismatch.
func validating(t testing.TB, base http.RoundTripper) http.RoundTripper {
	return apitest.New(t, OpenAPI()).Transport(t, base)
}

// client returns a client with the given timeout (0: none) whose answers
// are validated.
func (f *fixture) client(timeout time.Duration) *client.Client {
	return client.NewClient(f.ts.URL, &http.Client{Timeout: timeout, Transport: f.hc.Transport})
}

// setBehavior sets the behaviour or fails the test.
func (f *fixture) setBehavior(t *testing.T, mode institution.Mode, hangMS int64, idempotent bool) {
	t.Helper()
	b := institution.DefaultBehavior()
	b.Mode, b.HangMS, b.Idempotent = mode, hangMS, idempotent
	if _, err := f.admin.SetBehavior(context.Background(), b); err != nil {
		t.Fatalf("SetBehavior(%+v): %v", b, err)
	}
}

// ledger returns the ledger or fails the test.
func (f *fixture) ledger(t *testing.T) institution.Ledger {
	t.Helper()
	l, err := f.admin.Approvals(context.Background())
	if err != nil {
		t.Fatalf("Approvals: %v", err)
	}
	return l
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, within)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func req(key string) institution.ApproveRequest {
	return institution.ApproveRequest{ExternalKey: key, Amount: 15000, Currency: "KRW"}
}
