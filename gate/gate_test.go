package gate_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/stampede-lab/stampede/gate"
	"github.com/stampede-lab/stampede/internal/testenv"
	"github.com/stampede-lab/stampede/protocol"
	"github.com/stampede-lab/stampede/waitroom"
	"github.com/stampede-lab/stampede/waitroom/api"
	wrclient "github.com/stampede-lab/stampede/waitroom/client"
	"github.com/stampede-lab/stampede/waitroom/redisstore"
)

var (
	testSecret  = []byte("gate-test-secret-0123456789abcdef-0123456789")
	adminToken  = "gate-admin-token-0123456789"
	checkoutKey = "gate-checkout-key-0123456789"
)

// withRedis runs fn on the real Redis of STAMPEDE_REDIS_URL when it is
// set (its next-but-one database, so that no other package's service
// admits in these rooms), else on an embedded miniredis.
func withRedis(t *testing.T, fn func(t *testing.T, client redis.UniversalClient)) {
	if os.Getenv(testenv.RedisURL) == "" {
		t.Run("miniredis", func(t *testing.T) {
			m := miniredis.RunT(t)
			c := redis.NewClient(&redis.Options{Addr: m.Addr()})
			t.Cleanup(func() { c.Close() })
			fn(t, c)
		})
		return
	}
	t.Run("redis", func(t *testing.T) {
		opts, err := redis.ParseURL(testenv.URL(t, testenv.RedisURL))
		if err != nil {
			t.Fatalf("STAMPEDE_REDIS_URL: %v", err)
		}
		opts.DB = (opts.DB + 2) % 16
		c := redis.NewClient(opts)
		t.Cleanup(func() { c.Close() })
		fn(t, c)
	})
}

func randomName() string {
	b := make([]byte, 6)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// checkout is the upstream: it records, per admitted user, when their
// first and last request arrived, and answers /shop/pay with
// Stampede-Release: done.
type checkout struct {
	t    testing.TB
	room string

	mu        sync.Mutex
	first     map[string]time.Time
	last      map[string]time.Time
	requests  int
	badHeader int
	// badWhy keeps the first few reasons a request was found bad.
	badWhy []string
	jwks   *waitroom.AdmissionSigner
}

func (c *checkout) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	user, tok := r.Header.Get(protocol.HeaderUser), r.Header.Get(protocol.HeaderAdmission)
	claims, err := waitroom.VerifyAdmissionJWT(tok, c.jwks.JWKS(), c.room, now)
	c.mu.Lock()
	c.requests++
	if user == "" || err != nil || claims.User != user {
		c.badHeader++
		if len(c.badWhy) < 3 {
			c.badWhy = append(c.badWhy, fmt.Sprintf("%s %s: user %q, verify error %v", r.Method, r.URL.Path, user, err))
		}
	} else {
		if _, ok := c.first[user]; !ok {
			c.first[user] = now
		}
		c.last[user] = now
	}
	c.mu.Unlock()
	if r.URL.Path == "/shop/pay" {
		w.Header().Set(protocol.HeaderRelease, "done")
	}
	io.WriteString(w, "ok "+user)
}

// maxOverlap is the most users whose [first, last] request intervals
// overlap at one instant.
func (c *checkout) maxOverlap() (int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	type ev struct {
		at    time.Time
		delta int
	}
	var evs []ev
	for u, f := range c.first {
		evs = append(evs, ev{f, +1}, ev{c.last[u], -1})
	}
	slices.SortFunc(evs, func(a, b ev) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return b.delta - a.delta // a start and an end at one instant overlap
	})
	cur, best := 0, 0
	for _, e := range evs {
		cur += e.delta
		best = max(best, cur)
	}
	return best, len(c.first)
}

// world is 3 waiting-room instances, each inside a gate, on one Redis,
// in front of one checkout.
type world struct {
	room     string
	capacity int
	gates    []string
	apis     []string
	co       *checkout
}

