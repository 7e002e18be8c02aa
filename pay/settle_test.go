package pay_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stampede-lab/stampede/institution"
	instapi "github.com/stampede-lab/stampede/institution/api"
	instclient "github.com/stampede-lab/stampede/institution/client"
	"github.com/stampede-lab/stampede/internal/testenv"
	"github.com/stampede-lab/stampede/pay"
	"github.com/stampede-lab/stampede/pay/institutionclient"
	"github.com/stampede-lab/stampede/pay/postgres"
)

// simInst is the institution simulator over HTTP behind a middleware that
// a test steers: approvals may be held before the simulator sees them,
// status inquiries may take a while, and the inquiries are counted, with
// the most seen at once for one key.
type simInst struct {
	srv     *instapi.Server
	admin   *instclient.Client
	adapter *institutionclient.Adapter

	// approveDelay, if set, returns how long the n-th approval request
	// (from 0) is held before the simulator sees it.
	approveDelay func(n int64) time.Duration
	statusDelay  time.Duration
	approvals    atomic.Int64
	inquiries    atomic.Int64

	mu            sync.Mutex
	inFlight      map[string]int
	maxConcurrent int
}

// newSimInst starts a simulator with the not-found window given.
func newSimInst(t testing.TB, window time.Duration, setup func(*simInst)) *simInst {
	t.Helper()
	icfg := instapi.DefaultConfig()
	icfg.AdminToken, icfg.NotFoundWindow = adminToken, window
	icfg.Logger = slog.New(slog.DiscardHandler)
	srv, err := instapi.New(icfg)
	if err != nil {
		t.Fatal(err)
	}
	s := &simInst{srv: srv, inFlight: map[string]int{}}
	if setup != nil {
		setup(s)
	}
	ts := httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(func() { srv.Close(); ts.Close() })
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 256
	client := instclient.NewClient(ts.URL, &http.Client{Transport: tr})
	s.admin = client.WithAdminToken(adminToken)
	s.adapter = institutionclient.New(client)
	return s
}

func (s *simInst) serve(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/v1/approvals":
		n := s.approvals.Add(1) - 1
		if s.approveDelay != nil {
			time.Sleep(s.approveDelay(n))
		}
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/approvals/"):
		key := strings.TrimPrefix(r.URL.Path, "/v1/approvals/")
		s.inquiries.Add(1)
		s.mu.Lock()
		s.inFlight[key]++
		s.maxConcurrent = max(s.maxConcurrent, s.inFlight[key])
		s.mu.Unlock()
		defer func() {
			s.mu.Lock()
			s.inFlight[key]--
			s.mu.Unlock()
		}()
		time.Sleep(s.statusDelay)
	}
	s.srv.ServeHTTP(w, r)
}

// maxPerKey is the most inquiries seen at once for one key.
func (s *simInst) maxPerKey() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.maxConcurrent
}

// parity compares store with the simulator's ledger.
func (s *simInst) parity(t testing.TB, store pay.Store) pay.ParityReport {
	t.Helper()
	ctx := context.Background()
	ledger, err := s.admin.Approvals(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var charges []pay.Charge
	for _, rec := range ledger.Records {
		charges = append(charges, pay.Charge{ExternalKey: rec.ExternalKey, Approved: rec.Status == institution.StatusApproved,
			Amount: rec.Amount, Currency: rec.Currency, Times: rec.Charges})
	}
	rep, err := pay.Parity(ctx, store, charges)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// quiet is a logger for services under fault tests.
func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// runService runs svc's reconciler until the test ends.
func runService(t testing.TB, svc *pay.Service) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = svc.Run(ctx); close(done) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

// waitSettled waits until the store has no PENDING or UNKNOWN payment and
// returns when it saw that, or fails after limit.
func waitSettled(t testing.TB, store pay.Store, limit time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		st, err := store.Stats(context.Background())
		if err == nil && st.Pending == 0 && st.Unknown == 0 {
			return time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("not settled after %s: %+v, %v", limit, st, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// pgURL returns the test database's URL with its host replaced by
// hostport ("" keeps it) and a fresh schema, dropped when the test ends.
func pgURL(t testing.TB) (string, string) {
	t.Helper()
	raw := testenv.URL(t, testenv.PostgresURL)
	schema := fmt.Sprintf("stampede_settle_%016x", rand.Uint64())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, raw)
		if err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	return raw, schema
}

// openPG opens a store on schema of the database at raw, through hostport
// when it is not "", with operations bounded by opTimeout, closed when the
// test ends.
func openPG(t testing.TB, raw, schema, hostport string, opTimeout time.Duration) *postgres.Store {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	if hostport != "" {
		u.Host = hostport
	}
	cfg := postgres.DefaultConfig()
	cfg.URL, cfg.Schema, cfg.OpTimeout, cfg.ConnectTimeout = u.String(), schema, opTimeout, opTimeout
	s, err := postgres.OpenConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("open PostgreSQL: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
