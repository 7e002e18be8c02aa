package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/stampede-lab/stampede/waitroom"
	"github.com/stampede-lab/stampede/waitroom/api"
)

var (
	siteSecret  = []byte("site-secret-for-trusted-joins-0123456789abcdef")
	checkoutKey = "checkout-key-0123456789abcdef"
)

// strictEnv is a server with the production identity rules: no unsigned
// user ids, trusted joins with siteSecret, and a checkout key.
func strictEnv(t *testing.T, b backend) *env {
	return newEnvWith(t, b, false, func(o *api.Config) {
		o.AllowUnsignedUsers = false
		o.SiteSecret, o.CheckoutKey = siteSecret, checkoutKey
	})
}

// signedJoin is the body of a trusted join for user.
func signedJoin(room, user string, expires time.Time) string {
	return fmt.Sprintf(`{"user_id":%s,"user_sig":%q,"user_expires":%d}`, quote(user), waitroom.SignUser(siteSecret, room, user, expires), expires.Unix())
}

// TestNoTakeover: a second client joining with an existing user id never
// gets a usable token for that user's ticket, however it asks.
func TestNoTakeover(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		for _, unsigned := range []bool{false, true} {
			t.Run(fmt.Sprintf("allow_unsigned=%v", unsigned), func(t *testing.T) {
				e := newEnvWith(t, b, false, func(o *api.Config) {
					o.AllowUnsignedUsers = unsigned
					o.SiteSecret, o.CheckoutKey = siteSecret, checkoutKey
				})
				room := e.newRoom(t, `{"capacity":1,"admit_interval_ms":60000}`)
				tickets := "/v1/rooms/" + room + "/tickets"
				exp := time.Now().Add(time.Hour)
				victim := e.must(t, http.StatusCreated, req{method: "POST", path: tickets, body: signedJoin(room, "victim", exp)})
				victimTok := victim.str("ticket_token")
				if victimTok == "" {
					t.Fatalf("victim got no token: %s", victim.raw)
				}
				// The attacker replays the site's signature, sends the bare
				// id, or a ticket token of their own.
				anon := e.must(t, http.StatusCreated, req{method: "POST", path: tickets, body: `{}`})
				attempts := []req{
					{method: "POST", path: tickets, body: signedJoin(room, "victim", exp)},
					{method: "POST", path: tickets, body: `{"user_id":"victim"}`},
					{method: "POST", path: tickets, body: `{"user_id":"victim"}`, auth: "Bearer " + anon.str("ticket_token")},
					{method: "POST", path: tickets, body: `{}`, auth: "Bearer " + anon.str("ticket_token")},
					{method: "GET", path: ticketPath(room, "victim"), auth: "Bearer " + anon.str("ticket_token")},
					{method: "DELETE", path: ticketPath(room, "victim"), auth: "Bearer " + anon.str("ticket_token")},
				}
				for i, r := range attempts {
					a := e.do(t, r)
					if strings.Contains(string(a.raw), victimTok) || (a.str("user_id") == "victim" && a.str("ticket_token") != "") {
						t.Fatalf("attempt %d (%s %s) leaked the victim's ticket token: %s", i, r.method, r.body, a.raw)
					}
					if a.str("user_id") == "victim" {
						t.Fatalf("attempt %d answered with the victim's ticket: %s", i, a.raw)
					}
					if i == 0 && (a.status != http.StatusConflict || a.errCode() != "conflict") {
						t.Errorf("a replayed signature for a live ticket = %d %s, want 409 conflict", a.status, a.raw)
					}
					if i == 1 && a.status != map[bool]int{false: http.StatusForbidden, true: http.StatusConflict}[unsigned] {
						t.Errorf("a bare user_id for a live ticket = %d %s", a.status, a.raw)
					}
				}
				// The victim still holds the ticket, and gets it back with
				// its own token.
				again := e.must(t, http.StatusOK, req{method: "POST", path: tickets, body: `{}`, auth: "Bearer " + victimTok})
				if again.str("user_id") != "victim" || again.str("state") != "waiting" {
					t.Errorf("the victim's re-join = %s", again.raw)
				}
				e.must(t, http.StatusOK, req{method: "GET", path: ticketPath(room, "victim"), auth: "Bearer " + victimTok})
			})
		}
	})
}

