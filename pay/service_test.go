package pay_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stampede-lab/stampede/institution"
	instapi "github.com/stampede-lab/stampede/institution/api"
	instclient "github.com/stampede-lab/stampede/institution/client"
	"github.com/stampede-lab/stampede/internal/httpapi/apitest"
	"github.com/stampede-lab/stampede/pay"
	payapi "github.com/stampede-lab/stampede/pay/api"
	"github.com/stampede-lab/stampede/pay/institutionclient"
	"github.com/stampede-lab/stampede/pay/sqlite"
	"github.com/stampede-lab/stampede/retry"
)

const adminToken = "institution-admin-token-for-tests"

// rig is a payment service in front of a real institution simulator over
// HTTP, on an SQLite store.
type rig struct {
	instURL string
	store   pay.Store
	svc     *pay.Service
	inst    *instclient.Client // admin client
	api     *httptest.Server
	reg     *prometheus.Registry
	// v checks every answer against the OpenAPI description; client is
	// its validating client for the test that made the rig.
	v      *apitest.Validator
	client *http.Client
	// key is the API key of merchant, sent by do unless the request
	// carries an Authorization header of its own.
	key string
}

// addMerchant creates the merchant id (a new one when id is "") in store
// and returns its ID and API key.
func addMerchant(t testing.TB, store pay.Store, id string) (string, string) {
	t.Helper()
	if id == "" {
		id = pay.NewID()
	}
	key := pay.NewAPIKey()
	m := pay.Merchant{ID: id, Name: "test shop", KeyHash: pay.HashAPIKey(key), CreatedAt: time.Now()}
	if err := store.(pay.MerchantStore).CreateMerchant(context.Background(), m); err != nil {
		t.Fatalf("CreateMerchant: %v", err)
	}
	return id, key
}

// newInstitution starts an institution simulator for the test.
func newInstitution(t testing.TB) *httptest.Server {
	t.Helper()
	icfg := instapi.DefaultConfig()
	icfg.AdminToken, icfg.NotFoundWindow = adminToken, 200*time.Millisecond
	isrv, err := instapi.New(icfg)
	if err != nil {
		t.Fatal(err)
	}
	its := httptest.NewServer(isrv)
	t.Cleanup(func() { isrv.Close(); its.Close() })
	return its
}

