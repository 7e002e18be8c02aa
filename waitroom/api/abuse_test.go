package api_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stampede-lab/stampede/internal/httpapi/apitest"
	"github.com/stampede-lab/stampede/waitroom"
	"github.com/stampede-lab/stampede/waitroom/api"
	"github.com/stampede-lab/stampede/waitroom/redisstore"
)

// fakeClock is a clock the tests move by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// abuseEnv is a handler (no network) with a join limit and a fake clock;
// requests set their own peer address.
type abuseEnv struct {
	h     http.Handler
	api   *apitest.Validator
	clock *fakeClock
}

func newAbuseEnv(t *testing.T, limit api.JoinLimitConfig) *abuseEnv {
	t.Helper()
	store := redisstore.New(miniBackend(t).client)
	scfg := waitroom.DefaultServiceConfig()
	scfg.Logger = slog.New(slog.DiscardHandler)
	svc, err := waitroom.NewService(store, scfg)
	if err != nil {
		t.Fatal(err)
	}
	clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	signer, err := waitroom.NewSigner(testSecret, clock.Now)
	if err != nil {
		t.Fatal(err)
	}
	cfg := api.DefaultHandlerConfig()
	cfg.AdminToken, cfg.Logger, cfg.Now, cfg.JoinLimit = adminToken, slog.New(slog.DiscardHandler), clock.Now, limit
	cfg.AllowUnsignedUsers = true // these tests name their users; identity has its own tests
	h, err := api.NewHandler(svc, signer, cfg, nil)
	if err != nil {
		t.Fatalf("NewHandler: %v", err)
	}
	return &abuseEnv{h: h, api: apitest.New(t, api.OpenAPI()), clock: clock}
}

// do sends one request from peer (host:port) with extra headers.
func (e *abuseEnv) do(t *testing.T, method, path, body, peer string, hdr map[string]string) answer {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	r := httptest.NewRequest(method, path, rd)
	r.RemoteAddr = peer
	if body != "" {
		r.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		r.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	e.h.ServeHTTP(rec, r)
	a := answer{status: rec.Code, header: rec.Header(), raw: rec.Body.Bytes()}
	if err := e.api.Check(r, rec.Result(), a.raw); err != nil {
		t.Errorf("apitest: %v", err)
	}
	json.Unmarshal(a.raw, &a.json)
	return a
}

func (e *abuseEnv) room(t *testing.T, body string) string {
	t.Helper()
	room := "abuse-" + randomName()
	a := e.do(t, "PUT", "/v1/rooms/"+room, roomBody(t, body), "127.0.0.1:1", map[string]string{"Authorization": "Bearer " + adminToken})
	if a.status != http.StatusOK {
		t.Fatalf("PUT room = %d %s", a.status, a.raw)
	}
	return room
}

func TestJoinRateLimit(t *testing.T) {
	proxy := netip.MustParsePrefix("10.0.0.0/8")
	e := newAbuseEnv(t, api.JoinLimitConfig{Rate: 0.5, Burst: 3, MaxClients: 100, TrustedProxies: []netip.Prefix{proxy}})
	room := e.room(t, `{"capacity":5}`)
	join := func(peer, xff string, n int) answer {
		hdr := map[string]string{}
		if xff != "" {
			hdr["X-Forwarded-For"] = xff
		}
		return e.do(t, "POST", "/v1/rooms/"+room+"/tickets", `{"user_id":"u`+strconv.Itoa(n)+`"}`, peer, hdr)
	}

	// A burst of 3 passes, the 4th is refused with 429 and Retry-After.
	for i := range 3 {
		if a := join("192.0.2.1:5000", "", i); a.status != http.StatusCreated {
			t.Fatalf("join %d within the burst = %d %s", i, a.status, a.raw)
		}
	}
	a := join("192.0.2.1:5001", "", 3)
	if a.status != http.StatusTooManyRequests || a.errCode() != "rate_limited" {
		t.Fatalf("join over the burst = %d %s, want 429 rate_limited", a.status, a.raw)
	}
	if ra := a.header.Get("Retry-After"); ra != "2" {
		t.Errorf("Retry-After = %q, want 2 (one join per 2 s)", ra)
	}
	if ct := a.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/problem+json") {
		t.Errorf("Content-Type = %q", ct)
	}
	// Another address is not affected; after 2 s one more join passes.
	if a := join("192.0.2.2:5000", "", 100); a.status != http.StatusCreated {
		t.Errorf("another address = %d %s", a.status, a.raw)
	}
	e.clock.Advance(2 * time.Second)
	if a := join("192.0.2.1:5000", "", 4); a.status != http.StatusCreated {
		t.Errorf("after Retry-After = %d %s", a.status, a.raw)
	}

	// X-Forwarded-For from an untrusted peer is ignored: the peer's own
	// bucket (empty) decides, whatever the header claims.
	if a := join("192.0.2.1:5000", "198.51.100.7", 5); a.status != http.StatusTooManyRequests {
		t.Errorf("untrusted peer with X-Forwarded-For = %d, want 429 (the header must be ignored)", a.status)
	}
	// From the trusted proxy, the forwarded client has its own bucket,
	// so rotating the header would reset nothing for 192.0.2.1 ...
	for i := range 3 {
		if a := join("10.1.2.3:4000", "203.0.113.9, 10.9.9.9", 10+i); a.status != http.StatusCreated {
			t.Fatalf("forwarded join %d = %d %s", i, a.status, a.raw)
		}
	}
	if a := join("10.1.2.3:4001", "203.0.113.9", 13); a.status != http.StatusTooManyRequests {
		t.Errorf("4th forwarded join of 203.0.113.9 = %d, want 429", a.status)
	}
	// ... and the proxy itself is not the one limited.
	if a := join("10.1.2.3:4000", "203.0.113.10", 14); a.status != http.StatusCreated {
		t.Errorf("another forwarded client = %d %s", a.status, a.raw)
	}
	// A forwarded claim of 192.0.2.1 counts against 192.0.2.1's bucket.
	if a := join("10.1.2.3:4000", "192.0.2.1", 15); a.status != http.StatusTooManyRequests {
		t.Errorf("forwarded 192.0.2.1 = %d, want 429", a.status)
	}
	// IPv6 clients are limited by their /64.
	for i := range 3 {
		join("[2001:db8:1:2::"+strconv.Itoa(i+1)+"]:80", "", 20+i)
	}
	if a := join("[2001:db8:1:2::ff]:80", "", 23); a.status != http.StatusTooManyRequests {
		t.Errorf("4th join from one IPv6 /64 = %d, want 429", a.status)
	}
	// Reads are not limited.
	if a := e.do(t, "GET", "/v1/rooms/"+room, "", "192.0.2.1:5000", nil); a.status != http.StatusOK {
		t.Errorf("GET room from a limited address = %d", a.status)
	}
}

