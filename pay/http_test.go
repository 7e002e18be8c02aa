package pay_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stampede-lab/stampede/institution"
	"github.com/stampede-lab/stampede/internal/httpapi"
	"github.com/stampede-lab/stampede/pay"
	payapi "github.com/stampede-lab/stampede/pay/api"
)

// TestHTTPConventions: the same mistake answers the same status as the
// other services, always as a problem.
func TestHTTPConventions(t *testing.T) {
	r := newRig(t, nil)
	cases := []struct {
		method, path, ct, body string
		code                   int
		allow, field           string
	}{
		{http.MethodGet, "/v1/nothing", "", "", 404, "", ""},
		{http.MethodGet, "/v1/payments/", "", "", 404, "", ""},
		{http.MethodPut, "/v1/payments", "application/json", payment("o", 1), 405, "GET, HEAD, POST", ""},
		{http.MethodDelete, "/v1/payments/" + pay.NewID(), "", "", 405, "GET, HEAD", ""},
		{http.MethodPost, "/healthz", "", "", 405, "GET, HEAD", ""},
		{http.MethodGet, "/v1/payments/" + pay.NewID(), "", "", 404, "", ""},
		{http.MethodGet, "/v1/payments/not-a-uuid", "", "", 400, "", "id"},
		{http.MethodPost, "/v1/payments", "text/plain", payment("o", 1), 415, "", ""},
		{http.MethodPost, "/v1/payments", "", payment("o", 1), 415, "", ""},
		{http.MethodPost, "/v1/payments", "application/json", `{"merchant_id":"` + merchant + `","order_id":"o","amount":"12","currency":"KRW"}`, 400, "", "amount"},
		{http.MethodPost, "/v1/payments", "application/json", `{"merchant_id":"` + merchant + `","order_id":"o","amount":1,"currency":"KRW","tip":1}`, 400, "", "tip"},
		{http.MethodPost, "/v1/payments", "application/json", `{"merchant_id":"` + merchant + `","order_id":"` + strings.Repeat("x", 5000) + `","amount":1,"currency":"KRW"}`, 413, "", ""},
	}
	for _, tc := range cases {
		req, _ := http.NewRequest(tc.method, r.api.URL+tc.path, strings.NewReader(tc.body))
		if tc.ct != "" {
			req.Header.Set("Content-Type", tc.ct)
		}
		req.Header.Set("Idempotency-Key", pay.NewID())
		resp, body := r.do(t, req)
		name := tc.method + " " + tc.path
		if resp.StatusCode != tc.code || resp.Header.Get("Content-Type") != httpapi.ProblemContentType {
			t.Errorf("%s = %d %s, want a %d problem", name, resp.StatusCode, resp.Header.Get("Content-Type"), tc.code)
			continue
		}
		if got := resp.Header.Get("Allow"); got != tc.allow {
			t.Errorf("%s: Allow %q, want %q", name, got, tc.allow)
		}
		if body["status"] != float64(tc.code) || body["code"] == "" || body["field"] != nil && tc.field == "" {
			t.Errorf("%s: problem %v", name, body)
		}
		if tc.field != "" && body["field"] != tc.field {
			t.Errorf("%s: problem %v does not name %s", name, body, tc.field)
		}
	}
}

// TestOpenAPIServed: /openapi.json is the embedded description.
func TestOpenAPIServed(t *testing.T) {
	r := newRig(t, nil)
	resp, body := r.get(t, "/openapi.json")
	if resp.StatusCode != http.StatusOK || body["openapi"] != "3.0.3" {
		t.Fatalf("/openapi.json = %d %v", resp.StatusCode, body["openapi"])
	}
	paths, _ := body["paths"].(map[string]any)
	for _, p := range []string{"/v1/payments", "/v1/payments/{id}", "/v1/payments/{id}/refunds", "/healthz", "/readyz", "/metrics", "/openapi.json"} {
		if paths[p] == nil {
			t.Errorf("/openapi.json lacks %s", p)
		}
	}
}

// TestHistoryShowsCodesNotInternals: a timeout is recorded as a code and
// safe text; the institution's URL and the Go error stay in the log.
func TestHistoryShowsCodesNotInternals(t *testing.T) {
	r := newRig(t, nil)
	r.behave(t, institution.Behavior{Mode: institution.ModeHangBefore, HangMS: 1000, Idempotent: true, StatusAPI: institution.StatusAPIUp})
	code, created := r.post(t, "key-t", payment("o-t", 700))
	if code != http.StatusAccepted {
		t.Fatalf("POST = %d %v, want 202", code, created)
	}
	resp, body := r.get(t, "/v1/payments/"+created["id"].(string))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET = %d %v", resp.StatusCode, body)
	}
	raw, _ := json.Marshal(body)
	for _, leak := range []string{r.instURL, "127.0.0.1", "http://", "context deadline", "Post "} {
		if strings.Contains(string(raw), leak) {
			t.Errorf("the payment shows %q: %s", leak, raw)
		}
	}
	history, _ := body["history"].([]any)
	if len(history) < 2 {
		t.Fatalf("history %v, want created and the timeout", history)
	}
	last := history[1].(map[string]any)
	if last["code"] != pay.ReasonApprovalTimeout || !strings.HasPrefix(last["reason"].(string), "approval_timeout: the institution did not answer within 300ms") {
		t.Errorf("timeout entry %v, want code approval_timeout with safe text", last)
	}
}

