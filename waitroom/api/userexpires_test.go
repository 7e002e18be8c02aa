package api_test

import (
	"net/http"
	"testing"
	"time"
)

// TestSignedJoinExpiryIsBounded: a site's signature for a user id valid
// far in the future (a leaked one would be a pass for ever) is refused
// naming user_expires; one for the next hour joins.
func TestSignedJoinExpiryIsBounded(t *testing.T) {
	e := strictEnv(t, miniBackend(t))
	room := e.newRoom(t, `{"capacity":1}`)
	tickets := "/v1/rooms/" + room + "/tickets"
	for _, exp := range []time.Time{time.Unix(99999999999, 0), time.Now().Add(25 * time.Hour)} {
		a := e.do(t, req{method: "POST", path: tickets, body: signedJoin(room, "far-"+randomName(), exp)})
		if a.status != http.StatusBadRequest || a.str("field") != "user_expires" {
			t.Errorf("user_expires %d: %d %s, want 400 naming user_expires", exp.Unix(), a.status, a.raw)
		}
	}
	e.must(t, http.StatusCreated, req{method: "POST", path: tickets, body: signedJoin(room, "near-"+randomName(), time.Now().Add(time.Hour))})
}
