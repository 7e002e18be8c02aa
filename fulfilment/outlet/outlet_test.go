package outlet_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stampede-lab/stampede"
	dispatchjs "github.com/stampede-lab/stampede/dispatch/natskeyed"
	"github.com/stampede-lab/stampede/fulfilment/outlet"
	"github.com/stampede-lab/stampede/protocol"
)

const secret = "whsec_test_0123456789"

// testConfig is an outlet to url with fast retries and a recorded sleep.
func testConfig(url string, waits *[]time.Duration) outlet.Config {
	cfg := outlet.DefaultConfig()
	cfg.URL, cfg.Secret, cfg.Logger = url, secret, quiet
	cfg.Timeout, cfg.BaseBackoff, cfg.MaxBackoff = 2*time.Second, 10*time.Millisecond, 100*time.Millisecond
	if waits != nil {
		var mu sync.Mutex
		cfg.Sleep = func(ctx context.Context, d time.Duration) error {
			mu.Lock()
			*waits = append(*waits, d)
			mu.Unlock()
			return ctx.Err()
		}
	}
	return cfg
}

// event builds the natskeyed event of payment p's seq-th event.
func event(t testing.TB, p string, seq int64) dispatchjs.Event {
	t.Helper()
	body := eventBody(t, p, seq)
	return dispatchjs.Event{ID: protocol.EventID(p, seq), Key: p, Data: body, Delivery: 1}
}

func TestValidateNamesEveryField(t *testing.T) {
	cfg := outlet.Config{URL: "ftp://x", Timeout: 0, Attempts: 0, BaseBackoff: 0, MaxBackoff: -1, MaxRetryAfter: -1}
	err := cfg.Validate()
	for _, f := range []string{"deliver", "deliver_secret", "deliver_timeout", "deliver_attempts", "deliver_backoff",
		"deliver_max_backoff", "deliver_max_retry_after", "now", "sleep", "logger"} {
		found := false
		for _, fe := range stampede.FieldErrors(err) {
			found = found || fe.Field == f
		}
		if !found {
			t.Errorf("Validate() = %v, want field %s named", err, f)
		}
	}
	for _, u := range []string{"", "ftp://example.com/x", "http://", "https://user:pw@example.com/", "https://example.com/#x", "::"} {
		cfg := testConfig(u, nil)
		if _, err := outlet.New(cfg); err == nil || stampede.FieldErrors(err)[0].Field != "deliver" {
			t.Errorf("New(URL %q) = %v, want an error naming deliver", u, err)
		}
	}
	if _, err := outlet.New(testConfig("https://orders.example.com/events?x=1", nil)); err != nil {
		t.Errorf("New(good URL) = %v", err)
	}
}

// TestDeliverSignsAndRetriesTransientFailures: 500, 503 with Retry-After,
// 408, 429 and an answer later than the timeout are retried with the same Idempotency-Key
// and a fresh valid signature until a 2xx; the backoff grows and a longer
// Retry-After is waited.
func TestDeliverSignsAndRetriesTransientFailures(t *testing.T) {
	answers := []int{500, 503, 408, 429, -1, 204} // -1: answer after the timeout
	var (
		mu   sync.Mutex
		keys []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := protocol.VerifySignature(secret, r.Header.Get(protocol.HeaderSignature), body, time.Now(), protocol.DefaultSignatureTolerance); err != nil {
			t.Errorf("attempt %d: signature: %v", len(keys)+1, err)
		}
		if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("got %s with Content-Type %q", r.Method, r.Header.Get("Content-Type"))
		}
		mu.Lock()
		keys = append(keys, r.Header.Get(outlet.HeaderIdempotencyKey)+"|"+r.Header.Get(protocol.HeaderEventID))
		a := answers[len(keys)-1]
		mu.Unlock()
		switch a {
		case -1:
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
				t.Error("the outlet waited for an answer past its timeout")
			}
			return
		case 503:
			w.Header().Set("Retry-After", "7")
		}
		w.WriteHeader(a)
	}))
	defer srv.Close()
	var waits []time.Duration
	cfg := testConfig(srv.URL, &waits)
	cfg.Attempts, cfg.Timeout = 10, 300*time.Millisecond
	o, err := outlet.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ev := event(t, "pay_1", 3)
	if err := o.Deliver(context.Background(), ev); err != nil {
		t.Fatalf("Deliver = %v, want nil after the 2xx", err)
	}
	if len(keys) != len(answers) {
		t.Fatalf("%d attempts, want %d", len(keys), len(answers))
	}
	for _, k := range keys {
		if k != "pay_1-3|pay_1-3" {
			t.Errorf("Idempotency-Key|Stampede-Event-Id = %q, want pay_1-3 on every attempt", k)
		}
	}
	if len(waits) != 5 || waits[1] != 7*time.Second {
		t.Fatalf("waits %v: want 5, the second the 503's Retry-After (7s)", waits)
	}
	if waits[0] < 5*time.Millisecond || waits[0] > 10*time.Millisecond || waits[2] < 20*time.Millisecond || waits[3] < 40*time.Millisecond {
		t.Errorf("waits %v: want a jittered doubling from 10ms", waits)
	}
	if s := o.Stats(); s.Delivered != 1 || s.Attempts != 6 || s.Retries != 5 {
		t.Errorf("stats %+v", s)
	}
}

