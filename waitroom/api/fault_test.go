package api_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/stampede-lab/stampede/internal/httpapi/apitest"
	"github.com/stampede-lab/stampede/waitroom"
	"github.com/stampede-lab/stampede/waitroom/api"
	"github.com/stampede-lab/stampede/waitroom/redisstore"
)

// Fault tests: the store goes away and comes back, and an instance dies in
// the middle of a run. Both run on miniredis, so they need no set-up.
//
// Every identifier of this file starts with "fault" so that it cannot clash
// with the helpers of the package's other test files.

const faultAdminToken = "fault-admin-token-0123456789abcdef"

var faultSecret = []byte("fault-test-secret-0123456789abcdef0123456789")

// faultStart runs one waiting-room instance on store behind an httptest
// server. Both are closed when the test ends (closing twice is harmless).
func faultStart(t *testing.T, store waitroom.Store, instance string, onPass func(string, waitroom.Mode, time.Duration, waitroom.AdmitResult, error)) (*running, *httptest.Server) {
	t.Helper()
	return faultStartWith(t, store, instance, onPass, nil)
}

// faultStartWith is faultStart with the options changed by change (if
// not nil) after the tests' defaults.
func faultStartWith(t *testing.T, store waitroom.Store, instance string, onPass func(string, waitroom.Mode, time.Duration, waitroom.AdmitResult, error), change func(*api.Config)) (*running, *httptest.Server) {
	t.Helper()
	opts := api.DefaultConfig()
	opts.AllowUnsignedUsers = true // these tests join as named users
	opts.Instance = instance
	opts.Immediate = true
	opts.Secret, opts.AdminToken = faultSecret, faultAdminToken
	opts.Logger = slog.New(slog.DiscardHandler)
	opts.RoomRefresh = 50 * time.Millisecond
	opts.OnPass = onPass
	if change != nil {
		change(&opts)
	}
	srv, err := startServer(t, context.Background(), store, opts)
	if err != nil {
		t.Fatalf("NewServer(%s): %v", instance, err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		ts.Close()
		srv.Close()
	})
	return srv, ts
}

// faultHTTPClient is an HTTP client of its own (so that closing one
// test's servers never touches another test's pooled connections) that
// checks every answer against the OpenAPI description.
func faultHTTPClient(t *testing.T) *http.Client {
	tr := &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: apitest.New(t, api.OpenAPI()).Transport(t, tr), Timeout: 10 * time.Second}
}

func faultRand() string {
	b := make([]byte, 6)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// faultAnswer is one HTTP answer.
type faultAnswer struct {
	status     int
	ctype      string
	retryAfter string
	raw        []byte
	json       map[string]any
}

func (a faultAnswer) str(key string) string { s, _ := a.json[key].(string); return s }

// errCode and errMessage read the code and detail of a problem answer.
func (a faultAnswer) errCode() string { return a.str("code") }

func (a faultAnswer) errMessage() string { return a.str("detail") }

// faultDo sends one request. An error is a transport failure (no answer);
// an answer whose body is not JSON is returned with json nil.
func faultDo(hc *http.Client, method, url, body, auth string) (faultAnswer, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return faultAnswer{}, err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	res, err := hc.Do(req)
	if err != nil {
		return faultAnswer{}, err
	}
	defer res.Body.Close()
	a := faultAnswer{status: res.StatusCode, ctype: res.Header.Get("Content-Type"), retryAfter: res.Header.Get("Retry-After")}
	if a.raw, err = io.ReadAll(res.Body); err != nil {
		return faultAnswer{}, err
	}
	if strings.HasPrefix(a.ctype, "application/json") || strings.HasPrefix(a.ctype, "application/problem+json") {
		_ = json.Unmarshal(a.raw, &a.json)
	}
	return a, nil
}

// faultMust sends a request that must answer status.
func faultMust(t *testing.T, hc *http.Client, status int, method, url, body, auth string) faultAnswer {
	t.Helper()
	a, err := faultDo(hc, method, url, body, auth)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	if a.status != status {
		t.Fatalf("%s %s = %d, want %d\n%s", method, url, a.status, status, a.raw)
	}
	return a
}

// faultWaitFor polls cond every 5 ms until it holds, failing after limit.
func faultWaitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", limit, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// faultCapWatch reads ZCARD of a room's active set about every millisecond
// through a client of its own, and keeps the largest value seen.
type faultCapWatch struct {
	stopOnce sync.Once
	stopCh   chan struct{}
	done     chan struct{}
	max      atomic.Int64
	samples  atomic.Int64
	failures atomic.Int64 // reads that failed (the store was down)

	mu     sync.Mutex
	slowAt []time.Time // when reads failed: the store down, or too slow to answer in 200 ms
}

// storeSlowNear reports whether the observer failed to read the store
// within d of at: then a 503 at that moment is the store's own (down, or
// starved of CPU on a loaded machine), not the instance's.
func (w *faultCapWatch) storeSlowNear(at time.Time, d time.Duration) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.slowAt {
		if s.Sub(at) < d && at.Sub(s) < d {
			return true
		}
	}
	return false
}

