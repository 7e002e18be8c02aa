package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-lab/stampede/checkout/api"
	"github.com/stampede-lab/stampede/internal/httpapi/apitest"
	"github.com/stampede-lab/stampede/protocol"
	"github.com/stampede-lab/stampede/waitroom"
)

// runCheckoutCmd runs `serve checkout` with args until ctx ends, through
// the root command, logging text lines.
func runCheckoutCmd(ctx context.Context, args ...string) (*syncBuffer, <-chan error) {
	return runCmd(ctx, append([]string{"serve", "checkout", "--log-format", "text"}, args...)...)
}

func TestServeCheckoutRejectsBadFlags(t *testing.T) {
	t.Setenv(envAdminToken, "")
	t.Setenv(envPostgres, "")
	dir := t.TempDir()
	ok := []string{"--pay", "http://127.0.0.1:1", "--pay-key", "sk_test", "--admin-token", "0123456789abcdef", "--data-dir", dir,
		"--waitroom", "http://127.0.0.1:1", "--room", "concert"}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--pay-key", "k", "--admin-token", "0123456789abcdef"}, "--pay"},
		{[]string{"--pay", "http://127.0.0.1:1", "--admin-token", "0123456789abcdef"}, "--pay-key"},
		{[]string{"--pay", "http://127.0.0.1:1", "--pay-key", "k"}, "--admin-token"},
		{append(ok, "--admin-token", "short"), "--admin-token"},
		{append(ok, "--pay", "ftp://x"), "--pay"},
		{append(ok, "--max-hold", "0s"), "--max-hold"},
		{append(ok, "--max-seats-per-hold", "0"), "--max-seats-per-hold"},
		{append(ok, "--pay-timeout", "5s", "--write-timeout", "2s"), "--write-timeout"},
		{append(ok, "--db-timeout", "0s"), "--db-timeout"},
		{append(ok, "--postgres", "not a url"), "--postgres"},
		{append(ok, "--http", ""), "--http"},
		{append(ok, "--waitroom", ""), "--waitroom"},
		{append(ok, "--waitroom", "ftp://x"), "--waitroom"},
		{append(ok, "--room", ""), "--room"},
		{append(ok, "--room", "no room"), "--room"},
		{append(ok, "--online-check"), "--checkout-key"},
		{append(ok, "--checkout-key", "0123456789abcdef"), "--checkout-key"},
		{append(ok, "--unsafe-gap", "1s"), "--unsafe-gap"},
		{append(ok, "--capture", "later"), "--capture"},
	}
	for _, c := range cases {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, done := runCheckoutCmd(ctx, c.args...)
		err := <-done
		cancel()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err = %v, want one naming %s", c.args, err, c.want)
		}
	}
}

