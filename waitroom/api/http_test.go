package api_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/internal/httpapi/apitest"
	"github.com/stampede-lab/stampede/internal/testenv"
	"github.com/stampede-lab/stampede/waitroom"
	"github.com/stampede-lab/stampede/waitroom/api"
	"github.com/stampede-lab/stampede/waitroom/redisstore"
)

const adminToken = "test-admin-token-0123456789"

var testSecret = []byte("0123456789abcdef0123456789abcdef-test-secret")

// roomsKey is redisstore's set of configured rooms; the tests remove their
// rooms from it on real Redis.
const roomsKey = "stampede:rooms"

// backend is a Redis the tests run against.
type backend struct {
	client redis.UniversalClient
	mini   *miniredis.Miniredis // nil for a real server
}

// forEachBackend runs fn on miniredis and, when STAMPEDE_REDIS_URL is set,
// on that real Redis.
func forEachBackend(t *testing.T, fn func(t *testing.T, b backend)) {
	t.Run("miniredis", func(t *testing.T) { fn(t, miniBackend(t)) })
	t.Run("redis", func(t *testing.T) {
		url := testenv.URL(t, testenv.RedisURL)
		opts, err := redis.ParseURL(url)
		if err != nil {
			t.Fatalf("STAMPEDE_REDIS_URL: %v", err)
		}
		// These tests run a Service, which admits in every room of its
		// database. Use the next database so that it never admits in the
		// rooms of the store conformance tests, which may run at the same
		// time on the URL's own database.
		opts.DB = (opts.DB + 1) % 16
		client := redis.NewClient(opts)
		t.Cleanup(func() { client.Close() })
		if err := client.Ping(context.Background()).Err(); err != nil {
			t.Fatalf("STAMPEDE_REDIS_URL: %v", err)
		}
		fn(t, backend{client: client})
	})
}

func miniBackend(t testing.TB) backend {
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { client.Close() })
	return backend{client: client, mini: m}
}

// env is one waiting-room server under test.
type env struct {
	b     backend
	store *redisstore.Store
	srv   *running
	url   string // of an httptest server; empty when handler-only
	// api checks every answer against the OpenAPI description; hc is its
	// validating client.
	api *apitest.Validator
	hc  *http.Client
}

func newEnv(t testing.TB, b backend, network bool) *env {
	t.Helper()
	return newEnvWith(t, b, network, nil)
}

// newEnvWith is newEnv with the server options changed by change (if not
// nil) after the tests' defaults.
func newEnvWith(t testing.TB, b backend, network bool, change func(*api.Config)) *env {
	t.Helper()
	store := redisstore.New(b.client)
	opts := api.DefaultConfig()
	opts.AllowUnsignedUsers = true // these tests join as named users
	opts.Instance = "test-" + randomName()
	opts.Secret, opts.AdminToken = testSecret, adminToken
	opts.Logger = slog.New(slog.DiscardHandler)
	opts.RoomRefresh = 50 * time.Millisecond
	if change != nil {
		change(&opts)
	}
	srv, err := startServer(t, context.Background(), store, opts)
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	t.Cleanup(srv.Close)
	api := apitest.New(t, api.OpenAPI())
	e := &env{b: b, store: store, srv: srv, api: api, hc: api.Client(t)}
	if network {
		ts := httptest.NewServer(srv.Handler())
		t.Cleanup(ts.Close)
		e.url = ts.URL
	}
	return e
}

