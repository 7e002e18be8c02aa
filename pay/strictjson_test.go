package pay_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stampede-lab/stampede/internal/httpapi"
	"github.com/stampede-lab/stampede/pay"
)

// TestPaymentBodyIsReadOneWay: a payment body that two JSON readers could
// read differently is refused before anything is charged: a name twice
// or in two cases (encoding/json keeps the last and ignores case, a
// validator in front may read the first), bytes that are not UTF-8 and
// escaped lone surrogates (both read as U+FFFD, so two raw order ids
// would collide), and a body not declared as UTF-8 JSON.
func TestPaymentBodyIsReadOneWay(t *testing.T) {
	r := newRig(t, nil)
	m := `"merchant_id":"` + merchant + `"`
	cases := []struct {
		name, ct, body string
		code           int
	}{
		{"duplicate name", "application/json", `{` + m + `,"order_id":"s1","amount":1,"amount":100000000,"currency":"KRW"}`, 400},
		{"case variant", "application/json", `{` + m + `,"order_id":"s2","amount":1,"AMOUNT":100000000,"currency":"KRW"}`, 400},
		{"name in another case", "application/json", `{` + m + `,"order_id":"s3","Amount":1,"currency":"KRW"}`, 400},
		{"invalid UTF-8", "application/json", `{` + m + `,"order_id":"s5` + "\xff\xfe" + `","amount":1,"currency":"KRW"}`, 400},
		{"lone high surrogate", "application/json", `{` + m + `,"order_id":"s6\ud800","amount":1,"currency":"KRW"}`, 400},
		{"lone low surrogate", "application/json", `{` + m + `,"order_id":"s7\udc00x","amount":1,"currency":"KRW"}`, 400},
		{"reversed pair", "application/json", `{` + m + `,"order_id":"s8\udc00\ud800","amount":1,"currency":"KRW"}`, 400},
		{"no content type", "", payment("s9", 1), 415},
		{"latin1", "application/json; charset=latin1", payment("s10", 1), 415},
		{"other parameter", "application/json; profile=x", payment("s11", 1), 415},
		{"charset UTF-8", "application/json; charset=UTF-8", payment("s12", 1), 201},
		{"a real pair", "application/json", `{` + m + `,"order_id":"s13\ud83d\ude00","amount":1,"currency":"KRW"}`, 201},
	}
	for _, tc := range cases {
		req, _ := http.NewRequest(http.MethodPost, r.api.URL+"/v1/payments", strings.NewReader(tc.body))
		if tc.ct != "" {
			req.Header.Set("Content-Type", tc.ct)
		}
		req.Header.Set("Idempotency-Key", pay.NewID())
		resp, body := r.do(t, req)
		if tc.code >= 400 {
			if resp.StatusCode != tc.code || resp.Header.Get("Content-Type") != httpapi.ProblemContentType {
				t.Errorf("%s: %d %s %v, want a %d problem", tc.name, resp.StatusCode, resp.Header.Get("Content-Type"), body, tc.code)
			}
			continue
		}
		if resp.StatusCode != tc.code || body["status"] != "APPROVED" {
			t.Errorf("%s: %d %v, want %d APPROVED", tc.name, resp.StatusCode, body, tc.code)
		}
	}
}