// TestServeCheckoutSells runs the command on a SQLite file against a
// stand-in pay that approves, and sells a seat through the API.
func TestServeCheckoutSells(t *testing.T) {
	var payments atomic.Int32
	payStub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The checkout confirms the order of the approved payment before
		// it sells the seats.
		if r.Method == http.MethodPost && r.URL.Path == "/v1/payments/3f1c1c9e-3c48-4b8e-9d7a-4d1b2f9a0c11/confirm" && r.Header.Get("Authorization") == "Bearer sk_test" {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"payment_id":"3f1c1c9e-3c48-4b8e-9d7a-4d1b2f9a0c11","merchant_id":"m","order_id":"o","confirmed_at":"2026-12-02T00:00:00Z"}`)
			return
		}
		if r.Method != http.MethodPost || r.URL.Path != "/v1/payments" || r.Header.Get("Authorization") != "Bearer sk_test" ||
			!strings.HasPrefix(r.Header.Get("Idempotency-Key"), "checkout-order-") || r.Header.Get("Stampede-Admission") == "" {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		payments.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"id":"3f1c1c9e-3c48-4b8e-9d7a-4d1b2f9a0c11","status":"APPROVED"}`)
	}))
	defer payStub.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The waiting room's keys, served where a waiting room serves them.
	signer, err := waitroom.NewAdmissionSigner(waitroom.KeySpec{Secret: []byte("serve checkout test: the waiting room's secret"), Epoch: "1"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var jwksFetches atomic.Int32
	wr := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/.well-known/jwks.json" {
			http.NotFound(w, r)
			return
		}
		jwksFetches.Add(1)
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(signer.JWKS())
	}))
	defer wr.Close()
	adm, err := signer.Sign(protocol.AdmissionClaims{Room: "concert", User: "u1", Seq: 1, Expires: time.Now().Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	const admin = "0123456789abcdef0123"
	errOut, done := runCheckoutCmd(ctx, "--http", "127.0.0.1:0", "--pay", payStub.URL, "--pay-key", "sk_test",
		"--admin-token", admin, "--sqlite", filepath.Join(t.TempDir(), "checkout.db"), "--postgres", "",
		"--waitroom", "http://127.0.0.1:1,"+wr.URL, "--room", "concert")
	base := "http://" + listeningAddr(t, errOut)
	hc := apitest.New(t, api.OpenAPI()).Client(t)
	send := func(method, path, body string, headers ...string) (*http.Response, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Set(headers[i], headers[i+1])
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		json.NewDecoder(resp.Body).Decode(&m)
		return resp, m
	}
	if resp, m := send("POST", "/v1/events/show", `{"seats":2,"price":500,"currency":"USD"}`, "Authorization", "Bearer "+admin); resp.StatusCode != 201 {
		t.Fatalf("create = %d %v", resp.StatusCode, m)
	}
	// Headers that did not come through the gate: a forged token, and a
	// real one named for another user.
	forged := strings.Join(strings.Split(adm, ".")[:2], ".") + ".c2lnbmF0dXJl"
	if resp, m := send("POST", "/v1/events/show/holds", `{"seats":2}`, protocol.HeaderUser, "u1", protocol.HeaderAdmission, forged); resp.StatusCode != 401 ||
		m["field"] != protocol.HeaderAdmission {
		t.Fatalf("hold with a forged token = %d %v; want 401 naming %s", resp.StatusCode, m, protocol.HeaderAdmission)
	}
	if resp, m := send("POST", "/v1/events/show/holds", `{"seats":2}`, protocol.HeaderUser, "u2", protocol.HeaderAdmission, adm); resp.StatusCode != 403 ||
		m["field"] != protocol.HeaderUser {
		t.Fatalf("hold with another user's token = %d %v; want 403 naming %s", resp.StatusCode, m, protocol.HeaderUser)
	}
	resp, h := send("POST", "/v1/events/show/holds", `{"seats":2}`, protocol.HeaderUser, "u1", protocol.HeaderAdmission, adm)
	if resp.StatusCode != 201 {
		t.Fatalf("hold = %d %v", resp.StatusCode, h)
	}
	resp, o := send("POST", "/v1/holds/"+h["id"].(string)+"/purchase", "", protocol.HeaderUser, "u1", protocol.HeaderAdmission, adm)
	if resp.StatusCode != 200 || o["status"] != "paid" || resp.Header.Get(protocol.HeaderRelease) != "done" || payments.Load() != 1 {
		t.Fatalf("purchase = %d %v release=%q payments=%d", resp.StatusCode, o, resp.Header.Get(protocol.HeaderRelease), payments.Load())
	}
	if resp, e := send("GET", "/v1/events/show", ""); e["sold"] != 2.0 || e["seats_left"] != 0.0 {
		t.Fatalf("event = %d %v", resp.StatusCode, e)
	}
	if n := jwksFetches.Load(); n < 1 || n > 2 {
		t.Errorf("the waiting room's keys were fetched %d times, want once (twice: the forged token's refetch)", n)
	}
	if resp, m := send("GET", "/readyz", ""); resp.StatusCode != 200 {
		t.Fatalf("/readyz = %d %v", resp.StatusCode, m)
	}
	mresp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	for _, want := range []string{`stampede_checkout_orders_total{status="paid"} 1`, `stampede_checkout_holds_total{result="held"} 1`} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve checkout: %v\n%s", err, errOut.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve checkout did not stop")
	}
}