// TestStoredRawReasonsAreSanitized: rows written before reasons were
// made safe show a code and safe text, never the raw error.
func TestStoredRawReasonsAreSanitized(t *testing.T) {
	r := newRig(t, nil)
	ctx := context.Background()
	p, err := r.store.CreatePending(ctx, pay.Payment{ID: pay.NewID(), MerchantID: merchant, OrderID: "legacy", Amount: 10, Currency: "KRW"}, pay.IdempotencyRecord{Key: "legacy-key"})
	if err != nil {
		t.Fatal(err)
	}
	raw := `outcome unknown after 1 attempt(s): pay: the approval's outcome is unknown (timeout or lost answer)
institution: outcome unknown, the request may have been processed: Post "` + r.instURL + `/v1/approvals": context deadline exceeded`
	if _, err := r.store.Transition(ctx, p.ID, pay.StatusPending, pay.StatusUnknown, raw); err != nil {
		t.Fatal(err)
	}
	if err := r.store.FlagReview(ctx, p.ID, "still UNKNOWN after 8 status inquiries: dial tcp 10.0.0.7:8090: connection refused"); err != nil {
		t.Fatal(err)
	}
	// The status API is down: GET's inquiry leaves it UNKNOWN.
	r.behave(t, institution.Behavior{Mode: institution.ModeNormal, Idempotent: true, StatusAPI: institution.StatusAPIDown})
	resp, body := r.get(t, "/v1/payments/"+p.ID)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET = %d %v", resp.StatusCode, body)
	}
	enc, _ := json.Marshal(body)
	for _, leak := range []string{r.instURL, "10.0.0.7", "Post ", "dial tcp", "deadline exceeded"} {
		if strings.Contains(string(enc), leak) {
			t.Errorf("the payment shows %q: %s", leak, enc)
		}
	}
	h := body["history"].([]any)[1].(map[string]any)
	if h["code"] != pay.ReasonApprovalTimeout {
		t.Errorf("legacy timeout shown as %v", h)
	}
	if rr := body["review_reason"]; rr != "unsettled: still UNKNOWN after 8 status inquiries" {
		t.Errorf("review_reason = %q", rr)
	}
	for in, want := range map[string]string{
		"approved (attempt 2)":           "approved: the institution approved it (attempt 2)",
		"created":                        "created",
		"not sent: dial tcp: refused":    "not_sent: the request could not be sent to the institution; nothing was charged",
		"something else entirely: oops":  "withheld: the stored reason is not shown; see the service's logs",
		"declined: the institution said": "declined: the institution said",
		"outcome unknown after 1 attempt(s): pay: the approval's outcome is unknown (timeout or lost answer)\ninstitution: the institution answered an error: HTTP 500: boom":   "outcome_unknown: the institution's answer was lost (after 1 attempt(s)); the money may have moved",
		"outcome unknown after 2 attempt(s): pay: the approval's outcome is unknown (timeout or lost answer)\nPost \"http://10.1.1.1/v1/approvals\": context deadline exceeded": "approval_timeout: the institution did not answer in time (after 2 attempt(s)); the money may have moved",
	} {
		if got := pay.SafeReason(in); got != want {
			t.Errorf("SafeReason(%q) = %q, want %q", in, got, want)
		}
	}
}

// stalledStore is a store whose Ping never answers, as a frozen database
// does.
type stalledStore struct {
	pay.Store
	release chan struct{}
}

func (s stalledStore) Ping(context.Context) error { <-s.release; return nil }

// TestHealthzAsksNothingReadyzChecksTheStore: /healthz answers at once
// whatever the store does; /readyz answers 503 within about 1 s when the
// store is frozen or closed.
func TestHealthzAsksNothingReadyzChecksTheStore(t *testing.T) {
	r := newRig(t, nil)
	resp, body := r.get(t, "/readyz")
	checks, _ := body["checks"].(map[string]any)
	if resp.StatusCode != http.StatusOK || checks["store"] == nil {
		t.Fatalf("/readyz = %d %v, want 200 with the store's check", resp.StatusCode, body)
	}

	stalled := stalledStore{Store: r.store, release: make(chan struct{})}
	defer close(stalled.release)
	hcfg := payapi.DefaultConfig()
	hcfg.Merchants = r.store.(pay.MerchantStore)
	h, err := payapi.New(r.svc, stalled, hcfg, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	c := r.v.Client(t)
	start := time.Now()
	hz, err := c.Get(srv.URL + "/healthz")
	if err != nil || hz.StatusCode != http.StatusOK || time.Since(start) > 200*time.Millisecond {
		t.Fatalf("/healthz with a frozen store: %v %v after %s, want 200 at once", hz, err, time.Since(start))
	}
	hz.Body.Close()
	start = time.Now()
	rz, err := c.Get(srv.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(rz.Body)
	rz.Body.Close()
	if took := time.Since(start); rz.StatusCode != http.StatusServiceUnavailable || took > 1500*time.Millisecond || rz.Header.Get("Retry-After") == "" {
		t.Fatalf("/readyz with a frozen store = %d after %s (Retry-After %q): %s; want 503 within ~1s", rz.StatusCode, took, rz.Header.Get("Retry-After"), data)
	}
	if !strings.Contains(string(data), `"store"`) {
		t.Errorf("/readyz does not name the store: %s", data)
	}

	r.store.Close()
	if resp, _ := r.get(t, "/healthz"); resp.StatusCode != http.StatusOK {
		t.Errorf("/healthz with the store closed = %d, want 200: it asks nothing", resp.StatusCode)
	}
	if resp, body := r.get(t, "/readyz"); resp.StatusCode != http.StatusServiceUnavailable || body["code"] != "unavailable" {
		t.Errorf("/readyz with the store closed = %d %v, want 503", resp.StatusCode, body)
	}
}
