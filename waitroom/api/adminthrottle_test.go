package api_test

import (
	"net/http"
	"testing"

	"github.com/stampede-lab/stampede/waitroom/api"
)

// TestAdminTokenThrottled: after AdminFailures wrong admin tokens from
// one address, every admin call from it answers 429 with Retry-After,
// the right token included, so that the token cannot be guessed at
// network speed.
func TestAdminTokenThrottled(t *testing.T) {
	e := newEnv(t, miniBackend(t), true)
	for i := range api.AdminFailures {
		if a := e.do(t, req{method: "GET", path: "/v1/rooms", auth: "Bearer wrong-admin-token"}); a.status != http.StatusUnauthorized {
			t.Fatalf("wrong token %d = %d, want 401", i, a.status)
		}
	}
	for _, tok := range []string{"wrong-admin-token", adminToken} {
		a := e.do(t, req{method: "GET", path: "/v1/rooms", auth: "Bearer " + tok})
		if a.status != http.StatusTooManyRequests || a.header.Get("Retry-After") == "" {
			t.Errorf("admin call with %q after %d wrong = %d (Retry-After %q), want 429", tok, api.AdminFailures, a.status, a.header.Get("Retry-After"))
		}
	}
}
