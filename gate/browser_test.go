package gate_test

import (
	"context"
	"fmt"
	"html"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/chromedp/chromedp"
	"github.com/redis/go-redis/v9"

	"github.com/stampede-lab/stampede/gate"
	"github.com/stampede-lab/stampede/internal/browsertest"
	"github.com/stampede-lab/stampede/protocol"
	"github.com/stampede-lab/stampede/waitroom"
	"github.com/stampede-lab/stampede/waitroom/api"
	"github.com/stampede-lab/stampede/waitroom/redisstore"
)

// The names of this file start with "browser" or "shop" so that they do
// not clash with gate_test.go's.

// browserTexts are what the waiting page must say in each language.
var browserTexts = map[string]struct{ accept, waiting, released string }{
	"ko": {"ko-KR,ko;q=0.9,en-US;q=0.8", "대기 순번", "퇴장했습니다"},
	"en": {"en-US,en;q=0.9", "Your place in line", "You have left"},
}

// TestBrowserGate drives headless Chromium through the gate, in Korean
// and in English, 1200 and 390 pixels wide: the protected page sends the
// visitor to the waiting page (first in line behind the one admitted
// user), the visitor is admitted when that user leaves, the page hands
// the ticket to the gate and lands on the upstream page (which saw
// Stampede-User), "finish" answers Stampede-Release: done, and asking for
// the protected page again leads back to the waiting page. No token is in
// any page, and nothing scrolls sideways at 390 pixels.
func TestBrowserGate(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	bctx := browsertest.Start(t, ctx)

	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { client.Close() })
	opts := api.DefaultConfig()
	opts.Instance = "gate-browser-" + randomName()
	opts.Secret, opts.AdminToken, opts.CheckoutKey = testSecret, adminToken, checkoutKey
	opts.Logger = slog.New(slog.DiscardHandler)
	opts.RoomRefresh = 50 * time.Millisecond
	opts.OnAdmit = gate.AdmitPath // as serve gate sets it
	srv, err := startServer(t, ctx, redisstore.New(client), opts)
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	t.Cleanup(srv.Close)

	dir := browsertest.ShotDir(t)
	for _, lang := range []string{"ko", "en"} {
		for _, width := range []int{1200, 390} {
			t.Run(fmt.Sprintf("%s-%d", lang, width), func(t *testing.T) {
				browserGateFlow(ctx, t, srv, bctx, lang, width, dir)
			})
		}
	}
}

