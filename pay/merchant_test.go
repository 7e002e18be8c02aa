package pay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stampede-lab/stampede/institution"
	"github.com/stampede-lab/stampede/internal/testenv"
	"github.com/stampede-lab/stampede/pay"
	"github.com/stampede-lab/stampede/pay/postgres"
)

// postAs posts body under key with the API key apiKey.
func (r *rig) postAs(t *testing.T, apiKey, key, body string) (*http.Response, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, r.api.URL+"/v1/payments", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Authorization", "Bearer "+apiKey)
	return r.do(t, req)
}

// getAs reads payment id with the API key apiKey.
func (r *rig) getAs(t *testing.T, apiKey, id string) (*http.Response, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, r.api.URL+"/v1/payments/"+id, nil)
	req.Header.Set("Authorization", "Bearer "+apiKey)
	return r.do(t, req)
}

// TestAPIKeyRequired: without a valid, unrevoked key both endpoints
// answer 401 with WWW-Authenticate.
func TestAPIKeyRequired(t *testing.T) {
	r := newRig(t, nil)
	_, created := r.post(t, "k-auth", payment("o-auth", 100))
	id, _ := created["id"].(string)
	for _, auth := range []string{"", "Bearer", "Bearer " + pay.NewAPIKey(), "Basic " + r.key, r.key} {
		for _, req := range []*http.Request{
			must(http.NewRequest(http.MethodPost, r.api.URL+"/v1/payments", strings.NewReader(payment("o-x", 1)))),
			must(http.NewRequest(http.MethodGet, r.api.URL+"/v1/payments/"+id, nil)),
		} {
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", pay.NewID())
			if auth != "" {
				req.Header.Set("Authorization", auth)
			} else {
				req.Header.Set("Authorization", " ") // do adds the rig's key to a request without one
			}
			resp, body := r.do(t, req)
			if resp.StatusCode != http.StatusUnauthorized || body["code"] != "unauthorized" || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("%s with Authorization %q = %d %v (WWW-Authenticate %q), want 401", req.Method, auth, resp.StatusCode, body, resp.Header.Get("WWW-Authenticate"))
			}
		}
	}
	if err := r.store.(pay.MerchantStore).RevokeMerchant(context.Background(), merchant, time.Now()); err != nil {
		t.Fatal(err)
	}
	if resp, _ := r.get(t, "/v1/payments/"+id); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET with a revoked key = %d, want 401", resp.StatusCode)
	}
}

func must(req *http.Request, err error) *http.Request {
	if err != nil {
		panic(err)
	}
	return req
}

// TestMerchantsAreIsolated: merchant B cannot read A's payment (404, as
// an unknown id), the same Idempotency-Key used by A and B makes two
// payments, and merchant_id may be left out (the key's merchant).
func TestMerchantsAreIsolated(t *testing.T) {
	r := newRig(t, nil)
	b, bKey := addMerchant(t, r.store, "")
	resp, a := r.postAs(t, r.key, "shared-key", payment("order-1", 1000))
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("A's POST = %d %v", resp.StatusCode, a)
	}
	resp, bp := r.postAs(t, bKey, "shared-key", `{"order_id":"order-1","amount":1000,"currency":"KRW"}`)
	if resp.StatusCode != http.StatusCreated || bp["merchant_id"] != b || bp["id"] == a["id"] || resp.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("B's POST with A's idempotency key = %d %v, want a new payment of B", resp.StatusCode, bp)
	}
	if resp, body := r.getAs(t, bKey, a["id"].(string)); resp.StatusCode != http.StatusNotFound || body["code"] != "not_found" {
		t.Errorf("B reading A's payment = %d %v, want 404", resp.StatusCode, body)
	}
	if resp, body := r.getAs(t, r.key, a["id"].(string)); resp.StatusCode != http.StatusOK || body["id"] != a["id"] {
		t.Errorf("A reading its payment = %d %v, want 200", resp.StatusCode, body)
	}
	if resp, body := r.postAs(t, bKey, "b-2", payment("order-2", 1)); resp.StatusCode != http.StatusForbidden || body["code"] != "forbidden" {
		t.Errorf("B posting with A's merchant_id = %d %v, want 403", resp.StatusCode, body)
	}
	ledger, err := r.inst.Approvals(context.Background())
	if err != nil || ledger.ChargesTotal != 2 {
		t.Fatalf("ledger = %+v, %v; want 2 charges (one per merchant)", ledger, err)
	}
}

