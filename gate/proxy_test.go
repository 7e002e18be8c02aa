package gate_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/chromedp/chromedp"
	"github.com/redis/go-redis/v9"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/gate"
	"github.com/stampede-lab/stampede/internal/browsertest"
	"github.com/stampede-lab/stampede/internal/testenv"
	"github.com/stampede-lab/stampede/waitroom"
	"github.com/stampede-lab/stampede/waitroom/api"
	"github.com/stampede-lab/stampede/waitroom/redisstore"
)

// The names of this file start with "proxy" so that they do not clash with
// the other test files'. Its tests run real nginx and Caddy (Debian's, which
// .ci/proxies installs) with the configurations in deploy/forward-auth, in
// front of the forward-auth server.

// proxyKinds are the proxies tested end to end.
var proxyKinds = []string{"nginx", "caddy"}

// proxyFreePort returns a loopback port free a moment ago.
func proxyFreePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// proxyDeployFile reads a file of deploy/forward-auth.
func proxyDeployFile(t *testing.T, name string) string {
	t.Helper()
	_, here, _, _ := runtime.Caller(0)
	raw, err := os.ReadFile(filepath.Join(filepath.Dir(here), "..", "deploy", "forward-auth", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// startProxy runs a real nginx or Caddy with deploy/forward-auth's
// configuration, its addresses changed to the forward-auth server
// authAddr and the checkout upAddr, until the test ends. It returns the
// proxy's base URL, once it answers.
func startProxy(t *testing.T, kind, authAddr, upAddr string) string {
	t.Helper()
	dir := t.TempDir()
	port := proxyFreePort(t)
	var cmd *exec.Cmd
	switch kind {
	case "nginx":
		bin := testenv.Executable(t, "STAMPEDE_NGINX", "nginx", "/usr/sbin/nginx")
		site := proxyDeployFile(t, "nginx.conf")
		site = strings.NewReplacer("127.0.0.1:8081", authAddr, "127.0.0.1:9000", upAddr,
			"listen 8080;", fmt.Sprintf("listen 127.0.0.1:%d;", port)).Replace(site)
		if err := os.WriteFile(filepath.Join(dir, "site.conf"), []byte(site), 0o644); err != nil {
			t.Fatal(err)
		}
		// One process, in the foreground, as the test's user; every file
		// in dir.
		main := fmt.Sprintf(`daemon off;
master_process off;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path %[1]s/body;
    proxy_temp_path %[1]s/proxy;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;
    include %[1]s/site.conf;
}
`, dir)
		if err := os.WriteFile(filepath.Join(dir, "nginx.conf"), []byte(main), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd = exec.Command(bin, "-p", dir, "-e", filepath.Join(dir, "error.log"), "-c", filepath.Join(dir, "nginx.conf"))
	case "caddy":
		bin := testenv.Executable(t, "STAMPEDE_CADDY", "caddy")
		conf := proxyDeployFile(t, "Caddyfile")
		conf = strings.NewReplacer("127.0.0.1:8081", authAddr, "127.0.0.1:9000", upAddr,
			":8080 {", fmt.Sprintf("http://127.0.0.1:%d {", port)).Replace(conf)
		if err := os.WriteFile(filepath.Join(dir, "Caddyfile"), []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd = exec.Command(bin, "run", "--config", filepath.Join(dir, "Caddyfile"), "--adapter", "caddyfile")
		cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	default:
		t.Fatalf("unknown proxy %q", kind)
	}
	logf, err := os.Create(filepath.Join(dir, "out.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", kind, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); logf.Close(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			for _, f := range []string{"out.log", "error.log"} {
				if raw, err := os.ReadFile(filepath.Join(dir, f)); err == nil && len(raw) > 0 {
					t.Logf("%s %s:\n%s", kind, f, raw[max(0, len(raw)-4000):])
				}
			}
		}
	})
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	for end := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		select {
		case <-done:
			raw, _ := os.ReadFile(filepath.Join(dir, "out.log"))
			elog, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			t.Fatalf("%s exited at start:\n%s\n%s", kind, raw, elog)
		default:
		}
		if res, err := http.Get(base + "/.well-known/jwks.json"); err == nil {
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			return base // the proxy answers (whatever Stampede's state)
		}
		if time.Now().After(end) {
			t.Fatalf("%s did not answer on %s", kind, base)
		}
	}
}

// startForwardAuth runs a waiting-room instance on store inside a
// forward-auth server with rules (nil: none), as `stampede serve
// forward-auth` does, until the test ends; it returns the server's address
// and the instance.
func startForwardAuth(t *testing.T, ctx context.Context, store waitroom.Store, room string, rules *gate.Rules) (string, *running) {
	t.Helper()
	opts := api.DefaultConfig()
	opts.Instance = "gate-fa-" + randomName()
	opts.Secret, opts.AdminToken, opts.CheckoutKey = testSecret, adminToken, checkoutKey
	opts.Logger = slog.New(slog.DiscardHandler)
	opts.RoomRefresh = 50 * time.Millisecond
	opts.OnAdmit = gate.AdmitPath // as serve forward-auth sets it
	srv, err := startServer(t, ctx, store, opts)
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	t.Cleanup(srv.Close)
	cfg := gate.DefaultConfig()
	cfg.Room, cfg.Logger = room, slog.New(slog.DiscardHandler)
	cfg.SafetyMargin = 300 * time.Millisecond
	fa, err := gate.NewForwardAuth(withWaitroom(cfg, srv), rules)
	if err != nil {
		t.Fatalf("NewForwardAuth: %v", err)
	}
	hs := httptest.NewServer(fa)
	t.Cleanup(hs.Close)
	return strings.TrimPrefix(hs.URL, "http://"), srv
}

// proxyWorld is a world (gate_test.go) whose gates are real proxies, each
// asking its own forward-auth server, all on one Redis.
func proxyWorld(t *testing.T, client redis.UniversalClient, kind string, proxies, capacity int, lease time.Duration) *world {
	t.Helper()
	store := redisstore.New(client)
	room := "gate-fa-" + randomName()
	ctx := context.Background()
	t.Cleanup(func() { store.DeleteRoom(context.Background(), room) })
	w := &world{room: room, capacity: capacity}
	var srvs []*running
	var auths []string
	for range proxies {
		addr, srv := startForwardAuth(t, ctx, store, room, nil)
		srvs, auths = append(srvs, srv), append(auths, addr)
	}
	cfg := waitroom.RoomConfig{Capacity: capacity, Lease: lease, AdmitInterval: 20 * time.Millisecond, Retention: waitroom.DefaultRetention}
	proxyRetry(t, "Configure", func() error { return srvs[0].Service().Configure(ctx, room, cfg) })
	w.co = &checkout{t: t, room: room, first: map[string]time.Time{}, last: map[string]time.Time{}, jwks: srvs[0].Admissions()}
	up := httptest.NewServer(w.co)
	t.Cleanup(up.Close)
	for _, a := range auths {
		w.gates = append(w.gates, startProxy(t, kind, a, strings.TrimPrefix(up.URL, "http://")))
	}
	return w
}

// release posts the release form through proxy i, as a checkout's
// "finish" button would.
//
// A 503 (the store did not answer within its deadline, on a loaded
// machine) changed nothing, so the buyer presses again after its
// Retry-After, as a person would, up to 5 times.
func (b *buyer) release(i int) error {
	var res *http.Response
	for try := 0; ; try++ {
		var err error
		res, err = b.hc.PostForm(b.w.gates[i]+gate.ReleasePath, map[string][]string{"next": {"/shop/done"}})
		if err != nil {
			return err
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusServiceUnavailable || try == 4 {
			break
		}
		wait := time.Second
		if s, err := strconv.Atoi(res.Header.Get("Retry-After")); err == nil && s >= 0 {
			wait = min(time.Duration(s)*time.Second, time.Second) // the test's own bound
		}
		time.Sleep(wait)
	}
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/shop/done" {
		return fmt.Errorf("release: %d to %q, want 303 to /shop/done", res.StatusCode, res.Header.Get("Location"))
	}
	return nil
}

// TestForwardAuthCapThroughTwoProxies runs buyers through two real
// proxies of one kind (nginx, then Caddy), each asking its own
// forward-auth server, both on one Redis (the real one when
// STAMPEDE_REDIS_URL is set): the checkout never sees more admitted users
// at once than the capacity, every request it sees carries a valid
// Stampede-User and Stampede-Admission, an API client gets 503
// problem+json, and a released buyer is sent back to the waiting page.
func TestForwardAuthCapThroughTwoProxies(t *testing.T) {
	for _, kind := range proxyKinds {
		t.Run(kind, func(t *testing.T) {
			withRedis(t, func(t *testing.T, client redis.UniversalClient) {
				proxyCapRun(t, client, kind)
			})
		})
	}
}

func proxyCapRun(t *testing.T, client redis.UniversalClient, kind string) {
	buyers, capacity, lease := 120, 10, 2*time.Second
	w := proxyWorld(t, client, kind, 2, capacity, lease)
	// The gate's world picks among 3 gates; these are 2 proxies.
	w.gates = append(w.gates, w.gates[0])

	// An API client is told to wait, with problem+json.
	b := newBuyer(w)
	req, _ := http.NewRequest(http.MethodGet, w.gates[0]+"/shop/api", nil)
	req.Header.Set("Accept", "application/json")
	res, err := b.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Content-Type") != "application/problem+json" ||
		!strings.Contains(string(body), `"join"`) {
		t.Errorf("API client through %s: %d %s %s, want 503 problem+json naming join", kind, res.StatusCode, res.Header.Get("Content-Type"), body)
	}

	deadline := time.Now().Add(90 * time.Second)
	var slow atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []string
	fail := func(f string, a ...any) {
		mu.Lock()
		if len(failures) < 10 {
			failures = append(failures, fmt.Sprintf(f, a...))
		}
		mu.Unlock()
	}
	for i := range buyers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(pick(2000)) * time.Millisecond)
			b := newBuyer(w)
			back, err := b.enter(deadline)
			if err == errSlotLost {
				return
			}
			if err != nil {
				fail("buyer %d: %v", i, err)
				return
			}
			if back != "/shop/item?id=7" {
				fail("buyer %d: sent back to %q", i, back)
			}
			for range 3 {
				if st, _, err := b.get(pick(2), back, "text/html"); err != nil || st != http.StatusOK {
					if st == http.StatusSeeOther || st == http.StatusServiceUnavailable {
						// The lease ran out, or Redis answered too late
						// (503, Retry-After), on a slow machine.
						slow.Add(1)
						return
					}
					fail("buyer %d: page: %d %v", i, st, err)
					return
				}
				time.Sleep(time.Duration(50+pick(100)) * time.Millisecond)
			}
			if i%10 == 0 {
				return // abandons: the lease frees the slot
			}
			via := pick(2)
			u, _ := url.Parse(w.gates[via])
			kept := b.hc.Jar.Cookies(u) // a copy of the admission, as another device might hold
			if err := b.release(via); err != nil {
				fail("buyer %d: %v", i, err)
				return
			}
			// The copy is refused at once by the proxy the release went
			// through (the other may use its check for up to 1 s).
			replay := newBuyer(w)
			replay.hc.Jar.SetCookies(u, kept)
			if st, loc, err := replay.get(via, back, "text/html"); err != nil || st != http.StatusSeeOther || loc != "/rooms/"+w.room+"?join=anonymous" {
				fail("buyer %d: the released admission's cookie: %d %q %v, want 303 to the waiting page", i, st, loc, err)
			}
			if st, loc, err := b.get(pick(2), back, "text/html"); err != nil || st != http.StatusSeeOther || loc != "/rooms/"+w.room+"?join=anonymous" {
				fail("buyer %d: after release: %d %q %v, want 303 to the waiting page", i, st, loc, err)
			}
		}()
	}
	wg.Wait()
	for _, f := range failures {
		t.Error(f)
	}
	most, users := w.co.maxOverlap()
	t.Logf("%s: the checkout saw %d users, at most %d at once (capacity %d); %d requests", kind, users, most, capacity, w.co.requests)
	if most > capacity {
		t.Errorf("the checkout saw %d admitted users at once through two %s proxies, capacity %d", most, kind, capacity)
	}
	if n := slow.Load(); n > int64(buyers/4) {
		t.Errorf("%d of %d buyers lost their slot or got 503 while browsing", n, buyers)
	}
	if users < buyers/2 {
		t.Errorf("only %d of %d buyers reached the checkout", users, buyers)
	}
	if w.co.badHeader != 0 {
		t.Errorf("%d requests reached the checkout without a valid Stampede-User / Stampede-Admission: %q", w.co.badHeader, w.co.badWhy)
	}
}