// TestJoinIdentities: anonymous joins get distinct random ids, bare ids
// are refused by default, and trusted joins check their signature.
func TestJoinIdentities(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		e := strictEnv(t, b)
		room := e.newRoom(t, `{"capacity":5,"admit_interval_ms":60000}`)
		tickets := "/v1/rooms/" + room + "/tickets"
		a := e.must(t, http.StatusCreated, req{method: "POST", path: tickets, body: `{}`})
		b2 := e.must(t, http.StatusCreated, req{method: "POST", path: tickets, body: `{}`})
		if !strings.HasPrefix(a.str("user_id"), "anon-") || len(a.str("user_id")) != len("anon-")+26 || a.str("user_id") == b2.str("user_id") {
			t.Errorf("anonymous ids %q and %q", a.str("user_id"), b2.str("user_id"))
		}
		exp := time.Now().Add(time.Minute)
		for _, c := range []struct {
			name, body string
			status     int
			field      string
		}{
			{"bare id", `{"user_id":"carol"}`, 403, "user_sig"},
			{"anon id without its token", `{"user_id":` + quote(a.str("user_id")) + `}`, 403, "user_id"},
			{"wrong signature", fmt.Sprintf(`{"user_id":"carol","user_sig":%q,"user_expires":%d}`, strings.Repeat("0", 64), exp.Unix()), 401, "user_sig"},
			{"signature for another user", fmt.Sprintf(`{"user_id":"carol","user_sig":%q,"user_expires":%d}`, waitroom.SignUser(siteSecret, room, "dave", exp), exp.Unix()), 401, "user_sig"},
			{"signature for another room", fmt.Sprintf(`{"user_id":"carol","user_sig":%q,"user_expires":%d}`, waitroom.SignUser(siteSecret, "other", "carol", exp), exp.Unix()), 401, "user_sig"},
			{"expired signature", signedJoin(room, "carol", time.Now().Add(-time.Second)), 401, "user_expires"},
			{"short signature", `{"user_id":"carol","user_sig":"abc","user_expires":1}`, 401, "user_sig"},
			{"sig without expiry", `{"user_id":"carol","user_sig":"abc"}`, 400, "user_expires"},
			{"sig without user", `{"user_sig":"abc","user_expires":1}`, 400, "user_id"},
			{"expires wrong type", `{"user_id":"carol","user_sig":"abc","user_expires":"x"}`, 400, "user_expires"},
			{"bad bearer", `{}`, 401, ""},
		} {
			r := req{method: "POST", path: tickets, body: c.body}
			if c.name == "bad bearer" {
				r.auth = "Bearer nonsense"
			}
			got := e.do(t, r)
			if got.status != c.status || got.str("field") != c.field || got.str("ticket_token") != "" {
				t.Errorf("%s: %d field %q, want %d field %q\n%s", c.name, got.status, got.str("field"), c.status, c.field, got.raw)
			}
		}
		carol := e.must(t, http.StatusCreated, req{method: "POST", path: tickets, body: signedJoin(room, "carol", exp)})
		if carol.str("user_id") != "carol" || carol.str("ticket_token") == "" {
			t.Errorf("trusted join = %s", carol.raw)
		}
	})
}

// admit runs one admission pass in room and fails unless it admits.
func admitPass(t *testing.T, e *env, room string) {
	t.Helper()
	if res, err := e.store.Admit(context.Background(), room); err != nil || len(res.Admitted) == 0 {
		t.Fatalf("Admit = %+v, %v", res, err)
	}
}