// TestOneOrderNeverChargedTwice: the same order with a new idempotency
// key answers 409 order_exists naming the first payment, and the
// institution's ledger holds one charge; a replay of the first key is
// marked Idempotent-Replayed; after a decline the order may be paid.
func TestOneOrderNeverChargedTwice(t *testing.T) {
	r := newRig(t, nil)
	resp, first := r.postAs(t, r.key, "order-key-1", payment("order-77", 5000))
	if resp.StatusCode != http.StatusCreated || first["status"] != "APPROVED" {
		t.Fatalf("first POST = %d %v", resp.StatusCode, first)
	}
	resp, again := r.postAs(t, r.key, "order-key-2", payment("order-77", 5000))
	if resp.StatusCode != http.StatusConflict || again["code"] != "order_exists" || again["payment_id"] != first["id"] {
		t.Fatalf("same order, new key = %d %v, want 409 order_exists with payment_id %v", resp.StatusCode, again, first["id"])
	}
	resp, replay := r.postAs(t, r.key, "order-key-1", payment("order-77", 5000))
	if resp.StatusCode != http.StatusCreated || replay["id"] != first["id"] || resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay = %d %v (Idempotent-Replayed %q), want the stored answer, marked", resp.StatusCode, replay, resp.Header.Get("Idempotent-Replayed"))
	}
	ledger, err := r.inst.Approvals(context.Background())
	if err != nil || ledger.ChargesTotal != 1 || len(ledger.Records) != 1 {
		t.Fatalf("ledger = %+v, %v; want one charge", ledger, err)
	}

	r.behave(t, institution.Behavior{Mode: institution.ModeDecline, Idempotent: true, StatusAPI: institution.StatusAPIUp})
	resp, declined := r.postAs(t, r.key, "order-key-3", payment("order-78", 5000))
	if resp.StatusCode != http.StatusCreated || declined["status"] != "DECLINED" {
		t.Fatalf("POST in DECLINE mode = %d %v", resp.StatusCode, declined)
	}
	r.behave(t, institution.DefaultBehavior())
	resp, retried := r.postAs(t, r.key, "order-key-4", payment("order-78", 5000))
	if resp.StatusCode != http.StatusCreated || retried["status"] != "APPROVED" || retried["id"] == declined["id"] {
		t.Fatalf("a declined order paid again = %d %v, want a new APPROVED payment", resp.StatusCode, retried)
	}
}

// TestConcurrentOrderChargedOnce: many concurrent requests for one order,
// each under its own key: one payment, one charge at the institution, and
// every other request answers 409 order_exists naming it.
func TestConcurrentOrderChargedOnce(t *testing.T) {
	r := newRig(t, nil)
	const n = 12
	type result struct {
		code int
		body map[string]any
	}
	results := make([]result, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodPost, r.api.URL+"/v1/payments", strings.NewReader(payment("order-rush", 4200)))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", fmt.Sprintf("rush-%d", i))
			req.Header.Set("Authorization", "Bearer "+r.key)
			resp, err := r.client.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			var body map[string]any
			_ = json.NewDecoder(resp.Body).Decode(&body)
			results[i] = result{resp.StatusCode, body}
		})
	}
	wg.Wait()
	var winner any
	for _, res := range results {
		if res.code == http.StatusCreated {
			if winner != nil {
				t.Fatalf("two payments for one order: %v and %v", winner, res.body["id"])
			}
			winner = res.body["id"]
		}
	}
	if winner == nil {
		t.Fatalf("no request won: %+v", results)
	}
	for _, res := range results {
		if res.code != http.StatusCreated && (res.code != http.StatusConflict || res.body["code"] != "order_exists" || res.body["payment_id"] != winner) {
			t.Errorf("a losing request = %d %v, want 409 order_exists naming %v", res.code, res.body, winner)
		}
	}
	ledger, err := r.inst.Approvals(context.Background())
	if err != nil || ledger.ChargesTotal != 1 || len(ledger.Records) != 1 {
		t.Fatalf("ledger = %+v, %v; want exactly one charge", ledger, err)
	}
}

// TestTextValidatedOnPostgres: a NUL in order_id or invalid UTF-8 in
// Idempotency-Key answers 400 naming the field on PostgreSQL too (it
// answered 500), as on SQLite (TestBadInputNamesTheField).
func TestTextValidatedOnPostgres(t *testing.T) {
	url := testenv.URL(t, testenv.PostgresURL)
	schema := fmt.Sprintf("stampede_paytest_%016x", rand.Uint64())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if c, err := pgx.Connect(ctx, url); err == nil {
			defer c.Close(ctx)
			_, _ = c.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
		}
	})
	cfg := postgres.DefaultConfig()
	cfg.URL, cfg.Schema = url, schema
	store, err := postgres.OpenConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	r := newRigOn(t, store, newInstitution(t), nil)
	for _, tc := range []struct{ key, body, field string }{
		{"pg-1", payment("o\x00nul", 1), "order_id"},
		{"pg-2\xff\xfe", payment("o", 1), "Idempotency-Key"},
		{"pg-3\xc3\x28", payment("o", 1), "Idempotency-Key"},
	} {
		code, body := r.post(t, tc.key, tc.body)
		if code != http.StatusBadRequest || body["field"] != tc.field {
			t.Errorf("%q %s = %d %v, want 400 naming %s", tc.key, tc.body, code, body, tc.field)
		}
	}
	if code, body := r.post(t, "pg-ok", payment("주문-1", 1)); code != http.StatusCreated {
		t.Errorf("a printable non-ASCII order = %d %v, want 201", code, body)
	}
}