func faultWatchCap(t *testing.T, addr, room string) *faultCapWatch {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1, DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond})
	w := &faultCapWatch{stopCh: make(chan struct{}), done: make(chan struct{})}
	key := redisstore.KeysFor(room).Active
	go func() {
		defer close(w.done)
		defer client.Close()
		for {
			select {
			case <-w.stopCh:
				return
			default:
			}
			n, err := client.ZCard(context.Background(), key).Result()
			if err != nil {
				w.failures.Add(1)
				w.mu.Lock()
				w.slowAt = append(w.slowAt, time.Now())
				w.mu.Unlock()
				time.Sleep(20 * time.Millisecond) // the store is down: no need to hammer it
				continue
			}
			w.samples.Add(1)
			for {
				cur := w.max.Load()
				if n <= cur || w.max.CompareAndSwap(cur, n) {
					break
				}
			}
			time.Sleep(time.Millisecond)
		}
	}()
	t.Cleanup(w.stop)
	return w
}

func (w *faultCapWatch) stop() {
	w.stopOnce.Do(func() { close(w.stopCh) })
	<-w.done
}

// faultCheckAccounting reads the room's counters straight from the store
// and checks that every joined user is waiting, active, or gone in exactly
// one counted way.
func faultCheckAccounting(t *testing.T, store *redisstore.Store, room string) waitroom.RoomStats {
	t.Helper()
	st, err := store.Stats(context.Background(), room)
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	if sum := st.Waiting + st.Active + st.ReleasedTotal + st.ExpiredTotal + st.LeftTotal; st.JoinedTotal != sum {
		t.Errorf("accounting broken: joined %d != waiting %d + active %d + released %d + expired %d + left %d = %d",
			st.JoinedTotal, st.Waiting, st.Active, st.ReleasedTotal, st.ExpiredTotal, st.LeftTotal, sum)
	}
	if gone := st.Active + st.ReleasedTotal + st.ExpiredTotal; st.AdmittedTotal != gone {
		t.Errorf("admissions unaccounted: admitted %d != active %d + released %d + expired %d", st.AdmittedTotal, st.Active, st.ReleasedTotal, st.ExpiredTotal)
	}
	return st
}

// faultCheck503 checks the answer of an API call made while the store is
// down: a 503 problem with code unavailable and Retry-After, a detail that
// says what is wrong, and nothing of the cause's internals.
func faultCheck503(t *testing.T, what string, a faultAnswer) {
	t.Helper()
	if a.status == http.StatusInternalServerError {
		t.Errorf("%s with Redis down = 500 (a store outage must never be an internal error):\n%s", what, a.raw)
		return
	}
	if a.status != http.StatusServiceUnavailable || a.errCode() != string(waitroom.CodeUnavailable) {
		t.Errorf("%s with Redis down = %d %s, want 503 with code unavailable", what, a.status, a.raw)
		return
	}
	if a.ctype != "application/problem+json" || a.retryAfter == "" {
		t.Errorf("%s with Redis down: Content-Type %q, Retry-After %q; want application/problem+json with Retry-After", what, a.ctype, a.retryAfter)
	}
	msg := a.errMessage()
	if !strings.Contains(msg, "unavailable") || !strings.Contains(msg, "try again") {
		t.Errorf("%s with Redis down: message %q does not say the store is unavailable and to try again", what, msg)
	}
	for _, leak := range []string{"refused", "127.0.0.1", "dial", "EOF", "redis:"} {
		if bytes.Contains(a.raw, []byte(leak)) {
			t.Errorf("%s with Redis down: the answer shows the cause (%q) to the client: %s", what, leak, a.raw)
		}
	}
}