// TestForwardAuthProxyRefusesForgedIdentity: through each proxy, a visitor
// without an admission who sends Stampede-User and Stampede-Admission of
// their own is sent to the waiting page, and the checkout sees nothing.
func TestForwardAuthProxyRefusesForgedIdentity(t *testing.T) {
	for _, kind := range proxyKinds {
		t.Run(kind, func(t *testing.T) {
			w := proxyWorld(t, proxyMiniredis(t), kind, 1, 1, time.Minute)
			req, _ := http.NewRequest(http.MethodGet, w.gates[0]+"/shop/item", nil)
			req.Header.Set("Stampede-User", "mallory")
			req.Header.Set("Stampede-Admission", "eyJhbGciOiJub25lIn0.e30.")
			req.Header.Set("Cookie", "stampede_admission=not-a-token")
			b := newBuyer(w)
			res, err := b.hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/rooms/"+w.room+"?join=anonymous" {
				t.Errorf("%s: %d to %q, want 303 to the waiting page", kind, res.StatusCode, res.Header.Get("Location"))
			}
			if !strings.Contains(strings.Join(res.Header.Values("Set-Cookie"), "\n"), "stampede_admission=;") {
				t.Errorf("%s: the bad cookie was not cleared: %q", kind, res.Header.Values("Set-Cookie"))
			}
			if w.co.requests != 0 {
				t.Errorf("%s: the checkout saw %d requests", kind, w.co.requests)
			}
		})
	}
}

