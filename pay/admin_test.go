package pay_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stampede-lab/stampede/internal/httpapi"
	"github.com/stampede-lab/stampede/pay"
	payapi "github.com/stampede-lab/stampede/pay/api"
)

const testAdminToken = "operator-token-0123456789"

// adminRig is the rig's service and store behind a second handler that
// has the admin endpoints, with a second merchant beside the rig's.
type adminRig struct {
	*rig
	admin           *httptest.Server
	otherKey        string
	mine, theirs    string // payment ids of the rig's merchant and the other
	flaggedA, flagB string
}

func newAdminRig(t *testing.T) *adminRig {
	t.Helper()
	r := newRig(t, nil)
	cfg := payapi.DefaultConfig()
	cfg.AdminToken = testAdminToken
	h, err := payapi.New(r.svc, r.store, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := &adminRig{rig: r, admin: httptest.NewServer(h)}
	t.Cleanup(a.admin.Close)
	other, key := addMerchant(t, r.store, "")
	a.otherKey = key
	ids := make([]string, 0, 3)
	for i, body := range []string{payment("a1", 100), payment("a2", 200)} {
		code, out := r.post(t, pay.NewID(), body)
		if code != http.StatusCreated {
			t.Fatalf("payment %d: %d %v", i, code, out)
		}
		ids = append(ids, out["id"].(string))
	}
	req, _ := http.NewRequest(http.MethodPost, r.api.URL+"/v1/payments", strings.NewReader(paymentOf(other, "b1", 300)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", pay.NewID())
	req.Header.Set("Authorization", "Bearer "+key)
	resp, out := r.do(t, req)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("other merchant's payment: %d %v", resp.StatusCode, out)
	}
	ids = append(ids, out["id"].(string))
	a.mine, a.theirs = ids[1], ids[2]
	a.flaggedA, a.flagB = ids[0], ids[2]
	for _, id := range []string{a.flaggedA, a.flagB} {
		if err := r.store.FlagReview(context.Background(), id, "unsettled: check it"); err != nil {
			t.Fatal(err)
		}
	}
	return a
}

// adminGet GETs path on the admin handler through the validating client
// with the given Authorization header ("" for none).
func (a *adminRig) adminGet(t *testing.T, path, auth string) (*http.Response, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, a.admin.URL+path, nil)
	if auth == "" {
		auth = "none" // r.do adds the merchant key to a request without one
	}
	req.Header.Set("Authorization", auth)
	return a.do(t, req)
}

// TestAdminNeedsItsToken: every admin endpoint answers 401 without the
// admin token, with a wrong one and with a merchant's API key; after
// AdminFailures wrong tokens from one address, every admin call from it
// answers 429 with Retry-After, the right token included.
func TestAdminNeedsItsToken(t *testing.T) {
	a := newAdminRig(t)
	wrong := 0
	for _, path := range []string{"/v1/admin/payments?flagged=true", "/v1/admin/payments/" + a.mine, "/v1/admin/stats"} {
		for _, c := range []struct{ name, auth string }{{"none", ""}, {"wrong", "Bearer " + testAdminToken + "x"},
			{"merchant key", "Bearer " + a.key}, {"basic", "Basic " + testAdminToken}} {
			resp, body := a.adminGet(t, path, c.auth)
			wrong++
			if wrong > payapi.AdminFailures {
				if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
					t.Errorf("%s with %s after %d wrong tokens = %d %v, want 429 with Retry-After", path, c.name, wrong-1, resp.StatusCode, body)
				}
				continue
			}
			if resp.StatusCode != http.StatusUnauthorized || body["code"] != "unauthorized" || resp.Header.Get("WWW-Authenticate") == "" {
				t.Errorf("%s with %s = %d %v, want 401 unauthorized", path, c.name, resp.StatusCode, body)
			}
		}
	}
	if wrong <= payapi.AdminFailures {
		t.Fatalf("only %d wrong tokens: the throttle was not reached", wrong)
	}
	if resp, body := a.adminGet(t, "/v1/admin/stats", "Bearer "+testAdminToken); resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("the right token from a throttled address = %d %v, want 429", resp.StatusCode, body)
	}
}

// TestAdminMerchantIsolationUnchanged: the admin token opens no merchant
// endpoint, and a merchant still reads only its own payments on the
// handler that has the admin endpoints.
func TestAdminMerchantIsolationUnchanged(t *testing.T) {
	a := newAdminRig(t)
	if resp, body := a.adminGet(t, "/v1/payments/"+a.mine, "Bearer "+testAdminToken); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /v1/payments/{id} with the admin token = %d %v, want 401", resp.StatusCode, body)
	}
	if resp, body := a.adminGet(t, "/v1/payments/"+a.theirs, "Bearer "+a.key); resp.StatusCode != http.StatusNotFound {
		t.Errorf("another merchant's payment = %d %v, want 404", resp.StatusCode, body)
	}
	if resp, body := a.adminGet(t, "/v1/payments/"+a.mine, "Bearer "+a.key); resp.StatusCode != http.StatusOK || body["id"] != a.mine {
		t.Errorf("own payment = %d %v, want 200", resp.StatusCode, body)
	}
}

