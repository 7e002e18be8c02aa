package console_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/console"
	"github.com/stampede-lab/stampede/internal/httpapi"
	"github.com/stampede-lab/stampede/internal/httpapi/apitest"
	"github.com/stampede-lab/stampede/waitroom"
	"github.com/stampede-lab/stampede/waitroom/api"
	"github.com/stampede-lab/stampede/waitroom/redisstore"
)

const (
	adminToken    = "console-admin-token-0123456789"
	waitroomToken = "waitroom-admin-token-0123456789"
	payToken      = "pay-admin-token-0123456789"
	secret        = "console-test-secret-0123456789abcdef0123456789"
)

// clock is an injected clock the test moves.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// rig is a console in front of a real waiting room (on miniredis) with
// one room "hall", and, for pay, the checkout and two workers, small
// servers that answer as those parts do.
type rig struct {
	console *httptest.Server
	svc     *waitroom.Service
	clock   *clock
	v       *apitest.Validator
	client  *http.Client // validating, with a cookie jar
}

// closedURL is the URL of a port nothing listens on.
func closedURL(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

// fakePart answers path → JSON body (or text for /metrics), checking
// the bearer token when token is set.
func fakePart(t *testing.T, token string, answers map[string]string) *httptest.Server {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if token != "" && r.Header.Get("Authorization") != "Bearer "+token {
			httpapi.WriteProblem(w, &stampede.Error{Code: stampede.Unauthorized, Message: "no"}, "test")
			return
		}
		body, ok := answers[r.URL.RequestURI()]
		if !ok {
			body, ok = answers[r.URL.Path]
		}
		if !ok {
			httpapi.WriteProblem(w, &stampede.Error{Code: stampede.NotFound, Message: "no such path"}, "test")
			return
		}
		if r.URL.Path == "/metrics" {
			w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		} else {
			w.Header().Set("Content-Type", "application/json")
		}
		io.WriteString(w, body)
	}))
	t.Cleanup(s.Close)
	return s
}

type rigOptions struct {
	waitroomURL, payURL, checkoutURL string
	workers                          []string
	workerToken                      string
}