// proxyFinishRe is the upstream page's finish link.
var proxyFinishRe = regexp.MustCompile(`<a id="finish"[^>]*>([^<]*)</a>`)

// formShop is the browser test's shop whose finish is a form posted to
// the release path: behind a proxy that cannot pass "Stampede-Release:
// done" back, a checkout ends the admission this way.
type formShop struct{ *shop }

func (s formShop) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec := httptest.NewRecorder()
	s.shop.ServeHTTP(rec, r)
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	io.WriteString(w, proxyFinishRe.ReplaceAllString(rec.Body.String(),
		`<form method="post" action="`+gate.ReleasePath+`"><input type="hidden" name="next" value="/checkout/page">`+
			`<button id="finish" class="button" type="submit" style="width:100%;border:0;font:inherit">$1</button></form>`))
}

// proxyMiniredis is a client of an embedded Redis for the test.
func proxyMiniredis(t *testing.T) redis.UniversalClient {
	t.Helper()
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { c.Close() })
	return c
}

// TestBrowserThroughProxy drives headless Chromium through real nginx and
// Caddy in front of the forward-auth server: in a room of 1 that someone
// else holds, the protected page leads to the waiting page (first in
// line); when the other user leaves, the page is admitted, hands its
// ticket over and lands on the checkout's page, which saw the buyer's
// Stampede-User; the checkout's "finish" form releases the slot, and the
// protected page leads back to the waiting page, which says the visitor
// has left. Screenshots of each step are saved (browsertest.ShotDir).
func TestBrowserThroughProxy(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 120*time.Second)
	defer cancel()
	bctx := browsertest.Start(t, ctx)
	dir := browsertest.ShotDir(t)
	for _, kind := range proxyKinds {
		t.Run(kind, func(t *testing.T) {
			store := redisstore.New(proxyMiniredis(t))
			room := "gate-fa-browser-" + randomName()
			addr, srv := startForwardAuth(t, ctx, store, room, nil)
			svc := srv.Service()
			cfg := waitroom.DefaultRoomConfig()
			cfg.Capacity, cfg.Lease, cfg.AdmitInterval = 1, time.Minute, 50*time.Millisecond
			proxyRetry(t, "Configure", func() error { return svc.Configure(ctx, room, cfg) })
			up := &shop{room: room, keys: srv.Admissions()}
			ups := httptest.NewServer(formShop{up})
			t.Cleanup(ups.Close)
			base := startProxy(t, kind, addr, strings.TrimPrefix(ups.URL, "http://"))

			proxyRetry(t, "Join", func() error { _, err := svc.Join(ctx, room, "occupant"); return err })
			for end := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				if tk, err := svc.Ticket(ctx, room, "occupant"); err == nil && tk.State == waitroom.StateAdmitted {
					break
				}
				if time.Now().After(end) {
					t.Fatal("the occupant was not admitted")
				}
			}
			const width = 1200
			tab := browsertest.Tab(t, bctx, browsertest.TabOptions{Width: width, AcceptLanguage: browserTexts["en"].accept, OwnCookies: true}, base+"/checkout/page")
			p := browserWait(tab, t, room, "the waiting page, first in line", 20*time.Second, func(p browserPage) bool {
				return p.Path == "/rooms/"+room && p.State == "waiting" && p.Position == "1"
			})
			browserCheck(t, p, width)
			browsertest.Shot(t, tab, dir, fmt.Sprintf("forward-auth-%s-1-waiting", kind), width, 0)

			proxyRetry(t, "Leave", func() error { _, err := svc.Leave(ctx, room, "occupant"); return err })
			p = browserWait(tab, t, room, "the checkout's page", 20*time.Second, func(p browserPage) bool {
				return p.Path == "/checkout/page" && p.Marker != ""
			})
			browserCheck(t, p, width)
			user := p.User
			if seen := up.seen("/checkout/page"); len(seen) != 1 || seen[0] != user || user == "" {
				t.Errorf("the checkout saw Stampede-User %q on /checkout/page, want once %q", seen, user)
			}
			if !strings.Contains(p.Marker, user) || strings.Contains(p.Cookies, "stampede_admission") {
				t.Errorf("checkout page: marker %q (want user %q); document.cookie %q must not show the HttpOnly admission", p.Marker, user, p.Cookies)
			}
			browsertest.Shot(t, tab, dir, fmt.Sprintf("forward-auth-%s-2-checkout", kind), width, 0)

			// finish: the form releases the slot and goes back to the
			// protected page, which leads to the waiting page.
			if err := chromedp.Do(tab, chromedp.Click(chromedp.ID("finish"))); err != nil {
				t.Fatalf("clicking finish: %v", err)
			}
			p = browserWait(tab, t, room, "the waiting page after release", 20*time.Second, func(p browserPage) bool {
				return p.Path == "/rooms/"+room && p.State == "released"
			})
			browserCheck(t, p, width)
			if tk, err := svc.Ticket(ctx, room, user); err != nil || tk.State != waitroom.StateReleased {
				t.Errorf("after finish the ticket is %+v, %v; want released", tk, err)
			}
			if n := len(up.seen("/checkout/page")); n != 1 {
				t.Errorf("the checkout saw /checkout/page %d times, want once (not after the release)", n)
			}
			if up.bad() != 0 {
				t.Errorf("%d requests reached the checkout without a valid Stampede-User / Stampede-Admission", up.bad())
			}
			browsertest.Shot(t, tab, dir, fmt.Sprintf("forward-auth-%s-3-after-release", kind), width, 0)
		})
	}
}

