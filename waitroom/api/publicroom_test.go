package api_test

import (
	"net/http"
	"testing"
)

// TestPublicRoomViewHidesTheConfiguration: without the admin token GET
// /v1/rooms/{room} shows what the waiting page needs and nothing of the
// room's configuration or totals; with it, everything; with a wrong
// token, 401.
func TestPublicRoomViewHidesTheConfiguration(t *testing.T) {
	e := newEnv(t, miniBackend(t), true)
	room := e.newRoom(t, `{"capacity":3,"template":{"title":"Secret sale"},"closed_message":"later"}`)
	path := "/v1/rooms/" + room
	pub := e.must(t, http.StatusOK, req{method: "GET", path: path})
	for _, k := range []string{"config", "joined_total", "admitted_total", "away"} {
		if _, ok := pub.json[k]; ok {
			t.Errorf("the public view shows %q: %s", k, pub.raw)
		}
	}
	for _, k := range []string{"room", "capacity", "waiting", "active", "paused", "closed", "opens_at", "pow_difficulty"} {
		if _, ok := pub.json[k]; !ok {
			t.Errorf("the public view lacks %q, which the waiting page reads: %s", k, pub.raw)
		}
	}
	adm := e.must(t, http.StatusOK, req{method: "GET", path: path, auth: "Bearer " + adminToken})
	if cfg, _ := adm.json["config"].(map[string]any); cfg == nil || cfg["capacity"] != 3.0 {
		t.Errorf("the admin view = %s, want the configuration", adm.raw)
	}
	if a := e.do(t, req{method: "GET", path: path, auth: "Bearer wrong"}); a.status != http.StatusUnauthorized {
		t.Errorf("a wrong admin token = %d, want 401", a.status)
	}
}
