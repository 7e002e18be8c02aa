package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/stampede-lab/stampede/fulfilment"
	"github.com/stampede-lab/stampede/fulfilment/sqlstore"
	"github.com/stampede-lab/stampede/fulfilment/worker"
	"github.com/stampede-lab/stampede/institution"
	instapi "github.com/stampede-lab/stampede/institution/api"
	"github.com/stampede-lab/stampede/internal/httpapi"
	"github.com/stampede-lab/stampede/pay"
	"github.com/stampede-lab/stampede/pay/natspub"
	"github.com/stampede-lab/stampede/pay/sqlite"
)

// serveWorker runs `serve worker` in-process with args and returns its
// HTTP address once /healthz answers; the test's cleanup stops it.
func serveWorker(t *testing.T, args ...string) string {
	t.Helper()
	t.Setenv(envPostgres, "")
	t.Setenv(envNATS, "")
	addr, _ := startServe(t, "worker", args...)
	return addr
}

func TestServeWorkerNeedsNATS(t *testing.T) {
	t.Setenv(envNATS, "")
	_, _, err := execute(t, "serve", "worker")
	if err == nil || !strings.Contains(err.Error(), "--nats") {
		t.Fatalf("serve worker without --nats = %v, want an error naming --nats", err)
	}
	_, _, err = execute(t, "serve", "worker", "--nats", "nats://127.0.0.1:1", "--partitions", "0")
	if err == nil || !strings.Contains(err.Error(), "--nats") && !strings.Contains(err.Error(), "--partitions") {
		t.Fatalf("serve worker --partitions 0 = %v, want an error", err)
	}
}

// TestServeWorkerConfigNamesEveryFlag: every bad flag is named at once,
// by the flag that sets it.
func TestServeWorkerConfigNamesEveryFlag(t *testing.T) {
	opts := &workerOptions{cfg: worker.DefaultConfig(), server: httpapi.DefaultServerConfig()}
	opts.cfg.Consumer.Partitions, opts.cfg.Consumer.Workers, opts.cfg.Consumer.MaxPending, opts.cfg.Consumer.Stream = 0, 0, 0, ""
	opts.cfg.Consumer.Lease = -time.Second
	opts.server.ShutdownTimeout = 0
	_, err := opts.config("2.11.0")
	if err == nil {
		t.Fatal("config() = nil error, want every bad flag")
	}
	for _, flag := range []string{"--stream:", "--partitions:", "--concurrency:", "--max-pending:", "--shutdown-timeout:", "--lease:"} {
		if !strings.Contains(err.Error(), flag) {
			t.Errorf("config() = %v, want it to name %s", err, flag)
		}
	}
}