func randomName() string {
	b := make([]byte, 6)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// answer is one HTTP answer.
type answer struct {
	status int
	header http.Header
	raw    []byte
	json   map[string]any
}

func (a answer) str(key string) string { s, _ := a.json[key].(string); return s }

// errCode and errMessage read the code and detail of a problem answer.
func (a answer) errCode() string { return a.str("code") }

func (a answer) errMessage() string { return a.str("detail") }

// req describes a request.
type req struct {
	method, path string
	body         string
	contentType  string // default application/json when body is set; "-" for none
	auth         string // Authorization value
	header       http.Header
}

func (e *env) do(t testing.TB, r req) answer {
	t.Helper()
	var body io.Reader
	if r.body != "" {
		body = strings.NewReader(r.body)
	}
	hr := httptest.NewRequest(r.method, r.path, body)
	if e.url != "" {
		var err error
		hr, err = http.NewRequest(r.method, e.url+r.path, body)
		if err != nil {
			t.Fatalf("%s %s: %v", r.method, r.path, err)
		}
	}
	switch {
	case r.contentType == "-":
	case r.contentType != "":
		hr.Header.Set("Content-Type", r.contentType)
	case r.body != "":
		hr.Header.Set("Content-Type", "application/json")
	}
	if r.auth != "" {
		hr.Header.Set("Authorization", r.auth)
	}
	for k, v := range r.header {
		hr.Header[k] = v
	}
	var a answer
	if e.url != "" {
		res, err := e.hc.Do(hr)
		if err != nil {
			t.Fatalf("%s %s: %v", r.method, r.path, err)
		}
		defer res.Body.Close()
		a.status, a.header = res.StatusCode, res.Header
		a.raw, _ = io.ReadAll(res.Body)
	} else {
		rec := httptest.NewRecorder()
		e.srv.Handler().ServeHTTP(rec, hr)
		a.status, a.header, a.raw = rec.Code, rec.Header(), rec.Body.Bytes()
		if err := e.api.Check(hr, rec.Result(), a.raw); err != nil {
			t.Errorf("apitest: %v", err)
		}
	}
	if ct := a.header.Get("Content-Type"); strings.HasPrefix(ct, "application/json") || strings.HasPrefix(ct, "application/problem+json") {
		if err := json.Unmarshal(a.raw, &a.json); err != nil {
			t.Fatalf("%s %s: answer is not JSON: %v\n%s", r.method, r.path, err, a.raw)
		}
	}
	return a
}

// must checks the status and returns the answer.
func (e *env) must(t testing.TB, status int, r req) answer {
	t.Helper()
	a := e.do(t, r)
	if a.status != status {
		t.Fatalf("%s %s = %d, want %d\n%s", r.method, r.path, a.status, status, a.raw)
	}
	return a
}

// newRoom configures a uniquely named room through the API and removes it
// from the store when the test ends.
func (e *env) newRoom(t testing.TB, body string) string {
	t.Helper()
	room := "r-" + randomName()
	t.Cleanup(func() {
		ctx := context.Background()
		k := redisstore.KeysFor(room)
		e.b.client.Del(ctx, k.Config, k.Seq, k.Queue, k.Active, k.State, k.SeqOf, k.Stats)
		e.b.client.SRem(ctx, roomsKey, room)
	})
	e.must(t, http.StatusOK, req{method: "PUT", path: "/v1/rooms/" + room, body: roomBody(t, body), auth: "Bearer " + adminToken})
	return room
}

// roomBody is a complete room configuration for PUT: the default room's,
// with the fields of the JSON object partial over it (which may hold
// fields that do not exist, to be refused).
func roomBody(t testing.TB, partial string) string {
	t.Helper()
	full := map[string]any{
		"capacity": 100, "lease_seconds": 300, "admit_interval_ms": 200, "max_admissions_per_minute": 0,
		"opens_at": nil, "paused": false, "closed": false, "closed_message": "", "abandon_after_seconds": 0,
		"arrival_seconds": 0, "retention_seconds": 86400, "pow_difficulty": 0, "template": nil,
	}
	var over map[string]json.RawMessage
	if err := json.Unmarshal([]byte(partial), &over); err != nil {
		t.Fatalf("roomBody(%s): %v", partial, err)
	}
	for k, v := range over {
		full[k] = v
	}
	b, err := json.Marshal(full)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// waitFor polls cond every 10 ms for up to 5 s: the service admits in the
// background.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after 5s waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func join(t testing.TB, e *env, room, user string) answer {
	t.Helper()
	a := e.do(t, req{method: "POST", path: "/v1/rooms/" + room + "/tickets", body: `{"user_id":` + quote(user) + `}`})
	if a.status != http.StatusCreated && a.status != http.StatusOK {
		t.Fatalf("join %s: %d\n%s", user, a.status, a.raw)
	}
	return a
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func ticketPath(room, user string) string { return "/v1/rooms/" + room + "/tickets/" + user }

func TestFullFlow(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, true)
		// A one-minute tick: nothing is admitted but by the test's own
		// pass and by the release of a slot.
		room := e.newRoom(t, `{"capacity":1,"lease_seconds":60,"admit_interval_ms":60000}`)

		a := join(t, e, room, "alice")
		bob := join(t, e, room, "bob")
		if a.status != http.StatusCreated || a.str("state") != "waiting" || a.json["position"] != 1.0 || a.json["ahead"] != 0.0 || a.str("ticket_token") == "" {
			t.Fatalf("alice's join = %d %s", a.status, a.raw)
		}
		if bob.json["position"] != 2.0 || bob.json["ahead"] != 1.0 || a.json["poll_after_ms"] == nil || a.str("room") != room || a.str("user_id") != "alice" {
			t.Fatalf("bob's join = %s", bob.raw)
		}
		if _, ok := a.json["eta_seconds"]; !ok {
			t.Errorf("no eta_seconds in %s", a.raw)
		}
		aliceAuth, bobAuth := "Bearer "+a.str("ticket_token"), "Bearer "+bob.str("ticket_token")

		// One admission pass lets alice in.
		res, err := e.store.Admit(context.Background(), room)
		if err != nil || !slices.Equal(res.Admitted, []string{"alice"}) {
			t.Fatalf("Admit = %+v, %v; want alice admitted", res, err)
		}
		got := e.must(t, http.StatusOK, req{method: "GET", path: ticketPath(room, "alice"), auth: aliceAuth})
		if got.str("state") != "admitted" || got.str("ticket_token") != "" {
			t.Fatalf("alice's ticket = %s", got.raw)
		}
		keys, _ := waitroom.NewAdmissionSigner(waitroom.KeySpec{Secret: testSecret, Epoch: waitroom.DefaultKeyEpoch}, nil, nil)
		claims, err := waitroom.VerifyAdmissionJWT(got.str("admission_token"), keys.JWKS(), room, time.Now())
		if err != nil {
			t.Fatalf("VerifyAdmission: %v\n%s", err, got.raw)
		}
		lease, err := time.Parse(time.RFC3339Nano, got.str("lease_expires_at"))
		if err != nil || claims.User != "alice" || claims.Seq != 1 || !claims.Expires.Equal(lease.Truncate(time.Second)) {
			t.Errorf("claims %+v, lease_expires_at %q (%v)", claims, got.str("lease_expires_at"), err)
		}
		if d := time.Until(lease); d < 55*time.Second || d > 65*time.Second {
			t.Errorf("lease ends in %s, want about 60s", d)
		}
		if got := e.must(t, http.StatusOK, req{method: "GET", path: ticketPath(room, "bob"), auth: bobAuth}); got.str("state") != "waiting" || got.json["position"] != 1.0 || got.str("admission_token") != "" {
			t.Fatalf("bob's ticket = %s", got.raw)
		}

		// The release refills the slot at once: the service's admitter for
		// the room runs (once it has found the room) and is poked.
		waitFor(t, "the service to run the room's admitter", func() bool { return slices.Contains(e.srv.Service().Rooms(), room) })
		left := e.must(t, http.StatusOK, req{method: "DELETE", path: ticketPath(room, "alice"), auth: aliceAuth})
		if left.str("state") != "released" || left.json["position"] != nil || left.json["ahead"] != nil {
			t.Fatalf("alice's leave = %s", left.raw)
		}
		waitFor(t, "bob's admission", func() bool {
			return e.must(t, http.StatusOK, req{method: "GET", path: ticketPath(room, "bob"), auth: bobAuth}).str("state") == "admitted"
		})

		st := e.must(t, http.StatusOK, req{method: "GET", path: "/v1/rooms/" + room, auth: "Bearer " + adminToken})
		if st.json["active"] != 1.0 || st.json["waiting"] != 0.0 || st.json["admitted_total"] != 2.0 || st.json["released_total"] != 1.0 || st.json["joined_total"] != 2.0 || st.json["capacity"] != 1.0 {
			t.Errorf("room = %s", st.raw)
		}
		for _, k := range []string{"room", "expired_total", "left_total", "admission_rate_per_s"} {
			if _, ok := st.json[k]; !ok {
				t.Errorf("room answer lacks %q: %s", k, st.raw)
			}
		}
		if cc := st.header.Get("Cache-Control"); cc != "no-store" {
			t.Errorf("Cache-Control = %q", cc)
		}

		// The admitter's pass was counted (by its hook, which runs just
		// after the pass that bob may already have seen).
		want := `stampede_waitroom_admitted_total{room="` + room + `"} 1`
		waitFor(t, "/metrics to show "+want, func() bool {
			return bytes.Contains(e.must(t, http.StatusOK, req{method: "GET", path: "/metrics", auth: "Bearer " + adminToken}).raw, []byte(want))
		})
	})
}

