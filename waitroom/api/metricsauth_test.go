package api_test

import (
	"bytes"
	"net/http"
	"slices"
	"testing"

	"github.com/stampede-lab/stampede/waitroom/api"
)

// metricsToken is the scrape-only token of TestMetricsNeedAToken.
const metricsToken = "test-metrics-token-0123456789"

// TestMetricsNeedAToken: /metrics names every room, one not announced
// anywhere too, so an anonymous scrape, or one with a wrong token, gets
// 401 and no room name; the admin token and the metrics token read it;
// the metrics token configures nothing; liveness and readiness stay open.
func TestMetricsNeedAToken(t *testing.T) {
	e := newEnvWith(t, miniBackend(t), true, func(c *api.Config) { c.MetricsToken = metricsToken })
	room := e.newRoom(t, `{"capacity":3}`) // created by the admin, linked from nowhere
	waitFor(t, "the service to find the room", func() bool { return slices.Contains(e.srv.Service().Rooms(), room) })

	for _, auth := range []string{"", "Bearer wrong-token-0123456789", "Basic " + metricsToken} {
		a := e.do(t, req{method: "GET", path: "/metrics", auth: auth})
		if a.status != http.StatusUnauthorized || bytes.Contains(a.raw, []byte(room)) || bytes.Contains(a.raw, []byte("stampede_waitroom_")) {
			t.Errorf("GET /metrics with Authorization %q = %d %.300s, want 401 naming no room", auth, a.status, a.raw)
		}
	}
	want := []byte(`stampede_waitroom_room_capacity{room="` + room + `"} 3`)
	for _, token := range []string{adminToken, metricsToken} {
		if m := e.must(t, http.StatusOK, req{method: "GET", path: "/metrics", auth: "Bearer " + token}); !bytes.Contains(m.raw, want) {
			t.Errorf("GET /metrics with a token lacks %s", want)
		}
	}
	if a := e.do(t, req{method: "PATCH", path: "/v1/rooms/" + room, body: `{"paused":true}`,
		auth: "Bearer " + metricsToken}); a.status != http.StatusUnauthorized {
		t.Errorf("PATCH with the metrics token = %d %s, want 401: it reads metrics only", a.status, a.raw)
	}
	e.must(t, http.StatusOK, req{method: "GET", path: "/healthz"})
	e.must(t, http.StatusOK, req{method: "GET", path: "/readyz"})
}