// browserGateFlow is one run of TestBrowserGate, on its own room, gate,
// upstream and browser context (cookies ignore ports).
func browserGateFlow(ctx context.Context, t *testing.T, srv *running, bctx context.Context, lang string, width int, dir string) {
	want := browserTexts[lang]
	svc := srv.Service()
	room := "gate-browser-" + randomName()
	cfg := waitroom.DefaultRoomConfig()
	cfg.Capacity, cfg.Lease, cfg.AdmitInterval = 1, time.Minute, 50*time.Millisecond
	if err := svc.Configure(ctx, room, cfg); err != nil {
		t.Fatalf("Configure: %v", err)
	}
	up := &shop{room: room, keys: srv.Admissions()}
	ups := httptest.NewServer(up)
	t.Cleanup(ups.Close)
	upURL, _ := url.Parse(ups.URL)
	gcfg := gate.DefaultConfig()
	gcfg.Room, gcfg.Upstream, gcfg.Logger = room, upURL, slog.New(slog.DiscardHandler)
	g, err := gate.New(withWaitroom(gcfg, srv))
	if err != nil {
		t.Fatalf("gate.New: %v", err)
	}
	// The gate's first hand-off answers 503 (its store late, as under
	// load): the page must try again, not stay on "your turn".
	var failedOnce atomic.Bool
	gs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == gate.AdmitPath && failedOnce.CompareAndSwap(false, true) {
			w.Header().Set("Retry-After", "1")
			http.Error(w, "store unavailable (test)", http.StatusServiceUnavailable)
			return
		}
		g.ServeHTTP(w, r)
	}))
	t.Cleanup(gs.Close)

	// Someone else holds the one slot.
	if _, err := svc.Join(ctx, room, "occupant"); err != nil {
		t.Fatalf("Join: %v", err)
	}
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if tk, err := svc.Ticket(ctx, room, "occupant"); err == nil && tk.State == waitroom.StateAdmitted {
			break
		}
		if time.Now().After(end) {
			t.Fatal("the occupant was not admitted")
		}
	}

	// The protected page leads to the waiting page: first in line.
	tab := browsertest.Tab(t, bctx, browsertest.TabOptions{Width: int64(width), AcceptLanguage: want.accept, OwnCookies: true}, gs.URL+"/checkout/page")
	p := browserWait(tab, t, room, "the waiting page, first in line", 20*time.Second, func(p browserPage) bool {
		return p.Path == "/rooms/"+room && p.State == "waiting" && p.Position == "1"
	})
	browserCheck(t, p, width)
	if p.Lang != lang || !strings.Contains(p.Text, want.waiting) {
		t.Errorf("waiting page: lang %q, want %q with %q: %s", p.Lang, lang, want.waiting, p)
	}
	if p.Query != "?join=anonymous" || p.Token == "" || strings.Contains(p.HTML, p.Token) {
		t.Errorf("waiting page: query %q, ticket token stored %t, in the page %t", p.Query, p.Token != "", p.Token != "" && strings.Contains(p.HTML, p.Token))
	}
	browsertest.Shot(t, tab, dir, fmt.Sprintf("gate-%s-%d-1-waiting", lang, width), width, 0)

	// The occupant leaves: the page is admitted, hands its ticket to the
	// gate and goes to the address first asked for.
	if _, err := svc.Leave(ctx, room, "occupant"); err != nil {
		t.Fatalf("Leave: %v", err)
	}
	p = browserWait(tab, t, room, "the upstream page", 20*time.Second, func(p browserPage) bool {
		return p.Path == "/checkout/page" && p.Marker != ""
	})
	browserCheck(t, p, width)
	if !failedOnce.Load() {
		t.Error("the page reached the upstream without a hand-off to the gate")
	}
	user := p.User
	if seen := up.seen("/checkout/page"); len(seen) != 1 || seen[0] != user || user == "" {
		t.Errorf("upstream saw Stampede-User %q on /checkout/page, want once %q", seen, user)
	}
	if !strings.Contains(p.Marker, user) || strings.Contains(p.Cookies, "stampede_admission") {
		t.Errorf("upstream page: marker %q (want user %q); document.cookie %q must not show the HttpOnly admission", p.Marker, user, p.Cookies)
	}
	browsertest.Shot(t, tab, dir, fmt.Sprintf("gate-%s-%d-2-upstream", lang, width), width, 0)

	// finish: the upstream answers Stampede-Release: done.
	if err := chromedp.Do(tab, chromedp.Click(chromedp.ID("finish"))); err != nil {
		t.Fatalf("clicking finish: %v", err)
	}
	p = browserWait(tab, t, room, "the finished page", 10*time.Second, func(p browserPage) bool {
		return p.Path == "/checkout/finish" && p.Marker != ""
	})
	browserCheck(t, p, width)
	if tk, err := svc.Ticket(ctx, room, user); err != nil || tk.State != waitroom.StateReleased {
		t.Errorf("after finish the ticket is %+v, %v; want released", tk, err)
	}

	// The protected page again: back to the waiting page, which says the
	// visitor has left.
	if err := chromedp.Do(tab, chromedp.Click(chromedp.ID("again"))); err != nil {
		t.Fatalf("clicking again: %v", err)
	}
	p = browserWait(tab, t, room, "the waiting page after release", 20*time.Second, func(p browserPage) bool {
		return p.Path == "/rooms/"+room && p.State == "released"
	})
	browserCheck(t, p, width)
	if !strings.Contains(p.Text, want.released) || p.Token != "" {
		t.Errorf("after release: want %q and no stored token: %s", want.released, p)
	}
	if n := len(up.seen("/checkout/page")); n != 1 {
		t.Errorf("upstream saw /checkout/page %d times, want once (not after the release)", n)
	}
	if up.bad() != 0 {
		t.Errorf("%d upstream requests lacked a valid Stampede-User / Stampede-Admission", up.bad())
	}
	browsertest.Shot(t, tab, dir, fmt.Sprintf("gate-%s-%d-3-after-release", lang, width), width, 0)
}

// shop is the upstream checkout: /checkout/page shows the admitted user
// (#marker) and a #finish link; /checkout/finish answers
// Stampede-Release: done. It records each request's Stampede-User.
type shop struct {
	room string
	keys *waitroom.AdmissionSigner

	mu      sync.Mutex
	users   map[string][]string // path → Stampede-User of each request
	invalid int
}

func (s *shop) seen(path string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.users[path]...)
}

func (s *shop) bad() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.invalid
}