// TestAdmissionCheckAndDone: the online check sees a release at once, an
// old admission of a re-admitted user fails, the JWT verifies with the
// JWKS alone, and the endpoints need the checkout key.
func TestAdmissionCheckAndDone(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		e := strictEnv(t, b)
		room := e.newRoom(t, `{"capacity":1,"admit_interval_ms":60000,"lease_seconds":60}`)
		tickets := "/v1/rooms/" + room + "/tickets"
		j := e.must(t, http.StatusCreated, req{method: "POST", path: tickets, body: `{}`})
		user, tok := j.str("user_id"), "Bearer "+j.str("ticket_token")
		admitPass(t, e, room)
		adm := e.must(t, http.StatusOK, req{method: "GET", path: ticketPath(room, user), auth: tok}).str("admission_token")
		if adm == "" {
			t.Fatal("no admission token")
		}

		// A checkout in any language: the JWKS and a JWT library.
		jwksAns := e.must(t, http.StatusOK, req{method: "GET", path: "/.well-known/jwks.json"})
		var set jose.JSONWebKeySet
		if err := json.Unmarshal(jwksAns.raw, &set); err != nil || len(set.Keys) != 1 {
			t.Fatalf("JWKS %s: %v", jwksAns.raw, err)
		}
		parsed, err := jwt.ParseSigned(adm, []jose.SignatureAlgorithm{jose.EdDSA})
		if err != nil {
			t.Fatalf("ParseSigned: %v", err)
		}
		var std jwt.Claims
		var priv struct {
			Room string `json:"room"`
			Seq  int64  `json:"seq"`
		}
		if err := parsed.Claims(set.Key(parsed.Headers[0].KeyID)[0].Key, &std, &priv); err != nil {
			t.Fatalf("the JWT does not verify with the JWKS: %v", err)
		}
		if err := std.ValidateWithLeeway(jwt.Expected{Issuer: waitroom.AdmissionIssuer, Subject: user, AnyAudience: jwt.Audience{"stampede-room:" + room}, Time: time.Now()}, 0); err != nil || priv.Room != room {
			t.Errorf("claims %+v %+v: %v", std, priv, err)
		}

		check, done := "/v1/rooms/"+room+"/admissions/check", "/v1/rooms/"+room+"/admissions/done"
		key := "Bearer " + checkoutKey
		body := `{"admission_token":` + quote(adm) + `}`
		if a := e.must(t, http.StatusOK, req{method: "POST", path: check, body: body, auth: key}); a.json["held"] != true || a.str("user_id") != user || a.str("reason") != "held" || a.str("expires_at") == "" {
			t.Fatalf("check = %s", a.raw)
		}
		if a := e.must(t, http.StatusOK, req{method: "POST", path: done, body: body, auth: key}); a.json["released"] != true || a.json["held"] != false {
			t.Fatalf("done = %s", a.raw)
		}
		if a := e.must(t, http.StatusOK, req{method: "POST", path: check, body: body, auth: key}); a.json["held"] != false || a.str("reason") != "released" {
			t.Fatalf("check after done = %s", a.raw)
		}
		if a := e.must(t, http.StatusOK, req{method: "POST", path: done, body: body, auth: key}); a.json["released"] != false {
			t.Fatalf("done twice = %s", a.raw)
		}
		// The same user joins again (signed: the old ticket token cannot
		// start a new join) and is admitted: the old admission token names
		// the old admission and fails; done with it releases nothing.
		j2 := e.must(t, http.StatusCreated, req{method: "POST", path: tickets, body: signedJoin(room, user, time.Now().Add(time.Hour))})
		if j2.str("user_id") != user {
			t.Fatalf("re-join = %s", j2.raw)
		}
		tok2 := "Bearer " + j2.str("ticket_token")
		admitPass(t, e, room)
		if a := e.must(t, http.StatusOK, req{method: "POST", path: check, body: body, auth: key}); a.json["held"] != false || a.str("reason") != "superseded" {
			t.Fatalf("old token after re-admission = %s", a.raw)
		}
		e.must(t, http.StatusOK, req{method: "POST", path: done, body: body, auth: key})
		if st := e.must(t, http.StatusOK, req{method: "GET", path: ticketPath(room, user), auth: tok2}); st.str("state") != "admitted" {
			t.Fatalf("done with an old token released the new admission: %s", st.raw)
		}

		// Bad input: 4xx problems, never 500.
		other := newEnvWith(t, b, false, func(o *api.Config) { o.CheckoutKey = "" })
		for _, c := range []struct {
			name   string
			env    *env
			r      req
			status int
			reason string
		}{
			{"no key", e, req{method: "POST", path: check, body: body}, 401, ""},
			{"wrong key", e, req{method: "POST", path: check, body: body, auth: "Bearer wrong-key-0123456789"}, 401, ""},
			{"ticket token as key", e, req{method: "POST", path: done, body: body, auth: tok}, 401, ""},
			{"checks off", other, req{method: "POST", path: check, body: body, auth: key}, 403, ""},
			{"empty body", e, req{method: "POST", path: check, body: `{}`, auth: key}, 400, ""},
			{"empty token", e, req{method: "POST", path: check, body: `{"admission_token":""}`, auth: key}, 400, ""},
			{"token wrong type", e, req{method: "POST", path: check, body: `{"admission_token":1}`, auth: key}, 400, ""},
			{"unknown field", e, req{method: "POST", path: done, body: `{"admission_token":"x","y":1}`, auth: key}, 400, ""},
			{"not JSON", e, req{method: "POST", path: check, body: `nope`, auth: key}, 400, ""},
			{"bad room", e, req{method: "POST", path: "/v1/rooms/b%20d/admissions/check", body: body, auth: key}, 400, ""},
			{"GET", e, req{method: "GET", path: check, auth: key}, 405, ""},
			{"too large", e, req{method: "POST", path: check, body: `{"admission_token":"` + strings.Repeat("a", 5000) + `"}`, auth: key}, 413, ""},
			{"garbage token", e, req{method: "POST", path: check, body: `{"admission_token":"a.b.c"}`, auth: key}, 200, "invalid_token"},
			{"tampered token", e, req{method: "POST", path: check, body: `{"admission_token":` + quote(adm[:len(adm)-3]+"AAA") + `}`, auth: key}, 200, "invalid_token"},
			{"ticket token as admission", e, req{method: "POST", path: check, body: `{"admission_token":` + quote(j.str("ticket_token")) + `}`, auth: key}, 200, "invalid_token"},
			{"other room", e, req{method: "POST", path: "/v1/rooms/elsewhere/admissions/check", body: body, auth: key}, 200, "other_room"},
		} {
			a := c.env.do(t, c.r)
			if a.status != c.status || (c.status >= 400 && a.header.Get("Content-Type") != "application/problem+json") || a.str("reason") != c.reason {
				t.Errorf("%s: %d %q %s, want %d reason %q", c.name, a.status, a.header.Get("Content-Type"), a.raw, c.status, c.reason)
			}
		}
	})
}

