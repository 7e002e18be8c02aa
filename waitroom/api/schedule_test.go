package api_test

import (
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stampede-lab/stampede/waitroom"
)

// inviteKeys is the site's invite key pair of these tests.
var inviteKeys = ed25519.NewKeyFromSeed([]byte("stampede-invite-test-seed-32byte"))

func invitePub() string {
	return waitroom.EncodeInviteKey(inviteKeys.Public().(ed25519.PublicKey))
}

// joinInvite joins room with an invite token (and a ticket token when
// bearer is set).
func joinInvite(t *testing.T, e *env, room, token, bearer string) answer {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"invite": token})
	r := req{method: "POST", path: "/v1/rooms/" + room + "/tickets", body: string(body)}
	if bearer != "" {
		r.auth = "Bearer " + bearer
	}
	return e.do(t, r)
}

// TestInvitesOverHTTP: an invite-only room refuses a join without an
// invite (403 naming invite), a malformed, forged, expired or other room's
// invite (4xx naming invite, never 500); one invite is one place however
// many devices join with it (each gets the ticket token); once the place
// is released the invite is refused (409 invite_used); the admin view
// counts the invites.
func TestInvitesOverHTTP(t *testing.T) {
	e := newEnv(t, miniBackend(t), false)
	room := e.newRoom(t, fmt.Sprintf(`{"capacity":1,"invite_only":true,"invite_key":%q}`, invitePub()))
	now := time.Now()
	good := waitroom.SignInvite(inviteKeys, room, "guest-1", now.Add(time.Hour))
	_, otherKey, _ := ed25519.GenerateKey(nil)
	for _, tc := range []struct {
		name, token string
		status      int
	}{
		{"malformed", "not-a-token", 400},
		{"bad expiry", "guest-1.soon." + good[len(good)-86:], 400},
		{"forged", waitroom.SignInvite(otherKey, room, "guest-1", now.Add(time.Hour)), 401},
		{"other room", waitroom.SignInvite(inviteKeys, "elsewhere", "guest-1", now.Add(time.Hour)), 401},
		{"expired", waitroom.SignInvite(inviteKeys, room, "guest-1", now.Add(-time.Second)), 401},
	} {
		if a := joinInvite(t, e, room, tc.token, ""); a.status != tc.status || a.str("field") != "invite" {
			t.Errorf("%s invite: %d %s, want %d naming invite", tc.name, a.status, a.raw, tc.status)
		}
	}
	if a := e.do(t, req{method: "POST", path: "/v1/rooms/" + room + "/tickets", body: `{}`}); a.status != 403 ||
		a.errCode() != string(waitroom.CodeInviteRequired) || a.str("field") != "invite" {
		t.Fatalf("join without an invite: %d %s, want 403 invite_required naming invite", a.status, a.raw)
	}
	if a := e.do(t, req{method: "POST", path: "/v1/rooms/" + room + "/tickets", body: `{"user_id":"invite-guest-1"}`}); a.status != 403 {
		t.Fatalf("join naming an invite's user id: %d %s, want 403", a.status, a.raw)
	}

	// Two devices, one place.
	first := joinInvite(t, e, room, good, "")
	second := joinInvite(t, e, room, good, "")
	if first.status != 201 || second.status != 200 || first.str("user_id") != "invite-guest-1" ||
		second.str("user_id") != first.str("user_id") || second.str("ticket_token") == "" {
		t.Fatalf("two devices with one invite: %d %s / %d %s; want 201 then 200, the same place, a ticket token each",
			first.status, first.raw, second.status, second.raw)
	}
	user, token := first.str("user_id"), second.str("ticket_token")
	ticket := "/v1/rooms/" + room + "/tickets/" + user
	waitFor(t, "the invited buyer admitted", func() bool {
		return e.must(t, 200, req{method: "GET", path: ticket, auth: "Bearer " + token}).str("state") == "admitted"
	})
	e.must(t, 200, req{method: "DELETE", path: ticket, auth: "Bearer " + token})
	for _, bearer := range []string{"", token} {
		if a := joinInvite(t, e, room, good, bearer); a.status != 409 || a.errCode() != string(waitroom.CodeInviteUsed) || a.str("field") != "invite" {
			t.Fatalf("reused invite (bearer %t): %d %s, want 409 invite_used naming invite", bearer != "", a.status, a.raw)
		}
	}
	a := e.must(t, 200, req{method: "GET", path: "/v1/rooms/" + room, auth: "Bearer " + adminToken})
	if a.json["invites_used_total"] != 1.0 || a.json["invites_refused_total"] != 2.0 || a.json["invites_held"] != 1.0 {
		t.Errorf("admin view: used %v refused %v held %v, want 1, 2, 1", a.json["invites_used_total"], a.json["invites_refused_total"], a.json["invites_held"])
	}
}