func TestJoinIsIdempotent(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, true)
		room := e.newRoom(t, `{"capacity":5,"admit_interval_ms":60000}`)
		join(t, e, room, "first")
		a := join(t, e, room, "u-1")
		// A re-join proves the ticket with its own token.
		again := e.do(t, req{method: "POST", path: "/v1/rooms/" + room + "/tickets", body: `{"user_id":"u-1"}`, auth: "Bearer " + a.str("ticket_token")})
		if a.status != http.StatusCreated || again.status != http.StatusOK {
			t.Fatalf("statuses %d then %d, want 201 then 200", a.status, again.status)
		}
		if again.json["position"] != 2.0 || a.json["position"] != 2.0 || again.str("state") != "waiting" {
			t.Fatalf("joins = %s then %s", a.raw, again.raw)
		}
		// Both ticket tokens work.
		for _, tok := range []string{a.str("ticket_token"), again.str("ticket_token")} {
			e.must(t, http.StatusOK, req{method: "GET", path: ticketPath(room, "u-1"), auth: "Bearer " + tok})
		}
		st := e.must(t, http.StatusOK, req{method: "GET", path: "/v1/rooms/" + room, auth: "Bearer " + adminToken})
		if st.json["joined_total"] != 2.0 || st.json["waiting"] != 2.0 {
			t.Errorf("room after a repeated join = %s", st.raw)
		}
		// Joining again after leaving is a new ticket at the back.
		e.must(t, http.StatusOK, req{method: "DELETE", path: ticketPath(room, "u-1"), auth: "Bearer " + a.str("ticket_token")})
		if re := join(t, e, room, "u-1"); re.status != http.StatusCreated || re.str("state") != "waiting" {
			t.Errorf("rejoin = %d %s, want 201 waiting", re.status, re.raw)
		}
	})
}