func newWorld(t *testing.T, client redis.UniversalClient, capacity int, lease time.Duration) *world {
	t.Helper()
	return newWorldWith(t, client, capacity, lease, nil)
}

// newWorldWith is newWorld with each gate's configuration changed by
// change (if not nil).
func newWorldWith(t *testing.T, client redis.UniversalClient, capacity int, lease time.Duration, change func(*gate.Config)) *world {
	t.Helper()
	store := redisstore.New(client)
	room := "gate-" + randomName()
	ctx := context.Background()
	t.Cleanup(func() { store.DeleteRoom(context.Background(), room) })
	w := &world{room: room, capacity: capacity}
	var admissions *waitroom.AdmissionSigner
	var srvs []*running
	for i := range 3 {
		opts := api.DefaultConfig()
		opts.Instance = fmt.Sprintf("gate-test-%d-%s", i, randomName())
		opts.Secret, opts.AdminToken, opts.CheckoutKey = testSecret, adminToken, checkoutKey
		opts.Logger = slog.New(slog.DiscardHandler)
		opts.RoomRefresh = 50 * time.Millisecond
		srv, err := startServer(t, ctx, store, opts)
		if err != nil {
			t.Fatalf("NewServer: %v", err)
		}
		t.Cleanup(srv.Close)
		srvs = append(srvs, srv)
		admissions = srv.Admissions()
		api := httptest.NewServer(srv.Handler())
		t.Cleanup(api.Close)
		w.apis = append(w.apis, api.URL)
	}
	cfg := waitroom.RoomConfig{Capacity: capacity, Lease: lease, AdmitInterval: 20 * time.Millisecond, Retention: waitroom.DefaultRetention}
	if err := srvs[0].Service().Configure(ctx, room, cfg); err != nil {
		t.Fatalf("Configure: %v", err)
	}
	w.co = &checkout{t: t, room: room, first: map[string]time.Time{}, last: map[string]time.Time{}, jwks: admissions}
	up := httptest.NewServer(w.co)
	t.Cleanup(up.Close)
	upURL, _ := url.Parse(up.URL)
	for _, srv := range srvs {
		gcfg := gate.DefaultConfig()
		gcfg.Room, gcfg.Upstream = room, upURL
		gcfg.Logger = slog.New(slog.DiscardHandler)
		gcfg.SafetyMargin = 300 * time.Millisecond
		if change != nil {
			change(&gcfg)
		}
		g, err := gate.New(withWaitroom(gcfg, srv))
		if err != nil {
			t.Fatalf("gate.New: %v", err)
		}
		gs := httptest.NewServer(g)
		t.Cleanup(gs.Close)
		w.gates = append(w.gates, gs.URL)
	}
	return w
}

// buyer is one simulated visitor: a cookie jar shared by every gate (one
// host), redirects not followed.
type buyer struct {
	hc   *http.Client
	w    *world
	user string
}

// buyerTransport is shared by every buyer, with enough idle connections
// that thousands of requests do not churn through ephemeral ports.
var buyerTransport = &http.Transport{MaxIdleConns: 1024, MaxIdleConnsPerHost: 256, IdleConnTimeout: 30 * time.Second}