func newRig(t *testing.T, mutate func(*rigOptions)) *rig {
	t.Helper()
	m := miniredis.RunT(t)
	rc := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { rc.Close() })
	opts := api.DefaultConfig()
	opts.Secret, opts.AdminToken, opts.Logger = []byte(secret), waitroomToken, slog.New(slog.DiscardHandler)
	opts.Instance = "console-test"
	srv, err := startServer(t, t.Context(), redisstore.New(rc), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	cfg := waitroom.DefaultRoomConfig()
	cfg.Capacity = 2
	if err := srv.Service().Configure(t.Context(), "hall", cfg); err != nil {
		t.Fatal(err)
	}
	wr := httptest.NewServer(srv.Handler())
	t.Cleanup(wr.Close)

	pay := fakePart(t, payToken, map[string]string{
		"/v1/admin/stats": `{"by_status":{"PENDING":1,"APPROVED":7,"DECLINED":2,"UNKNOWN":1,"FAILED":0},"flagged":1,"outbox_lag_seconds":0.25}`,
		"/v1/admin/payments?flagged=true&limit=50": `{"payments":[{"id":"0b6f9c1e-6d7e-4c59-9a43-7d3c1d2f0a11","merchant_id":"7b0a3c5e-1111-4a4a-9b9b-0123456789ab",` +
			`"order_id":"o-1","amount":5000,"currency":"KRW","status":"UNKNOWN","manual_review":true,"review_reason":"unsettled: asked 10 times","created_at":"2026-01-01T00:00:00Z","updated_at":"2026-01-01T00:00:00Z"}]}`,
		"/v1/admin/payments/" + flaggedID: `{"id":"` + flaggedID + `","merchant_id":"7b0a3c5e-1111-4a4a-9b9b-0123456789ab","order_id":"o-1","amount":5000,` +
			`"currency":"KRW","status":"UNKNOWN","manual_review":true,"review_reason":"unsettled: asked 10 times","created_at":"2026-01-01T00:00:00Z",` +
			`"updated_at":"2026-01-01T00:00:00Z","history":[{"to":"PENDING","code":"created","reason":"created","at":"2026-01-01T00:00:00Z"},` +
			`{"from":"PENDING","to":"UNKNOWN","code":"approval_timeout","reason":"approval_timeout: <b>no answer</b> within 3s","at":"2026-01-01T00:00:03Z"}]}`,
	})
	checkout := fakePart(t, "", map[string]string{"/v1/events/concert": `{"event":"concert","seats":100,"seats_left":60,"held":10,"sold":30}`})
	w1 := fakePart(t, "", map[string]string{"/metrics": "stampede_worker_partition_lag{partition=\"0\"} 5\nstampede_worker_partition_lag{partition=\"1\"} 2\nstampede_worker_acked_total 9\n",
		"/v1/parked": `{"keys":[{"key":"pay-7","partition":3,"first_id":"pay-7-2","first_sequence":41,"reason":"ticket service: 422","attempts":20,` +
			`"parked_at":"2026-01-01T00:00:00Z","events":2}],"events":2}`})
	w2 := fakePart(t, "", map[string]string{"/metrics": "stampede_worker_partition_lag{partition=\"1\"} 4\nstampede_worker_partition_lag{partition=\"2\"} 1\n"})
	o := rigOptions{waitroomURL: wr.URL, payURL: pay.URL, checkoutURL: checkout.URL, workers: []string{w1.URL, w2.URL}}
	if mutate != nil {
		mutate(&o)
	}
	// The clock starts at the wall clock's time: the client's cookie jar
	// drops a cookie whose expiry, set by this clock, is in the past.
	clk := &clock{t: time.Now().UTC().Truncate(time.Second)}
	ccfg := console.DefaultConfig()
	ccfg.AdminToken = adminToken
	ccfg.Waitroom = console.Endpoint{URL: o.waitroomURL, Token: waitroomToken}
	ccfg.Pay = console.Endpoint{URL: o.payURL, Token: payToken}
	ccfg.Checkout, ccfg.Events = console.Endpoint{URL: o.checkoutURL}, []string{"concert"}
	ccfg.Workers, ccfg.WorkerToken = o.workers, o.workerToken
	ccfg.Interval, ccfg.Timeout = 100*time.Millisecond, 500*time.Millisecond
	ccfg.Logger, ccfg.Now = slog.New(slog.DiscardHandler), clk.Now
	h, err := console.New(ccfg)
	if err != nil {
		t.Fatal(err)
	}
	cs := httptest.NewServer(h)
	t.Cleanup(cs.Close)
	v := apitest.New(t, console.OpenAPI())
	jar, _ := cookiejar.New(nil)
	client := v.Client(t)
	client.Jar = jar
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &rig{console: cs, svc: srv.Service(), clock: clk, v: v, client: client}
}

// login posts the admin token and returns the answer.
func (r *rig) login(t *testing.T, token string) *http.Response {
	t.Helper()
	resp, err := r.client.PostForm(r.console.URL+"/console/login", url.Values{"token": {token}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// csrf logs in and reads the page's CSRF token.
func (r *rig) csrf(t *testing.T) string {
	t.Helper()
	if resp := r.login(t, adminToken); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("login = %d", resp.StatusCode)
	}
	resp, err := r.client.Get(r.console.URL + "/console")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	const marker = `name="csrf-token" content="`
	i := strings.Index(string(b), marker)
	if i < 0 {
		t.Fatalf("the page has no CSRF token: %.300s", b)
	}
	rest := string(b[i+len(marker):])
	return rest[:strings.IndexByte(rest, '"')]
}

// send makes a request with optional CSRF token and JSON body, and
// decodes the JSON answer.
func (r *rig) send(t *testing.T, method, path, csrf, body string) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, r.console.URL+path, rd)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if csrf != "" {
		req.Header.Set(console.CSRFHeader, csrf)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

// TestLogin: the page asks for the token; a wrong, missing or
// cross-origin login sets no cookie; the right one sets an HttpOnly,
// SameSite=Strict session cookie.
func TestLogin(t *testing.T) {
	r := newRig(t, nil)
	resp, err := r.client.Get(r.console.URL + "/console")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), `name="token"`) || strings.Contains(string(b), "csrf-token") {
		t.Fatalf("GET /console without a session = %d, want the login form: %.200s", resp.StatusCode, b)
	}
	if resp.Header.Get("Content-Security-Policy") == "" {
		t.Error("the login page has no Content-Security-Policy")
	}
	for token, want := range map[string]int{adminToken + "x": 401, "": 400, adminToken[:10]: 401} {
		if resp := r.login(t, token); resp.StatusCode != want || len(resp.Cookies()) != 0 {
			t.Errorf("login with %q = %d with %d cookies, want %d and none", token, resp.StatusCode, len(resp.Cookies()), want)
		}
	}
	req, _ := http.NewRequest(http.MethodPost, r.console.URL+"/console/login", strings.NewReader("token="+adminToken))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "https://evil.example")
	if resp, err := r.client.Do(req); err != nil || resp.StatusCode != 403 || len(resp.Cookies()) != 0 {
		t.Errorf("cross-origin login = %v %v, want 403 without a cookie", resp.StatusCode, err)
	}
	resp = r.login(t, adminToken)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/console" {
		t.Fatalf("login = %d → %q, want 303 to /console", resp.StatusCode, resp.Header.Get("Location"))
	}
	cs := resp.Cookies()
	if len(cs) != 1 || cs[0].Name != console.CookieName || !cs[0].HttpOnly || cs[0].SameSite != http.SameSiteStrictMode || cs[0].Path != "/console" {
		t.Fatalf("session cookie = %+v, want HttpOnly, SameSite=Strict, Path=/console", cs)
	}
	if strings.Contains(cs[0].Value, adminToken) {
		t.Error("the cookie carries the admin token")
	}
	if code, _ := r.send(t, http.MethodGet, "/console/api/snapshot", "", ""); code != 200 {
		t.Errorf("snapshot after login = %d, want 200", code)
	}
}