func TestBadRequests(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, true)
		room := e.newRoom(t, `{"capacity":2,"admit_interval_ms":60000}`)
		alice := join(t, e, room, "alice")
		join(t, e, room, "bob")
		aliceTok := alice.str("ticket_token")

		sign := func(s *waitroom.Signer, c waitroom.Claims) string {
			tok, err := s.Sign(c)
			if err != nil {
				t.Fatalf("Sign: %v", err)
			}
			return tok
		}
		past, _ := waitroom.NewSigner(testSecret, func() time.Time { return time.Now().Add(-48 * time.Hour) })
		expired := sign(past, waitroom.Claims{Kind: waitroom.TicketToken, Room: room, User: "alice", Generation: 1, Expires: time.Now().Add(-47 * time.Hour)})
		other, _ := waitroom.NewSigner([]byte("another-secret-another-secret-another-secret"), nil)
		forged := sign(other, waitroom.Claims{Kind: waitroom.TicketToken, Room: room, User: "alice", Generation: 1, Expires: time.Now().Add(time.Hour)})
		now, _ := waitroom.NewSigner(testSecret, nil)
		admission := sign(now, waitroom.Claims{Kind: waitroom.AdmissionToken, Room: room, User: "alice", Seq: 1, Expires: time.Now().Add(time.Hour)})
		ghostTok := sign(now, waitroom.Claims{Kind: waitroom.TicketToken, Room: room, User: "ghost", Generation: 1, Expires: time.Now().Add(time.Hour)})
		otherRoomTok := sign(now, waitroom.Claims{Kind: waitroom.TicketToken, Room: "elsewhere", User: "alice", Generation: 1, Expires: time.Now().Add(time.Hour)})

		tickets := "/v1/rooms/" + room + "/tickets"
		cfgPath := "/v1/rooms/" + room
		admin := "Bearer " + adminToken
		cases := []struct {
			name   string
			r      req
			status int
			code   string
			want   []string // substrings of the message
		}{
			{"malformed JSON", req{method: "POST", path: tickets, body: `{"user_id":`}, 400, "invalid", []string{"malformed JSON"}},
			{"malformed JSON inside", req{method: "POST", path: tickets, body: `{"user_id" "x"}`}, 400, "invalid", []string{"malformed JSON", "byte offset"}},
			{"trailing data", req{method: "POST", path: tickets, body: `{"user_id":"a"} {"user_id":"b"}`}, 400, "invalid", []string{"trailing data"}},
			{"not an object", req{method: "POST", path: tickets, body: `["alice"]`}, 400, "invalid", []string{"JSON object", "user_id"}},
			{"null body", req{method: "POST", path: tickets, body: `null`}, 400, "invalid", []string{"JSON object"}},
			{"empty body", req{method: "POST", path: tickets, body: "", contentType: "application/json"}, 400, "invalid", []string{"empty"}},
			{"unknown field", req{method: "POST", path: tickets, body: `{"user_id":"a","admin":true}`}, 400, "invalid", []string{`"admin"`, "user_id"}},
			{"user_id wrong type", req{method: "POST", path: tickets, body: `{"user_id":42}`}, 400, "invalid", []string{"user_id", "string"}},
			{"user_id empty", req{method: "POST", path: tickets, body: `{"user_id":""}`}, 400, "invalid", []string{"user_id"}},
			{"user_id 200 bytes", req{method: "POST", path: tickets, body: `{"user_id":"` + strings.Repeat("x", 200) + `"}`}, 400, "invalid", []string{"user_id", "200"}},
			{"user_id control character", req{method: "POST", path: tickets, body: `{"user_id":"a\u0007b"}`}, 400, "invalid", []string{"user_id", "control"}},
			{"bad room name", req{method: "GET", path: "/v1/rooms/bad.room"}, 400, "invalid", []string{"room"}},
			{"unknown room", req{method: "GET", path: "/v1/rooms/no-such-room"}, 404, "not_found", []string{"no-such-room"}},
			{"join unknown room", req{method: "POST", path: "/v1/rooms/no-such-room/tickets", body: `{"user_id":"a"}`}, 404, "not_found", []string{"no-such-room"}},
			{"no ticket", req{method: "GET", path: ticketPath(room, "ghost"), auth: "Bearer " + ghostTok}, 404, "not_found", []string{"ghost"}},
			{"capacity wrong type", req{method: "PUT", path: cfgPath, body: roomBody(t, `{"capacity":"ten"}`), auth: admin}, 400, "invalid", []string{"capacity", "number"}},
			{"capacity fraction", req{method: "PUT", path: cfgPath, body: roomBody(t, `{"capacity":1.5}`), auth: admin}, 400, "invalid", []string{"capacity", "whole number"}},
			{"capacity huge", req{method: "PUT", path: cfgPath, body: roomBody(t, `{"capacity":1e40}`), auth: admin}, 400, "invalid", []string{"capacity"}},
			{"capacity zero", req{method: "PUT", path: cfgPath, body: roomBody(t, `{"capacity":0}`), auth: admin}, 400, "invalid", []string{"capacity"}},
			{"lease huge", req{method: "PUT", path: cfgPath, body: roomBody(t, `{"lease_seconds":1e300}`), auth: admin}, 400, "invalid", []string{"lease_seconds"}},
			{"lease wrong type", req{method: "PUT", path: cfgPath, body: roomBody(t, `{"lease_seconds":"1m"}`), auth: admin}, 400, "invalid", []string{"lease_seconds", "number"}},
			{"interval too short", req{method: "PUT", path: cfgPath, body: roomBody(t, `{"admit_interval_ms":1}`), auth: admin}, 400, "invalid", []string{"admit_interval_ms"}},
			{"mode not in the API", req{method: "PUT", path: cfgPath, body: roomBody(t, `{"mode":"naive"}`), auth: admin}, 400, "invalid", []string{`"mode"`, "unknown field"}},
			{"put incomplete", req{method: "PUT", path: cfgPath, body: `{"lease_seconds":60}`, auth: admin}, 400, "invalid", []string{"capacity", "default"}},
			{"patch bad capacity", req{method: "PATCH", path: cfgPath, body: `{"capacity":0}`, auth: admin}, 400, "invalid", []string{"capacity"}},
			{"patch without admin", req{method: "PATCH", path: cfgPath, body: `{"capacity":3}`}, 401, "unauthorized", []string{"admin token"}},
			{"delete without admin", req{method: "DELETE", path: cfgPath}, 401, "unauthorized", []string{"admin token"}},
			{"list without admin", req{method: "GET", path: "/v1/rooms"}, 401, "unauthorized", []string{"admin token"}},
			{"user_id dot", req{method: "POST", path: tickets, body: `{"user_id":"."}`}, 400, "invalid", []string{"user_id"}},
			{"user_id dotdot", req{method: "POST", path: tickets, body: `{"user_id":".."}`}, 400, "invalid", []string{"user_id"}},
			{"user_id slash", req{method: "POST", path: tickets, body: `{"user_id":"a/b"}`}, 400, "invalid", []string{"user_id", "'/'"}},
			{"config unknown field", req{method: "PUT", path: cfgPath, body: roomBody(t, `{"cap":1}`), auth: admin}, 400, "invalid", []string{`"cap"`, "capacity"}},
			{"missing admin token", req{method: "PUT", path: cfgPath, body: `{}`}, 401, "unauthorized", []string{"admin token"}},
			{"wrong admin token", req{method: "PUT", path: cfgPath, body: `{}`, auth: "Bearer not-the-admin-token"}, 401, "unauthorized", []string{"admin token invalid"}},
			{"ticket token as admin token", req{method: "PUT", path: cfgPath, body: `{}`, auth: "Bearer " + aliceTok}, 401, "unauthorized", []string{"admin token invalid"}},
			{"basic auth as admin", req{method: "PUT", path: cfgPath, body: `{}`, auth: "Basic " + adminToken}, 401, "unauthorized", []string{"Bearer"}},
			{"missing ticket token", req{method: "GET", path: ticketPath(room, "alice")}, 401, "unauthorized", []string{"ticket_token"}},
			{"missing ticket token on leave", req{method: "DELETE", path: ticketPath(room, "alice")}, 401, "unauthorized", []string{"ticket_token"}},
			{"garbage ticket token", req{method: "GET", path: ticketPath(room, "alice"), auth: "Bearer garbage"}, 401, "unauthorized", []string{"malformed token"}},
			{"forged ticket token", req{method: "GET", path: ticketPath(room, "alice"), auth: "Bearer " + forged}, 401, "unauthorized", []string{"signature"}},
			{"expired ticket token", req{method: "GET", path: ticketPath(room, "alice"), auth: "Bearer " + expired}, 401, "unauthorized", []string{"expired"}},
			{"admission token as ticket token", req{method: "GET", path: ticketPath(room, "alice"), auth: "Bearer " + admission}, 401, "unauthorized", []string{"wrong token kind"}},
			{"other user's token", req{method: "GET", path: ticketPath(room, "bob"), auth: "Bearer " + aliceTok}, 403, "forbidden", []string{"another user"}},
			{"other user's token on leave", req{method: "DELETE", path: ticketPath(room, "bob"), auth: "Bearer " + aliceTok}, 403, "forbidden", []string{"another user"}},
			{"other room's token", req{method: "GET", path: ticketPath(room, "alice"), auth: "Bearer " + otherRoomTok}, 403, "forbidden", []string{"another user or room"}},
			{"user path too long", req{method: "GET", path: ticketPath(room, strings.Repeat("u", 200)), auth: "Bearer " + aliceTok}, 400, "invalid", []string{"user_id"}},
			{"oversized body", req{method: "POST", path: tickets, body: `{"user_id":"` + strings.Repeat("x", 5000) + `"}`}, 413, "too_large", []string{"4096"}},
			{"oversized config", req{method: "PUT", path: cfgPath, body: strings.Repeat(" ", 5000) + "{}", auth: admin}, 413, "too_large", []string{"4096 bytes"}},
			{"wrong content type", req{method: "POST", path: tickets, body: `{"user_id":"a"}`, contentType: "text/plain"}, 415, "unsupported", []string{"application/json", "text/plain"}},
			{"no content type", req{method: "POST", path: tickets, body: `{"user_id":"a"}`, contentType: "-"}, 415, "unsupported", []string{"application/json"}},
			{"form content type", req{method: "PUT", path: cfgPath, body: `capacity=1`, contentType: "application/x-www-form-urlencoded", auth: admin}, 415, "unsupported", []string{"application/json"}},
			{"wrong method on room", req{method: "POST", path: cfgPath, body: `{}`}, 405, "method_not_allowed", []string{"POST", "DELETE, GET, HEAD, PATCH, PUT"}},
			{"wrong method on tickets", req{method: "GET", path: tickets}, 405, "method_not_allowed", []string{"GET", "POST"}},
			{"wrong method on ticket", req{method: "POST", path: ticketPath(room, "alice")}, 405, "method_not_allowed", []string{"DELETE"}},
			{"wrong method on healthz", req{method: "DELETE", path: "/healthz"}, 405, "method_not_allowed", []string{"DELETE"}},
			{"wrong method on page", req{method: "POST", path: "/rooms/" + room}, 405, "method_not_allowed", []string{"POST"}},
			{"unknown path", req{method: "GET", path: "/v2/nothing"}, 404, "not_found", []string{"/v2/nothing"}},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				a := e.do(t, tc.r)
				if a.status != tc.status || a.errCode() != tc.code {
					t.Fatalf("%s %s = %d %q, want %d %q\n%s", tc.r.method, tc.r.path, a.status, a.errCode(), tc.status, tc.code, a.raw)
				}
				for _, w := range tc.want {
					if !strings.Contains(a.errMessage(), w) {
						t.Errorf("message %q does not mention %q", a.errMessage(), w)
					}
				}
				if a.status == 401 && a.header.Get("WWW-Authenticate") == "" {
					t.Error("401 without WWW-Authenticate")
				}
				if a.status == 405 && a.header.Get("Allow") == "" {
					t.Error("405 without Allow")
				}
			})
		}

		// A field at fault is named in the problem's "field" member.
		for _, fc := range []struct {
			r     req
			field string
		}{
			{req{method: "POST", path: tickets, body: `{"user_id":42}`}, "user_id"},
			{req{method: "PUT", path: cfgPath, body: roomBody(t, `{"capacity":"ten"}`), auth: admin}, "capacity"},
			{req{method: "PUT", path: cfgPath, body: roomBody(t, `{"admit_interval_ms":1}`), auth: admin}, "admit_interval_ms"},
			{req{method: "GET", path: "/v1/rooms/bad.room"}, "room"},
		} {
			if a := e.do(t, fc.r); a.status != http.StatusBadRequest || a.str("field") != fc.field {
				t.Errorf("%s %s %s = %d field %q, want 400 naming %s\n%s", fc.r.method, fc.r.path, fc.r.body, a.status, a.str("field"), fc.field, a.raw)
			}
		}

		// None of it changed the room.
		st := e.must(t, http.StatusOK, req{method: "GET", path: "/v1/rooms/" + room, auth: "Bearer " + adminToken})
		if st.json["joined_total"] != 2.0 || st.json["capacity"] != 2.0 {
			t.Errorf("room after bad requests = %s", st.raw)
		}
	})
}

