package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stampede-lab/stampede/institution"
	instapi "github.com/stampede-lab/stampede/institution/api"
	instclient "github.com/stampede-lab/stampede/institution/client"
	"github.com/stampede-lab/stampede/internal/httpapi/apitest"
	payapi "github.com/stampede-lab/stampede/pay/api"
	"github.com/stampede-lab/stampede/pay/natspub"
)

// servePay runs `stampede serve pay` in-process on SQLite and the
// embedded NATS, waits until /healthz answers and returns its address
// and its log (text lines); the test's cleanup stops it as SIGINT does and checks that
// it stopped.
func servePay(t *testing.T, institutionURL string, args ...string) (string, *syncBuffer) {
	t.Helper()
	return servePayOn(t, filepath.Join(t.TempDir(), "pay.db"), institutionURL, args...)
}

// addMerchantCLI adds a merchant to the SQLite database db with `stampede
// pay merchant add` and returns its ID and API key.
func addMerchantCLI(t *testing.T, db string) (string, string) {
	t.Helper()
	t.Setenv(envPostgres, "")
	out, _, err := execute(t, "pay", "merchant", "add", "test shop", "--sqlite", db)
	if err != nil {
		t.Fatalf("pay merchant add: %v", err)
	}
	var m struct {
		ID  string `json:"merchant_id"`
		Key string `json:"api_key"`
	}
	if err := json.Unmarshal([]byte(out), &m); err != nil || m.ID == "" || m.Key == "" {
		t.Fatalf("pay merchant add printed %q (%v), want {merchant_id, api_key}", out, err)
	}
	return m.ID, m.Key
}

// servePayOn is servePay on the SQLite database db.
func servePayOn(t *testing.T, db, institutionURL string, args ...string) (string, *syncBuffer) {
	t.Helper()
	t.Setenv(envPostgres, "")
	t.Setenv(envNATS, "")
	return startServe(t, "pay", append([]string{"--institution", institutionURL, "--data-dir", t.TempDir(), "--sqlite", db}, args...)...)
}

// TestServePayAnswersThroughHTTPAPI: the real server's endpoints, checked
// against the OpenAPI description, and /readyz naming each dependency.
func TestServePayAnswersThroughHTTPAPI(t *testing.T) {
	icfg := instapi.DefaultConfig()
	icfg.AdminToken = "institution-admin-token-for-tests"
	isrv, err := instapi.New(icfg)
	if err != nil {
		t.Fatal(err)
	}
	its := httptest.NewServer(isrv)
	t.Cleanup(func() { isrv.Close(); its.Close() })
	admin := instclient.NewClient(its.URL, its.Client()).WithAdminToken(icfg.AdminToken)
	// Hang past the approval timeout: the answer (202) must still come,
	// since --write-timeout defaults to --timeout plus a margin.
	if _, err := admin.SetBehavior(context.Background(), institution.Behavior{Mode: institution.ModeHangBefore, HangMS: 3000, Idempotent: true, StatusAPI: institution.StatusAPIUp}); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(t.TempDir(), "pay.db")
	merchantID, apiKey := addMerchantCLI(t, db)
	// Request lines are logged at debug (a line per request at info would
	// flood a sale's logs): ask for them.
	addr, logs := servePayOn(t, db, its.URL, "--timeout", "300ms", "--log-level", "debug")
	base := "http://" + addr
	c := apitest.New(t, payapi.OpenAPI()).Client(t)

	resp, err := c.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"store":{"status":"ok"`) || !strings.Contains(string(body), `"nats":{"status":"ok"`) {
		t.Errorf("/readyz = %d %s, want 200 with the store and NATS ok", resp.StatusCode, body)
	}

	req, _ := http.NewRequest(http.MethodPost, base+"/v1/payments", strings.NewReader(`{"merchant_id":"`+merchantID+`","order_id":"serve-1","amount":1000,"currency":"KRW"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "serve-key-1")
	req.Header.Set("Authorization", "Bearer "+apiKey)
	resp, err = c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted || !strings.Contains(string(body), `"UNKNOWN"`) {
		t.Errorf("POST against a hung institution = %d %s, want 202 UNKNOWN", resp.StatusCode, body)
	}

	for path, want := range map[string]int{"/v1/payments": 401, "/v1/nothing": 404, "/openapi.json": 200, "/healthz": 200} {
		resp, err := c.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s = %d, want %d", path, resp.StatusCode, want)
		}
	}
	for _, want := range []string{"route=/v1/payments path=/v1/payments status=202", "route=/readyz path=/readyz status=200", "route=unmatched path=/v1/nothing status=404"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the request log lacks %q", want)
		}
	}
	resp, err = c.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`http_requests_total{code="202",method="POST",route="/v1/payments"} 1`,
		`http_requests_total{code="401",method="GET",route="/v1/payments"} 1`,
		`http_requests_total{code="200",method="GET",route="/readyz"} 1`,
		`http_request_duration_seconds_count{method="POST",route="/v1/payments"} 1`,
	} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestServePayClosesStalledAndIdleConnections opens raw TCP connections