func newRig(t testing.TB, mutate func(*pay.Config)) *rig {
	t.Helper()
	its := newInstitution(t)
	store, err := sqlite.Open(filepath.Join(t.TempDir(), "pay.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return newRigOn(t, store, its, mutate)
}

// newRigOn is newRig on store, in front of the institution simulator its.
// It creates the rig's merchant (the constant merchant) in store, which
// must therefore be fresh.
func newRigOn(t testing.TB, store pay.Store, its *httptest.Server, mutate func(*pay.Config)) *rig {
	t.Helper()
	client := instclient.NewClient(its.URL, its.Client())
	reg := prometheus.NewRegistry()
	cfg := pay.DefaultConfig()
	cfg.ApprovalTimeout, cfg.ReconcileEvery = 300*time.Millisecond, 50*time.Millisecond
	cfg.Metrics = pay.NewMetrics(reg)
	if mutate != nil {
		mutate(&cfg)
	}
	svc, err := pay.NewService(store, institutionclient.New(client), cfg)
	if err != nil {
		t.Fatal(err)
	}
	h, err := payapi.New(svc, store, payapi.DefaultConfig(), reg)
	if err != nil {
		t.Fatal(err)
	}
	api := httptest.NewServer(h)
	t.Cleanup(api.Close)
	v := apitest.New(t, payapi.OpenAPI())
	_, key := addMerchant(t, store, merchant)
	return &rig{instURL: its.URL, store: store, svc: svc, inst: client.WithAdminToken(adminToken), api: api, reg: reg, v: v, client: v.Client(t), key: key}
}

// do sends a request through the validating client and decodes a JSON
// answer (nil for another kind).
func (r *rig) do(t *testing.T, req *http.Request) (*http.Response, map[string]any) {
	t.Helper()
	if req.Header.Get("Authorization") == "" {
		req.Header.Set("Authorization", "Bearer "+r.key)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if strings.Contains(resp.Header.Get("Content-Type"), "json") {
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatalf("%s %s: the answer is not JSON: %v", req.Method, req.URL.Path, err)
		}
	}
	return resp, out
}

// get GETs path through the validating client.
func (r *rig) get(t *testing.T, path string) (*http.Response, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, r.api.URL+path, nil)
	return r.do(t, req)
}

func (r *rig) behave(t *testing.T, b institution.Behavior) {
	t.Helper()
	if _, err := r.inst.SetBehavior(context.Background(), b); err != nil {
		t.Fatal(err)
	}
}

const merchant = "7b0a3c5e-1111-4a4a-9b9b-0123456789ab"

func (r *rig) post(t *testing.T, key, body string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, r.api.URL+"/v1/payments", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, out := r.do(t, req)
	if out == nil {
		t.Fatalf("POST answered %d with Content-Type %q, want JSON", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	return resp.StatusCode, out
}

func payment(order string, amount int64) string { return paymentOf(merchant, order, amount) }

// paymentOf is the body of a payment of merchant mid.
func paymentOf(mid, order string, amount int64) string {
	b, _ := json.Marshal(order) // JSON escapes, not Go's
	return fmt.Sprintf(`{"merchant_id":%q,"order_id":%s,"amount":%d,"currency":"KRW"}`, mid, b, amount)
}

func TestApprovedDeclinedAndReplayed(t *testing.T) {
	r := newRig(t, nil)
	code, body := r.post(t, "key-1", payment("o-1", 5000))
	if code != http.StatusCreated || body["status"] != "APPROVED" {
		t.Fatalf("POST = %d %v, want 201 APPROVED", code, body)
	}
	again, replay := r.post(t, "key-1", payment("o-1", 5000))
	if again != code || replay["id"] != body["id"] {
		t.Fatalf("replay = %d %v, want the stored answer", again, replay)
	}
	resp, err := r.client.Get(r.api.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`stampede_pay_payments_total{status="APPROVED"} 1`, `http_requests_total{code="201",method="POST",route="/v1/payments"} 2`} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %s:\n%s", want, metrics)
		}
	}
	if code, body := r.post(t, "key-1", payment("o-1", 6000)); code != http.StatusUnprocessableEntity {
		t.Fatalf("same key, different body = %d %v, want 422", code, body)
	}
	r.behave(t, institution.Behavior{Mode: institution.ModeDecline, Idempotent: true, StatusAPI: institution.StatusAPIUp})
	if code, body := r.post(t, "key-2", payment("o-2", 5000)); code != http.StatusCreated || body["status"] != "DECLINED" {
		t.Fatalf("declined POST = %d %v", code, body)
	}
}

// TestTimeoutIsUnknownThenSettled: a hung institution makes the payment
// UNKNOWN (202), never retried; the status inquiry settles it.
func TestTimeoutIsUnknownThenSettled(t *testing.T) {
	r := newRig(t, nil)
	ctx := context.Background()
	// The institution charges, then hangs: the answer is lost.
	r.behave(t, institution.Behavior{Mode: institution.ModeHangAfter, HangMS: 1000, Idempotent: true, StatusAPI: institution.StatusAPIUp})
	code, body := r.post(t, "key-h", payment("o-h", 7000))
	if code != http.StatusAccepted || body["status"] != "UNKNOWN" {
		t.Fatalf("POST against a hung institution = %d %v, want 202 UNKNOWN", code, body)
	}
	arrivals, err := r.inst.Arrivals(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(arrivals.Arrivals); n != 1 {
		t.Fatalf("the institution saw %d approval requests, want 1 (approvals are never retried)", n)
	}
	settled, err := r.svc.Reconcile(ctx)
	if err != nil || settled != 1 {
		t.Fatalf("Reconcile = %d, %v; want 1 settled", settled, err)
	}
	p, err := r.svc.Get(ctx, body["id"].(string))
	if err != nil || p.Status != pay.StatusApproved {
		t.Fatalf("after reconciliation: %+v, %v; want APPROVED", p.Status, err)
	}
}

// TestHangBeforeProcessingEndsFailed: nothing was processed; after the
// not-found window the inquiry turns UNKNOWN into FAILED.
func TestHangBeforeProcessingEndsFailed(t *testing.T) {
	r := newRig(t, nil)
	ctx := context.Background()
	r.behave(t, institution.Behavior{Mode: institution.ModeHangBefore, HangMS: 1000, Idempotent: true, StatusAPI: institution.StatusAPIUp})
	_, body := r.post(t, "key-b", payment("o-b", 7000))
	id := body["id"].(string)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := r.svc.Reconcile(ctx); err != nil {
			t.Fatal(err)
		}
		p, err := r.store.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if p.Status == pay.StatusFailed {
			break
		}
		if p.Status != pay.StatusUnknown || time.Now().After(deadline) {
			t.Fatalf("status %s; want UNKNOWN until the not-found window passes, then FAILED", p.Status)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestStatusAPIDownStaysUnknown: no answer is never read as an answer.
func TestStatusAPIDownStaysUnknown(t *testing.T) {
	r := newRig(t, func(c *pay.Config) { c.ReviewAfter = 2 })
	ctx := context.Background()
	r.behave(t, institution.Behavior{Mode: institution.ModeHangAfter, HangMS: 1000, Idempotent: true, StatusAPI: institution.StatusAPIDown})
	_, body := r.post(t, "key-d", payment("o-d", 7000))
	id := body["id"].(string)
	for range 3 {
		if _, err := r.svc.Reconcile(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(120 * time.Millisecond) // past the reconciler's backoff
	}
	p, err := r.store.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if p.Status != pay.StatusUnknown || !p.ManualReview {
		t.Fatalf("with the status API down: %s, review %v; want UNKNOWN and flagged for review", p.Status, p.ManualReview)
	}
}

// TestRetriesAgainstANonIdempotentInstitutionDoubleCharge makes the harm
// of retrying approvals measurable.
func TestRetriesAgainstANonIdempotentInstitutionDoubleCharge(t *testing.T) {
	r := newRig(t, func(c *pay.Config) {
		rc := retry.DefaultConfig()
		rc.Name, rc.Base = retry.Exponential, 10*time.Millisecond
		c.Retry, _ = retry.New(rc, nil)
	})
	ctx := context.Background()
	r.behave(t, institution.Behavior{Mode: institution.ModeHangAfter, HangMS: 1000, Idempotent: false, StatusAPI: institution.StatusAPIUp})
	r.post(t, "key-x", payment("o-x", 7000))
	ledger, err := r.inst.Approvals(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ledger.ChargesTotal != 3 {
		t.Fatalf("charges = %d, want 3: one payment, three attempts, each charged", ledger.ChargesTotal)
	}
}

func TestBadInputNamesTheField(t *testing.T) {
	r := newRig(t, nil)
	cases := []struct {
		key, body, field string
		code             int
	}{
		{"", payment("o", 1), "Idempotency-Key", 400},
		{"k1", `{"merchant_id":"MERCHANT-001","order_id":"o","amount":1,"currency":"KRW"}`, "merchant_id", 400},
		{"k2", payment("o", 0), "amount", 400},
		{"k3", payment("o", -5), "amount", 400},
		{"k4", `{"merchant_id":"` + merchant + `","order_id":"o","amount":99999999999999999999,"currency":"KRW"}`, "amount", 400},
		{"k5", `{"merchant_id":"` + merchant + `","order_id":"o","amount":1,"currency":"XYZ"}`, "currency", 400},
		{"k6", `{"merchant_id":`, "", 400},
		{"k7", `{"merchant_id":"` + merchant + `","order_id":"o","amount":1,"currency":"KRW","tip":1}`, "", 400},
		{"k8", paymentOf(pay.NewID(), "o", 1), "merchant_id", 403}, // another merchant's id
		{"k10", payment("o\u0000nul", 1), "order_id", 400},
		{"k11", payment("o\ttab", 1), "order_id", 400},
		{"k12\xff", payment("o", 1), "Idempotency-Key", 400},
		{"k13\xc3\x28", payment("o", 1), "Idempotency-Key", 400},
		{"k9", `{"merchant_id":"` + merchant + `","order_id":"` + strings.Repeat("x", 5000) + `","amount":1,"currency":"KRW"}`, "", 413},
	}
	for _, tc := range cases {
		code, body := r.post(t, tc.key, tc.body)
		if code != tc.code || body["status"] != float64(tc.code) || body["code"] == nil {
			t.Errorf("%s: %d %v, want a %d problem", tc.body[:min(40, len(tc.body))], code, body, tc.code)
			continue
		}
		if tc.field != "" && body["field"] != tc.field {
			t.Errorf("%s: problem %v does not name %s", tc.key, body, tc.field)
		}
	}
}

// TestDatabaseDownAnswers503 closes the store under the
// running service.
func TestDatabaseDownAnswers503(t *testing.T) {
	r := newRig(t, nil)
	r.store.Close()
	code, body := r.post(t, "key-z", payment("o-z", 100))
	if code != http.StatusServiceUnavailable {
		t.Fatalf("POST with the database down = %d %v, want 503", code, body)
	}
	var buf bytes.Buffer
	_ = json.NewEncoder(&buf).Encode(body)
	if !strings.Contains(buf.String(), "unavailable") {
		t.Fatalf("error body %s does not say unavailable", buf.String())
	}
}

// TestClientDisconnectDoesNotCutTheCharge: a client that goes away while
// the approval is in flight does not cancel the call; the payment ends
// APPROVED, not UNKNOWN.
func TestClientDisconnectDoesNotCutTheCharge(t *testing.T) {
	r := newRig(t, func(c *pay.Config) { c.ApprovalTimeout = 5 * time.Second })
	bg := context.Background()
	// Charged at once, answered 800 ms later.
	r.behave(t, institution.Behavior{Mode: institution.ModeHangAfter, HangMS: 800, Idempotent: true, StatusAPI: institution.StatusAPIUp})
	ctx, cancel := context.WithCancel(bg)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, r.api.URL+"/v1/payments", strings.NewReader(payment("o-gone", 4200)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "key-gone")
	req.Header.Set("Authorization", "Bearer "+r.key)
	errc := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	// The call has reached the institution: the client leaves.
	deadline := time.Now().Add(5 * time.Second)
	for {
		a, err := r.inst.Arrivals(bg)
		if err != nil {
			t.Fatal(err)
		}
		if len(a.Arrivals) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the approval never reached the institution")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("the client got an answer although it left mid-approval")
	}
	deadline = time.Now().Add(10 * time.Second)
	for {
		ps, err := r.store.List(bg, "", 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(ps) == 1 && ps[0].Status != pay.StatusPending {
			p, err := r.store.Get(bg, ps[0].ID)
			if err != nil {
				t.Fatal(err)
			}
			if p.Status != pay.StatusApproved || len(p.History) != 2 || pay.ReasonCode(p.History[1].Reason) != pay.ReasonApproved {
				t.Fatalf("after the client left: %s, history %+v; want APPROVED straight from PENDING", p.Status, p.History)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the payment is still PENDING (or missing): %+v", ps)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// A retry with the same key gets the stored APPROVED answer.
	code, body := r.post(t, "key-gone", payment("o-gone", 4200))
	if code != http.StatusCreated || body["status"] != "APPROVED" {
		t.Fatalf("retry after the disconnect = %d %v, want 201 APPROVED", code, body)
	}
}
