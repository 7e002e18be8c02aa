package api_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

// TestTicketTokenNamesOneJoin: a ticket token is for one join of its
// user. Once that ticket is released, the token reads nothing of the
// user's next ticket, releases nothing of it, hands nothing of it to a
// gate, and cannot join again as the (signed) user without user_sig; the
// new join's own token does all that. In a room of one queue and in a
// sharded one, waiting and admitted.
func TestTicketTokenNamesOneJoin(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		e := strictEnv(t, b)
		for _, shards := range []int{1, 3} {
			t.Run(fmt.Sprintf("queue_shards=%d", shards), func(t *testing.T) {
				room := e.newRoom(t, fmt.Sprintf(`{"capacity":1,"admit_interval_ms":60000,"queue_shards":%d}`, shards))
				tickets := "/v1/rooms/" + room + "/tickets"
				exp := time.Now().Add(time.Hour)
				first := e.must(t, http.StatusCreated, req{method: "POST", path: tickets, body: signedJoin(room, "victim", exp)})
				old := "Bearer " + first.str("ticket_token")
				admitPass(t, e, room)
				e.must(t, http.StatusOK, req{method: "GET", path: ticketPath(room, "victim"), auth: old})
				e.must(t, http.StatusOK, req{method: "DELETE", path: ticketPath(room, "victim"), auth: old})

				// The old token cannot start a new join without user_sig.
				for _, body := range []string{`{}`, `{"user_id":"victim"}`} {
					if a := e.do(t, req{method: "POST", path: tickets, body: body, auth: old}); a.status != http.StatusForbidden || a.str("field") != "Authorization" {
						t.Errorf("a join with the released ticket's token (%s) = %d %s, want 403 naming Authorization", body, a.status, a.raw)
					}
				}
				st := e.must(t, http.StatusOK, req{method: "GET", path: "/v1/rooms/" + room, auth: "Bearer " + adminToken})
				if st.json["waiting"] != 0.0 || st.json["active"] != 0.0 {
					t.Fatalf("the refused joins left a ticket behind: %s", st.raw)
				}

				// The user joins again, signed: a new ticket, a new token.
				second := e.must(t, http.StatusCreated, req{method: "POST", path: tickets, body: signedJoin(room, "victim", exp)})
				fresh := "Bearer " + second.str("ticket_token")
				for _, stage := range []string{"waiting", "admitted"} {
					if stage == "admitted" {
						admitPass(t, e, room)
					}
					if a := e.do(t, req{method: "GET", path: ticketPath(room, "victim"), auth: old}); a.status != http.StatusForbidden || a.str("admission_token") != "" {
						t.Errorf("%s: reading the new ticket with the old token = %d %s, want 403", stage, a.status, a.raw)
					}
					if a := e.do(t, req{method: "DELETE", path: ticketPath(room, "victim"), auth: old}); a.status != http.StatusForbidden {
						t.Errorf("%s: releasing the new ticket with the old token = %d %s, want 403", stage, a.status, a.raw)
					}
					if a := e.do(t, req{method: "POST", path: tickets, body: `{}`, auth: old}); a.status != http.StatusForbidden || a.str("ticket_token") != "" {
						t.Errorf("%s: joining with the old token = %d %s, want 403", stage, a.status, a.raw)
					}
					if a := e.must(t, http.StatusOK, req{method: "GET", path: ticketPath(room, "victim"), auth: fresh}); a.str("state") != stage {
						t.Fatalf("the new ticket, read with its own token = %s, want %s", a.raw, stage)
					}
					if a := e.must(t, http.StatusOK, req{method: "POST", path: tickets, body: `{}`, auth: fresh}); a.str("state") != stage || a.str("ticket_token") == "" {
						t.Fatalf("a join with the new ticket's own token = %s, want its ticket back", a.raw)
					}
				}
				if a := e.must(t, http.StatusOK, req{method: "GET", path: ticketPath(room, "victim"), auth: fresh}); a.str("admission_token") == "" {
					t.Fatalf("the admitted ticket, read with its own token, has no admission token: %s", a.raw)
				}
				if a := e.must(t, http.StatusOK, req{method: "DELETE", path: ticketPath(room, "victim"), auth: fresh}); a.str("state") != "released" {
					t.Errorf("the new ticket's own token releases it: %s", a.raw)
				}
			})
		}
	})
}