// to the real server: one whose body stalls, one that never sends its
// headers, and keep-alive connections left idle. Each must be closed by
// the server within its timeout plus a second.
func TestServePayClosesStalledAndIdleConnections(t *testing.T) {
	const (
		readHeader = 500 * time.Millisecond
		read       = time.Second
		idle       = time.Second
	)
	addr, _ := servePay(t, "http://127.0.0.1:1", "--read-header-timeout", readHeader.String(), "--read-timeout", read.String(), "--idle-timeout", idle.String())

	// closedWithin reads conn until the server closes it and fails if
	// that takes longer than limit from start.
	closedWithin := func(name string, conn net.Conn, r io.Reader, start time.Time, limit time.Duration) {
		t.Helper()
		_ = conn.SetReadDeadline(start.Add(limit + 3*time.Second))
		_, err := io.Copy(io.Discard, r)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Errorf("%s: still open %s after it started; want closed within %s", name, time.Since(start).Round(time.Millisecond), limit)
			return
		}
		t.Logf("%s: closed after %s (%v)", name, time.Since(start), err)
		if took := time.Since(start); took > limit {
			t.Errorf("%s: closed after %s, want within %s", name, took.Round(time.Millisecond), limit)
		}
	}
	dial := func() net.Conn {
		t.Helper()
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}

	var wg sync.WaitGroup
	wg.Go(func() { // headers, then a body that stops half-way
		conn := dial()
		start := time.Now()
		if _, err := io.WriteString(conn, "POST /v1/payments HTTP/1.1\r\nHost: pay\r\nContent-Type: application/json\r\n"+
			"Idempotency-Key: stalled-1\r\nContent-Length: 200\r\n\r\n{\"merchant_id\":"); err != nil {
			t.Error(err)
			return
		}
		closedWithin("stalled body", conn, conn, start, read+time.Second)
	})
	wg.Go(func() { // headers that never end
		conn := dial()
		start := time.Now()
		if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: pay\r\n"); err != nil {
			t.Error(err)
			return
		}
		closedWithin("stalled headers", conn, conn, start, readHeader+time.Second)
	})
	for i := range 3 { // keep-alive connections left idle after an answer
		wg.Go(func() {
			conn := dial()
			if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: pay\r\n\r\n"); err != nil {
				t.Error(err)
				return
			}
			br := bufio.NewReader(conn)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Errorf("idle %d: %v", i, err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || resp.Close {
				t.Errorf("idle %d: /healthz = %d (close %v), want 200 keep-alive", i, resp.StatusCode, resp.Close)
			}
			closedWithin("idle keep-alive", conn, br, time.Now(), idle+time.Second)
		})
	}
	wg.Wait()
}