// TestPutWholePatchOne: PUT needs the complete configuration and names
// every missing field; PATCH of one field leaves every other unchanged;
// GET /v1/rooms lists the room and DELETE removes it.
func TestPutWholePatchOne(t *testing.T) {
	e := newEnv(t, miniBackend(t), false)
	room := "cfg-" + randomName()
	path := "/v1/rooms/" + room
	admin := "Bearer " + adminToken

	a := e.do(t, req{method: "PUT", path: path, body: `{"lease_seconds":60}`, auth: admin})
	if a.status != http.StatusBadRequest || a.str("field") != "capacity" {
		t.Fatalf("PUT with only lease_seconds = %d %s, want 400 naming capacity", a.status, a.raw)
	}
	missing, _ := a.json["missing_fields"].([]any)
	if len(missing) != 1 || missing[0] != "capacity" {
		t.Errorf("missing_fields = %v, want capacity alone", missing)
	}
	if _, err := e.store.Config(context.Background(), room); !errors.Is(err, waitroom.ErrNoRoom) {
		t.Fatalf("a refused PUT created the room: %v", err)
	}

	full := `{"capacity":7,"lease_seconds":90,"admit_interval_ms":50,"max_admissions_per_minute":600,` +
		`"opens_at":"2030-01-02T03:04:05Z","paused":true,"closed":false,"closed_message":"sold out",` +
		`"abandon_after_seconds":30,"arrival_seconds":20,"retention_seconds":3600,"pow_difficulty":4,"template":{"title":"T"}}`
	a = e.must(t, http.StatusOK, req{method: "PUT", path: path, body: full, auth: admin})
	t.Cleanup(func() { _ = e.store.DeleteRoom(context.Background(), room) })
	want := waitroom.RoomConfig{Capacity: 7, Lease: 90 * time.Second, AdmitInterval: 50 * time.Millisecond,
		MaxAdmissionsPerMinute: 600, OpensAt: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC), Paused: true,
		ClosedMessage: "sold out", AbandonAfter: 30 * time.Second, Arrival: 20 * time.Second, Retention: time.Hour,
		PoWDifficulty: 4, Template: waitroom.RoomTemplate{Title: "T"}, MaxWaiting: waitroom.DefaultMaxWaiting}
	if cfg, err := e.store.Config(context.Background(), room); err != nil || !cfg.Equal(want) {
		t.Fatalf("stored config = %+v, %v\nwant %+v", cfg, err, want)
	}
	if a.str("opens_at") != "2030-01-02T03:04:05Z" || a.json["capacity"] != 7.0 || a.str("room") != room {
		t.Errorf("PUT answer = %s", a.raw)
	}

	// Each field alone: only it changes.
	for _, pc := range []struct {
		body   string
		change func(*waitroom.RoomConfig)
	}{
		{`{"lease_seconds":120}`, func(c *waitroom.RoomConfig) { c.Lease = 2 * time.Minute }},
		{`{"capacity":9}`, func(c *waitroom.RoomConfig) { c.Capacity = 9 }},
		{`{"paused":false}`, func(c *waitroom.RoomConfig) { c.Paused = false }},
		{`{"opens_at":null}`, func(c *waitroom.RoomConfig) { c.OpensAt = time.Time{} }},
		{`{"max_admissions_per_minute":0}`, func(c *waitroom.RoomConfig) { c.MaxAdmissionsPerMinute = 0 }},
		{`{"closed":true,"closed_message":"all gone"}`, func(c *waitroom.RoomConfig) { c.Closed, c.ClosedMessage = true, "all gone" }},
		{`{"pow_difficulty":0}`, func(c *waitroom.RoomConfig) { c.PoWDifficulty = 0 }},
		{`{"max_waiting":50}`, func(c *waitroom.RoomConfig) { c.MaxWaiting = 50 }},
		{`{"max_joins_per_second":20}`, func(c *waitroom.RoomConfig) { c.MaxJoinsPerSecond = 20 }},
		{`{"template":{"title":"U","primary_color":"#112233"}}`, func(c *waitroom.RoomConfig) {
			c.Template = waitroom.RoomTemplate{Title: "U", PrimaryColor: "#112233"}
		}},
		{`{"template":null}`, func(c *waitroom.RoomConfig) { c.Template = waitroom.RoomTemplate{} }},
		{`{}`, func(*waitroom.RoomConfig) {}},
	} {
		pc.change(&want)
		e.must(t, http.StatusOK, req{method: "PATCH", path: path, body: pc.body, auth: admin})
		if cfg, err := e.store.Config(context.Background(), room); err != nil || !cfg.Equal(want) {
			t.Fatalf("after PATCH %s: config = %+v, %v\nwant %+v", pc.body, cfg, err, want)
		}
	}
	// A PATCH that would make the whole invalid changes nothing.
	if a := e.do(t, req{method: "PATCH", path: path, body: `{"arrival_seconds":1000}`, auth: admin}); a.status != 400 || a.str("field") != "arrival_seconds" {
		t.Errorf("PATCH arrival over the lease = %d %s, want 400 naming arrival_seconds", a.status, a.raw)
	}
	// Every bad field of the template is named at once, the first in
	// "field", all in "errors".
	if a := e.do(t, req{method: "PATCH", path: path, body: `{"template":{"primary_color":"red","background_color":"blue"}}`, auth: admin}); a.status != 400 ||
		a.str("field") != "template.primary_color" || !strings.Contains(string(a.raw), `"template.background_color"`) {
		t.Errorf("PATCH with two bad colours = %d %s, want 400 naming template.primary_color and template.background_color", a.status, a.raw)
	}
	// A PATCH with one bad field writes none of the others.
	if a := e.do(t, req{method: "PATCH", path: path, body: `{"capacity":3,"paused":"yes"}`, auth: admin}); a.status != 400 || a.str("field") != "paused" {
		t.Errorf("PATCH with a bad paused = %d %s, want 400 naming paused", a.status, a.raw)
	}
	if cfg, err := e.store.Config(context.Background(), room); err != nil || !cfg.Equal(want) {
		t.Fatalf("after a refused PATCH: config = %+v, %v\nwant %+v", cfg, err, want)
	}
	if a := e.do(t, req{method: "PATCH", path: "/v1/rooms/nope-" + randomName(), body: `{"capacity":1}`, auth: admin}); a.status != 404 {
		t.Errorf("PATCH of an unknown room = %d %s, want 404", a.status, a.raw)
	}

	list := e.must(t, http.StatusOK, req{method: "GET", path: "/v1/rooms", auth: admin})
	if !strings.Contains(string(list.raw), `"room":"`+room+`"`) {
		t.Errorf("GET /v1/rooms = %s, want %s listed", list.raw, room)
	}
	got := e.must(t, http.StatusOK, req{method: "GET", path: path, auth: admin})
	if cfg, _ := got.json["config"].(map[string]any); cfg["closed_message"] != "all gone" || cfg["capacity"] != 9.0 {
		t.Errorf("GET room config = %s", got.raw)
	}
	// The waiting page reads these at the top level.
	if got.json["closed"] != true || got.json["message"] != "all gone" || got.json["paused"] != false ||
		got.json["opens_at"] != nil || got.json["pow_difficulty"] != 0.0 {
		t.Errorf("GET room top-level page fields = %s", got.raw)
	}
	if a := e.do(t, req{method: "DELETE", path: path, auth: admin}); a.status != http.StatusNoContent {
		t.Fatalf("DELETE = %d %s", a.status, a.raw)
	}
	if a := e.do(t, req{method: "GET", path: path}); a.status != 404 {
		t.Errorf("GET after DELETE = %d, want 404", a.status)
	}
	if a := e.do(t, req{method: "DELETE", path: path, auth: admin}); a.status != 404 {
		t.Errorf("second DELETE = %d, want 404", a.status)
	}
}

