package api_test

import (
	"net/http"
	"testing"
)

// TestQueueShardsThroughTheAPI: a room created with queue_shards shows it,
// takes joins, keeps it fixed (PATCH to another value is a 400 naming the
// field, to the same value changes nothing), and an out-of-range value is
// a 400 naming the field.
func TestQueueShardsThroughTheAPI(t *testing.T) {
	e := newEnv(t, miniBackend(t), false)
	admin := "Bearer " + adminToken
	room := e.newRoom(t, `{"capacity":1,"admit_interval_ms":60000,"queue_shards":3}`)
	shards := func() float64 {
		t.Helper()
		a := e.must(t, http.StatusOK, req{method: "GET", path: "/v1/rooms/" + room, auth: "Bearer " + adminToken})
		cfg, _ := a.json["config"].(map[string]any)
		n, _ := cfg["queue_shards"].(float64)
		return n
	}
	if n := shards(); n != 3 {
		t.Fatalf("queue_shards = %v, want 3", n)
	}
	for _, u := range []string{"a", "b", "c", "d"} {
		if st := join(t, e, room, u).str("state"); st != "waiting" && st != "admitted" {
			t.Fatalf("join %s: state %q", u, st)
		}
	}
	a := e.must(t, http.StatusBadRequest, req{method: "PATCH", path: "/v1/rooms/" + room, body: `{"queue_shards":4}`, auth: admin})
	if a.str("field") != "queue_shards" {
		t.Fatalf("PATCH queue_shards 4: field %q, want queue_shards\n%s", a.str("field"), a.raw)
	}
	e.must(t, http.StatusOK, req{method: "PATCH", path: "/v1/rooms/" + room, body: `{"queue_shards":3,"capacity":2}`, auth: admin})
	if n := shards(); n != 3 {
		t.Fatalf("after PATCH: queue_shards = %v, want 3", n)
	}
	a = e.must(t, http.StatusBadRequest, req{method: "PUT", path: "/v1/rooms/other", body: roomBody(t, `{"queue_shards":65}`), auth: admin})
	if a.str("field") != "queue_shards" {
		t.Fatalf("PUT queue_shards 65: field %q, want queue_shards\n%s", a.str("field"), a.raw)
	}
}
