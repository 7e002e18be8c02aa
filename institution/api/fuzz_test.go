package api

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stampede-lab/stampede/institution"
	"github.com/stampede-lab/stampede/internal/httpapi"
	"github.com/stampede-lab/stampede/internal/httpapi/apitest"
)

// FuzzApprovalBody posts arbitrary bodies under every mode: the answer is
// never a 5xx except the mode's own (500 for ERROR, 504 for a hang that
// ended), a 200 is a well-formed result, every error is a problem, every
// answer matches the OpenAPI description, and an idempotent institution
// never charges a key twice.
func FuzzApprovalBody(f *testing.F) {
	for _, seed := range []string{
		`{"external_key":"k1","amount":1000,"currency":"KRW"}`,
		`{"external_key":"k1","amount":1001,"currency":"KRW"}`,
		`{"external_key":"k2","amount":9007199254740991,"currency":"USD"}`,
		`{"external_key":"k","amount":-1,"currency":"EUR"}`,
		`{"external_key":"k","amount":1e400,"currency":"JPY"}`,
		`{"external_key":"","amount":1,"currency":"GBP"}`,
		`{"external_key":"a/b","amount":1,"currency":"KRW"}`,
		`{"external_key":"k","amount":1,"currency":"KRW","x":1}`,
		`{"external_key":"k","amount":1,"currency":"KRW"}{"external_key":"k"}`,
		`{"external_key":"\u0000","amount":1,"currency":"KRW"}`,
		`{"amount":null}`,
		`[]`, `null`, `"s"`, `{`, ``, "\xff\xfe",
	} {
		for mode := range byte(len(institution.Modes)) {
			f.Add([]byte(seed), mode)
		}
	}
	cfg := DefaultConfig()
	cfg.AdminToken = testToken
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := New(cfg)
	if err != nil {
		f.Fatal(err)
	}
	defer srv.Close()
	spec := apitest.New(f, OpenAPI())
	f.Fuzz(func(t *testing.T, body []byte, modeSel byte) {
		b := institution.DefaultBehavior()
		b.Mode, b.HangMS = institution.Modes[int(modeSel)%len(institution.Modes)], 0
		if err := srv.SetBehavior(b); err != nil {
			t.Fatal(err)
		}
		r := httptest.NewRequest(http.MethodPost, "/v1/approvals", bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, r)
		code := w.Code
		switch {
		case code == http.StatusInternalServerError && b.Mode == institution.ModeError:
		case code == http.StatusGatewayTimeout && b.Mode == institution.ModeHangBefore:
		case code >= 500:
			t.Fatalf("mode %s, body %q: %d %s", b.Mode, body, code, w.Body)
		case code == http.StatusOK:
			var res institution.ApprovalResult
			if err := json.Unmarshal(w.Body.Bytes(), &res); err != nil || (res.Status != institution.StatusApproved && res.Status != institution.StatusDeclined) {
				t.Fatalf("mode %s, body %q: a 200 that is no result: %s", b.Mode, body, w.Body)
			}
			charges, ok := srv.Ledger().ChargesByKey[res.ExternalKey]
			if !ok {
				charges = -1
			}
			if charges < 0 || charges > 1 {
				t.Fatalf("body %q: key %q has %d charges on an idempotent institution", body, res.ExternalKey, charges)
			}
		}
		if err := spec.Check(r, w.Result(), w.Body.Bytes()); err != nil {
			t.Fatalf("mode %s, body %q: %v", b.Mode, body, err)
		}
		if code != http.StatusOK {
			var p httpapi.Problem
			if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || p.Code == "" || p.Detail == "" || p.Status != code {
				t.Fatalf("mode %s, body %q: %d with a body that is not a problem: %s", b.Mode, body, code, w.Body)
			}
		}
		if srv.Hung() != 0 {
			t.Fatalf("a request is still counted as held")
		}
	})
}
