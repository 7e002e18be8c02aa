package pay_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	instclient "github.com/stampede-lab/stampede/institution/client"
	"github.com/stampede-lab/stampede/pay"
	"github.com/stampede-lab/stampede/pay/institutionclient"
	"github.com/stampede-lab/stampede/pay/sqlite"
	"github.com/stampede-lab/stampede/protocol"
)

// admissions answers CheckAdmission from a table of tokens; an unknown
// token is the waiting room not answering.
type admissions map[string]pay.Admission

func (a admissions) CheckAdmission(_ context.Context, token string) (pay.Admission, error) {
	if ad, ok := a[token]; ok {
		return ad, nil
	}
	return pay.Admission{}, errors.New("waiting room unreachable")
}

// TestRequireAdmission: with HandlerConfig.Admissions, a new payment needs
// an admission that holds its slot (401 without one, 403 when not held,
// both naming the header; 503 when the waiting room cannot say), and a
// retry of a known key passes without one.
func TestRequireAdmission(t *testing.T) {
	its := newInstitution(t)
	store, err := sqlite.Open(filepath.Join(t.TempDir(), "pay.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	key := pay.NewAPIKey()
	if err := store.CreateMerchant(context.Background(), pay.Merchant{ID: pay.NewID(), Name: "m", KeyHash: pay.HashAPIKey(key), CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	svc, err := pay.NewService(store, institutionclient.New(instclient.NewClient(its.URL, its.Client())), pay.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	hcfg := pay.DefaultHandlerConfig()
	hcfg.Admissions = admissions{"held": {Held: true}, "gone": {Held: false, Reason: "expired"}}
	h, err := pay.NewHandler(svc, store, hcfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	api := httptest.NewServer(h)
	t.Cleanup(api.Close)

	post := func(idem, admission, order string) (int, map[string]any) {
		body, _ := json.Marshal(map[string]any{"order_id": order, "amount": 1000, "currency": "KRW"})
		req, _ := http.NewRequest(http.MethodPost, api.URL+"/v1/payments", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", idem)
		if admission != "" {
			req.Header.Set(protocol.HeaderAdmission, admission)
		}
		resp, err := api.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	for _, c := range []struct {
		name, admission string
		want            int
		field           string
	}{
		{"missing", "", http.StatusUnauthorized, protocol.HeaderAdmission},
		{"not held", "gone", http.StatusForbidden, protocol.HeaderAdmission},
		{"waiting room down", "unknown", http.StatusServiceUnavailable, ""},
	} {
		code, body := post("k-"+c.name, c.admission, "o-"+c.name)
		if code != c.want || (c.field != "" && body["field"] != c.field) {
			t.Errorf("%s: %d %v, want %d naming %q", c.name, code, body, c.want, c.field)
		}
	}
	if code, body := post("k-ok", "held", "o-ok"); code != http.StatusCreated {
		t.Fatalf("held admission: %d %v, want 201", code, body)
	}
	// A retry of the same key after the admission ended replays it.
	if code, body := post("k-ok", "", "o-ok"); code != http.StatusCreated {
		t.Errorf("retry without admission: %d %v, want 201 replayed", code, body)
	}
}