// TestScheduleValidationNamesEveryField: a bad schedule is a 400 naming
// every bad member by its path, at once.
func TestScheduleValidationNamesEveryField(t *testing.T) {
	e := newEnv(t, miniBackend(t), false)
	room := e.newRoom(t, `{"capacity":1}`)
	body := `{"closes_at":"2030-01-01T09:00:00Z","schedule":[
	  {"start":"2030-01-01T10:00:00Z","end":"2030-01-01T09:30:00Z","capacity":0},
	  {"start":"2030-01-01T10:00:00Z","capacity":5,"max_admissions_per_minute":-1,"admit_interval_ms":5,"colour":1},
	  {"start":"soon","capacity":"many","invite_only":true}]}`
	a := e.do(t, req{method: "PATCH", path: "/v1/rooms/" + room, body: body, auth: "Bearer " + adminToken})
	var got []string
	if errs, ok := a.json["errors"].([]any); ok {
		for _, x := range errs {
			if m, ok := x.(map[string]any); ok {
				got = append(got, fmt.Sprint(m["field"]))
			}
		}
	}
	want := []string{"schedule[1].colour", "schedule[2].start", "schedule[2].capacity"}
	if a.status != 400 || !slices.Equal(got, want) {
		t.Fatalf("bad schedule (types): %d fields %v, want 400 %v\n%s", a.status, got, want, a.raw)
	}
	body = `{"closes_at":"2030-01-01T09:00:00Z","opens_at":"2029-12-31T00:00:00Z","schedule":[
	  {"start":"2030-01-01T10:00:00Z","end":"2030-01-01T09:30:00Z","capacity":0},
	  {"start":"2030-01-01T10:00:00Z","capacity":5,"max_admissions_per_minute":-1,"admit_interval_ms":5,"invite_only":true}]}`
	a = e.do(t, req{method: "PATCH", path: "/v1/rooms/" + room, body: body, auth: "Bearer " + adminToken})
	got = nil
	if errs, ok := a.json["errors"].([]any); ok {
		for _, x := range errs {
			if m, ok := x.(map[string]any); ok {
				got = append(got, fmt.Sprint(m["field"]))
			}
		}
	}
	want = []string{"closes_at", "opens_at", "schedule[0].end", "schedule[0].capacity", "schedule[1].start",
		"schedule[1].max_admissions_per_minute", "schedule[1].admit_interval_ms", "invite_key"}
	if a.status != 400 || !slices.Equal(got, want) {
		t.Fatalf("bad schedule (values): %d fields %v, want 400 %v\n%s", a.status, got, want, a.raw)
	}
}

// TestScheduleOverHTTP walks a presale window (invited buyers only) into
// the general sale: what the room and a ticket say before, during and
// between the windows, and that the general sale admits a plain join.
func TestScheduleOverHTTP(t *testing.T) {
	e := newEnv(t, miniBackend(t), false)
	now := time.Now().UTC().Truncate(time.Millisecond) // the store keeps milliseconds
	at := func(d time.Duration) string { return now.Add(d).Format(time.RFC3339Nano) }
	room := e.newRoom(t, fmt.Sprintf(`{"capacity":1,"invite_key":%q,"schedule":[
	  {"start":%q,"end":%q,"capacity":1,"invite_only":true},
	  {"start":%q,"capacity":2}]}`, invitePub(), at(-time.Second), at(400*time.Millisecond), at(700*time.Millisecond)))
	r := e.must(t, 200, req{method: "GET", path: "/v1/rooms/" + room})
	if r.str("sale") != "open" || r.json["window"] != 0.0 || r.json["invite_required"] != true {
		t.Fatalf("in the presale window: %s, want sale open, window 0, invite required", r.raw)
	}
	if a := e.do(t, req{method: "POST", path: "/v1/rooms/" + room + "/tickets", body: `{}`}); a.status != 403 || a.str("field") != "invite" {
		t.Fatalf("plain join in the presale: %d %s, want 403 naming invite", a.status, a.raw)
	}
	time.Sleep(time.Until(now.Add(450 * time.Millisecond)))
	r = e.must(t, 200, req{method: "GET", path: "/v1/rooms/" + room})
	if r.str("sale") != "between" || r.json["window"] != 1.0 || r.json["invite_required"] != false || r.str("window_starts_at") != at(700*time.Millisecond) {
		t.Fatalf("between the windows: %s, want sale between, window 1 next, no invite", r.raw)
	}
	j := e.must(t, 201, req{method: "POST", path: "/v1/rooms/" + room + "/tickets", body: `{}`})
	if j.str("state") != "waiting" || j.str("sale") != "between" || j.str("sale_resumes_at") != at(700*time.Millisecond) {
		t.Fatalf("a join between the windows: %s, want waiting, sale between, resuming at the next start", j.raw)
	}
	ticket := "/v1/rooms/" + room + "/tickets/" + j.str("user_id")
	waitFor(t, "admission in the general sale", func() bool {
		return e.must(t, 200, req{method: "GET", path: ticket, auth: "Bearer " + j.str("ticket_token")}).str("state") == "admitted"
	})
	if time.Now().Before(now.Add(700 * time.Millisecond)) {
		t.Fatal("admitted before the general sale opened")
	}
}