func newBuyer(w *world) *buyer {
	jar, _ := cookiejar.New(nil)
	return &buyer{w: w, hc: &http.Client{Jar: jar, Timeout: 10 * time.Second, Transport: buyerTransport,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func pick(n int) int {
	v, _ := rand.Int(rand.Reader, big.NewInt(int64(n)))
	return int(v.Int64())
}

// get sends GET path through gate i and returns the status and Location.
func (b *buyer) get(i int, path string, accept string) (int, string, error) {
	req, _ := http.NewRequest(http.MethodGet, b.w.gates[i]+path, nil)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	res, err := b.hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode, res.Header.Get("Location"), nil
}

// call sends a JSON request through gate i and decodes the answer.
func (b *buyer) call(i int, method, path, body, bearer string, out any) (int, error) {
	req, _ := http.NewRequest(method, b.w.gates[i]+path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	res, err := b.hc.Do(req)
	for try := 0; err == nil && res.StatusCode == http.StatusServiceUnavailable && try < 20; try++ {
		// The store was slow (a loaded machine): as a client would, retry.
		res.Body.Close()
		time.Sleep(100 * time.Millisecond)
		req, _ = http.NewRequest(method, b.w.gates[i]+path, strings.NewReader(body))
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		res, err = b.hc.Do(req)
	}
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	if out != nil && res.StatusCode < 300 {
		if err := json.Unmarshal(raw, out); err != nil {
			return res.StatusCode, fmt.Errorf("%s: %w", raw, err)
		}
	}
	return res.StatusCode, nil
}

// errSlotLost: the buyer was too slow and the lease ran out.
var errSlotLost = errors.New("slot lost before the hand-off")

// enter goes through the waiting room: asks for the shop, is sent to the
// waiting page, joins anonymously, polls until admitted, and hands the
// ticket to the gate. It returns the address to go back to.
func (b *buyer) enter(deadline time.Time) (string, error) {
	st, loc, err := b.get(pick(3), "/shop/item?id=7", "text/html")
	if err != nil {
		return "", err
	}
	if st != http.StatusSeeOther || loc != "/rooms/"+b.w.room+"?join=anonymous" {
		return "", fmt.Errorf("first visit: %d %q, want 303 to the waiting page", st, loc)
	}
	var t wrclient.TicketInfo
	if st, err := b.call(pick(3), "POST", "/v1/rooms/"+b.w.room+"/tickets", `{}`, "", &t); err != nil || st != http.StatusCreated {
		return "", fmt.Errorf("join: %d %v", st, err)
	}
	b.user = t.UserID
	tok := t.TicketToken
	for t.State != waitroom.StateAdmitted {
		if t.State != waitroom.StateWaiting {
			return "", errSlotLost // admitted and expired before this poll saw it
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("not admitted in time (%s)", t.State)
		}
		time.Sleep(time.Duration(150+pick(100)) * time.Millisecond)
		st, err := b.call(pick(3), "GET", "/v1/rooms/"+b.w.room+"/tickets/"+url.PathEscape(b.user), "", tok, &t)
		if st == http.StatusServiceUnavailable {
			continue // the store was slow (a loaded machine): poll again
		}
		if err != nil || st != http.StatusOK {
			return "", fmt.Errorf("poll: %d %v", st, err)
		}
	}
	var h struct{ Redirect string }
	st, err = b.call(pick(3), "POST", gate.AdmitPath, "", tok, &h)
	if st == http.StatusConflict {
		return "", errSlotLost // the lease ran out before the hand-off
	}
	if err != nil || st != http.StatusOK {
		return "", fmt.Errorf("hand-off: %d %v", st, err)
	}
	return h.Redirect, nil
}

// TestCheckoutSeesAtMostCapacity runs 2,000 buyers through 3 gates on 3
// waiting-room instances sharing one Redis: some abandon after their
// first page, the others finish with Stampede-Release: done. The checkout
// never sees more distinct admitted users at once than the capacity, and
// a finished user is refused afterwards.
func TestCheckoutSeesAtMostCapacity(t *testing.T) {
	withRedis(t, func(t *testing.T, client redis.UniversalClient) {
		buyers, capacity, lease := 2000, 50, 2*time.Second
		lostLimit := buyers / 20
		switch {
		case testing.Short():
			buyers, lostLimit = 200, 10
		case raceEnabled && os.Getenv(testenv.RedisURL) == "":
			// The race detector slows the embedded Redis (Lua in Go)
			// many-fold: fewer, slower-leased buyers.
			buyers, capacity, lease, lostLimit = 200, 20, 8*time.Second, 50
		case raceEnabled:
			// Every request is several times slower: slow buyers would
			// lose their slot before they see it.
			lease, lostLimit = 4*time.Second, buyers/4
		}
		w := newWorld(t, client, capacity, lease)
		deadline := time.Now().Add(4 * time.Minute)

		var finished, abandoned, refusedAfter, lost atomic.Int64
		var firstErr atomic.Pointer[error]     // the first buyer's failure, whatever its type
		sem := make(chan struct{}, 2*capacity) // buyers in the shop at once
		var wg sync.WaitGroup
		for i := range buyers {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				b := newBuyer(w)
				back, err := b.enter(deadline)
				if errors.Is(err, errSlotLost) {
					lost.Add(1)
					return
				}
				if err != nil {
					firstErr.CompareAndSwap(nil, &err)
					return
				}
				if back != "/shop/item?id=7" {
					err := fmt.Errorf("redirect %q, want the address first asked for", back)
					firstErr.CompareAndSwap(nil, &err)
					return
				}
				if st, _, err := b.get(pick(3), back, "text/html"); err != nil || st != http.StatusOK {
					lost.Add(1)
					return
				}
				if i%10 == 3 { // abandons: never comes back
					abandoned.Add(1)
					return
				}
				for range 3 {
					time.Sleep(60 * time.Millisecond)
					if st, _, err := b.get(pick(3), "/shop/cart", "text/html"); err != nil || st != http.StatusOK {
						lost.Add(1)
						return
					}
				}
				if st, _, err := b.get(pick(3), "/shop/pay", "text/html"); err != nil || st != http.StatusOK {
					lost.Add(1)
					return
				}
				finished.Add(1)
				// Released: the gate that saw the release refuses at once.
				if st, loc, _ := b.get(pick(3), "/shop/cart", "text/html"); st == http.StatusSeeOther && strings.HasPrefix(loc, "/rooms/") {
					refusedAfter.Add(1)
				}
			})
		}
		wg.Wait()
		if err := firstErr.Load(); err != nil {
			t.Fatalf("a buyer failed: %v", *err)
		}
		overlap, seen := w.co.maxOverlap()
		t.Logf("%d buyers: %d finished, %d abandoned, %d lost a slot mid-checkout; the checkout saw %d users, %d requests, at most %d at once (capacity %d); %d refused right after paying",
			buyers, finished.Load(), abandoned.Load(), lost.Load(), seen, w.co.requests, overlap, capacity, refusedAfter.Load())
		if overlap > capacity {
			t.Errorf("the checkout saw %d admitted users at once, over the capacity of %d", overlap, capacity)
		}
		if w.co.badHeader != 0 {
			t.Errorf("%d upstream requests lacked a valid Stampede-User / Stampede-Admission: %q", w.co.badHeader, w.co.badWhy)
		}
		if got := finished.Load() + abandoned.Load() + lost.Load(); got != int64(buyers) || int64(seen) < finished.Load()+abandoned.Load() {
			t.Errorf("%d buyers accounted for, %d seen by the checkout; want %d", got, seen, buyers)
		}
		if lost.Load() > int64(lostLimit) {
			t.Errorf("%d buyers lost their slot mid-checkout", lost.Load())
		}
	})
}

// TestReleasedUserRefusedWithinOneSecond: after a checkout releases an
// admission with POST /admissions/done (not through a gate), every gate
// refuses the user within 1 s; a tampered cookie leads back to the
// waiting page; an API client gets 503 problem+json with a position.
func TestReleasedUserRefusedWithinOneSecond(t *testing.T) {
	withRedis(t, func(t *testing.T, client redis.UniversalClient) {
		w := newWorld(t, client, 1, 30*time.Second)
		b := newBuyer(w)
		if _, err := b.enter(time.Now().Add(20 * time.Second)); err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			if st, _, err := b.get(i, "/shop/cart", ""); err != nil || st != http.StatusOK {
				t.Fatalf("admitted buyer through gate %d: %d %v", i, st, err)
			}
		}
		// An API client without a cookie: 503 with its place.
		other := newBuyer(w)
		req, _ := http.NewRequest("GET", w.gates[1]+"/api/cart", nil)
		req.Header.Set("Accept", "application/json")
		res, err := other.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var p map[string]any
		json.NewDecoder(res.Body).Decode(&p)
		res.Body.Close()
		if res.StatusCode != 503 || res.Header.Get("Content-Type") != "application/problem+json" || res.Header.Get("Retry-After") == "" || p["waiting"] == nil || p["position"] != nil {
			t.Errorf("API client without admission: %d %q Retry-After %q %v", res.StatusCode, res.Header.Get("Content-Type"), res.Header.Get("Retry-After"), p)
		}

		// The checkout says done through the API, not through a gate.
		u, _ := url.Parse(w.gates[0])
		var adm string
		for _, c := range b.hc.Jar.Cookies(u) {
			if c.Name == "stampede_admission" {
				adm = c.Value
			}
		}
		cl, err := wrclient.New(wrclient.Config{BaseURL: w.apis[2], CheckoutKey: checkoutKey, Timeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if a, err := cl.Check(ctx, w.room, adm); err != nil || !a.Held || a.UserID != b.user {
			t.Fatalf("Check before done = %+v, %v", a, err)
		}
		a, err := cl.Done(ctx, w.room, adm)
		released := time.Now()
		if err != nil || !a.Released {
			t.Fatalf("Done = %+v, %v", a, err)
		}
		if a, err := cl.Check(ctx, w.room, adm); err != nil || a.Held || a.Reason != waitroom.ReasonReleased {
			t.Fatalf("Check after done = %+v, %v; want not held, released", a, err)
		}
		var lastPassed time.Time
		for time.Since(released) < 1500*time.Millisecond {
			for i := range 3 {
				sent := time.Now()
				st, _, err := b.get(i, "/shop/cart", "")
				if err != nil {
					t.Fatal(err)
				}
				if st == http.StatusOK {
					lastPassed = sent
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
		if !lastPassed.IsZero() && lastPassed.Sub(released) >= time.Second {
			t.Errorf("a released user still got through %s after the release", lastPassed.Sub(released))
		}
		t.Logf("released user last let through %s after the release (cache ≤ 1 s)", max(0, lastPassed.Sub(released)))

		// A tampered cookie leads to the waiting page.
		tampered := newBuyer(w)
		tampered.hc.Jar.SetCookies(u, []*http.Cookie{{Name: "stampede_admission", Value: adm[:len(adm)-2] + "AA"}})
		if st, loc, _ := tampered.get(0, "/shop/cart", ""); st != http.StatusSeeOther || !strings.HasPrefix(loc, "/rooms/") {
			t.Errorf("tampered cookie: %d %q, want 303 to the waiting page", st, loc)
		}
	})
}

// TestLeaseSlidesUpToMaxSession: an active visitor keeps the slot past
// the room's lease, but not past the maximum session; the admission
// cookie is HttpOnly and SameSite=Lax.
func TestLeaseSlidesUpToMaxSession(t *testing.T) {
	withRedis(t, func(t *testing.T, client redis.UniversalClient) {
		const lease, maxSession = 2 * time.Second, 5 * time.Second
		w := newWorldWith(t, client, 1, lease, func(c *gate.Config) { c.MaxSession = maxSession })
		b := newBuyer(w)
		var tk wrclient.TicketInfo
		if st, err := b.call(0, "POST", "/v1/rooms/"+w.room+"/tickets", `{}`, "", &tk); err != nil || st != http.StatusCreated {
			t.Fatalf("join: %d %v", st, err)
		}
		for tk.State != waitroom.StateAdmitted {
			time.Sleep(50 * time.Millisecond)
			b.call(1, "GET", "/v1/rooms/"+w.room+"/tickets/"+tk.UserID, "", tk.TicketToken, &tk)
		}
		req, _ := http.NewRequest("POST", w.gates[2]+gate.AdmitPath, nil)
		req.Header.Set("Authorization", "Bearer "+tk.TicketToken)
		res, err := b.hc.Do(req)
		if err != nil || res.StatusCode != http.StatusOK {
			t.Fatalf("hand-off: %v %v", res, err)
		}
		res.Body.Close()
		admitted := time.Now()
		var sc string
		for _, v := range res.Header.Values("Set-Cookie") {
			if strings.HasPrefix(v, "stampede_admission=") && !strings.Contains(v, "Max-Age=0") {
				sc = v
			}
		}
		if !strings.Contains(sc, "HttpOnly") || !strings.Contains(sc, "SameSite=Lax") || strings.Contains(sc, "Secure") || !strings.Contains(sc, "Path=/") {
			t.Errorf("admission cookie %q: want HttpOnly, SameSite=Lax, Path=/, not Secure without TLS", sc)
		}
		// Active every 250 ms: past the 2 s lease the slot holds; past
		// the 5 s session (counted from the admission's whole second) it
		// ends.
		var lastOK, firstRefused time.Duration
		for time.Since(admitted) < maxSession+2*time.Second {
			st, _, err := b.get(pick(3), "/shop/cart", "")
			if err != nil {
				t.Fatal(err)
			}
			at := time.Since(admitted)
			switch {
			case st == http.StatusServiceUnavailable:
				// The store was slow (-race on a loaded machine): neither.
			case st == http.StatusOK && firstRefused == 0:
				lastOK = at
			case st == http.StatusSeeOther && firstRefused == 0:
				firstRefused = at
			case st != http.StatusOK && st != http.StatusSeeOther:
				t.Fatalf("GET /shop/cart = %d", st)
			}
			time.Sleep(250 * time.Millisecond)
		}
		t.Logf("lease %s, max session %s: last let through at %s, refused from %s", lease, maxSession, lastOK.Round(time.Millisecond), firstRefused.Round(time.Millisecond))
		if lastOK < lease+time.Second {
			t.Errorf("an active visitor was refused at %s, soon after the %s lease: the lease did not slide", firstRefused, lease)
		}
		if firstRefused == 0 || firstRefused > maxSession+500*time.Millisecond {
			t.Errorf("refused from %s, want by the %s session's end", firstRefused, maxSession)
		}
	})
}

// TestSubresourceKeepsReturnAddress: a sub-resource the browser fetches
// while the visitor waits (Sec-Fetch-Dest: image, the favicon) is sent to
// the waiting page too, but does not replace the address to return to.
func TestSubresourceKeepsReturnAddress(t *testing.T) {
	withRedis(t, func(t *testing.T, client redis.UniversalClient) {
		w := newWorld(t, client, 1, 30*time.Second)
		b := newBuyer(w)
		if st, _, err := b.get(0, "/shop/item?id=7", "text/html"); err != nil || st != http.StatusSeeOther {
			t.Fatalf("first visit: %d %v", st, err)
		}
		req, _ := http.NewRequest(http.MethodGet, w.gates[0]+"/favicon.ico", nil)
		req.Header.Set("Sec-Fetch-Dest", "image")
		res, err := b.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusSeeOther {
			t.Errorf("favicon while waiting: %d, want 303", res.StatusCode)
		}
		var tk wrclient.TicketInfo
		if st, err := b.call(0, "POST", "/v1/rooms/"+w.room+"/tickets", `{}`, "", &tk); err != nil || st != http.StatusCreated {
			t.Fatalf("join: %d %v", st, err)
		}
		for end := time.Now().Add(10 * time.Second); tk.State != waitroom.StateAdmitted; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("not admitted: %s", tk.State)
			}
			b.call(0, "GET", "/v1/rooms/"+w.room+"/tickets/"+tk.UserID, "", tk.TicketToken, &tk)
		}
		var h struct{ Redirect string }
		if st, err := b.call(0, "POST", gate.AdmitPath, "", tk.TicketToken, &h); err != nil || st != http.StatusOK {
			t.Fatalf("hand-off: %d %v", st, err)
		}
		if h.Redirect != "/shop/item?id=7" {
			t.Errorf("redirect %q, want the page first asked for, not the favicon", h.Redirect)
		}
	})
}
