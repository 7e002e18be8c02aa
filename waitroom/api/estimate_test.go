package api_test

import (
	"net/http"
	"testing"
	"time"
)

// TestWaitEstimateFromTheFirstAnswer: both slots of a room held on
// 300-second leases and nobody leaving: the next buyer's first answer
// (the join's) already gives an estimate, and it is about five minutes
// (on the room's capacity), not null ("Calculating…") and not "less than
// a minute"; the poll interval follows it.
func TestWaitEstimateFromTheFirstAnswer(t *testing.T) {
	e := newEnv(t, miniBackend(t), true)
	room := e.newRoom(t, `{"capacity":2,"lease_seconds":300}`)
	for _, u := range []string{"a", "b"} {
		join(t, e, room, u)
	}
	waitFor(t, "both slots to be held", func() bool {
		st := e.must(t, http.StatusOK, req{method: "GET", path: "/v1/rooms/" + room})
		return st.json["active"] == 2.0
	})
	time.Sleep(150 * time.Millisecond) // the service's room refresh (every 50 ms here) sees them

	a := join(t, e, room, "c")
	if a.str("state") != "waiting" {
		t.Fatalf("c: %s, want waiting", a.raw)
	}
	eta, _ := a.json["eta_seconds"].(float64)
	low, _ := a.json["eta_low_seconds"].(float64)
	high, _ := a.json["eta_high_seconds"].(float64)
	if a.json["eta_seconds"] == nil || low < 250 || high < low || high > 301 || eta < low || eta > high || a.str("eta_basis") != "capacity" {
		t.Errorf("c's first answer: %s, want an estimate of about 300 s on the room's capacity", a.raw)
	}
}