// TestForwardAuthLeaseSlidesThroughProxy: through each proxy, a buyer who
// keeps browsing keeps the slot past the room's 2 s lease, and every
// request reaches the checkout with an admission token it verifies
// (unexpired), whether or not the proxy passes the re-issued cookie back
// (nginx does; Caddy's forward_auth does not, and the forward-auth server
// then re-checks the expired cookie's slot in the store and re-signs).
func TestForwardAuthLeaseSlidesThroughProxy(t *testing.T) {
	for _, kind := range proxyKinds {
		t.Run(kind, func(t *testing.T) {
			w := proxyWorld(t, proxyMiniredis(t), kind, 1, 5, 2*time.Second)
			w.gates = append(w.gates, w.gates[0], w.gates[0])
			b := newBuyer(w)
			back, err := b.enter(time.Now().Add(30 * time.Second))
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			for time.Since(start) < 5*time.Second {
				if st, loc, err := b.get(0, back, "text/html"); err != nil || st != http.StatusOK {
					t.Fatalf("%s after %s of browsing: %d %q %v, want 200", kind, time.Since(start).Round(time.Millisecond), st, loc, err)
				}
				time.Sleep(250 * time.Millisecond)
			}
			if w.co.badHeader != 0 {
				t.Errorf("%s: %d of %d requests reached the checkout without a valid (unexpired) admission: %q", kind, w.co.badHeader, w.co.requests, w.co.badWhy)
			}
		})
	}
}

