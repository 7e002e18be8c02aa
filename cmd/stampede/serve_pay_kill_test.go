package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stampede-lab/stampede/institution"
	instapi "github.com/stampede-lab/stampede/institution/api"
	instclient "github.com/stampede-lab/stampede/institution/client"
	"github.com/stampede-lab/stampede/pay"
	"github.com/stampede-lab/stampede/pay/sqlite"
)

// startPayChild runs `stampede serve pay` in a child process and waits
// until it answers.
func startPayChild(t *testing.T, addr string, args ...string) *exec.Cmd {
	t.Helper()
	child := childCmd(append([]string{"serve", "pay", "--http", addr}, args...), "STAMPEDE_POSTGRES_URL=", "STAMPEDE_NATS_URL=")
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = child.Process.Kill(); _, _ = child.Process.Wait() })
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return child
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the payment service did not come up on %s", addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestPayKilledMidStampedeLosesNothing fires payments at a service in
// front of an institution that charges and then hangs, kills the service
// with SIGKILL while every call is in flight, restarts it on the same
// database, and checks that every payment is there, settled, and matches
// the institution's ledger.
func TestPayKilledMidStampedeLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the payment service twice as a child process")
	}
	const payments = 20
	ctx := context.Background()
	icfg := instapi.DefaultConfig()
	icfg.AdminToken, icfg.NotFoundWindow = "institution-admin-token-for-tests", 500*time.Millisecond
	isrv, err := instapi.New(icfg)
	if err != nil {
		t.Fatal(err)
	}
	its := httptest.NewServer(isrv)
	defer func() { isrv.Close(); its.Close() }()
	admin := instclient.NewClient(its.URL, its.Client()).WithAdminToken(icfg.AdminToken)
	if _, err := admin.SetBehavior(ctx, institution.Behavior{Mode: institution.ModeHangAfter, HangMS: 10_000, Idempotent: true, StatusAPI: institution.StatusAPIUp}); err != nil {
		t.Fatal(err)
	}

	db := filepath.Join(t.TempDir(), "pay.db")
	merchantID, apiKey := addMerchantCLI(t, db)
	addr := freeAddr(t)
	first := startPayChild(t, addr, "--institution", its.URL, "--sqlite", db, "--data-dir", filepath.Dir(db), "--timeout", "20s")

	var wg sync.WaitGroup
	for i := range payments {
		wg.Go(func() {
			body := fmt.Sprintf(`{"merchant_id":%q,"order_id":"kill-%d","amount":%d,"currency":"KRW"}`, merchantID, i, 1000+i)
			req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/payments", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", fmt.Sprint("kill-key-", i))
			req.Header.Set("Authorization", "Bearer "+apiKey)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close() // the service dies first: no answer is expected
			}
		})
	}
	// Every call has reached the institution (and been charged) when the
	// service dies.
	deadline := time.Now().Add(30 * time.Second)
	for {
		log, err := admin.Arrivals(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(log.Arrivals) == payments {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d payments reached the institution", len(log.Arrivals), payments)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := first.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_, _ = first.Process.Wait()
	wg.Wait()

	// The institution answers inquiries normally again; its ledger stays.
	if _, err := admin.SetBehavior(ctx, institution.Behavior{Mode: institution.ModeNormal, HangMS: 0, Idempotent: true, StatusAPI: institution.StatusAPIUp}); err != nil {
		t.Fatal(err)
	}
	startPayChild(t, addr, "--institution", its.URL, "--sqlite", db, "--data-dir", filepath.Dir(db), "--timeout", "20s")

	store, err := sqlite.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	deadline = time.Now().Add(60 * time.Second)
	for {
		pending, err1 := store.ListByStatus(ctx, pay.StatusPending, 100)
		unknown, err2 := store.ListByStatus(ctx, pay.StatusUnknown, 100)
		if err1 == nil && err2 == nil && len(pending)+len(unknown) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the restart: %d PENDING, %d UNKNOWN still (%v, %v)", len(pending), len(unknown), err1, err2)
		}
		time.Sleep(200 * time.Millisecond)
	}
	all, err := store.List(ctx, "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != payments {
		t.Fatalf("%d payments in the database, want all %d", len(all), payments)
	}
	for _, p := range all {
		if p.Status != pay.StatusApproved {
			t.Errorf("payment %s (%s) ended %s, want APPROVED: the institution charged it", p.ID, p.OrderID, p.Status)
		}
	}
	ledger, err := admin.Approvals(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := pay.Parity(ctx, store, ChargesOf(ledger))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Mismatches() != 0 || rep.Matched != payments {
		t.Fatalf("parity after the crash: %s", rep)
	}
}
