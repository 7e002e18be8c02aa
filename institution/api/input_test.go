package api

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/institution"
	"github.com/stampede-lab/stampede/internal/httpapi"
)

// TestBadInputIsA4xxNamingTheField sends every kind of client mistake and
// checks the answer: the right 4xx, a problem+json body (the fixture's
// client validates it against the description), and the field (or the
// problem) named — never a 5xx.
func TestBadInputIsA4xxNamingTheField(t *testing.T) {
	const ct = "application/json"
	big := `{"external_key":"` + strings.Repeat("k", 5000) + `","amount":1,"currency":"KRW"}`
	cases := []struct {
		name        string
		method      string
		path        string
		token       string
		contentType string
		body        string
		status      int
		code        institution.Code
		field       string // the error's "field", if it names one
		mention     string // what the message must mention
	}{
		{"malformed JSON", "POST", "/v1/approvals", "", ct, `{"external_key":`, 400, stampede.Invalid, "", "malformed JSON"},
		{"not an object", "POST", "/v1/approvals", "", ct, `["k",1,"KRW"]`, 400, stampede.Invalid, "", `"external_key"`},
		{"empty body", "POST", "/v1/approvals", "", ct, ``, 400, stampede.Invalid, "", "empty"},
		{"null body", "POST", "/v1/approvals", "", ct, `null`, 400, stampede.Invalid, "", "JSON object"},
		{"trailing data", "POST", "/v1/approvals", "", ct, `{"external_key":"k","amount":1,"currency":"KRW"} {}`, 400, stampede.Invalid, "", "trailing"},
		{"unknown field", "POST", "/v1/approvals", "", ct, `{"external_key":"k","amount":1,"currency":"KRW","merchant":"m"}`, 400, stampede.Invalid, "merchant", "merchant"},
		{"missing external_key", "POST", "/v1/approvals", "", ct, `{"amount":1,"currency":"KRW"}`, 400, stampede.Invalid, "external_key", "required"},
		{"null external_key", "POST", "/v1/approvals", "", ct, `{"external_key":null,"amount":1,"currency":"KRW"}`, 400, stampede.Invalid, "external_key", "required"},
		{"empty external_key", "POST", "/v1/approvals", "", ct, `{"external_key":"","amount":1,"currency":"KRW"}`, 400, stampede.Invalid, "external_key", "empty"},
		{"external_key with a slash", "POST", "/v1/approvals", "", ct, `{"external_key":"a/b","amount":1,"currency":"KRW"}`, 400, stampede.Invalid, "external_key", "letters"},
		{"external_key too long", "POST", "/v1/approvals", "", ct, `{"external_key":"` + strings.Repeat("k", 129) + `","amount":1,"currency":"KRW"}`, 400, stampede.Invalid, "external_key", "128"},
		{"external_key a number", "POST", "/v1/approvals", "", ct, `{"external_key":7,"amount":1,"currency":"KRW"}`, 400, stampede.Invalid, "external_key", "string"},
		{"missing amount", "POST", "/v1/approvals", "", ct, `{"external_key":"k","currency":"KRW"}`, 400, stampede.Invalid, "amount", "required"},
		{"zero amount", "POST", "/v1/approvals", "", ct, `{"external_key":"k","amount":0,"currency":"KRW"}`, 400, stampede.Invalid, "amount", "between 1"},
		{"negative amount", "POST", "/v1/approvals", "", ct, `{"external_key":"k","amount":-5,"currency":"KRW"}`, 400, stampede.Invalid, "amount", "between 1"},
		{"amount over int64", "POST", "/v1/approvals", "", ct, `{"external_key":"k","amount":99999999999999999999,"currency":"KRW"}`, 400, stampede.Invalid, "amount", "whole number"},
		{"amount over MaxAmount", "POST", "/v1/approvals", "", ct, `{"external_key":"k","amount":9007199254740992,"currency":"KRW"}`, 400, stampede.Invalid, "amount", "9007199254740991"},
		{"fractional amount", "POST", "/v1/approvals", "", ct, `{"external_key":"k","amount":1.5,"currency":"KRW"}`, 400, stampede.Invalid, "amount", "whole number"},
		{"exponent amount", "POST", "/v1/approvals", "", ct, `{"external_key":"k","amount":1e3,"currency":"KRW"}`, 400, stampede.Invalid, "amount", "whole number"},
		{"amount a string", "POST", "/v1/approvals", "", ct, `{"external_key":"k","amount":"100","currency":"KRW"}`, 400, stampede.Invalid, "amount", "whole number"},
		{"missing currency", "POST", "/v1/approvals", "", ct, `{"external_key":"k","amount":1}`, 400, stampede.Invalid, "currency", "required"},
		{"lower-case currency", "POST", "/v1/approvals", "", ct, `{"external_key":"k","amount":1,"currency":"krw"}`, 400, stampede.Invalid, "currency", `"KRW"`},
		{"unknown currency", "POST", "/v1/approvals", "", ct, `{"external_key":"k","amount":1,"currency":"XYZ"}`, 400, stampede.Invalid, "currency", "XYZ"},
		{"oversized body", "POST", "/v1/approvals", "", ct, big, 413, stampede.TooLarge, "", "4096"},
		{"no content type", "POST", "/v1/approvals", "", "", `{"external_key":"k","amount":1,"currency":"KRW"}`, 415, stampede.Unsupported, "", "Content-Type"},
		{"form content type", "POST", "/v1/approvals", "", "application/x-www-form-urlencoded", `external_key=k`, 415, stampede.Unsupported, "", "Content-Type"},
		{"status: bad key", "GET", "/v1/approvals/bad%20key", "", "", "", 400, stampede.Invalid, "external_key", "letters"},
		{"behavior: bad mode", "PUT", "/admin/behavior", testToken, ct, `{"mode":"FAST"}`, 400, stampede.Invalid, "mode", "HANG_BEFORE_PROCESSING"},
		{"behavior: mode a number", "PUT", "/admin/behavior", testToken, ct, `{"mode":3}`, 400, stampede.Invalid, "mode", "string"},
		{"behavior: negative hang_ms", "PUT", "/admin/behavior", testToken, ct, `{"hang_ms":-1}`, 400, stampede.Invalid, "hang_ms", "between 0"},
		{"behavior: huge hang_ms", "PUT", "/admin/behavior", testToken, ct, `{"hang_ms":600001}`, 400, stampede.Invalid, "hang_ms", "600000"},
		{"behavior: hang_ms a string", "PUT", "/admin/behavior", testToken, ct, `{"hang_ms":"8s"}`, 400, stampede.Invalid, "hang_ms", "whole number"},
		{"behavior: idempotent a string", "PUT", "/admin/behavior", testToken, ct, `{"idempotent":"yes"}`, 400, stampede.Invalid, "idempotent", "true or false"},
		{"behavior: bad status_api", "PUT", "/admin/behavior", testToken, ct, `{"status_api":"SIDEWAYS"}`, 400, stampede.Invalid, "status_api", `"UP"`},
		{"behavior: unknown field", "PUT", "/admin/behavior", testToken, ct, `{"mode":"NORMAL","hang":5}`, 400, stampede.Invalid, "hang", "allowed"},
		{"behavior: malformed", "PUT", "/admin/behavior", testToken, ct, `{"mode":`, 400, stampede.Invalid, "", "malformed"},
		{"behavior: bad admin token", "PUT", "/admin/behavior", "not-the-token-at-all", ct, `{"mode":"ERROR"}`, 401, stampede.Unauthorized, "", "admin token"},
		{"behavior: no admin token", "PUT", "/admin/behavior", "", ct, `{"mode":"ERROR"}`, 401, stampede.Unauthorized, "", "Bearer"},
		{"reset: bad admin token", "POST", "/admin/reset", "not-the-token-at-all", "", "", 401, stampede.Unauthorized, "", "admin token"},
		{"arrivals: no admin token", "GET", "/admin/arrivals", "", "", "", 401, stampede.Unauthorized, "", "Bearer"},
	}
	// Validation comes before the mode: a client's mistake is a 4xx even
	// while the institution is set to fail.
	for _, mode := range []institution.Mode{institution.ModeNormal, institution.ModeError, institution.ModeHangBefore} {
		f := newFixture(t, nil)
		f.setBehavior(t, mode, 60_000, true)
		for _, tc := range cases {
			code, body := do(t, f, tc.method, tc.path, tc.token, tc.contentType, tc.body)
			var got httpapi.Problem
			if err := json.Unmarshal([]byte(body), &got); err != nil {
				t.Errorf("%s/%s: body is not JSON: %s", mode, tc.name, body)
				continue
			}
			if code != tc.status || got.Status != code || got.Code != tc.code || got.Field != tc.field ||
				!strings.Contains(got.Detail, tc.mention) || (tc.field != "" && !strings.Contains(got.Detail, tc.field)) {
				t.Errorf("%s/%s: %d %s\nwant %d, code %s, field %q, a message mentioning %q", mode, tc.name, code, body, tc.status, tc.code, tc.field, tc.mention)
			}
		}
		if code, _ := do(t, f, http.MethodPut, "/admin/behavior", "not-the-token-at-all", "application/json", `{"mode":"NORMAL"}`); code != 401 {
			t.Errorf("%s: a bad token changed nothing but answered %d", mode, code)
		}
		if b := f.srv.Behavior(); b.Mode != mode {
			t.Errorf("%s: bad input changed the behaviour to %+v", mode, b)
		}
		if l := f.srv.Ledger(); l.Keys != 0 {
			t.Errorf("%s: bad input was recorded: %+v", mode, l)
		}
		if f.srv.Hung() != 0 {
			t.Errorf("%s: bad input was held", mode)
		}
	}
}