// TestForwardAuthDownNeverLetsThrough: with the forward-auth server
// unreachable, each proxy answers 5xx and the checkout sees nothing; nginx
// (its error page in deploy/forward-auth/nginx.conf) answers 503
// problem+json with Retry-After.
func TestForwardAuthDownNeverLetsThrough(t *testing.T) {
	for _, kind := range proxyKinds {
		t.Run(kind, func(t *testing.T) {
			co := &checkout{t: t, first: map[string]time.Time{}, last: map[string]time.Time{}}
			up := httptest.NewServer(co)
			t.Cleanup(up.Close)
			down := fmt.Sprintf("127.0.0.1:%d", proxyFreePort(t)) // nothing listens
			base := startProxy(t, kind, down, strings.TrimPrefix(up.URL, "http://"))
			res, err := http.Get(base + "/shop/item")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode < 500 {
				t.Errorf("%s with Stampede down: %d %s, want 5xx", kind, res.StatusCode, body)
			}
			if kind == "nginx" && (res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") == "" ||
				res.Header.Get("Content-Type") != "application/problem+json") {
				t.Errorf("nginx with Stampede down: %d %q %q, want 503 problem+json with Retry-After", res.StatusCode, res.Header.Get("Content-Type"), res.Header.Get("Retry-After"))
			}
			if co.requests != 0 {
				t.Errorf("%s with Stampede down let %d requests through to the checkout", kind, co.requests)
			}
		})
	}
}