// TestDeliverHandsBackAfterAttempts: a receiver that keeps failing gets
// Attempts requests, then the error goes back to the consumer, not
// wrapping ErrPermanent (the consumer redelivers it later).
func TestDeliverHandsBackAfterAttempts(t *testing.T) {
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n++
		w.WriteHeader(502)
	}))
	defer srv.Close()
	o, err := outlet.New(testConfig(srv.URL, &[]time.Duration{}))
	if err != nil {
		t.Fatal(err)
	}
	err = o.Deliver(context.Background(), event(t, "pay_2", 1))
	if err == nil || errors.Is(err, dispatchjs.ErrPermanent) || !strings.Contains(err.Error(), "502") {
		t.Fatalf("Deliver = %v, want a transient error naming 502", err)
	}
	if n != outlet.DefaultConfig().Attempts {
		t.Errorf("%d requests, want %d", n, outlet.DefaultConfig().Attempts)
	}
}

// TestDeliverPermanentRefusals: a 4xx other than 408/429, and a
// redirect, are sent once and wrap ErrPermanent; an invalid body is never
// sent and is of class Invalid.
func TestDeliverPermanentRefusals(t *testing.T) {
	for _, code := range []int{400, 401, 404, 409, 422, 301} {
		n := 0
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n++
			if code == 301 {
				w.Header().Set("Location", "http://example.com/")
			}
			w.WriteHeader(code)
		}))
		o, err := outlet.New(testConfig(srv.URL, &[]time.Duration{}))
		if err != nil {
			t.Fatal(err)
		}
		err = o.Deliver(context.Background(), event(t, "pay_3", 1))
		if !errors.Is(err, dispatchjs.ErrPermanent) || n != 1 {
			t.Errorf("answer %d: Deliver = %v after %d requests, want ErrPermanent after 1", code, err, n)
		}
		srv.Close()
	}
	o, err := outlet.New(testConfig("http://127.0.0.1:1/", &[]time.Duration{}))
	if err != nil {
		t.Fatal(err)
	}
	err = o.Deliver(context.Background(), dispatchjs.Event{ID: "x", Key: "x", Data: []byte(`{"payment_id":""}`)})
	if stampede.ClassOf(err) != stampede.Invalid || o.Stats().Attempts != 0 {
		t.Errorf("invalid body: Deliver = %v (class %v), %d attempts; want Invalid and none", err, stampede.ClassOf(err), o.Stats().Attempts)
	}
}

// TestDeliverWaitsRetryAfterDates: a Retry-After given as an HTTP date is
// waited until that date, and one longer than MaxRetryAfter is capped.
func TestDeliverWaitsRetryAfterDates(t *testing.T) {
	now := time.Now().Truncate(time.Second)
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n++
		switch n {
		case 1:
			w.Header().Set("Retry-After", now.Add(4*time.Second).UTC().Format(http.TimeFormat))
			w.WriteHeader(http.StatusTooManyRequests)
		case 2:
			w.Header().Set("Retry-After", "3600")
			w.WriteHeader(http.StatusServiceUnavailable)
		default:
			w.WriteHeader(http.StatusOK)
		}
	}))
	defer srv.Close()
	var waits []time.Duration
	cfg := testConfig(srv.URL, &waits)
	cfg.Now = func() time.Time { return now }
	o, err := outlet.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Deliver(context.Background(), event(t, "pay_4", 1)); err != nil {
		t.Fatal(err)
	}
	if len(waits) != 2 || waits[0] != 4*time.Second || waits[1] != cfg.MaxRetryAfter {
		t.Errorf("waits %v, want [4s %s]", waits, cfg.MaxRetryAfter)
	}
}
