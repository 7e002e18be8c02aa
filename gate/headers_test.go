package gate_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/stampede-lab/stampede/gate"
	"github.com/stampede-lab/stampede/protocol"
)

// headerRecorder is an upstream that keeps the headers of the last
// request it was sent, as they arrived on the wire.
type headerRecorder struct {
	mu   sync.Mutex
	last http.Header
}

func (h *headerRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.last = r.Header.Clone()
	h.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// TestGateIdentityHeadersCannotBeStrippedOrForged: an admitted visitor
// names the gate's identity headers in Connection (which would have the
// proxy drop them as hop-by-hop after the gate set them) and sends its
// own Stampede-* headers in other spellings, with underscores (which
// CGI, WSGI and PHP read as the same HTTP_STAMPEDE_USER). The checkout
// sees exactly the gate's Stampede-User and Stampede-Admission, and no
// other header a Stampede-* reader could take for them.
func TestGateIdentityHeadersCannotBeStrippedOrForged(t *testing.T) {
	withRedis(t, func(t *testing.T, client redis.UniversalClient) {
		rec := &headerRecorder{}
		up := httptest.NewServer(rec)
		t.Cleanup(up.Close)
		upURL, _ := url.Parse(up.URL)
		w := newWorldWith(t, client, 1, 30*time.Second, func(c *gate.Config) { c.Upstream = upURL })
		b := newBuyer(w)
		if _, err := b.enter(time.Now().Add(20 * time.Second)); err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest(http.MethodGet, w.gates[0]+"/shop/cart", nil)
		req.Header.Set("Connection", "Stampede-User, Stampede-Admission, stampede_user")
		req.Header["Stampede_User"] = []string{"mallory"}
		req.Header["stampede_admission"] = []string{"forged"}
		req.Header["STAMPEDE-USER"] = []string{"mallory2"}
		req.Header["Stampede-Release"] = []string{"done"}
		req.Header["X-Other"] = []string{"kept"}
		res, err := b.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusNoContent {
			t.Fatalf("admitted request: %d, want the upstream's 204", res.StatusCode)
		}
		rec.mu.Lock()
		got := rec.last
		rec.mu.Unlock()
		if v := got.Values(protocol.HeaderUser); len(v) != 1 || v[0] != b.user {
			t.Errorf("upstream Stampede-User = %q, want exactly [%q]", v, b.user)
		}
		tok := got.Values(protocol.HeaderAdmission)
		if len(tok) != 1 {
			t.Fatalf("upstream Stampede-Admission = %q, want exactly one token", tok)
		}
		if c, err := protocol.VerifyAdmission(tok[0], w.co.jwks.JWKS(), w.room, time.Now()); err != nil || c.User != b.user {
			t.Errorf("upstream admission: %+v, %v; want %q's", c, err, b.user)
		}
		for name, v := range got {
			norm := strings.ToLower(strings.ReplaceAll(name, "_", "-"))
			if !strings.HasPrefix(norm, "stampede-") {
				continue
			}
			if name != protocol.HeaderUser && name != protocol.HeaderAdmission {
				t.Errorf("upstream got the client's %s: %q", name, v)
			}
		}
		if got.Get("X-Other") != "kept" {
			t.Errorf("an ordinary header was lost: %v", got)
		}
	})
}

// TestGateLeavesAnotherRoomsCookie: two gates on one host (cookies do
// not tell ports apart) guard two rooms with the same cookie name. A
// visitor admitted to the first and sent to the second is asked to wait
// there, and keeps the first room's admission: the second gate does not
// delete a cookie it did not issue.
func TestGateLeavesAnotherRoomsCookie(t *testing.T) {
	withRedis(t, func(t *testing.T, client redis.UniversalClient) {
		a := newWorld(t, client, 1, 30*time.Second)
		b := newWorld(t, client, 1, 30*time.Second)
		v := newBuyer(a)
		if _, err := v.enter(time.Now().Add(20 * time.Second)); err != nil {
			t.Fatal(err)
		}
		other := &buyer{hc: v.hc, w: b}
		st, loc, err := other.get(0, "/shop/cart", "text/html")
		if err != nil || st != http.StatusSeeOther || !strings.HasPrefix(loc, "/rooms/"+b.room) {
			t.Fatalf("the other room's gate: %d %q %v, want 303 to its waiting page", st, loc, err)
		}
		if st, _, err := v.get(0, "/shop/cart", ""); err != nil || st != http.StatusOK {
			t.Errorf("back at the first room's gate: %d %v, want 200: the other gate deleted the admission", st, err)
		}
	})
}

// TestGateServesItsOwnHealth: the gate answers its liveness, readiness and
// metrics under its reserved prefix (the embedded waiting room's), while
// the unprefixed paths stay the checkout's (behind the gate's guard). The
// metrics, which name the room, need the admin token: the public, who
// reach the gate, get 401 and no room name.
func TestGateServesItsOwnHealth(t *testing.T) {
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { client.Close() })
	w := newWorld(t, client, 1, time.Minute)
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	// In this order: the request counter has series only once a request
	// was answered, and the server counts a request after its answer has
	// left, so the metrics are read until they show the earlier two.
	for _, c := range []struct{ path, want, auth string }{
		{gate.HealthPath, `"ok"`, ""}, {gate.ReadyPath, "", ""},
		{gate.MetricsPath, `stampede_waitroom_room_capacity{room="` + w.room + `"} 1`, "Bearer " + adminToken},
		{gate.MetricsPath, `http_requests_total{`, "Bearer " + adminToken},
	} {
		var (
			status int
			body   []byte
		)
		for deadline := time.Now().Add(5 * time.Second); ; {
			req, _ := http.NewRequest(http.MethodGet, w.gates[0]+c.path, nil)
			if c.auth != "" {
				req.Header.Set("Authorization", c.auth)
			}
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			status = resp.StatusCode
			if (status == http.StatusOK && strings.Contains(string(body), c.want)) || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if status != http.StatusOK || !strings.Contains(string(body), c.want) {
			t.Errorf("GET %s = %d %.200s, want 200 with %q", c.path, status, body, c.want)
		}
	}
	for _, auth := range []string{"", "Bearer not-the-admin-token-0123"} {
		req, _ := http.NewRequest(http.MethodGet, w.gates[0]+gate.MetricsPath, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || strings.Contains(string(body), w.room) {
			t.Errorf("GET %s with Authorization %q = %d %.200s, want 401 naming no room", gate.MetricsPath, auth, resp.StatusCode, body)
		}
	}
	// /healthz itself is the checkout's: a visitor without admission is
	// sent to the waiting page.
	resp, err := hc.Get(w.gates[0] + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		t.Errorf("GET /healthz through the gate = 200: the checkout's path was answered by the gate")
	}
}

// TestGateKeepsThePageLanguage: a visitor sent to the waiting page keeps
// the language it asked for (?lang=ko).
func TestGateKeepsThePageLanguage(t *testing.T) {
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { client.Close() })
	w := newWorld(t, client, 1, time.Minute)
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, _ := http.NewRequest(http.MethodGet, w.gates[0]+"/shop?lang=ko", nil)
	req.Header.Set("Accept", "text/html")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || loc != "/rooms/"+w.room+"?join=anonymous&lang=ko" {
		t.Errorf("GET /shop?lang=ko = %d to %q, want 303 to the page in Korean", resp.StatusCode, loc)
	}
}