func (s *shop) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	user := r.Header.Get(protocol.HeaderUser)
	c, err := waitroom.VerifyAdmissionJWT(r.Header.Get(protocol.HeaderAdmission), s.keys.JWKS(), s.room, time.Now())
	s.mu.Lock()
	if s.users == nil {
		s.users = map[string][]string{}
	}
	s.users[r.URL.Path] = append(s.users[r.URL.Path], user)
	if user == "" || err != nil || c.User != user {
		s.invalid++
	}
	s.mu.Unlock()
	ko := api.PageLang(r) == api.LangKorean
	say := func(k, e string) string {
		if ko {
			return k
		}
		return e
	}
	var body string
	switch r.URL.Path {
	case "/checkout/page":
		body = `<div id="marker"><h1>` + say("결제 페이지", "Checkout") + `</h1>
<p>` + say("입장한 사용자만 이 페이지를 봅니다.", "Only admitted visitors see this page.") + `</p>
<p class="user">Stampede-User: <code>` + html.EscapeString(user) + `</code></p></div>
<a id="finish" class="button" href="/checkout/finish">` + say("결제 완료", "Finish") + `</a>`
	case "/checkout/finish":
		w.Header().Set(protocol.HeaderRelease, "done")
		body = `<h1 id="marker">` + say("결제가 끝났습니다", "Done, thank you") + `</h1>
<p>` + say("자리를 반납했습니다.", "Your place has been released.") + `</p>
<a id="again" class="button" href="/checkout/page">` + say("결제 페이지 다시 열기", "Open the checkout again") + `</a>`
	default:
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	fmt.Fprintf(w, `<!doctype html><html lang="%s"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1"><title>Shop</title>
<style>body{font-family:system-ui,"Noto Sans CJK KR","NanumGothic",sans-serif;margin:0;padding:1.5rem 1rem;background:#eef7ee}
main{max-width:34rem;margin:0 auto;background:#fff;border-radius:1rem;padding:1.5rem;overflow-wrap:anywhere}
.user{color:#5b6478;font-size:.9rem}
.button{display:block;text-align:center;padding:.75rem;border-radius:.5rem;background:#1b7f3b;color:#fff;text-decoration:none}</style>
</head><body><main>%s</main></body></html>`, say("ko", "en"), body)
}

// browserPage is what a tab shows, read in one evaluation.
type browserPage struct {
	Path        string `json:"path"`
	Query       string `json:"query"`
	State       string `json:"state"`
	Position    string `json:"position"`
	Lang        string `json:"lang"`
	Text        string `json:"text"`
	HTML        string `json:"html"`
	Marker      string `json:"marker"`
	Cookies     string `json:"cookies"`
	ScrollWidth int    `json:"scrollWidth"`
	Token       string `json:"token"`
	User        string `json:"user"`
}

func (p browserPage) String() string {
	return fmt.Sprintf("path=%q%s state=%q position=%q lang=%q marker=%q scrollWidth=%d text=%q",
		p.Path, p.Query, p.State, p.Position, p.Lang, p.Marker, p.ScrollWidth, p.Text)
}

// browserPageJS reads a browserPage; %q is the room (its localStorage
// keys).
const browserPageJS = `(() => {
	const room = %q, el = (id) => document.getElementById(id);
	const m = el("marker"), visible = m && m.getBoundingClientRect().height > 0;
	return {
		path: location.pathname, query: location.search,
		state: document.body ? document.body.dataset.state || "" : "",
		position: el("position") ? el("position").textContent : "",
		lang: document.documentElement.lang,
		text: document.body ? document.body.innerText : "",
		html: document.documentElement.outerHTML,
		marker: visible ? m.textContent : "",
		cookies: document.cookie,
		scrollWidth: document.documentElement.scrollWidth,
		token: localStorage.getItem("stampede:" + room + ":token") || "",
		user: localStorage.getItem("stampede:" + room + ":user") || "",
	};
})()`

// browserWait reads the tab every 25 ms until ok accepts it, for at most
// limit; reads that fail while the tab navigates are retried.
func browserWait(tab context.Context, t *testing.T, room, what string, limit time.Duration, ok func(browserPage) bool) browserPage {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab, limit)
	defer cancel()
	var last browserPage
	for {
		p, err := chromedp.Run(ctx, chromedp.Evaluate[browserPage](fmt.Sprintf(browserPageJS, room)))
		if err == nil {
			last = p
			if ok(p) {
				return p
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("timed out after %s waiting for %s; the tab shows %s (last error %v)", limit, what, last, err)
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// browserCheck: nothing scrolls sideways, and no token is in the page.
func browserCheck(t *testing.T, p browserPage, width int) {
	t.Helper()
	if p.ScrollWidth > width {
		t.Errorf("%s: scrollWidth %d > %d: the page scrolls sideways", p.Path, p.ScrollWidth, width)
	}
	if strings.Contains(p.HTML, "eyJ") { // a JWT's base64url header
		t.Errorf("%s: a token is in the page", p.Path)
	}
}