// TestRedisOutageAnswers503AndRecovers stops Redis under a running
// instance, checks that the API answers 503 unavailable (never 500), starts
// Redis again on the same address with the same data, and checks that the
// instance recovers on its own: joins succeed, admission resumes, the cap
// and the accounting hold.
func TestRedisOutageAnswers503AndRecovers(t *testing.T) {
	// miniredis directly (not redisstore.StartEmbedded): it can be closed
	// and restarted on the same port. The databases belong to the
	// Miniredis value, not to its listener, so Restart keeps every key
	// (checked below). ClockTTL expires keys with a TTL by the wall clock;
	// the atomic mode uses none, but a real server would do the same.
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		t.Fatalf("start miniredis: %v", err)
	}
	t.Cleanup(m.Close)
	m.ClockTTL(true)
	addr := m.Addr()

	// One retry and one dial attempt per command: an outage answers in
	// milliseconds instead of after go-redis's default dial backoff.
	client := redis.NewClient(&redis.Options{
		Addr: addr, MaxRetries: 1, DialerRetries: 1,
		DialTimeout: time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second,
	})
	t.Cleanup(func() { client.Close() })
	store := redisstore.New(client)

	var passOK, passFailed atomic.Int64
	_, ts := faultStart(t, store, "fault-outage", func(_ string, _ waitroom.Mode, _ time.Duration, _ waitroom.AdmitResult, err error) {
		if err != nil {
			passFailed.Add(1)
		} else {
			passOK.Add(1)
		}
	})
	hc := faultHTTPClient(t)
	const capacity = 3
	room := "fault-outage-" + faultRand()
	roomURL := ts.URL + "/v1/rooms/" + room
	faultMust(t, hc, http.StatusOK, "PUT", roomURL, roomBody(t, `{"capacity":3,"lease_seconds":60,"admit_interval_ms":20}`), "Bearer "+faultAdminToken)
	watch := faultWatchCap(t, addr, room)

	tokens := map[string]string{}
	var users []string
	joinOK := func(user string) {
		t.Helper()
		a := faultMust(t, hc, http.StatusCreated, "POST", roomURL+"/tickets", `{"user_id":"`+user+`"}`, "")
		tokens[user] = "Bearer " + a.str("ticket_token")
		users = append(users, user)
	}
	ticket := func(user string) faultAnswer {
		t.Helper()
		return faultMust(t, hc, http.StatusOK, "GET", roomURL+"/tickets/"+user, "", tokens[user])
	}
	stats := func() waitroom.RoomStats {
		t.Helper()
		st, err := store.Stats(context.Background(), room)
		if err != nil {
			t.Fatalf("Stats: %v", err)
		}
		return st
	}

	for i := range 6 {
		joinOK(fmt.Sprintf("u%d", i))
	}
	faultWaitFor(t, 5*time.Second, "the first three users to be admitted", func() bool {
		st := stats()
		return st.Active == capacity && st.Waiting == 3
	})

	// --- Redis goes away. ---
	m.Close()
	failedBefore := passFailed.Load()
	probes := []struct{ what, method, url, body, auth string }{
		{"POST join", "POST", roomURL + "/tickets", `{"user_id":"during-outage"}`, ""},
		{"GET room", "GET", roomURL, "", ""},
		{"GET ticket (admitted)", "GET", roomURL + "/tickets/u0", "", tokens["u0"]},
		{"GET ticket (waiting)", "GET", roomURL + "/tickets/u3", "", tokens["u3"]},
		{"DELETE ticket", "DELETE", roomURL + "/tickets/u5", "", tokens["u5"]},
	}
	// Several rounds: the first meets the pool's dead connections, the
	// later ones refused dials; meanwhile the admitter's passes fail.
	for round := range 4 {
		for _, p := range probes {
			a, err := faultDo(hc, p.method, p.url, p.body, p.auth)
			if err != nil {
				t.Fatalf("round %d: %s with Redis down: no answer at all: %v", round, p.what, err)
			}
			faultCheck503(t, fmt.Sprintf("round %d: %s", round, p.what), a)
		}
		time.Sleep(30 * time.Millisecond)
	}
	faultWaitFor(t, 5*time.Second, "an admission pass to fail while Redis is down", func() bool { return passFailed.Load() > failedBefore })
	// /healthz does not touch the store: the process is alive.
	faultMust(t, hc, http.StatusOK, "GET", ts.URL+"/healthz", "", "")

	// --- Redis comes back on the same address, with its data. ---
	if err := m.Restart(); err != nil {
		t.Fatalf("restart miniredis on %s: %v", addr, err)
	}
	if got := m.Addr(); got != addr {
		t.Fatalf("miniredis restarted on %s, want the same address %s", got, addr)
	}
	restarted := time.Now()
	// The service must recover by itself: keep joining until one works.
	// Until then the only acceptable failure is 503.
	deadline := restarted.Add(10 * time.Second)
	for {
		a, err := faultDo(hc, "POST", roomURL+"/tickets", `{"user_id":"after-0"}`, "")
		if err != nil {
			t.Fatalf("join after the restart: no answer: %v", err)
		}
		if a.status == http.StatusCreated {
			tokens["after-0"] = "Bearer " + a.str("ticket_token")
			users = append(users, "after-0")
			break
		}
		if a.status != http.StatusServiceUnavailable {
			t.Fatalf("join after the restart = %d, want 201 or (while recovering) 503:\n%s", a.status, a.raw)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the service did not recover within 10s of Redis coming back: last join = %d %s", a.status, a.raw)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("joins succeed again %s after Redis restarted", time.Since(restarted).Round(time.Millisecond))
	// The observer's own client recovers too; wait for it, so that it
	// watches the room while admission resumes.
	seen := watch.samples.Load()
	faultWaitFor(t, 10*time.Second, "the observer to read the room again", func() bool { return watch.samples.Load() > seen })

	// The data survived and the outage changed nothing: the three
	// admitted users still are, the others wait in order, nobody joined
	// or left during the outage.
	if st := ticket("u0"); st.str("state") != "admitted" || st.str("admission_token") == "" {
		t.Fatalf("u0 after the outage: %s, want admitted with an admission_token", st.raw)
	}
	for i, u := range []string{"u3", "u4", "u5"} {
		if st := ticket(u); st.str("state") != "waiting" || st.json["position"] != float64(i+1) {
			t.Fatalf("%s after the outage: %s, want waiting at position %d", u, st.raw, i+1)
		}
	}
	room1 := faultMust(t, hc, http.StatusOK, "GET", roomURL, "", "Bearer "+faultAdminToken)
	if room1.json["joined_total"] != 7.0 || room1.json["active"] != 3.0 || room1.json["waiting"] != 4.0 {
		t.Fatalf("room after the outage: %s, want joined_total 7 (6 + after-0), active 3, waiting 4", room1.raw)
	}

	// Admission resumes: a release through this instance is refilled at
	// once (poke) ...
	if a := faultMust(t, hc, http.StatusOK, "DELETE", roomURL+"/tickets/u0", "", tokens["u0"]); a.str("state") != "released" {
		t.Fatalf("release u0: %s", a.raw)
	}
	faultWaitFor(t, 10*time.Second, "u3 to be admitted after u0's release", func() bool { return ticket("u3").str("state") == "admitted" })
	// ... and a release the instance does not hear about (another
	// instance, straight to the store) is refilled by the tick.
	if tk, err := store.Leave(context.Background(), room, "u1"); err != nil || tk.State != waitroom.StateReleased {
		t.Fatalf("store.Leave(u1) = %v, %v", tk, err)
	}
	faultWaitFor(t, 10*time.Second, "u4 to be admitted by the tick after u1's release", func() bool { return ticket("u4").str("state") == "admitted" })
	if passOK.Load() == 0 {
		t.Fatal("no admission pass succeeded")
	}

	// More joins, then drain: release whoever is admitted until every
	// user has been through the room.
	for i := 1; i <= 5; i++ {
		joinOK(fmt.Sprintf("after-%d", i))
	}
	released := map[string]bool{"u0": true, "u1": true}
	faultWaitFor(t, 10*time.Second, "every user to be admitted and released", func() bool {
		for _, u := range users {
			if released[u] {
				continue
			}
			switch st := ticket(u).str("state"); st {
			case "admitted":
				a := faultMust(t, hc, http.StatusOK, "DELETE", roomURL+"/tickets/"+u, "", tokens[u])
				if a.str("state") != "released" {
					t.Fatalf("release %s: %s", u, a.raw)
				}
				released[u] = true
			case "waiting":
			default:
				t.Fatalf("%s is %s, want waiting or admitted", u, st)
			}
		}
		return len(released) == len(users)
	})

	watch.stop()
	active, err := client.ZCard(context.Background(), redisstore.KeysFor(room).Active).Result()
	if err != nil {
		t.Fatalf("ZCARD: %v", err)
	}
	if active > capacity {
		t.Errorf("ZCARD active = %d after the run, capacity %d", active, capacity)
	}
	if max := watch.max.Load(); max > capacity {
		t.Errorf("the observer saw %d users in a room of %d", max, capacity)
	}
	if watch.samples.Load() == 0 {
		t.Error("the observer never read the room")
	}
	st := faultCheckAccounting(t, store, room)
	if want := int64(len(users)); st.JoinedTotal != want || st.ReleasedTotal != want || st.AdmittedTotal != want || st.Waiting != 0 || st.Active != 0 {
		t.Errorf("stats after draining = %+v, want %d joined, admitted and released, none waiting or active", st, want)
	}
	t.Logf("observer: %d samples, max active %d, %d reads failed during the outage; passes: %d ok, %d failed",
		watch.samples.Load(), watch.max.Load(), watch.failures.Load(), passOK.Load(), passFailed.Load())
}

// faultInstance is one waiting-room instance of the kill test.
type faultInstance struct {
	name   string
	client *redis.Client
	srv    *running
	ts     *httptest.Server
	url    string
	// served counts successful joins answered; unavailable counts 503s.
	served, unavailable atomic.Int64
	mu                  sync.Mutex
	unavailableAt       []time.Time // when each 503 came back
}

// TestInstanceKilledMidRunLosesNoUser runs three instances on one store,
// sends users to them round robin, and kills one in the middle of the run
// while users keep joining and polling through the other two (a client
// fails over to the next instance when its own does not answer). At the
// end every user who got a ticket is accounted for, and an observer
// reading the room every millisecond never saw it over capacity.
//
// "In the middle" is checked, not hoped for: the users come in two waves.
// The kill waits until the whole first wave has joined (so the instance to
// die has served joins) and the store shows users admitted and users still
// waiting; the second wave joins only after the kill.
func TestInstanceKilledMidRunLosesNoUser(t *testing.T) {
	emb, err := redisstore.StartEmbedded()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(emb.Close)

	const (
		capacity  = 4
		nUsers    = 90
		firstWave = 60 // users 0-59 join before the kill, 60-89 after it
		killed    = 0  // the instance that dies
	)
	var insts []*faultInstance
	for i := range 3 {
		in := &faultInstance{name: fmt.Sprintf("fault-kill-%d", i)}
		// A store deadline of 3 s, not the default 1 s: this test is
		// about an instance dying, not about a slow store (the frozen-Redis
		// tests above are), and on 2 cores under -race beside other
		// packages' tests an embedded store's script can take over a
		// second, which would turn every join into a 503.
		scfg := redisstore.DefaultConfig()
		scfg.OpTimeout = 3 * time.Second
		ropts := &redis.Options{Addr: emb.Addr()}
		scfg.ApplyTimeouts(ropts)
		in.client = redis.NewClient(ropts)
		t.Cleanup(func() { in.client.Close() })
		st, err := redisstore.NewWithConfig(in.client, scfg)
		if err != nil {
			t.Fatal(err)
		}
		// Every poll reads the store: these buyers poll every 30–50 ms
		// across the instances with their join's token, and a position
		// answered from a room view never goes up only for polls at
		// least 600 ms apart with the newest token
		// (TestPollsFromViewAcrossInstances); this test is about the
		// store's answers through a kill.
		in.srv, in.ts = faultStartWith(t, st, in.name, nil, func(c *api.Config) { c.ViewRefresh = -1 })
		in.url = in.ts.URL
		insts = append(insts, in)
	}
	// The test's own view of the store.
	direct := redis.NewClient(&redis.Options{Addr: emb.Addr()})
	t.Cleanup(func() { direct.Close() })
	store := redisstore.New(direct)

	hc := faultHTTPClient(t)
	room := "fault-kill-" + faultRand()
	path := "/v1/rooms/" + room
	// One-second leases: the users who abandon their slot expire soon.
	faultMust(t, hc, http.StatusOK, "PUT", insts[0].url+path,
		roomBody(t, fmt.Sprintf(`{"capacity":%d,"lease_seconds":1,"admit_interval_ms":20}`, capacity)), "Bearer "+faultAdminToken)
	watch := faultWatchCap(t, emb.Addr(), room)

	var (
		dead atomic.Bool
		// uncertainJoins counts join attempts whose fate the user does not
		// know (no answer, or 503 after the store's deadline): each may
		// have joined. A user whose lost join then ended (admitted and
		// expired, nobody following it) joins again on the retry, and
		// that join counts too.
		uncertainJoins atomic.Int64
	)
	// send tries instance first, then the next ones: a transport failure
	// or a 503 means "this instance cannot serve me now". It gives up
	// after 30 s: on a starved machine (2 cores, -race, other packages'
	// tests beside it) the store's own one-second deadline can pass on
	// every instance for seconds at a time, and a user who retries is
	// what the test is about, not a user who gives up early.
	send := func(first int, method, p, body, auth string) (faultAnswer, int, error) {
		deadline := time.Now().Add(30 * time.Second)
		var last error
		for attempt := 0; ; attempt++ {
			k := (first + attempt) % len(insts)
			a, err := faultDo(hc, method, insts[k].url+p, body, auth)
			switch {
			case err != nil:
				last = err
				if method == "POST" {
					uncertainJoins.Add(1) // the request may have reached the store before the connection broke
				}
			case a.status == http.StatusServiceUnavailable:
				insts[k].unavailable.Add(1)
				insts[k].mu.Lock()
				insts[k].unavailableAt = append(insts[k].unavailableAt, time.Now())
				insts[k].mu.Unlock()
				if method == "POST" {
					uncertainJoins.Add(1) // the join may have reached the store after its deadline
				}
				last = fmt.Errorf("%s answered 503: %s", insts[k].name, a.raw)
			default:
				return a, k, nil
			}
			if time.Now().After(deadline) {
				return a, k, fmt.Errorf("%s %s: no instance answered within 30s; last: %v", method, p, last)
			}
			if round := attempt / len(insts); attempt%len(insts) == len(insts)-1 {
				// Back off like a browser after each round of refusals
				// (exponentially, with jitter, up to half a second): a
				// crowd retrying every few milliseconds would be a retry
				// stampede of the test's own making on a starved store.
				backoff := 5 * time.Millisecond << min(round, 7)
				time.Sleep(backoff/2 + mrand.N(backoff/2))
			}
		}
	}

	type outcome struct {
		action string // release, leave, abandon
		final  string // the state the user's last request left them in
		got    bool   // has a ticket
		auth   string // its ticket token, as an Authorization value
	}
	outcomes := make([]outcome, nUsers)
	var (
		joined, joinsAfterKill, lapsed, lostAnswers atomic.Int64
		firstWaveIn                                 = make(chan struct{}) // closed when the whole first wave has joined
		secondWaveGo                                = make(chan struct{}) // closed after the kill (or when there is none)
		noKill                                      atomic.Bool           // the kill never came: the second wave stays home
		wg                                          sync.WaitGroup
	)
	for i := range nUsers {
		action := "release"
		switch {
		case i%10 == 0:
			action = "leave" // leaves the queue when still waiting at the first poll
		case i%15 == 1:
			action = "abandon" // never releases: the lease expires
		}
		outcomes[i].action = action
		wg.Go(func() {
			if i < firstWave {
				time.Sleep(time.Duration(i) * 4 * time.Millisecond)
			} else {
				<-secondWaveGo
				if noKill.Load() {
					return
				}
				time.Sleep(time.Duration(i-firstWave) * 4 * time.Millisecond)
			}
			user := fmt.Sprintf("user-%03d", i)
			home := i % len(insts)
			a, k, err := send(home, "POST", path+"/tickets", `{"user_id":"`+user+`"}`, "")
			if err != nil {
				t.Errorf("%s: join: %v", user, err)
				return
			}
			// 409: an earlier attempt of this join reached the store but
			// its answer was lost (a timeout on a starved machine, the
			// kill). A join without the ticket's token never gets it
			// back, so this user cannot follow the ticket: it waits, is
			// admitted and expires, and the accounting below counts it.
			lostAnswer := a.status == http.StatusConflict
			if a.status != http.StatusCreated && a.status != http.StatusOK && !lostAnswer {
				t.Errorf("%s: join via %s = %d %s", user, insts[k].name, a.status, a.raw)
				return
			}
			insts[k].served.Add(1)
			if dead.Load() {
				joinsAfterKill.Add(1)
			}
			if joined.Add(1) == firstWave {
				close(firstWaveIn) // only the first wave joins before the kill
			}
			if lostAnswer {
				lostAnswers.Add(1)
				outcomes[i].action = "lost-answer"
				return
			}
			auth := "Bearer " + a.str("ticket_token")
			outcomes[i].got, outcomes[i].auth = true, auth
			lastPos := int64(1 << 62)
			deadline := time.Now().Add(30 * time.Second)
			for poll := 0; ; poll++ {
				if time.Now().After(deadline) {
					t.Errorf("%s: still %s after 30s", user, outcomes[i].final)
					return
				}
				a, k, err := send(home+poll, "GET", path+"/tickets/"+user, "", auth)
				if err != nil || a.status != http.StatusOK {
					t.Errorf("%s: poll: %v %d %s", user, err, a.status, a.raw)
					return
				}
				state := a.str("state")
				outcomes[i].final = state
				switch state {
				case "waiting":
					posF, ok := a.json["position"].(float64)
					if !ok {
						t.Errorf("%s: waiting without a position: %s", user, a.raw)
						return
					}
					pos := int64(posF)
					if pos > lastPos {
						t.Errorf("%s: position went from %d to %d (via %s)", user, lastPos, pos, insts[k].name)
					}
					lastPos = pos
					if action == "leave" {
						a, _, err := send(home+poll, "DELETE", path+"/tickets/"+user, "", auth)
						if err != nil || a.status != http.StatusOK {
							t.Errorf("%s: leave: %v %d %s", user, err, a.status, a.raw)
							return
						}
						outcomes[i].final = a.str("state") // left, or released if admitted meanwhile
						return
					}
				case "admitted":
					if action == "abandon" {
						return
					}
					time.Sleep(5 * time.Millisecond) // the checkout
					a, _, err := send(home+poll, "DELETE", path+"/tickets/"+user, "", auth)
					if err != nil || a.status != http.StatusOK {
						t.Errorf("%s: release: %v %d %s", user, err, a.status, a.raw)
						return
					}
					// released, or expired when the one-second lease
					// ran out first (a slow machine, the race detector):
					// both are final and counted.
					outcomes[i].final = a.str("state")
					return
				case "expired":
					// Admitted, and the one-second lease ran out before
					// this poll: on a starved machine (the race detector,
					// a busy CI runner) one request can take longer than
					// the lease, so the user never saw its admission.
					// Final, and it counts: faultCheckAccounting below
					// ties every expiry to an admission.
					lapsed.Add(1)
					return
				default:
					t.Errorf("%s: state %q while it waits for admission", user, state)
					return
				}
				time.Sleep(time.Duration(30+i%20) * time.Millisecond)
			}
		})
	}

	// The kill, mid-run: once the whole first wave has joined and the store
	// shows users admitted and users waiting, instance 0 dies at once: its
	// Redis connections, its clients' connections, its listener and its
	// admitter. The room is read before and after; nobody joins in between
	// (the second wave waits for the kill), so the queue only shrinks
	// meanwhile: whoever still waits after the kill waited during it.
	before, whyNot := faultAwaitMidRun(store, room, firstWaveIn, 45*time.Second)
	in := insts[killed]
	servedBefore := in.served.Load()
	if whyNot == "" {
		in.client.Close()
		in.ts.CloseClientConnections()
		in.ts.Close()
		in.srv.Close()
		dead.Store(true)
	} else {
		noKill.Store(true)
	}
	after, afterErr := store.Stats(context.Background(), room)
	close(secondWaveGo)
	wg.Wait()
	if whyNot != "" {
		t.Fatalf("no kill: %s", whyNot)
	}
	if afterErr != nil {
		t.Fatalf("Stats after the kill: %v", afterErr)
	}
	if before.AdmittedTotal == 0 || after.Waiting == 0 || servedBefore == 0 {
		t.Fatalf("the kill was not mid-run: %d admitted before it, %d waiting after it, %d joins served by %s before it; want all > 0",
			before.AdmittedTotal, after.Waiting, servedBefore, in.name)
	}
	t.Logf("killed %s after it served %d joins, with %d users admitted so far (%d active) and %d waiting (%d still waiting right after the kill)",
		in.name, servedBefore, before.AdmittedTotal, before.Active, before.Waiting, after.Waiting)
	if t.Failed() {
		t.FailNow()
	}
	if !dead.Load() {
		t.Fatal("the instance was never killed")
	}
	if _, err := faultDo(hc, "GET", insts[killed].url+"/healthz", "", ""); err == nil {
		t.Fatalf("the killed instance %s still answers", insts[killed].name)
	}

	// Every user who got a ticket ends somewhere, as read through the
	// instances still alive (with the ticket token the user got, from
	// whichever instance: they share the secret) and straight from the
	// store: the abandoned leases run out (1 s) and the survivors'
	// admitters reclaim them.
	alive := []int{1, 2}
	counts := map[string]int64{}
	faultWaitFor(t, 30*time.Second, "every user to reach a final state", func() bool {
		clear(counts)
		done := true
		for i, o := range outcomes {
			user := fmt.Sprintf("user-%03d", i)
			if o.action == "lost-answer" {
				// Nobody follows the ticket: it ends expired.
				tk, err := store.Ticket(context.Background(), room, user)
				if err != nil {
					t.Fatalf("%s: %v (a user whose join reached the store is lost)", user, err)
				}
				counts[string(tk.State)]++
				if tk.State != waitroom.StateExpired {
					done = false
				}
				continue
			}
			if !o.got {
				t.Fatalf("%s never got a ticket", user)
			}
			a, k, err := send(alive[i%2], "GET", path+"/tickets/"+user, "", o.auth)
			if err != nil || a.status != http.StatusOK {
				t.Fatalf("%s: reading the ticket through the survivors: %v %d %s (a user who got a ticket is lost)", user, err, a.status, a.raw)
			}
			if k == killed {
				t.Fatalf("%s: the killed instance answered", user)
			}
			tk, err := store.Ticket(context.Background(), room, user)
			if err != nil {
				t.Fatalf("%s: %v (a user who got a ticket is lost)", user, err)
			}
			if got := a.str("state"); got != string(tk.State) {
				// The state can move between the two reads only for
				// an abandoned lease running out.
				if o.action != "abandon" {
					t.Fatalf("%s: the API says %s, the store %s", user, got, tk.State)
				}
			}
			counts[string(tk.State)]++
			switch o.action {
			case "abandon":
				if tk.State != waitroom.StateExpired {
					done = false
				}
			default:
				if string(tk.State) != o.final {
					t.Fatalf("%s (%s): the store says %s, the last answer said %s", user, o.action, tk.State, o.final)
				}
			}
		}
		return done
	})
	for i, o := range outcomes {
		switch {
		case o.action == "release" && o.final != "released" && o.final != "expired",
			o.action == "leave" && o.final != "left" && o.final != "released" && o.final != "expired",
			o.action == "abandon" && o.final != "admitted" && o.final != "expired":
			t.Errorf("user-%03d (%s) ended with its last answer %q", i, o.action, o.final)
		}
	}

	watch.stop()
	st := faultCheckAccounting(t, store, room)
	// Each user joined once, plus at most one re-join per join attempt
	// whose answer was lost (see uncertainJoins); every re-join's first
	// ticket ended, unseen, as expired.
	rejoins := st.JoinedTotal - nUsers
	if rejoins < 0 || rejoins > uncertainJoins.Load() || st.Waiting != 0 || st.Active != 0 {
		t.Errorf("stats = %+v, want %d joined (plus at most %d re-joins after lost answers), none waiting or active", st, nUsers, uncertainJoins.Load())
	}
	if st.ReleasedTotal != counts["released"] || st.LeftTotal != counts["left"] || st.ExpiredTotal != counts["expired"]+rejoins {
		t.Errorf("counters released/left/expired = %d/%d/%d, users in those states = %d/%d/%d (+%d first tickets of re-joins expired)",
			st.ReleasedTotal, st.LeftTotal, st.ExpiredTotal, counts["released"], counts["left"], counts["expired"], rejoins)
	}
	if max := watch.max.Load(); max > capacity {
		t.Errorf("the observer saw %d users in a room of %d", max, capacity)
	}
	if watch.samples.Load() == 0 {
		t.Error("the observer never read the room")
	}
	if n := insts[killed].served.Load(); n != servedBefore {
		t.Errorf("the killed instance served %d joins, %d of them after it died", n, n-servedBefore)
	}
	if n := joinsAfterKill.Load(); n != nUsers-firstWave {
		t.Errorf("%d users joined after the kill, want the second wave's %d", n, nUsers-firstWave)
	}
	// The kill must not make the survivors unavailable. A 503 is
	// excused only when the store itself failed the observer's 200 ms
	// reads within a second of it (a store starved of CPU on a loaded
	// machine answers every instance late, killed or not).
	for _, k := range alive {
		insts[k].mu.Lock()
		var unexcused int
		for _, at := range insts[k].unavailableAt {
			if !watch.storeSlowNear(at, time.Second) {
				unexcused++
			}
		}
		n := len(insts[k].unavailableAt)
		insts[k].mu.Unlock()
		if unexcused > 0 {
			t.Errorf("the surviving instance %s answered 503 %d times, %d of them while the store answered the observer promptly", insts[k].name, n, unexcused)
		} else if n > 0 {
			t.Logf("the surviving instance %s answered 503 %d times, each while the store itself was too slow for the observer", insts[k].name, n)
		}
	}
	t.Logf("joins served by instance: %d/%d/%d (%d after the kill); final states %v (%d leases ran out before the user's next poll; %d join answers lost); observer: %d samples, max active %d",
		insts[0].served.Load(), insts[1].served.Load(), insts[2].served.Load(), joinsAfterKill.Load(), counts, lapsed.Load(), lostAnswers.Load(),
		watch.samples.Load(), watch.max.Load())
}

// faultAwaitMidRun waits until firstWaveIn is closed and the room shows
// users admitted (admitted_total > 0) and users waiting, and returns the
// room's stats at that moment. When that cannot happen within limit (or
// any more: the queue drained), it returns why not instead.
func faultAwaitMidRun(store *redisstore.Store, room string, firstWaveIn <-chan struct{}, limit time.Duration) (waitroom.RoomStats, string) {
	deadline := time.Now().Add(limit)
	select {
	case <-firstWaveIn:
	case <-time.After(limit):
		return waitroom.RoomStats{}, fmt.Sprintf("the first wave did not all join within %s", limit)
	}
	for {
		st, err := store.Stats(context.Background(), room)
		switch {
		case err != nil:
			return st, fmt.Sprintf("Stats: %v", err)
		case st.Waiting == 0:
			return st, fmt.Sprintf("nobody waits any more (%d admitted): the first wave drained before the kill", st.AdmittedTotal)
		case st.AdmittedTotal > 0:
			return st, ""
		case time.Now().After(deadline):
			return st, fmt.Sprintf("nobody admitted within %s", limit)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
