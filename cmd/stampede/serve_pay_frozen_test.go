package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	neturl "net/url"
	"strings"
	"sync"
	"testing"
	"time"

	instapi "github.com/stampede-lab/stampede/institution/api"
	"github.com/stampede-lab/stampede/internal/httpapi/apitest"
	"github.com/stampede-lab/stampede/internal/tcpproxy"
	"github.com/stampede-lab/stampede/internal/testenv"
	payapi "github.com/stampede-lab/stampede/pay/api"
)

// TestServePayPostgresFrozen runs `serve pay` on PostgreSQL behind a proxy
// that stops forwarding, as a PostgreSQL stopped with SIGSTOP looks from
// the client (the shared server itself is not stopped, so other tests are
// not disturbed). While frozen, every request that needs the database is
// answered 503 problem+json with Retry-After within --db-timeout plus 1 s,
// /readyz fails and /healthz stays ok; once traffic flows again the
// service recovers by itself, without a restart.
func TestServePayPostgresFrozen(t *testing.T) {
	raw := testenv.URL(t, testenv.PostgresURL)
	u, err := neturl.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	px, err := tcpproxy.Start(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(px.Close)
	u.Host = px.Addr()

	icfg := instapi.DefaultConfig()
	icfg.AdminToken = "institution-admin-token-for-tests"
	isrv, err := instapi.New(icfg)
	if err != nil {
		t.Fatal(err)
	}
	its := httptest.NewServer(isrv)
	t.Cleanup(func() { isrv.Close(); its.Close() })

	const dbTimeout = 500 * time.Millisecond
	out, _, err := execute(t, "pay", "merchant", "add", "frozen test shop", "--postgres", raw)
	if err != nil {
		t.Fatalf("pay merchant add: %v", err)
	}
	var merchant struct {
		Key string `json:"api_key"`
	}
	if err := json.Unmarshal([]byte(out), &merchant); err != nil || merchant.Key == "" {
		t.Fatalf("pay merchant add printed %q: %v", out, err)
	}
	key := merchant.Key
	addr, _ := servePay(t, its.URL, "--postgres", u.String(), "--db-timeout", dbTimeout.String(), "--timeout", "1s")
	base := "http://" + addr
	c := apitest.New(t, payapi.OpenAPI()).Client(t)
	c.Timeout = 30 * time.Second
	run := fmt.Sprintf("frozen-%d", time.Now().UnixNano())

	create := func(n int) (*http.Response, string) {
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/payments",
			strings.NewReader(fmt.Sprintf(`{"order_id":"%s-%d","amount":1000,"currency":"KRW"}`, run, n)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Idempotency-Key", fmt.Sprintf("%s-%d", run, n))
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("POST: %v", err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(body)
	}
	get := func(url string) (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		return c.Do(req)
	}
	resp, body := create(0)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("before the freeze: POST = %d %s", resp.StatusCode, body)
	}
	id := between(body, `"id":"`, `"`)

	px.Freeze()
	type answer struct {
		what   string
		status int
		retry  string
		took   time.Duration
	}
	var (
		mu      sync.Mutex
		answers []answer
		wg      sync.WaitGroup
	)
	ask := func(what string, do func() (*http.Response, error)) {
		wg.Go(func() {
			start := time.Now()
			resp, err := do()
			took := time.Since(start)
			if err != nil {
				t.Errorf("%s while frozen: %v after %s", what, err, took)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			mu.Lock()
			answers = append(answers, answer{what, resp.StatusCode, resp.Header.Get("Retry-After"), took})
			mu.Unlock()
		})
	}
	for i := 1; i <= 3; i++ {
		ask(fmt.Sprintf("POST /v1/payments #%d", i), func() (*http.Response, error) {
			resp, body := create(i)
			resp.Body = io.NopCloser(strings.NewReader(body))
			return resp, nil
		})
		ask("GET /v1/payments/{id}", func() (*http.Response, error) { return get(base + "/v1/payments/" + id) })
	}
	ask("GET /readyz", func() (*http.Response, error) { return c.Get(base + "/readyz") })
	ask("GET /healthz", func() (*http.Response, error) { return c.Get(base + "/healthz") })
	wg.Wait()
	limit := dbTimeout + time.Second
	for _, a := range answers {
		want := http.StatusServiceUnavailable
		if a.what == "GET /healthz" {
			want = http.StatusOK
		}
		if a.status != want || a.took > limit || (want == 503 && a.retry == "") {
			t.Errorf("%s while frozen: %d (Retry-After %q) after %s; want %d within %s", a.what, a.status, a.retry, a.took.Round(time.Millisecond), want, limit)
		} else {
			t.Logf("%s while frozen: %d after %s", a.what, a.status, a.took.Round(time.Millisecond))
		}
	}

	px.Thaw()
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := c.Get(base + "/readyz")
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("/readyz did not recover within 20s of the thaw")
		}
		time.Sleep(100 * time.Millisecond)
	}
	// A client that honours Retry-After gets through: a loaded database
	// may still be working off the statements held during the freeze.
	for attempt := 1; ; attempt++ {
		resp, body := create(10)
		if resp.StatusCode == http.StatusCreated {
			break
		}
		if resp.StatusCode != http.StatusServiceUnavailable || attempt == 10 {
			t.Fatalf("after the thaw: POST = %d %s (attempt %d)", resp.StatusCode, body, attempt)
		}
		time.Sleep(time.Second)
	}
	resp, err = get(base + "/v1/payments/" + id)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("after the thaw: GET = %d", resp.StatusCode)
	}
}

// between returns the text of s between the first prefix and the next
// suffix after it.
func between(s, prefix, suffix string) string {
	_, rest, ok := strings.Cut(s, prefix)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, suffix)
	return v
}