func TestStoreDownIs503(t *testing.T) {
	m := miniredis.RunT(t)
	// No retries: each request fails at the first refused dial.
	client := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { client.Close() })
	b := backend{client: client, mini: m}
	e := newEnv(t, b, true)
	room := e.newRoom(t, `{"capacity":1}`)
	tok := join(t, e, room, "alice").str("ticket_token")
	b.mini.Close()
	for _, r := range []req{
		{method: "GET", path: "/v1/rooms/" + room},
		{method: "POST", path: "/v1/rooms/" + room + "/tickets", body: `{"user_id":"bob"}`},
		{method: "GET", path: ticketPath(room, "alice"), auth: "Bearer " + tok},
		{method: "DELETE", path: ticketPath(room, "alice"), auth: "Bearer " + tok},
		{method: "PUT", path: "/v1/rooms/" + room, body: roomBody(t, `{}`), auth: "Bearer " + adminToken},
	} {
		a := e.do(t, r)
		if a.status != http.StatusServiceUnavailable || a.errCode() != "unavailable" || !strings.Contains(a.errMessage(), "unavailable") {
			t.Errorf("%s %s with Redis down = %d %s, want 503 unavailable", r.method, r.path, a.status, a.raw)
		}
		if strings.Contains(string(a.raw), "refused") || strings.Contains(string(a.raw), "127.0.0.1") {
			t.Errorf("the 503 shows the cause to the client: %s", a.raw)
		}
	}
	// Not ready, naming Redis; still alive.
	if a := e.do(t, req{method: "GET", path: "/readyz"}); a.status != http.StatusServiceUnavailable || !strings.Contains(string(a.raw), `"redis"`) || a.header.Get("Retry-After") == "" {
		t.Errorf("/readyz with Redis down = %d %s, want 503 naming redis, with Retry-After", a.status, a.raw)
	}
	e.must(t, http.StatusOK, req{method: "GET", path: "/healthz"})
	// A scrape still answers, reporting the store down.
	scrape := e.must(t, http.StatusOK, req{method: "GET", path: "/metrics", auth: "Bearer " + adminToken})
	if !bytes.Contains(scrape.raw, []byte("stampede_waitroom_store_up 0")) {
		t.Errorf("/metrics with Redis down lacks stampede_waitroom_store_up 0:\n%s", scrape.raw)
	}
}