// TestServeWorkerWithoutStream: a worker started before serve pay has
// created the stream says which stream is missing and what creates it.
func TestServeWorkerWithoutStream(t *testing.T) {
	emb, err := natspub.StartEmbedded(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Close()
	t.Setenv(envPostgres, "")
	_, _, err = execute(t, "serve", "worker", "--nats", emb.URL(), "--stream", "NOPE", "--sqlite", filepath.Join(t.TempDir(), "f.db"))
	if err == nil || !strings.Contains(err.Error(), "NOPE") || !strings.Contains(err.Error(), "serve pay creates the stream") {
		t.Fatalf("serve worker on a missing stream = %v, want an error naming the stream and serve pay", err)
	}
}

// TestPaymentsToTicketsEndToEnd: 1,000 payments through serve pay (its
// merchant added with `pay merchant add`, an institution simulator that
// approves some rounds and declines others), published on a shared
// nats-server, consumed by two serve worker instances into one
// fulfilment store: exactly 1,000 settled orders, one ticket per APPROVED
// payment, and exact parity between payments and tickets.
func TestPaymentsToTicketsEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("1,000 payments through pay, NATS and two workers")
	}
	const rounds, perRound = 10, 100
	ctx := context.Background()
	emb, err := natspub.StartEmbedded(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Close()

	icfg := instapi.DefaultConfig()
	icfg.AdminToken = "institution-admin-token-for-tests"
	isrv, err := instapi.New(icfg)
	if err != nil {
		t.Fatal(err)
	}
	its := httptest.NewServer(isrv)
	defer func() { isrv.Close(); its.Close() }()

	dir := t.TempDir()
	payDB, fulfilmentDB := filepath.Join(dir, "pay.db"), filepath.Join(dir, "fulfilment.db")
	_, apiKey := addMerchantCLI(t, payDB)
	payAddr, _ := servePayOn(t, payDB, its.URL, "--nats", emb.URL(), "--partitions", "8", "--db-timeout", "10s")
	serveWorker(t, "--nats", emb.URL(), "--partitions", "8", "--sqlite", fulfilmentDB, "--db-timeout", "10s")
	worker := serveWorker(t, "--nats", emb.URL(), "--partitions", "8", "--sqlite", fulfilmentDB, "--db-timeout", "10s")

	client := &http.Client{Timeout: 30 * time.Second}
	for r := range rounds {
		mode := institution.ModeNormal
		if r%3 == 1 {
			mode = institution.ModeDecline
		}
		b := institution.DefaultBehavior()
		b.Mode = mode
		if err := isrv.SetBehavior(b); err != nil {
			t.Fatal(err)
		}
		// 20 requests in flight; a 503 (the SQLite writer busy under
		// -race) is retried with the same idempotency key, as a client
		// would.
		var wg sync.WaitGroup
		sem := make(chan struct{}, 20)
		for i := range perRound {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				body := fmt.Sprintf(`{"order_id":"order-%d-%d","amount":%d,"currency":"KRW"}`, r, i, 1000+i)
				for attempt := 1; ; attempt++ {
					req, _ := http.NewRequest(http.MethodPost, "http://"+payAddr+"/v1/payments", strings.NewReader(body))
					req.Header.Set("Content-Type", "application/json")
					req.Header.Set("Idempotency-Key", fmt.Sprintf("key-%d-%d", r, i))
					req.Header.Set("Authorization", "Bearer "+apiKey)
					resp, err := client.Do(req)
					if err != nil {
						t.Errorf("POST: %v", err)
						return
					}
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode == http.StatusServiceUnavailable && attempt < 5 {
						time.Sleep(100 * time.Millisecond)
						continue
					}
					if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
						t.Errorf("POST = %d %s, want 201", resp.StatusCode, b)
					}
					return
				}
			})
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
	}

	ps, err := sqlite.Open(payDB)
	if err != nil {
		t.Fatal(err)
	}
	defer ps.Close()
	fcfg := sqlstore.DefaultConfig()
	fcfg.SQLitePath, fcfg.OpTimeout = fulfilmentDB, 10*time.Second
	fs, err := sqlstore.Open(ctx, fcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()

	// Wait until every order is settled (the condition, not a time, ends
	// the wait; the deadline only bounds a failure).
	var c fulfilment.Counts
	deadline := time.Now().Add(120 * time.Second)
	for {
		if c, err = fs.Counts(ctx); err != nil {
			t.Fatal(err)
		}
		if c.Orders[fulfilment.OrderTicketed]+c.Orders[fulfilment.OrderReleased] >= rounds*perRound {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 120s: %+v, want %d settled orders", c, rounds*perRound)
		}
		time.Sleep(50 * time.Millisecond)
	}

	var records []fulfilment.PaymentRecord
	approved, declined := 0, 0
	for after := ""; ; {
		page, err := ps.List(ctx, after, 500)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		for _, p := range page {
			records = append(records, fulfilment.PaymentRecord{PaymentID: p.ID, MerchantID: p.MerchantID, OrderID: p.OrderID, Status: p.Status})
			switch p.Status {
			case pay.StatusApproved:
				approved++
			case pay.StatusDeclined:
				declined++
			}
		}
		after = page[len(page)-1].ID
	}
	if len(records) != rounds*perRound || approved+declined != rounds*perRound || approved == 0 || declined == 0 {
		t.Fatalf("%d payments, %d APPROVED, %d DECLINED; want %d, all settled, both kinds", len(records), approved, declined, rounds*perRound)
	}
	rep, err := fulfilment.CheckParity(ctx, fs, records)
	if err != nil {
		t.Fatal(err)
	}
	if c, err = fs.Counts(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d payments (%d APPROVED, %d DECLINED); fulfilment %+v; parity %v", len(records), approved, declined, c, rep)
	if rep.Mismatches() != 0 || rep.Matched != approved {
		t.Errorf("parity = %v, want %d matched and nothing else", rep, approved)
	}
	settled := c.Orders[fulfilment.OrderTicketed] + c.Orders[fulfilment.OrderReleased]
	if settled != rounds*perRound || c.Tickets != int64(approved) || c.Releases != int64(declined) {
		t.Errorf("%d settled orders, %d tickets, %d releases; want %d, %d, %d", settled, c.Tickets, c.Releases, rounds*perRound, approved, declined)
	}

	// The worker's HTTP surface.
	resp, err := http.Get("http://" + worker + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "consumer") {
		t.Errorf("/readyz = %d %s, want 200 naming the consumer check", resp.StatusCode, body)
	}
	resp, err = http.Get("http://" + worker + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, m := range []string{`stampede_worker_partition_lag{partition="0"}`, "stampede_worker_in_flight", "stampede_worker_redelivered_total",
		"stampede_worker_partition_max_key_depth", "stampede_worker_invalid_events_total"} {
		if !strings.Contains(string(body), m) {
			t.Errorf("/metrics lacks %s", m)
		}
	}
}

// TestServeWorkerDeliverRefusesBadStart: --deliver without the secret in
// the environment, or with a URL that is not an http(s) endpoint, stops
// the command before it connects, saying what is missing.
func TestServeWorkerDeliverRefusesBadStart(t *testing.T) {
	t.Setenv(envDeliverSecret, "")
	_, _, err := execute(t, "serve", "worker", "--nats", "nats://127.0.0.1:1", "--deliver", "https://orders.example.com/events")
	if err == nil || !strings.Contains(err.Error(), envDeliverSecret) {
		t.Fatalf("--deliver without %s = %v, want an error naming it", envDeliverSecret, err)
	}
	t.Setenv(envDeliverSecret, "whsec_x")
	for _, u := range []string{"ftp://orders.example.com/x", "orders.example.com/events", "https://"} {
		_, _, err = execute(t, "serve", "worker", "--nats", "nats://127.0.0.1:1", "--deliver", u, "--deliver-attempts", "0")
		if err == nil || !strings.Contains(err.Error(), "--deliver:") || !strings.Contains(err.Error(), "--deliver-attempts:") {
			t.Errorf("--deliver %q --deliver-attempts 0 = %v, want errors naming --deliver and --deliver-attempts", u, err)
		}
	}
}

// TestServeWorkerDeliverEndToEnd: events published by pay's publisher are
// POSTed by `serve worker --deliver` to an endpoint, signed so that pay's
// webhook check (pay.VerifyWebhook) accepts them, each body the event as
// published with its id as Idempotency-Key, each payment's in order; a 409
// parks its payment (listed by `events parked`) while the others are
// delivered; no fulfilment store is opened.
func TestServeWorkerDeliverEndToEnd(t *testing.T) {
	const secret = "whsec_outlet_e2e_0123"
	ctx := context.Background()
	emb, err := natspub.StartEmbedded(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(emb.Close) // after the worker's stop, which the cleanups run first
	nc, err := nats.Connect(emb.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	pub, err := natspub.NewPublisher(ctx, nc, natspub.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	published := map[string][]byte{}
	payments := []string{"pay_a", "pay_b", "pay_bad"}
	statuses := []pay.Status{pay.StatusPending, pay.StatusUnknown, pay.StatusApproved}
	for seq := int64(1); seq <= 3; seq++ {
		for _, id := range payments {
			p := pay.Payment{ID: id, MerchantID: "m1", OrderID: "order-" + id, Amount: 5000, Currency: "KRW", Status: statuses[seq-1]}
			e := pay.NewEvent(pay.EventStatusChanged, p, seq, "", "", time.Now())
			if err := pub.Publish(ctx, e); err != nil {
				t.Fatal(err)
			}
			published[natspub.MsgID(e)] = e.Payload
		}
	}

	var (
		mu  sync.Mutex
		got = map[string][]string{}
		bad []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := pay.VerifyWebhook(secret, r.Header.Get(pay.SignatureHeader), body, time.Now(), pay.DefaultWebhookTolerance); err != nil {
			t.Errorf("signature: %v", err)
		}
		id := r.Header.Get("Idempotency-Key")
		if want, ok := published[id]; !ok || string(body) != string(want) {
			t.Errorf("Idempotency-Key %q with body %s: want a published event id and its body as published", id, body)
		}
		mu.Lock()
		defer mu.Unlock()
		p, _, _ := strings.Cut(id, "-")
		if id == "pay_bad-2" {
			bad = append(bad, id)
			http.Error(w, "order cancelled", http.StatusConflict)
			return
		}
		got[p] = append(got[p], id)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)

	dataDir := t.TempDir()
	t.Setenv(envDeliverSecret, secret)
	addr := serveWorker(t, "--nats", emb.URL(), "--deliver", srv.URL+"/events", "--data-dir", dataDir)
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		done := len(got["pay_a"]) == 3 && len(got["pay_b"]) == 3 && len(bad) == 1
		mu.Unlock()
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not delivered in 20s: %v, refused %v", got, bad)
		}
		time.Sleep(50 * time.Millisecond)
	}
	out, _, err := execute(t, "events", "parked", "--nats", emb.URL())
	if err != nil || !strings.Contains(out, "pay_bad") {
		t.Errorf("events parked = %q, %v: want pay_bad listed", out, err)
	}
	mu.Lock()
	for _, p := range []string{"pay_a", "pay_b"} {
		if want := []string{p + "-1", p + "-2", p + "-3"}; fmt.Sprint(got[p]) != fmt.Sprint(want) {
			t.Errorf("%s delivered %v, want %v", p, got[p], want)
		}
	}
	if fmt.Sprint(got["pay_bad"]) != "[pay_bad-1]" || len(bad) != 1 {
		t.Errorf("pay_bad delivered %v, refused %v: want its first event only, the refused one sent once", got["pay_bad"], bad)
	}
	mu.Unlock()
	if !strings.Contains(out, "answered 409: order cancelled") {
		t.Errorf("events parked = %q: want the endpoint's answer as the reason", out)
	}
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("/readyz = %v, %v: want 200 without a store", resp, err)
	} else {
		resp.Body.Close()
	}
	resp, err = http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, m := range []string{"stampede_outlet_delivered_total 7", "stampede_outlet_permanent_total 1", "stampede_worker_applied_total 7"} {
		if !strings.Contains(string(metrics), m+"\n") {
			t.Errorf("/metrics lacks %q", m)
		}
	}
	if entries, _ := filepath.Glob(filepath.Join(dataDir, "*")); len(entries) > 0 {
		t.Errorf("--deliver wrote %v: no store should be opened", entries)
	}
}