func TestJoinLimitMemoryBounded(t *testing.T) {
	e := newAbuseEnv(t, api.JoinLimitConfig{Rate: 0.001, Burst: 1, MaxClients: 2})
	room := e.room(t, `{"capacity":5}`)
	join := func(peer string, n int) int {
		return e.do(t, "POST", "/v1/rooms/"+room+"/tickets", `{"user_id":"m`+strconv.Itoa(n)+`"}`, peer, nil).status
	}
	join("192.0.2.1:1", 0)
	if s := join("192.0.2.1:1", 1); s != http.StatusTooManyRequests {
		t.Fatalf("second join = %d, want 429", s)
	}
	// Two other clients push 192.0.2.1 out of the 2-bucket table: it is
	// forgotten, not kept forever.
	join("192.0.2.2:1", 2)
	join("192.0.2.3:1", 3)
	if s := join("192.0.2.1:1", 4); s != http.StatusCreated {
		t.Errorf("join after eviction = %d, want 201", s)
	}
}

func TestJoinLimitConfigValidate(t *testing.T) {
	for field, c := range map[string]api.JoinLimitConfig{
		"join_rate":         {Rate: -1},
		"join_burst":        {Rate: 1, Burst: 0, MaxClients: 1},
		"join_clients":      {Rate: 1, Burst: 1},
		"join_prefix_rate":  {Rate: 1, Burst: 1, MaxClients: 1, PrefixRate: -2},
		"join_prefix_burst": {Rate: 1, Burst: 1, MaxClients: 1, PrefixRate: 5},
	} {
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%+v: %v, want an error naming %s", c, err, field)
		}
	}
	if err := api.DefaultJoinLimitConfig().Validate(); err != nil {
		t.Errorf("default: %v", err)
	}
	got, err := api.ParseTrustedProxies(" 10.0.0.0/8, 192.0.2.1,::1 ,")
	if err != nil || len(got) != 3 || got[1].String() != "192.0.2.1/32" || got[2].String() != "::1/128" {
		t.Errorf("ParseTrustedProxies = %v, %v", got, err)
	}
	if _, err := api.ParseTrustedProxies("10.0.0.0/33"); err == nil {
		t.Error("ParseTrustedProxies accepted /33")
	}
	cfg := api.DefaultHandlerConfig()
	cfg.AdminToken = adminToken
	cfg.JoinLimit.Rate = 1
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "join_burst") {
		t.Errorf("handler config with a bad limit: %v, want one naming join_burst", err)
	}
	cfg = api.DefaultHandlerConfig()
	cfg.AdminToken, cfg.OnAdmit = adminToken, "//evil.example/x"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "on_admit") {
		t.Errorf("OnAdmit //evil: %v, want an error naming on_admit", err)
	}
}