// TestSessionRequired: the API answers 401 without a session, with a
// forged one and once the session expired.
func TestSessionRequired(t *testing.T) {
	r := newRig(t, nil)
	for _, path := range []string{"/console/api/snapshot", "/console/api/stream"} {
		resp, err := http.Get(r.console.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 401 {
			t.Errorf("%s without a session = %d, want 401", path, resp.StatusCode)
		}
	}
	u, _ := url.Parse(r.console.URL + "/console")
	r.client.Jar.SetCookies(u, []*http.Cookie{{Name: console.CookieName, Value: "9999999999.forged", Path: "/console"}})
	if code, body := r.send(t, http.MethodGet, "/console/api/snapshot", "", ""); code != 401 || body["code"] != "unauthorized" {
		t.Errorf("forged session = %d %v, want 401", code, body)
	}
	r.csrf(t)
	if code, _ := r.send(t, http.MethodGet, "/console/api/snapshot", "", ""); code != 200 {
		t.Fatalf("snapshot = %d", code)
	}
	r.clock.Add(13 * time.Hour)
	if code, _ := r.send(t, http.MethodGet, "/console/api/snapshot", "", ""); code != 401 {
		t.Errorf("snapshot after the session's 12 h = %d, want 401", code)
	}
}

// TestControlsNeedCSRF: a control with the session but without the
// page's CSRF token is refused (403 naming the header) and changes
// nothing; with it, pause, resume and close reach the waiting room.
func TestControlsNeedCSRF(t *testing.T) {
	r := newRig(t, nil)
	tok := r.csrf(t)
	for _, csrf := range []string{"", "not-the-token", tok + "x"} {
		code, body := r.send(t, http.MethodPost, "/console/api/rooms/hall/pause", csrf, "")
		if code != 403 || body["field"] != console.CSRFHeader {
			t.Errorf("pause with CSRF %q = %d %v, want 403 naming %s", csrf, code, body, console.CSRFHeader)
		}
	}
	if cfg, _ := r.svc.RoomConfig(t.Context(), "hall"); cfg.Paused {
		t.Fatal("a refused control paused the room")
	}
	code, body := r.send(t, http.MethodPost, "/console/api/rooms/hall/pause", tok, "")
	if code != 200 || body["paused"] != true {
		t.Fatalf("pause = %d %v", code, body)
	}
	if cfg, _ := r.svc.RoomConfig(t.Context(), "hall"); !cfg.Paused {
		t.Error("pause did not pause the room")
	}
	if code, body = r.send(t, http.MethodPost, "/console/api/rooms/hall/resume", tok, ""); code != 200 || body["paused"] != false {
		t.Errorf("resume = %d %v", code, body)
	}
	code, body = r.send(t, http.MethodPatch, "/console/api/rooms/hall", tok, `{"capacity":7,"max_admissions_per_minute":120}`)
	if code != 200 || body["capacity"] != 7.0 || body["max_admissions_per_minute"] != 120.0 {
		t.Errorf("change = %d %v", code, body)
	}
	if cfg, _ := r.svc.RoomConfig(t.Context(), "hall"); cfg.Capacity != 7 || cfg.MaxAdmissionsPerMinute != 120 {
		t.Errorf("the room is %+v after the change", cfg)
	}
	if code, body = r.send(t, http.MethodPost, "/console/api/rooms/hall/close", tok, ""); code != 200 || body["closed"] != true {
		t.Errorf("close = %d %v", code, body)
	}
	if code, _ := r.send(t, http.MethodPost, "/console/logout", tok, ""); code != 204 {
		t.Errorf("logout = %d", code)
	}
	if code, _ := r.send(t, http.MethodGet, "/console/api/snapshot", "", ""); code != 401 {
		t.Errorf("snapshot after logout = %d, want 401", code)
	}
}

// TestBadInput: a control's mistake is a 4xx naming the field, never a
// 500; a room the waiting room does not have is its 404.
func TestBadInput(t *testing.T) {
	r := newRig(t, nil)
	tok := r.csrf(t)
	cases := []struct {
		method, path, body string
		code               int
		field              string
	}{
		{http.MethodPatch, "/console/api/rooms/hall", `{"capacity":0}`, 400, "capacity"},
		{http.MethodPatch, "/console/api/rooms/hall", `{"capacity":"ten"}`, 400, "capacity"},
		{http.MethodPatch, "/console/api/rooms/hall", `{"max_admissions_per_minute":-1}`, 400, "max_admissions_per_minute"},
		{http.MethodPatch, "/console/api/rooms/hall", `{}`, 400, "capacity"},
		{http.MethodPatch, "/console/api/rooms/hall", `{"capacity":5,"paused":true}`, 400, "paused"},
		{http.MethodPost, "/console/api/rooms/" + strings.Repeat("r", 65) + "/pause", "", 400, "room"},
		{http.MethodPost, "/console/api/rooms/nowhere/pause", "", 404, ""},
	}
	for _, tc := range cases {
		code, body := r.send(t, tc.method, tc.path, tok, tc.body)
		if code != tc.code || (tc.field != "" && body["field"] != tc.field) {
			t.Errorf("%s %s %s = %d %v, want %d naming %q", tc.method, tc.path, tc.body, code, body, tc.code, tc.field)
		}
	}
	if code, _ := r.send(t, http.MethodGet, "/console/api/rooms/hall/pause", tok, ""); code != 405 {
		t.Errorf("GET on a control = %d, want 405", code)
	}
}

// TestSnapshot: the snapshot shows the room's queue and ETA, pay's
// counts and flagged payments, the seats left and the consumer lag
// (each partition's largest report, summed).
func TestSnapshot(t *testing.T) {
	r := newRig(t, nil)
	for i := range 5 {
		if _, err := r.svc.Join(t.Context(), "hall", fmt.Sprintf("u%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	r.csrf(t)
	var s console.Snapshot
	deadline := time.Now().Add(10 * time.Second)
	for {
		s = r.snapshot(t)
		if len(s.Rooms.Rooms) == 1 && s.Rooms.Rooms[0].Active == 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !s.Rooms.Available || len(s.Rooms.Rooms) != 1 {
		t.Fatalf("rooms = %+v", s.Rooms)
	}
	room := s.Rooms.Rooms[0]
	if room.Name != "hall" || room.Active != 2 || room.Waiting != 3 || room.Capacity != 2 || room.Paused || room.Closed {
		t.Errorf("room = %+v, want hall with 2 active of 2 and 3 waiting", room)
	}
	p := s.Payments
	if !p.Available || p.ByStatus["APPROVED"] != 7 || p.FlaggedTotal != 1 || len(p.Flagged) != 1 || p.OutboxLagSeconds != 0.25 {
		t.Errorf("payments = %+v", p)
	}
	if c := s.Checkout; !c.Available || len(c.Events) != 1 || c.Events[0].SeatsLeft != 60 || c.Events[0].Name != "concert" {
		t.Errorf("checkout = %+v", c)
	}
	if w := s.Workers; !w.Available || w.ConsumerLag != 5+4+1 || len(w.Workers) != 2 || w.Workers[0].Acked != 9 {
		t.Errorf("workers = %+v, want consumer lag 10 (5 + max(2,4) + 1)", w)
	}
	if w := s.Workers; w.ParkedKnown || len(w.Parked) != 0 {
		t.Errorf("without --worker-token the parked keys = %+v, want none read", w)
	}
}

// TestSnapshotListsParkedKeys: with the workers' token, the snapshot lists
// the parked keys a worker reports; a worker that refuses the token makes
// the part unavailable with a safe message.
func TestSnapshotListsParkedKeys(t *testing.T) {
	r := newRig(t, func(o *rigOptions) { o.workerToken = "worker-admin-token-0123" })
	r.csrf(t)
	w := r.snapshot(t).Workers
	if !w.Available || !w.ParkedKnown || w.ParkedEvents != 2 || len(w.Parked) != 1 {
		t.Fatalf("workers = %+v, want one parked key with 2 events", w)
	}
	if k := w.Parked[0]; k.Key != "pay-7" || k.Partition != 3 || k.Attempts != 20 || k.Reason != "ticket service: 422" || k.Events != 2 {
		t.Errorf("parked key = %+v", k)
	}
	refusing := fakePart(t, "another-token-0123456", map[string]string{"/v1/parked": `{"keys":[],"events":0}`})
	metrics := fakePart(t, "", map[string]string{"/metrics": "stampede_worker_acked_total 1\n"})
	// The metrics from one server, the refusal from another behind one URL.
	both := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		target := refusing.URL
		if req.URL.Path == "/metrics" {
			target = metrics.URL
		}
		u, _ := url.Parse(target)
		httputil.NewSingleHostReverseProxy(u).ServeHTTP(w, req)
	}))
	t.Cleanup(both.Close)
	r = newRig(t, func(o *rigOptions) { o.workerToken, o.workers = "worker-admin-token-0123", []string{both.URL} })
	r.csrf(t)
	if w := r.snapshot(t).Workers; w.Available || w.ParkedKnown || !strings.Contains(w.Error, "parked keys: refused the console's token") {
		t.Errorf("a worker refusing the token: %+v, want unavailable, saying the token was refused", w)
	}
}

func (r *rig) snapshot(t *testing.T) console.Snapshot {
	t.Helper()
	resp, err := r.client.Get(r.console.URL + "/console/api/snapshot")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s console.Snapshot
	if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&s) != nil {
		t.Fatalf("snapshot = %d", resp.StatusCode)
	}
	return s
}

// TestDependencyDown: parts that do not answer are shown unavailable in a
// 200 snapshot; a control with the waiting room down is 503, not 500.
func TestDependencyDown(t *testing.T) {
	down := ""
	r := newRig(t, func(o *rigOptions) {
		down = closedURL(t)
		o.waitroomURL, o.payURL, o.checkoutURL, o.workers = down, down, down, []string{down}
	})
	tok := r.csrf(t)
	s := r.snapshot(t)
	for name, part := range map[string]console.Part{"rooms": s.Rooms.Part, "payments": s.Payments.Part,
		"checkout": s.Checkout.Part, "workers": s.Workers.Part} {
		if !part.Configured || part.Available || part.Error == "" {
			t.Errorf("%s = %+v, want configured, unavailable, with an error", name, part)
		}
		if strings.Contains(part.Error, "127.0.0.1") || strings.Contains(part.Error, "dial") {
			t.Errorf("%s shows internals: %q", name, part.Error)
		}
	}
	code, body := r.send(t, http.MethodPost, "/console/api/rooms/hall/pause", tok, "")
	if code != 503 || body["code"] != "unavailable" {
		t.Errorf("pause with the waiting room down = %d %v, want 503", code, body)
	}
	resp, err := r.client.Get(r.console.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 {
		t.Errorf("/readyz with the waiting room down = %d, want 503", resp.StatusCode)
	}
}

const flaggedID = "0b6f9c1e-6d7e-4c59-9a43-7d3c1d2f0a11"

// TestPaymentHistory: a flagged payment's link shows its history, read
// from pay's admin API and escaped; an unknown one is 404, and without a
// session the link leads to the login.
func TestPaymentHistory(t *testing.T) {
	r := newRig(t, nil)
	get := func(path string) (int, string) {
		resp, err := r.client.Get(r.console.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/console/payments/" + flaggedID); code != http.StatusSeeOther {
		t.Errorf("history without a session = %d, want 303 to the login", code)
	}
	r.csrf(t)
	code, page := get("/console/payments/" + flaggedID)
	if code != 200 || !strings.Contains(page, "approval_timeout: &lt;b&gt;no answer&lt;/b&gt; within 3s") || !strings.Contains(page, "unsettled: asked 10 times") {
		t.Errorf("history = %d, want the escaped history: %.400s", code, page)
	}
	if code, _ := get("/console/payments/" + "11111111-2222-4333-8444-555555555555"); code != 404 {
		t.Errorf("unknown payment = %d, want 404", code)
	}
}

// TestWrongPartToken: a part that refuses the console's token is shown as
// such, not as a console error.
func TestWrongPartToken(t *testing.T) {
	r := newRig(t, func(o *rigOptions) {
		o.payURL = fakePart(t, "another-token-0123456789", nil).URL
	})
	r.csrf(t)
	if p := r.snapshot(t).Payments; p.Available || p.Error != "refused the console's token" {
		t.Errorf("payments = %+v, want refused", p.Part)
	}
}

// TestStream: the stream sends snapshots as server-sent events, and ends
// with "logout" once the session expires.
func TestStream(t *testing.T) {
	r := newRig(t, nil)
	r.csrf(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, r.console.URL+"/console/api/stream", nil)
	plain := &http.Client{Jar: r.client.Jar} // the validating client reads whole bodies
	resp, err := plain.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream = %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	events := 0
	event := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: ") && event == "snapshot":
			var s console.Snapshot
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &s); err != nil || !s.Rooms.Available {
				t.Fatalf("snapshot event %v: %.200s", err, line)
			}
			events++
			if events == 2 {
				r.clock.Add(13 * time.Hour)
			}
		case strings.HasPrefix(line, "data: ") && event == "logout":
			if events < 2 {
				t.Fatalf("logout after %d snapshots", events)
			}
			return
		}
	}
	t.Fatalf("the stream ended after %d snapshots without a logout event: %v", events, sc.Err())
}