func TestMetricsHealthzAndPage(t *testing.T) {
	e := newEnv(t, miniBackend(t), true)
	room := e.newRoom(t, `{"capacity":3,"admit_interval_ms":60000}`)
	join(t, e, room, "a")
	join(t, e, room, "b")
	waitFor(t, "the service to find the room", func() bool { return slices.Contains(e.srv.Service().Rooms(), room) })

	m := e.must(t, http.StatusOK, req{method: "GET", path: "/metrics", auth: "Bearer " + adminToken})
	for _, want := range []string{
		`stampede_waitroom_room_waiting{room="` + room + `"} 2`,
		`stampede_waitroom_room_active{room="` + room + `"} 0`,
		`stampede_waitroom_room_capacity{room="` + room + `"} 3`,
		`stampede_waitroom_room_oldest_wait_seconds{room="` + room + `"}`,
		`stampede_waitroom_store_up 1`,
		`http_requests_total{code="201",method="POST",route="/v1/rooms/{room}/tickets"} 2`,
		`http_request_duration_seconds_bucket{method="POST",route="/v1/rooms/{room}/tickets",le=`,
		`go_goroutines`,
	} {
		if !bytes.Contains(m.raw, []byte(want)) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	if r := e.must(t, http.StatusOK, req{method: "GET", path: "/readyz"}); r.str("status") != "ready" {
		t.Errorf("/readyz = %s", r.raw)
	}
	if o := e.must(t, http.StatusOK, req{method: "GET", path: "/openapi.json"}); !bytes.Equal(o.raw, api.OpenAPI().JSON) || o.str("openapi") != "3.0.3" {
		t.Errorf("/openapi.json does not serve the description: %.200s", o.raw)
	}
	h := e.must(t, http.StatusOK, req{method: "GET", path: "/healthz"})
	if h.str("status") != "ok" {
		t.Errorf("/healthz = %s", h.raw)
	}

	// The page itself is tested in page_test.go.
	if p := e.must(t, http.StatusOK, req{method: "GET", path: "/rooms/" + room}); !strings.HasPrefix(p.header.Get("Content-Type"), "text/html") {
		t.Errorf("page Content-Type = %q", p.header.Get("Content-Type"))
	}
	if a := e.do(t, req{method: "GET", path: "/rooms/bad.name"}); a.status != http.StatusBadRequest {
		t.Errorf("page of a bad room name = %d", a.status)
	}
}

func TestConfigValidation(t *testing.T) {
	cfg := api.DefaultHandlerConfig()
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "admin_token") {
		t.Errorf("default config without an admin token: %v, want an error naming admin_token", err)
	}
	cfg.AdminToken = adminToken
	if err := cfg.Validate(); err != nil {
		t.Errorf("valid config: %v", err)
	}
	for field, mutate := range map[string]func(*api.HandlerConfig){
		"ticket_ttl": func(c *api.HandlerConfig) { c.TicketTTL = 0 },
		"max_body":   func(c *api.HandlerConfig) { c.MaxBody = 1 },
	} {
		c := cfg
		mutate(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: error %v, want one naming it", field, err)
		}
	}

	store := redisstore.New(miniBackend(t).client)
	opts := api.DefaultConfig()
	opts.AdminToken = adminToken
	opts.Secret = []byte("short")
	if _, err := startServer(t, context.Background(), store, opts); err == nil || !strings.Contains(err.Error(), "secret") {
		t.Errorf("New with a short secret: %v, want an error naming the secret", err)
	}
	opts.Secret, opts.AdminToken = testSecret, "short"
	if _, err := startServer(t, context.Background(), store, opts); err == nil || !strings.Contains(err.Error(), "admin_token") {
		t.Errorf("New with a short admin token: %v, want an error naming admin_token", err)
	}
	// Every bad field at once.
	opts = api.DefaultConfig()
	opts.Secret, opts.AdminToken, opts.CheckoutKey, opts.KeyEpoch = []byte("short"), "short", "short", "bad epoch"
	err := opts.Validate()
	var fields []string
	for _, e := range stampede.FieldErrors(err) {
		fields = append(fields, e.Field)
	}
	if got, want := strings.Join(fields, ","), "store,secret,key_epoch,admin_token,checkout_key"; got != want {
		t.Errorf("Validate named %s, want %s (%v)", got, want, err)
	}
}

// fuzzEnv is a handler-only server with one room, for the fuzz targets.
func fuzzEnv(f *testing.F) (*env, string) {
	e := newEnv(f, miniBackend(f), false)
	room := e.newRoom(f, `{"capacity":3,"admit_interval_ms":60000}`)
	return e, room
}