// solve finds a solution of challenge at difficulty by brute force.
func solve(t testing.TB, challenge string, difficulty int) string {
	for i := 0; ; i++ {
		s := strconv.FormatInt(int64(i), 36)
		if waitroom.SolvesChallenge(challenge, s, difficulty) {
			return s
		}
		if i > 1<<26 {
			t.Fatal("no solution found")
		}
	}
}

func TestProofOfWork(t *testing.T) {
	e := newAbuseEnv(t, api.JoinLimitConfig{})
	const bits = 10
	room := e.room(t, `{"capacity":5,"pow_difficulty":10}`)
	other := e.room(t, `{"capacity":5,"pow_difficulty":10}`)
	open := e.room(t, `{"capacity":5}`)
	peer := "192.0.2.1:1"
	challenge := func(room string) answer {
		a := e.do(t, "GET", "/v1/rooms/"+room+"/challenge", "", peer, nil)
		if a.status != http.StatusOK {
			t.Fatalf("GET challenge = %d %s", a.status, a.raw)
		}
		return a
	}
	join := func(room, user, body string) answer {
		if body == "" {
			body = `{"user_id":"` + user + `"}`
		}
		return e.do(t, "POST", "/v1/rooms/"+room+"/tickets", body, peer, nil)
	}
	withPoW := func(user, c, s string) string {
		return `{"user_id":"` + user + `","challenge":"` + c + `","solution":"` + s + `"}`
	}

	if a := e.do(t, "GET", "/v1/rooms/"+room, "", peer, nil); a.json["pow_difficulty"] != float64(bits) {
		t.Errorf("GET room pow_difficulty = %v", a.json["pow_difficulty"])
	}
	if a := challenge(open); a.json["difficulty"] != 0.0 || a.str("challenge") != "" {
		t.Errorf("challenge of a room without PoW = %s", a.raw)
	}
	if a := join(open, "free", ""); a.status != http.StatusCreated {
		t.Errorf("join without PoW where none is asked = %d %s", a.status, a.raw)
	}

	// Absent: 400 naming challenge, with the difficulty.
	a := join(room, "alice", "")
	if a.status != http.StatusBadRequest || a.str("field") != "challenge" || a.json["pow_difficulty"] != float64(bits) {
		t.Errorf("join without a challenge = %d %s", a.status, a.raw)
	}
	c := challenge(room)
	ch := c.str("challenge")
	if c.json["difficulty"] != float64(bits) || len(ch) != 43 || c.str("expires_at") == "" {
		t.Fatalf("challenge = %s", c.raw)
	}
	good := solve(t, ch, bits)
	bad := "x"
	for waitroom.SolvesChallenge(ch, bad, bits) {
		bad += "x"
	}
	for name, body := range map[string]string{
		"no solution":    `{"user_id":"alice","challenge":"` + ch + `"}`,
		"wrong solution": withPoW("alice", ch, bad),
		"bad characters": withPoW("alice", ch, "a b"),
		"forged":         withPoW("alice", strings.ToUpper(ch[:10])+ch[10:], good),
		"garbage":        withPoW("alice", "not-a-challenge", good),
	} {
		if a := join(room, "", body); a.status != http.StatusBadRequest || a.errCode() != "invalid" {
			t.Errorf("%s: join = %d %s, want 400", name, a.status, a.raw)
		}
	}
	// Another room's challenge does not do.
	oc := challenge(other).str("challenge")
	if a := join(room, "", withPoW("alice", oc, solve(t, oc, bits))); a.status != http.StatusBadRequest || a.str("field") != "challenge" {
		t.Errorf("another room's challenge = %d %s", a.status, a.raw)
	}
	// The right one passes once; a replay is forbidden.
	if a := join(room, "", withPoW("alice", ch, good)); a.status != http.StatusCreated {
		t.Fatalf("solved join = %d %s", a.status, a.raw)
	}
	if a := join(room, "", withPoW("bob", ch, good)); a.status != http.StatusForbidden || a.str("field") != "challenge" {
		t.Errorf("replayed challenge = %d %s, want 403", a.status, a.raw)
	}
	// An expired challenge is refused.
	c2 := challenge(room).str("challenge")
	s2 := solve(t, c2, bits)
	e.clock.Advance(waitroom.DefaultPoWConfig().TTL + time.Second)
	if a := join(room, "", withPoW("carol", c2, s2)); a.status != http.StatusBadRequest || !strings.Contains(a.errMessage(), "expired") {
		t.Errorf("expired challenge = %d %s", a.status, a.raw)
	}
	// A challenge issued at a lower difficulty than the room now asks.
	low := e.room(t, `{"capacity":5,"pow_difficulty":1}`)
	c3 := challenge(low).str("challenge")
	a = e.do(t, "PUT", "/v1/rooms/"+low, roomBody(t, `{"capacity":5,"pow_difficulty":12}`), peer, map[string]string{"Authorization": "Bearer " + adminToken})
	if a.status != http.StatusOK || a.json["pow_difficulty"] != 12.0 {
		t.Fatalf("raising the difficulty = %d %s", a.status, a.raw)
	}
	if a := join(low, "", withPoW("dave", c3, solve(t, c3, 1))); a.status != http.StatusBadRequest {
		t.Errorf("easier challenge = %d %s", a.status, a.raw)
	}
	// The difficulty is validated.
	a = e.do(t, "PUT", "/v1/rooms/"+low, roomBody(t, `{"pow_difficulty":99}`), peer, map[string]string{"Authorization": "Bearer " + adminToken})
	if a.status != http.StatusBadRequest || a.str("field") != "pow_difficulty" {
		t.Errorf("pow_difficulty 99 = %d %s", a.status, a.raw)
	}
}

