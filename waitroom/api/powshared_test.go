package api_test

import (
	"net/http"
	"testing"
)

// TestProofOfWorkSpentAcrossInstances: two instances on one store; a
// solution that joined through the first is refused (403, naming the
// challenge) by the second, instead of joining once per instance.
func TestProofOfWorkSpentAcrossInstances(t *testing.T) {
	b := miniBackend(t)
	one, two := newEnv(t, b, true), newEnv(t, b, true)
	room := one.newRoom(t, `{"capacity":5,"pow_difficulty":8}`)
	ch := one.must(t, http.StatusOK, req{method: "GET", path: "/v1/rooms/" + room + "/challenge"}).str("challenge")
	sol := solve(t, ch, 8)
	body := `{"challenge":"` + ch + `","solution":"` + sol + `"}`
	one.must(t, http.StatusCreated, req{method: "POST", path: "/v1/rooms/" + room + "/tickets", body: body})
	if a := two.do(t, req{method: "POST", path: "/v1/rooms/" + room + "/tickets", body: body}); a.status != http.StatusForbidden || a.str("field") != "challenge" {
		t.Errorf("the same solution through a second instance = %d %s, want 403 naming challenge", a.status, a.raw)
	}
}