// TestKeyRotation: tokens signed before a rotation verify after it while
// the previous key is configured, and the JWKS serves both keys.
func TestKeyRotation(t *testing.T) {
	old, err := waitroom.NewAdmissionSigner(waitroom.KeySpec{Secret: testSecret, Epoch: "1"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := old.Sign(waitroom.AdmissionClaims{Room: "r", User: "u", Seq: 3, Expires: time.Now().Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	again, _ := waitroom.NewAdmissionSigner(waitroom.KeySpec{Secret: testSecret, Epoch: "1"}, nil, nil)
	if again.KeyID() != old.KeyID() {
		t.Errorf("the same secret and epoch derive kids %q and %q: instances would disagree", again.KeyID(), old.KeyID())
	}
	rotated, err := waitroom.NewAdmissionSigner(waitroom.KeySpec{Secret: testSecret, Epoch: "2"}, []waitroom.KeySpec{{Secret: testSecret, Epoch: "1"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rotated.KeyID() == old.KeyID() || len(rotated.JWKS().Keys) != 2 {
		t.Fatalf("rotated kid %q, JWKS of %d keys", rotated.KeyID(), len(rotated.JWKS().Keys))
	}
	if c, err := rotated.Verify(tok, "r"); err != nil || c.User != "u" || c.Seq != 3 || c.KeyID != old.KeyID() {
		t.Errorf("an old token after rotation: %+v, %v", c, err)
	}
	dropped, _ := waitroom.NewAdmissionSigner(waitroom.KeySpec{Secret: testSecret, Epoch: "2"}, nil, nil)
	if _, err := dropped.Verify(tok, "r"); err == nil {
		t.Error("an old token verifies after its key was dropped")
	}
	if _, err := waitroom.NewAdmissionSigner(waitroom.KeySpec{Secret: testSecret, Epoch: "a b"}, nil, nil); err == nil || !strings.Contains(err.Error(), "key_epoch") {
		t.Errorf("a bad epoch: %v", err)
	}
}

// TestKeyedAnonymousJoin: an anonymous join tried again with the same
// Idempotency-Key (its first answer lost) gets the same ticket back, not a
// second place in line; another key is another buyer, in another room
// too; a malformed key is a 400 naming the header.
func TestKeyedAnonymousJoin(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		e := strictEnv(t, b)
		room := e.newRoom(t, `{"capacity":1,"admit_interval_ms":60000}`)
		other := e.newRoom(t, `{"capacity":1,"admit_interval_ms":60000}`)
		keyed := func(room, key string, status int) answer {
			return e.must(t, status, req{method: "POST", path: "/v1/rooms/" + room + "/tickets", body: `{}`,
				header: http.Header{"Idempotency-Key": {key}}})
		}
		const k1, k2 = "k1-0123456789abcdef", "k2-0123456789abcdef"
		first := keyed(room, k1, http.StatusCreated)
		again := keyed(room, k1, http.StatusOK)
		if again.str("user_id") != first.str("user_id") || again.str("ticket_token") == "" {
			t.Fatalf("the same key twice: %s then %s, want the same user with a token", first.raw, again.raw)
		}
		second := keyed(room, k2, http.StatusCreated)
		elsewhere := keyed(other, k1, http.StatusCreated)
		if second.str("user_id") == first.str("user_id") || elsewhere.str("user_id") == first.str("user_id") ||
			!strings.HasPrefix(second.str("user_id"), "anon-") {
			t.Errorf("another key %q, another room %q, want ids other than %q", second.str("user_id"), elsewhere.str("user_id"), first.str("user_id"))
		}
		st, err := e.store.Stats(context.Background(), room)
		if err != nil {
			t.Fatal(err)
		}
		if st.JoinedTotal != 2 {
			t.Errorf("joined %d, want 2 (a retried join is not a new ticket)", st.JoinedTotal)
		}
		for _, bad := range []string{"short", strings.Repeat("x", 129), "has a space in it...."} {
			a := e.do(t, req{method: "POST", path: "/v1/rooms/" + room + "/tickets", body: `{}`, header: http.Header{"Idempotency-Key": {bad}}})
			if a.status != http.StatusBadRequest || a.str("field") != "Idempotency-Key" {
				t.Errorf("key %q: %d %s, want 400 naming Idempotency-Key", bad, a.status, a.raw)
			}
		}
	})
}