func TestSolvesChallenge(t *testing.T) {
	if got := waitroom.LeadingZeroBits([]byte{0, 0, 0x1f, 0xff}); got != 19 {
		t.Errorf("LeadingZeroBits = %d, want 19", got)
	}
	if got := waitroom.LeadingZeroBits([]byte{0, 0}); got != 16 {
		t.Errorf("LeadingZeroBits of zeros = %d, want 16", got)
	}
	// Known answer: SHA-256("abc") = ba7816bf...: no leading zero bit.
	if waitroom.SolvesChallenge("ab", "c", 1) || !waitroom.SolvesChallenge("ab", "c", 0) {
		t.Error("SolvesChallenge on sha256(abc)")
	}
}

// FuzzParseChallenge feeds the challenge decoder and the solution check
// arbitrary strings: they must never panic, and a decoded challenge must
// encode the same fields back.
func FuzzParseChallenge(f *testing.F) {
	for _, s := range []string{"", "AQoAAAAA", strings.Repeat("A", 43), "AQ" + strings.Repeat("_", 41), strings.Repeat("=", 43), "é"} {
		f.Add(s, "0")
	}
	f.Fuzz(func(t *testing.T, challenge, solution string) {
		c, err := waitroom.ParseChallenge(challenge)
		if err == nil {
			if len(challenge) != 43 || c.Difficulty < 0 || c.Difficulty > 255 {
				t.Fatalf("ParseChallenge(%q) = %+v", challenge, c)
			}
		}
		if waitroom.ValidSolution(solution) && (len(solution) == 0 || len(solution) > waitroom.MaxSolutionLen) {
			t.Fatalf("ValidSolution(%q) is true", solution)
		}
		waitroom.SolvesChallenge(challenge, solution, 3)
	})
}

// TestChallengeNotFound: an unknown room has no challenge.
func TestChallengeNotFound(t *testing.T) {
	e := newAbuseEnv(t, api.JoinLimitConfig{})
	if a := e.do(t, "GET", "/v1/rooms/nope/challenge", "", "192.0.2.1:1", nil); a.status != http.StatusNotFound {
		t.Errorf("challenge of an unknown room = %d %s", a.status, a.raw)
	}
}