// TestConfigValidate names the field at fault by the words of its flag,
// and every bad field at once.
func TestConfigValidate(t *testing.T) {
	ok := console.DefaultConfig()
	ok.AdminToken, ok.Waitroom = adminToken, console.Endpoint{URL: "http://127.0.0.1:1", Token: waitroomToken}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	cases := map[string]func(*console.Config){
		"admin_token":    func(c *console.Config) { c.AdminToken = "short" },
		"waitroom":       func(c *console.Config) { c.Waitroom.URL = "" },
		"waitroom_token": func(c *console.Config) { c.Waitroom.Token = "" },
		"pay_token":      func(c *console.Config) { c.Pay = console.Endpoint{URL: "http://127.0.0.1:2"} },
		"checkout":       func(c *console.Config) { c.Checkout = console.Endpoint{URL: "ftp://x"} },
		"events": func(c *console.Config) {
			if c.Checkout.URL == "" {
				c.Checkout.URL = "http://127.0.0.1:3"
			}
			c.Events = []string{"e/"}
		},
		"workers":             func(c *console.Config) { c.Workers = []string{"not a url"} },
		"interval":            func(c *console.Config) { c.Interval = 0 },
		"timeout":             func(c *console.Config) { c.Timeout = 0 },
		"session":             func(c *console.Config) { c.Session = 0 },
		"flagged_limit":       func(c *console.Config) { c.FlaggedLimit = 0 },
		"max_body":            func(c *console.Config) { c.MaxBody = 0 },
		"read_header_timeout": func(c *console.Config) { c.HTTP.ReadHeaderTimeout = 0 },
	}
	all := ok
	for field, mutate := range cases {
		c := ok
		mutate(&c)
		mutate(&all)
		err := c.Validate()
		if e, isErr := err.(*stampede.Error); !isErr || e.Field != field {
			t.Errorf("%s: Validate = %v, want an error naming it", field, err)
		}
	}
	c := ok
	c.Pay = console.Endpoint{URL: "ftp://x", Token: payToken}
	if e, isErr := c.Validate().(*stampede.Error); !isErr || e.Field != "pay" {
		t.Errorf("pay: Validate = %v, want an error naming it", c.Validate())
	}
	named := map[string]bool{}
	for _, e := range stampede.FieldErrors(all.Validate()) {
		named[e.Field] = true
	}
	for field := range cases {
		if !named[field] {
			t.Errorf("every field wrong: Validate did not name %s (named %v)", field, named)
		}
	}
}