// checkFuzzAnswer fails on a 5xx or an answer that is not JSON.
func checkFuzzAnswer(t *testing.T, e *env, r req) {
	a := e.do(t, r) // fails on invalid JSON
	if a.status >= 500 {
		t.Fatalf("%s %s with %q = %d\n%s", r.method, r.path, r.body, a.status, a.raw)
	}
	if !json.Valid(a.raw) {
		t.Fatalf("answer is not JSON: %s", a.raw)
	}
	if a.status >= 400 && (a.errCode() == "" || a.errMessage() == "") {
		t.Fatalf("error answer without code and message: %s", a.raw)
	}
}

func FuzzJoinBody(f *testing.F) {
	for _, s := range []string{
		`{"user_id":"alice"}`, `{"user_id":""}`, `{"user_id":"\u0000"}`, `{"user_id":"\ud800"}`, `{"user_id":1}`,
		`{"user_id":"a","x":1}`, `{"user_id":"a"}x`, `{`, `[]`, `null`, `""`, "", `{"user_id":"` + strings.Repeat("é", 80) + `"}`,
		`{"user_id":{"a":[1,2,{}]}}`, `{"USER_ID":"caps"}`, "{\"user_id\":\"\xff\xfe\"}",
		`{"user_id":"a","challenge":"x","solution":"y"}`, `{"user_id":"a","challenge":null,"solution":1}`,
	} {
		f.Add([]byte(s))
	}
	e, room := fuzzEnv(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		checkFuzzAnswer(t, e, req{method: "POST", path: "/v1/rooms/" + room + "/tickets", body: string(body), contentType: "application/json"})
	})
}

func FuzzConfigBody(f *testing.F) {
	for _, s := range []string{
		`{"capacity":1,"lease_seconds":60,"admit_interval_ms":200,"mode":"atomic"}`, `{}`, `{"capacity":-1}`,
		`{"capacity":1e400}`, `{"lease_seconds":-0}`, `{"lease_seconds":1e-300}`, `{"admit_interval_ms":9223372036854775807}`,
		`{"admit_interval_ms":-9223372036854775808}`, `{"mode":null}`, `{"mode":""}`, `{"capacity":"1"}`, `{"capacity":true}`,
		`{"lease_seconds":86400.0000001}`, `{`, `}`, `null`,
		`{"pow_difficulty":29}`, `{"pow_difficulty":-1}`, `{"template":null}`, `{"template":{"title":"<script>x</script>","logo_url":"javascript:x"}}`,
		`{"template":{"primary_color":"#zzzzzz","text_ko":"\u2028"}}`, `{"template":{"unknown":1}}`,
	} {
		f.Add([]byte(s))
	}
	e, room := fuzzEnv(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		checkFuzzAnswer(t, e, req{method: "PUT", path: "/v1/rooms/" + room, body: string(body), contentType: "application/json", auth: "Bearer " + adminToken})
	})
}

// TestDeleteStopsAdmittersEverywhere: deleting a room stops its admitter
// on the instance that deleted it at once and on every other instance at
// its next room refresh, the last room included.
func TestDeleteStopsAdmittersEverywhere(t *testing.T) {
	b := miniBackend(t)
	e1, e2 := newEnv(t, b, false), newEnv(t, b, false)
	room := "del-" + randomName()
	e1.must(t, http.StatusOK, req{method: "PUT", path: "/v1/rooms/" + room, body: roomBody(t, `{}`), auth: "Bearer " + adminToken})
	join(t, e1, room, "alice")
	for _, e := range []*env{e1, e2} {
		waitFor(t, "both instances to admit for the room", func() bool { return slices.Contains(e.srv.Service().Rooms(), room) })
	}
	e1.must(t, http.StatusNoContent, req{method: "DELETE", path: "/v1/rooms/" + room, auth: "Bearer " + adminToken})
	if rooms := e1.srv.Service().Rooms(); len(rooms) != 0 {
		t.Errorf("the deleting instance still admits for %v", rooms)
	}
	waitFor(t, "the other instance to stop the deleted room's admitter", func() bool { return len(e2.srv.Service().Rooms()) == 0 })
	if keys, err := b.client.Keys(context.Background(), "{"+room+"}*").Result(); err != nil || len(keys) != 0 {
		t.Errorf("keys left after DELETE: %v, %v", keys, err)
	}
}

// TestClosedTicketOverHTTP: closing a room tells a waiting user, through
// their ticket, with the room's message.
func TestClosedTicketOverHTTP(t *testing.T) {
	e := newEnv(t, miniBackend(t), false)
	room := e.newRoom(t, `{"capacity":1,"admit_interval_ms":60000}`)
	join(t, e, room, "alice")
	bobTok := join(t, e, room, "bob").str("ticket_token")
	e.must(t, http.StatusOK, req{method: "PATCH", path: "/v1/rooms/" + room, body: `{"closed":true,"closed_message":"sold out"}`, auth: "Bearer " + adminToken})
	a := e.must(t, http.StatusOK, req{method: "GET", path: ticketPath(room, "bob"), auth: "Bearer " + bobTok})
	if a.str("state") != "closed" || a.str("message") != "sold out" {
		t.Errorf("bob's ticket after closing = %s, want closed with the message", a.raw)
	}
}

// TestPollHintWithinAbandonWindow: a waiting user told to poll is never
// told to wait longer than half the room's abandon_after_seconds, so that
// following the hint keeps their place.
func TestPollHintWithinAbandonWindow(t *testing.T) {
	e := newEnv(t, miniBackend(t), false)
	room := e.newRoom(t, `{"capacity":1,"admit_interval_ms":60000,"abandon_after_seconds":4}`)
	waitFor(t, "the service to run the room's admitter", func() bool { return slices.Contains(e.srv.Service().Rooms(), room) })
	join(t, e, room, "first")
	for i := range 200 {
		join(t, e, room, fmt.Sprintf("u%03d", i))
	}
	a := join(t, e, room, "last")
	if ms, _ := a.json["poll_after_ms"].(float64); ms <= 0 || ms > 2000 {
		t.Errorf("poll_after_ms far back in a room abandoning after 4 s = %v, want at most 2000", a.json["poll_after_ms"])
	}
}