// TestServePayRejectsBadServerFlags: each timeout flag is checked, and
// named, before anything starts.
func TestServePayRejectsBadServerFlags(t *testing.T) {
	t.Setenv(envPostgres, "")
	t.Setenv(envNATS, "")
	db := filepath.Join(t.TempDir(), "pay.db")
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--timeout", "3s", "--write-timeout", "2s"}, "--write-timeout must exceed --timeout"},
		{[]string{"--read-header-timeout", "0s"}, "--read-header-timeout"},
		{[]string{"--read-timeout", "1ms"}, "--read-timeout"},
		{[]string{"--idle-timeout", "-1s"}, "--idle-timeout"},
		{[]string{"--timeout", "0s"}, "--timeout"},
	}
	for _, tc := range cases {
		_, _, err := execute(t, append([]string{"serve", "pay", "--institution", "http://127.0.0.1:1", "--sqlite", db}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one naming %s", tc.args, err, tc.want)
		}
	}
	if _, err := os.Stat(db); err == nil {
		t.Errorf("a bad flag still opened the database")
	}
}

// TestNATSReadiness: the NATS check passes on a live connection and fails
// once the connection is closed.
func TestNATSReadiness(t *testing.T) {
	_, nc := startNATS(t, t.TempDir())
	ready := natsReady(nc)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := ready(ctx); err != nil {
		t.Fatalf("a live connection: %v", err)
	}
	nc.Close()
	if err := ready(ctx); err == nil {
		t.Fatal("a closed connection passed the readiness check")
	}
}

// TestServePayStopsWhenNATSIsGoneForGood: serve pay on a NATS server that
// goes away and stays away past --give-up-after. /readyz reports the relay
// (and NATS) first; then the command fails, naming the relay, so the
// process exits non-zero.
func TestServePayStopsWhenNATSIsGoneForGood(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the relay to give up, about 15 s")
	}
	t.Setenv(envPostgres, "")
	t.Setenv(envNATS, "")
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
	t.Cleanup(func() { isrv.Close(); its.Close() })

	addr := freeAddr(t)
	logs := &syncBuffer{}
	cmd := newRootCmd()
	cmd.SetOut(io.Discard)
	cmd.SetErr(logs)
	dataDir := t.TempDir()
	_, apiKey := addMerchantCLI(t, filepath.Join(dataDir, "pay.db"))
	cmd.SetArgs([]string{"serve", "pay", "--http", addr, "--institution", its.URL, "--data-dir", dataDir,
		"--nats", emb.URL(), "--give-up-after", "1s"})
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(context.Background()) }()
	readyz := func() (int, string) {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return 0, ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	deadline := time.Now().Add(30 * time.Second)
	for code, _ := readyz(); code != http.StatusOK; code, _ = readyz() {
		if time.Now().After(deadline) {
			t.Fatalf("serve pay did not become ready:\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/payments", strings.NewReader(`{"order_id":"gone-1","amount":1000,"currency":"KRW"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "gone-key-1")
	req.Header.Set("Authorization", "Bearer "+apiKey)
	emb.Close() // NATS goes away for good, with the payment's events unpublished
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST = %d, want 201 (NATS is not on the payment's path)", resp.StatusCode)
	}

	sawRelay := false
	deadline = time.Now().Add(60 * time.Second)
	for {
		select {
		case err := <-done:
			if !sawRelay {
				t.Errorf("serve pay stopped before /readyz reported the relay")
			}
			if err == nil || !strings.Contains(err.Error(), "relay") {
				t.Fatalf("serve pay = %v, want an error naming the relay\n%s", err, logs.String())
			}
			if !strings.Contains(logs.String(), "a background component failed") {
				t.Errorf("the log does not say why it stopped:\n%s", logs.String())
			}
			return
		default:
		}
		if code, body := readyz(); code == http.StatusServiceUnavailable && strings.Contains(body, `"relay":{"status":"failed"`) {
			sawRelay = true
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve pay still runs 60s after NATS went away:\n%s", logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
