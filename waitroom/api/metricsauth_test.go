package api_test

import (
	"bytes"
	"net/http"
	"slices"
	"testing"
	"time"

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

// TestMetricsSalePhase: each room's sale phase is a metric (the alerts
// leave out rooms not open yet), one series per phase, 1 for the room's;
// and every room's invite gauges exist at 0 before any invite is used.
func TestMetricsSalePhase(t *testing.T) {
	e := newEnv(t, miniBackend(t), true)
	open := e.newRoom(t, `{"capacity":3}`)
	later := e.newRoom(t, `{"capacity":3,"opens_at":"`+time.Now().Add(time.Hour).UTC().Format(time.RFC3339)+`"}`)
	waitFor(t, "the service to find the rooms", func() bool {
		rooms := e.srv.Service().Rooms()
		return slices.Contains(rooms, open) && slices.Contains(rooms, later)
	})
	m := e.must(t, http.StatusOK, req{method: "GET", path: "/metrics", auth: "Bearer " + adminToken})
	for _, want := range []string{
		`stampede_waitroom_room_sale_phase{phase="open",room="` + open + `"} 1`,
		`stampede_waitroom_room_sale_phase{phase="before",room="` + open + `"} 0`,
		`stampede_waitroom_room_sale_phase{phase="before",room="` + later + `"} 1`,
		`stampede_waitroom_room_sale_phase{phase="open",room="` + later + `"} 0`,
		`stampede_waitroom_room_sale_phase{phase="between",room="` + later + `"} 0`,
		`stampede_waitroom_room_sale_phase{phase="closed",room="` + later + `"} 0`,
		`stampede_waitroom_room_invites{kind="used",room="` + open + `"} 0`,
		`stampede_waitroom_room_invites{kind="refused",room="` + open + `"} 0`,
		`stampede_waitroom_room_invites{kind="held",room="` + open + `"} 0`,
	} {
		if !bytes.Contains(m.raw, []byte(want)) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