// TestAdminFlaggedAndHistory: the flagged list holds exactly the flagged
// payments of every merchant, and each links to its history.
func TestAdminFlaggedAndHistory(t *testing.T) {
	a := newAdminRig(t)
	admin := "Bearer " + testAdminToken
	resp, body := a.adminGet(t, "/v1/admin/payments?flagged=true", admin)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("flagged = %d %v", resp.StatusCode, body)
	}
	got := map[string]bool{}
	for _, p := range body["payments"].([]any) {
		m := p.(map[string]any)
		if m["manual_review"] != true || m["review_reason"] == "" {
			t.Errorf("listed as flagged: %v", m)
		}
		got[m["id"].(string)] = true
	}
	if len(got) != 2 || !got[a.flaggedA] || !got[a.flagB] {
		t.Errorf("flagged = %v, want %s and %s", got, a.flaggedA, a.flagB)
	}
	if _, body := a.adminGet(t, "/v1/admin/payments", admin); len(body["payments"].([]any)) != 3 {
		t.Errorf("all payments = %v, want 3", body["payments"])
	}
	resp, body = a.adminGet(t, "/v1/admin/payments?limit=1", admin)
	if resp.StatusCode != http.StatusOK || len(body["payments"].([]any)) != 1 || body["next_after"] == nil {
		t.Errorf("page of 1 = %d %v, want one payment and next_after", resp.StatusCode, body)
	}
	resp, body = a.adminGet(t, "/v1/admin/payments/"+a.flagB, admin)
	if resp.StatusCode != http.StatusOK || body["id"] != a.flagB {
		t.Fatalf("history = %d %v", resp.StatusCode, body)
	}
	if h, _ := body["history"].([]any); len(h) < 2 {
		t.Errorf("history = %v, want created and approved", body["history"])
	}
	resp, body = a.adminGet(t, "/v1/admin/stats", admin)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("stats = %d %v", resp.StatusCode, body)
	}
	if bs := body["by_status"].(map[string]any); bs["APPROVED"] != 3.0 || bs["PENDING"] != 0.0 || body["flagged"] != 2.0 {
		t.Errorf("stats = %v, want 3 APPROVED and 2 flagged", body)
	}
}

// TestAdminBadInput: a bad query parameter is a 400 naming it, an unknown
// payment a 404.
func TestAdminBadInput(t *testing.T) {
	a := newAdminRig(t)
	admin := "Bearer " + testAdminToken
	for path, field := range map[string]string{
		"/v1/admin/payments?flagged=maybe":   "flagged",
		"/v1/admin/payments?limit=0":         "limit",
		"/v1/admin/payments?limit=501":       "limit",
		"/v1/admin/payments?limit=x":         "limit",
		"/v1/admin/payments?after=not-an-id": "after",
		"/v1/admin/payments/not-an-id":       "id",
	} {
		resp, body := a.adminGet(t, path, admin)
		if resp.StatusCode != http.StatusBadRequest || body["field"] != field {
			t.Errorf("%s = %d %v, want 400 naming %s", path, resp.StatusCode, body, field)
		}
	}
	if resp, body := a.adminGet(t, "/v1/admin/payments/"+pay.NewID(), admin); resp.StatusCode != http.StatusNotFound {
		t.Errorf("unknown payment = %d %v, want 404", resp.StatusCode, body)
	}
}

// TestAdminOffWithoutToken: without an admin token the endpoints do not
// exist, and a short token is refused by name.
func TestAdminOffWithoutToken(t *testing.T) {
	r := newRig(t, nil)
	resp, body := r.get(t, "/v1/admin/payments?flagged=true")
	if resp.StatusCode != http.StatusNotFound || resp.Header.Get("Content-Type") != httpapi.ProblemContentType {
		t.Errorf("admin endpoint without --admin-token = %d %v, want a 404 problem", resp.StatusCode, body)
	}
	cfg := payapi.DefaultConfig()
	cfg.AdminToken = "short"
	err := cfg.Validate()
	if e, ok := err.(*pay.Error); !ok || e.Field != "admin_token" {
		t.Errorf("Validate(short admin token) = %v, want an error naming admin_token", err)
	}
}