// TestForwardAuthBypassThroughProxy: through each proxy, a request on a
// bypassed path reaches the checkout without a room and without the
// Stampede-User and Stampede-Admission the client sent.
func TestForwardAuthBypassThroughProxy(t *testing.T) {
	for _, kind := range proxyKinds {
		t.Run(kind, func(t *testing.T) {
			rules := &gate.Rules{Bypass: gate.Bypass{PathPrefixes: []string{"/static/"}}}
			addr, _ := startForwardAuth(t, context.Background(), redisstore.New(proxyMiniredis(t)), "gate-fa-bypass-"+randomName(), rules)
			var mu sync.Mutex
			var seen []string
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				seen = append(seen, r.URL.Path+" user="+r.Header.Get("Stampede-User")+" admission="+r.Header.Get("Stampede-Admission"))
				mu.Unlock()
				io.WriteString(w, "asset")
			}))
			t.Cleanup(up.Close)
			base := startProxy(t, kind, addr, strings.TrimPrefix(up.URL, "http://"))
			req, _ := http.NewRequest(http.MethodGet, base+"/static/app.css", nil)
			req.Header.Set("Stampede-User", "mallory")
			req.Header.Set("Stampede-Admission", "forged")
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			mu.Lock()
			defer mu.Unlock()
			if res.StatusCode != http.StatusOK || len(seen) != 1 || seen[0] != "/static/app.css user= admission=" {
				t.Errorf("%s: %d; the checkout saw %q, want one request without identity", kind, res.StatusCode, seen)
			}
		})
	}
}

// proxyRetry runs fn until it succeeds, retrying (for at most 10 s) while
// the store answers Unavailable: the embedded Redis answers late on a
// loaded machine, and a client would retry.
func proxyRetry(t *testing.T, what string, fn func() error) {
	t.Helper()
	end := time.Now().Add(10 * time.Second)
	for {
		err := fn()
		if err == nil {
			return
		}
		if stampede.ClassOf(err) != stampede.Unavailable || time.Now().After(end) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
