package pay_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stampede-lab/stampede/internal/tcpproxy"
	"github.com/stampede-lab/stampede/pay"
	payapi "github.com/stampede-lab/stampede/pay/api"
	"github.com/stampede-lab/stampede/pay/sqlite"
)

// outageConfig is the service of the outage tests: 1 s approvals, a
// reconciler every 100 ms, outcome writes retried for 1 s (shorter than
// the outage, so that some requests give up and the reconciler settles
// their payments).
func outageConfig() pay.Config {
	cfg := pay.DefaultConfig()
	cfg.ApprovalTimeout, cfg.ReconcileEvery, cfg.TakeoverMargin = time.Second, 100*time.Millisecond, 200*time.Millisecond
	cfg.WriteRetryFor, cfg.InquiryTimeout, cfg.ClaimLease = time.Second, 500*time.Millisecond, 2*time.Second
	cfg.Logger = quiet()
	return cfg
}

// runOutage sends a burst of 100 payments, 5 ms apart, to a charging
// institution that takes 200 ms to answer, cuts the database for 3 s
// from the 40th on, and then checks that, without a restart, every
// payment settles within 2 × approval timeout + one reconcile interval
// after the database returns, that every key whose payment was written
// answers with its settled payment, and that parity is clean.
func runOutage(t *testing.T, store pay.Store, cut, restore func()) {
	// Approval requests from the 30th on are held until the database is
	// cut, so that the cut surely comes while some payments are being
	// charged (their outcome cannot be written), however slow the machine.
	const heldFrom = 30
	cutDone := make(chan struct{})
	inst := newSimInst(t, 200*time.Millisecond, func(s *simInst) {
		s.approveDelay = func(n int64) time.Duration {
			if n >= heldFrom {
				<-cutDone
			}
			return 200 * time.Millisecond
		}
	})
	cfg := outageConfig()
	svc, err := pay.NewService(store, inst.adapter, cfg)
	if err != nil {
		t.Fatal(err)
	}
	runService(t, svc)

	const n = 100
	type result struct {
		code int
		err  error
	}
	var (
		results  [n]result
		wg       sync.WaitGroup
		restored time.Time
		outage   sync.WaitGroup
	)
	req := func(i int) pay.CreateRequest {
		return pay.CreateRequest{MerchantID: merchant, OrderID: fmt.Sprint("outage-", i), Amount: int64(100 + i), Currency: "KRW"}
	}
	for i := range n {
		if i == 40 {
			// Wait until some approvals are held at the institution.
			deadline := time.Now().Add(30 * time.Second)
			for inst.approvals.Load() < heldFrom+5 && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			cut()
			close(cutDone)
			outage.Go(func() {
				time.Sleep(3 * time.Second)
				restore()
				restored = time.Now()
			})
		}
		wg.Go(func() {
			resp, err := createAnswer(svc, context.Background(), fmt.Sprint("outage-key-", i), req(i))
			results[i] = result{resp.Code, err}
		})
		time.Sleep(5 * time.Millisecond)
	}
	wg.Wait()
	outage.Wait()
	bound := 2*cfg.ApprovalTimeout + cfg.ReconcileEvery
	settled := waitSettled(t, store, bound+10*time.Second)
	took := settled.Sub(restored)
	if took > bound {
		t.Errorf("settled %s after the database returned, want within %s", took, bound)
	}

	ctx := context.Background()
	answered, refused, unwritten := 0, 0, 0
	for i, r := range results {
		switch {
		case r.err == nil:
			answered++
		case pay.ErrorCode(r.err) == pay.CodeUnavailable:
			if _, err := store.Idempotency(ctx, pay.ScopedKey(merchant, fmt.Sprint("outage-key-", i))); err != nil {
				refused++ // nothing was written, nothing was sent
				continue
			}
			unwritten++
		default:
			t.Errorf("payment %d: %v", i, r.err)
			continue
		}
		// The key answers with the settled payment.
		resp, err := createAnswer(svc, ctx, fmt.Sprint("outage-key-", i), req(i))
		if err != nil {
			t.Errorf("payment %d: repeating its key: %v", i, err)
			continue
		}
		var v payapi.View
		if err := json.Unmarshal(resp.Body, &v); err != nil || resp.Code != http.StatusCreated || !v.Status.Terminal() {
			t.Errorf("payment %d: repeating its key answered %d %s, %v; want 201 with the settled payment", i, resp.Code, resp.Body, err)
		}
	}
	rep := inst.parity(t, store)
	t.Logf("100 payments: %d answered, %d refused before anything was written, %d charged but answered 503 (settled by the reconciler); "+
		"all settled %s after the database returned (bound %s); parity: %s", answered, refused, unwritten, took.Round(time.Millisecond), bound, rep)
	if rep.Mismatches() != 0 {
		t.Errorf("parity: %s", rep)
	}
	if unwritten == 0 {
		t.Errorf("no payment was charged while its outcome could not be written: the outage missed the burst")
	}
}

// TestPostgresOutageSettlesWithoutRestart cuts PostgreSQL (through a TCP
// proxy that drops every connection and refuses new ones) for 3 s during
// a burst of payments.
func TestPostgresOutageSettlesWithoutRestart(t *testing.T) {
	raw, schema := pgURL(t)
	openPG(t, raw, schema, "", 5*time.Second).Close() // migrate directly
	u := mustHost(t, raw)
	proxy, err := tcpproxy.Start(u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	store := openPG(t, raw, schema, proxy.Addr(), 2*time.Second)
	runOutage(t, store, proxy.Cut, proxy.Restore)
}

// TestSQLiteOutageSettlesWithoutRestart makes the SQLite database refuse
// every write for 3 s during a burst of payments: another connection
// holds an exclusive transaction (BEGIN EXCLUSIVE), so the store's writes
// fail with busy after its busy timeout. (The tests run as root, which
// file permissions do not stop; a held write lock is the honest outage
// SQLite can have: reads go on, every write fails.)
func TestSQLiteOutageSettlesWithoutRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pay.db")
	cfg := sqlite.DefaultConfig()
	// Deadlines long enough that a loaded machine's queue of writers is not
	// taken for the outage; the outage itself outlasts them.
	cfg.Path, cfg.OpTimeout, cfg.BusyTimeout = path, 2500*time.Millisecond, time.Second
	store, err := sqlite.OpenConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	locker, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { locker.Close() })
	conn, err := locker.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	cut := func() {
		if _, err := conn.ExecContext(context.Background(), "BEGIN EXCLUSIVE"); err != nil {
			t.Errorf("BEGIN EXCLUSIVE: %v", err)
		}
	}
	restore := func() {
		if _, err := conn.ExecContext(context.Background(), "ROLLBACK"); err != nil {
			t.Errorf("ROLLBACK: %v", err)
		}
	}
	runOutage(t, store, cut, restore)
}

// mustHost returns the host:port of a database URL.
func mustHost(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	host := u.Host
	if u.Port() == "" {
		host += ":5432"
	}
	return host
}
