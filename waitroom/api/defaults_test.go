package api_test

import (
	"context"
	"net/http"
	"testing"
	"time"
)

// TestDefaultRoomFreesClosedTabs: a room created with capacity alone
// abandons and checks arrival by default, so that closed tabs hold
// neither a slot beyond the arrival window nor a place beyond twice the
// abandonment window. The store's clock is moved, so this runs on the
// embedded server only (a real Redis's TIME cannot be moved).
func TestDefaultRoomFreesClosedTabs(t *testing.T) {
	b := miniBackend(t)
	now := time.Now()
	b.mini.SetTime(now)
	e := newEnv(t, b, false)
	admin := "Bearer " + adminToken
	room := putBare(t, e, `{"capacity":1}`)
	cfg := e.must(t, http.StatusOK, req{method: "GET", path: "/v1/rooms/" + room, auth: admin}).json["config"].(map[string]any)
	if cfg["abandon_after_seconds"] != 120.0 || cfg["arrival_seconds"] != 60.0 {
		t.Fatalf("a room of defaults: abandon_after_seconds %v, arrival_seconds %v; want 120 and 60", cfg["abandon_after_seconds"], cfg["arrival_seconds"])
	}
	// Three tabs join, then close: nobody reads a ticket again.
	for _, u := range []string{"a", "b", "c"} {
		join(t, e, room, u)
	}
	pass := func(at time.Duration) map[string]any {
		t.Helper()
		b.mini.SetTime(now.Add(at))
		if _, err := e.store.Admit(context.Background(), room); err != nil {
			t.Fatal(err)
		}
		return e.must(t, http.StatusOK, req{method: "GET", path: "/v1/rooms/" + room, auth: admin}).json
	}
	pass(time.Second) // a holds the slot (or the service's own pass let them in)
	st := pass(62 * time.Second)
	if st["no_show_total"] != 1.0 || st["active"] != 1.0 {
		t.Fatalf("a minute after a's admission: %v no-shows, %v active; want a's slot freed and b admitted", st["no_show_total"], st["active"])
	}
	st = pass(124 * time.Second)
	if st["no_show_total"] != 2.0 || st["away"] != 1.0 || st["waiting"] != 0.0 {
		t.Fatalf("two minutes on: %v no-shows, %v away, %v waiting; want b's slot freed and c's place set aside", st["no_show_total"], st["away"], st["waiting"])
	}
	st = pass(250 * time.Second)
	if st["abandoned_total"] != 1.0 || st["away"] != 0.0 {
		t.Fatalf("four minutes on: %v abandoned, %v away; want c's place given up", st["abandoned_total"], st["away"])
	}
}

// TestDefaultArrivalFollowsAShortLease: a room whose lease is shorter
// than the default arrival window, given no window of its own, is
// created (the window is the lease), on PUT and on PATCH.
func TestDefaultArrivalFollowsAShortLease(t *testing.T) {
	e := newEnv(t, miniBackend(t), false)
	admin := "Bearer " + adminToken
	room := putBare(t, e, `{"capacity":1,"lease_seconds":20}`)
	cfg := e.must(t, http.StatusOK, req{method: "GET", path: "/v1/rooms/" + room, auth: admin}).json["config"].(map[string]any)
	if cfg["arrival_seconds"] != 20.0 {
		t.Errorf("lease 20 s: arrival_seconds %v, want 20", cfg["arrival_seconds"])
	}
	other := putBare(t, e, `{"capacity":1}`)
	p := e.must(t, http.StatusOK, req{method: "PATCH", path: "/v1/rooms/" + other, body: `{"lease_seconds":5}`, auth: admin})
	if p.json["arrival_seconds"] != 5.0 {
		t.Errorf("PATCH lease 5 s: %s, want arrival_seconds 5", p.raw)
	}
}

// putBare creates a room (on an embedded server of its own) with body as
// it is: every field body does not name takes its default.
func putBare(t *testing.T, e *env, body string) string {
	t.Helper()
	room := "r-" + randomName()
	e.must(t, http.StatusOK, req{method: "PUT", path: "/v1/rooms/" + room, body: body, auth: "Bearer " + adminToken})
	return room
}
