package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/redis/go-redis/v9"

	"github.com/stampede-lab/stampede/internal/browsertest"
	"github.com/stampede-lab/stampede/internal/httpapi/apitest"
	"github.com/stampede-lab/stampede/waitroom"
	"github.com/stampede-lab/stampede/waitroom/api"
	"github.com/stampede-lab/stampede/waitroom/redisstore"
)

// The names of this file start with "browser" so that they cannot clash with
// the other tests of the package.

const (
	browserAdminToken = "browser-test-admin-token-0123456789"
)

var browserSecret = []byte("browser-test-secret-0123456789abcdef-0123")

// browserServer is a waiting-room server on the embedded Redis behind an
// httptest server.
type browserServer struct {
	url string
	hc  *http.Client // checks every answer against the OpenAPI description
}

func newBrowserServer(t *testing.T) *browserServer {
	t.Helper()
	emb, err := redisstore.StartEmbedded()
	if err != nil {
		t.Fatalf("StartEmbedded: %v", err)
	}
	t.Cleanup(emb.Close)
	client := redis.NewClient(&redis.Options{Addr: emb.Addr()})
	t.Cleanup(func() { client.Close() })

	opts := api.DefaultConfig()
	opts.Immediate = true
	opts.Instance = "browser-test"
	opts.Secret, opts.AdminToken = browserSecret, browserAdminToken
	opts.Logger = slog.New(slog.DiscardHandler)
	opts.AllowUnsignedUsers = true // the tests name the users in line ahead of the page
	opts.RoomRefresh = 50 * time.Millisecond
	srv, err := startServer(t, context.Background(), redisstore.New(client), opts)
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	t.Cleanup(srv.Close)
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	return &browserServer{url: ts.URL, hc: apitest.New(t, api.OpenAPI()).Client(t)}
}

// call sends one API request and decodes the JSON answer; it fails the
// test unless the status is want.
func (s *browserServer) call(ctx context.Context, t *testing.T, want int, method, path, body, auth string) map[string]any {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	r, err := http.NewRequestWithContext(ctx, method, s.url+path, rd)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	if body != "" {
		r.Header.Set("Content-Type", "application/json")
	}
	if auth != "" {
		r.Header.Set("Authorization", "Bearer "+auth)
	}
	res, err := s.hc.Do(r)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the answer: %v", method, path, err)
	}
	if res.StatusCode != want {
		t.Fatalf("%s %s = %d, want %d\n%s", method, path, res.StatusCode, want, raw)
	}
	var v map[string]any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("%s %s: answer is not JSON: %v\n%s", method, path, err, raw)
	}
	return v
}

// browserPage is what the waiting page shows, read in one evaluation.
type browserPage struct {
	State          string `json:"state"`
	Position       string `json:"position"`
	Ahead          string `json:"ahead"`
	ETA            string `json:"eta"`
	Progress       string `json:"progress"`
	Notice         string `json:"notice"`
	AdmittedText   string `json:"admittedText"`
	EndedText      string `json:"endedText"`
	Polite         string `json:"polite"`
	Assertive      string `json:"assertive"`
	LiveRegions    int    `json:"liveRegions"`
	Title          string `json:"title"`
	Lang           string `json:"lang"`
	ScrollWidth    int    `json:"scrollWidth"`
	ViewportWidth  int    `json:"viewportWidth"`
	HTML           string `json:"html"`
	Text           string `json:"text"`
	TicketToken    string `json:"ticketToken"`
	UserID         string `json:"userID"`
	WaitingHidden  bool   `json:"waitingHidden"`
	AdmittedHidden bool   `json:"admittedHidden"`
	EndedHidden    bool   `json:"endedHidden"`
}

func (p browserPage) String() string {
	return fmt.Sprintf("state=%q position=%q ahead=%q eta=%q progress=%q notice=%q admitted=%q ended=%q polite=%q assertive=%q title=%q scrollWidth=%d",
		p.State, p.Position, p.Ahead, p.ETA, p.Progress, p.Notice, p.AdmittedText, p.EndedText, p.Polite, p.Assertive, p.Title, p.ScrollWidth)
}

// browserPageJS reads a browserPage. It runs through the DevTools protocol
// (Runtime.evaluate), which the page's CSP does not restrict. The test polls
// it from Go rather than with chromedp.Poll so that a timeout can say what
// the page showed last.
const browserPageJS = `(() => {
	const $ = (id) => document.getElementById(id);
	const room = document.body.dataset.room;
	const text = (id) => $(id) ? $(id).textContent : "";
	return {
		state: document.body.dataset.state || "",
		position: text("position"),
		ahead: text("ahead"),
		eta: text("eta"),
		progress: $("progress") ? $("progress").getAttribute("aria-valuenow") : "",
		notice: $("notice").hidden ? "" : text("notice"),
		admittedText: text("admitted-text"),
		endedText: text("ended-text"),
		polite: text("live-polite"),
		assertive: text("live-assertive"),
		liveRegions: document.querySelectorAll('[aria-live="polite"]#live-polite, [aria-live="assertive"]#live-assertive').length,
		title: document.title,
		lang: document.documentElement.lang,
		scrollWidth: document.documentElement.scrollWidth,
		viewportWidth: window.innerWidth,
		html: document.documentElement.outerHTML,
		text: document.body.innerText,
		ticketToken: localStorage.getItem("stampede:" + room + ":token") || "",
		userID: localStorage.getItem("stampede:" + room + ":user") || "",
		waitingHidden: $("s-waiting").hidden,
		admittedHidden: $("s-admitted").hidden,
		endedHidden: $("s-ended").hidden,
	};
})()`

// browserWait reads the page every 25 ms until ok accepts it, for at most
// limit (and never past ctx). ctx is the browser tab's chromedp context.
func browserWait(ctx context.Context, t *testing.T, what string, limit time.Duration, ok func(browserPage) bool) browserPage {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	var last browserPage
	for {
		p, err := chromedp.Run(ctx, chromedp.Evaluate[browserPage](browserPageJS))
		if err == nil {
			last = p
			if ok(p) {
				return p
			}
		} else if ctx.Err() == nil {
			t.Fatalf("waiting for %s: reading the page: %v", what, err)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("timed out after %s waiting for %s; the page shows %s", limit, what, last)
		case <-tick.C:
		}
	}
}

// browserTexts are what the page must say in each language.
var browserTexts = map[string]struct {
	accept, waiting, ahead, admitted, released string
}{
	"ko": {"ko-KR,ko;q=0.9,en-US;q=0.8", "대기 순번", "다음 차례입니다", "입장 차례입니다", "퇴장했습니다"},
	"en": {"en-US,en;q=0.9", "Your place in line", "You are next", "It's your turn", "You have left"},
}

// TestBrowserWaitingToAdmitted drives the waiting page in headless
// Chromium, in Korean and in English, 1200 and 390 pixels wide: bob opens
// the page of a full room and joins anonymously behind carol (second in
// line), moves to first, is admitted when carol releases her slot, is
// told so (assertive live region, title), and leaves. The page shows the
// position from 1, never overflows the 390-pixel width, and never shows a
// token.
func TestBrowserWaitingToAdmitted(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 150*time.Second)
	defer cancel()
	// The browser starts first: alice's lease runs from her admission, and
	// a slow browser start must not eat it.
	bctx := browsertest.Start(t, ctx)
	s := newBrowserServer(t)
	dir := browsertest.ShotDir(t)
	for _, lang := range []string{"ko", "en"} {
		for _, width := range []int{1200, 390} {
			t.Run(fmt.Sprintf("%s-%d", lang, width), func(t *testing.T) {
				browserFlow(ctx, t, s, bctx, lang, width, dir)
			})
		}
	}
}

// browserFlow is one run of TestBrowserWaitingToAdmitted.
func browserFlow(ctx context.Context, t *testing.T, s *browserServer, bctx context.Context, lang string, width int, dir string) {
	want := browserTexts[lang]
	room := "browser-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	title := map[string]string{"ko": "2026 봄 콘서트 <b>티켓</b>", "en": "Spring Concert 2026 <b>tickets</b>"}[lang]
	s.call(ctx, t, http.StatusOK, "PUT", "/v1/rooms/"+room,
		roomBody(t, `{"capacity":1,"lease_seconds":60,"admit_interval_ms":100,"template":{"title":`+strconv.Quote(title)+
			`,"primary_color":"#6a1b9a","background_color":"#f3e5f5","text_ko":"좌석은 선착순입니다.\n창을 닫지 마세요.","text_en":"Seats are first come, first served.\nPlease keep this window open."}}`),
		browserAdminToken)
	// alice holds the one slot; carol waits first in line.
	users := map[string]string{}
	for _, u := range []string{"alice", "carol"} {
		a := s.call(ctx, t, http.StatusCreated, "POST", "/v1/rooms/"+room+"/tickets", `{"user_id":"`+u+`"}`, "")
		users[u], _ = a["ticket_token"].(string)
		if u == "alice" {
			for s.call(ctx, t, http.StatusOK, "GET", "/v1/rooms/"+room+"/tickets/alice", "", users[u])["state"] != "admitted" {
				time.Sleep(20 * time.Millisecond)
			}
		}
	}

	tab := browsertest.Tab(t, bctx, browsertest.TabOptions{Width: int64(width), AcceptLanguage: want.accept}, s.url+"/rooms/"+room)
	p := browserWait(tab, t, "second in line", 20*time.Second, func(p browserPage) bool {
		return p.State == "waiting" && p.Position == "2"
	})
	t.Logf("second: %s", p)
	checkBrowserPage(t, p, lang, width, title)
	if !strings.Contains(p.Text, want.waiting) || p.Lang != lang || !strings.Contains(p.Title, "2") {
		t.Errorf("waiting page in %s lacks %q or a title with the position: %s", lang, want.waiting, p)
	}
	if !strings.Contains(p.Text, map[string]string{"ko": "좌석은 선착순입니다.", "en": "Seats are first come"}[lang]) {
		t.Errorf("the room's text is missing")
	}

	// alice leaves: carol is admitted, bob is first in line.
	s.call(ctx, t, http.StatusOK, "DELETE", "/v1/rooms/"+room+"/tickets/alice", "", users["alice"])
	p = browserWait(tab, t, "first in line", 40*time.Second, func(p browserPage) bool {
		return p.State == "waiting" && p.Position == "1"
	})
	t.Logf("first: %s", p)
	checkBrowserPage(t, p, lang, width, title)
	// The alert button asks for notification permission on this click
	// (headless Chromium denies it: the page falls back to sound) and says
	// what it will do.
	if err := chromedp.Do(tab, chromedp.Click(chromedp.ID("notify"))); err != nil {
		t.Fatalf("clicking #notify: %v", err)
	}
	notify := `(() => { const s = document.getElementById("notify-status"); return s.hidden ? "" : s.textContent; })()`
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(25 * time.Millisecond) {
		got, _ := chromedp.Run(tab, chromedp.Evaluate[string](notify))
		if got != "" {
			t.Logf("after the alert button: %q", got)
			break
		}
		if time.Now().After(end) {
			t.Fatal("the alert button changed nothing")
		}
	}
	// From second to first: half the way by place, more if the time
	// waited says so.
	if pct, _ := strconv.Atoi(p.Progress); !strings.Contains(p.Ahead, want.ahead) || pct < 50 || pct > 99 {
		t.Errorf("first in line: ahead %q, progress %q; want %q, 50 to 99", p.Ahead, p.Progress, want.ahead)
	}
	p = browserWait(tab, t, "the polite announcement", 5*time.Second, func(p browserPage) bool { return strings.Contains(p.Polite, "1") })
	time.Sleep(700 * time.Millisecond) // the progress bar's transition
	browsertest.Shot(t, tab, dir, fmt.Sprintf("waitroom-%s-%d-1-waiting", lang, width), width, 300)

	// Stand in for a granted notification permission (headless Chromium
	// has none to grant) and record the notifications the page makes.
	fake := `window.__notes = []; window.Notification = class { static permission = "granted";
		static requestPermission() { return Promise.resolve("granted"); }
		constructor(title, o) { window.__notes.push(title + " | " + (o && o.body)); } close() {} };`
	if _, err := chromedp.Run(tab, chromedp.Evaluate[any](fake+"0")); err != nil {
		t.Fatalf("installing the fake Notification: %v", err)
	}

	// carol leaves: bob's turn.
	s.call(ctx, t, http.StatusOK, "DELETE", "/v1/rooms/"+room+"/tickets/carol", "", users["carol"])
	p = browserWait(tab, t, "admitted", 40*time.Second, func(p browserPage) bool {
		return p.State == "admitted" && !p.AdmittedHidden && strings.Contains(p.Assertive, want.admitted)
	})
	t.Logf("admitted: %s", p)
	checkBrowserPage(t, p, lang, width, title)
	if !p.WaitingHidden || !strings.Contains(p.Title, "✅") || p.AdmittedText == "" {
		t.Errorf("admitted page: %s", p)
	}
	notes, err := chromedp.Run(tab, chromedp.Evaluate[[]string](`window.__notes`))
	if err != nil || len(notes) != 1 || !strings.Contains(notes[0], title) {
		t.Errorf("notifications on admission: %q, %v; want one naming %q", notes, err, title)
	} else {
		t.Logf("notification: %q", notes[0])
	}
	// The admission token exists (the API gives it to bob) but is not on
	// the page.
	bob := s.call(ctx, t, http.StatusOK, "GET", "/v1/rooms/"+room+"/tickets/"+p.UserID, "", p.TicketToken)
	adm, _ := bob["admission_token"].(string)
	if adm == "" {
		t.Fatalf("bob's ticket has no admission token: %v", bob)
	}
	if strings.Contains(p.HTML, adm) || strings.Contains(p.HTML, adm[:20]) {
		t.Error("the admission token is in the page")
	}
	browsertest.Shot(t, tab, dir, fmt.Sprintf("waitroom-%s-%d-2-admitted", lang, width), width, 300)

	if err := chromedp.Do(tab, chromedp.Click(chromedp.ID("done"))); err != nil {
		t.Fatalf("clicking #done: %v", err)
	}
	p = browserWait(tab, t, "released", 15*time.Second, func(p browserPage) bool { return p.State == "released" })
	t.Logf("released: %s", p)
	checkBrowserPage(t, p, lang, width, title)
	if !strings.Contains(p.EndedText, want.released) || p.EndedHidden || !p.AdmittedHidden || p.TicketToken != "" {
		t.Errorf("after leaving: %s (token kept: %t)", p, p.TicketToken != "")
	}
	browsertest.Shot(t, tab, dir, fmt.Sprintf("waitroom-%s-%d-3-released", lang, width), width, 300)
	st := s.call(ctx, t, http.StatusOK, "GET", "/v1/rooms/"+room, "", browserAdminToken)
	if st["active"] != 0.0 || st["waiting"] != 0.0 || st["admitted_total"] != 3.0 || st["released_total"] != 3.0 {
		t.Errorf("the room after bob left = %v", st)
	}
}

// checkBrowserPage checks what every state of the page must hold.
func checkBrowserPage(t *testing.T, p browserPage, lang string, width int, title string) {
	t.Helper()
	if p.LiveRegions != 2 {
		t.Errorf("%d aria-live regions, want polite and assertive", p.LiveRegions)
	}
	if p.ScrollWidth > width || p.ViewportWidth != width {
		t.Errorf("scrollWidth %d in a %d-pixel viewport (innerWidth %d): horizontal overflow", p.ScrollWidth, width, p.ViewportWidth)
	}
	if p.TicketToken != "" && strings.Contains(p.HTML, p.TicketToken[:20]) {
		t.Error("the ticket token is in the page")
	}
	if strings.Contains(p.Text, "eyJ") || strings.Contains(p.Text, "token") {
		t.Errorf("the page's text shows something like a token: %q", p.Text)
	}
	if strings.Contains(p.HTML, "<b>") || !strings.Contains(p.Text, title) {
		t.Errorf("the template title %q is not shown escaped", title)
	}
	if p.State == "waiting" {
		if p.ETA == "" || regexp.MustCompile(`(^|\D)0\s?(s|초)`).MatchString(p.ETA) {
			t.Errorf("ETA %q", p.ETA)
		}
	}
}

// TestBrowserUnknownRoom: a buyer following a link to a room that does not
// exist is told so, in their language, without admin instructions.
func TestBrowserUnknownRoom(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	bctx := browsertest.Start(t, ctx)
	s := newBrowserServer(t)
	for lang, want := range map[string]string{"ko": "대기실을 찾을 수 없습니다", "en": "We can't find this waiting room"} {
		tab := browsertest.Tab(t, bctx, browsertest.TabOptions{Width: 390, AcceptLanguage: browserTexts[lang].accept}, s.url+"/rooms/no-such-room")
		p := browserWait(tab, t, "the unknown-room text", 10*time.Second, func(p browserPage) bool {
			return p.State == "unknown" && strings.Contains(p.Text, want)
		})
		if strings.Contains(p.Text, "PUT") || strings.Contains(p.Text, "admin") || p.ScrollWidth > 390 {
			t.Errorf("%s: unknown room page: %q (scrollWidth %d)", lang, p.Text, p.ScrollWidth)
		}
	}
}

// TestBrowserProofOfWork: the page solves a room's proof of work and joins.
func TestBrowserProofOfWork(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	bctx := browsertest.Start(t, ctx)
	s := newBrowserServer(t)
	room := "pow-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	s.call(ctx, t, http.StatusOK, "PUT", "/v1/rooms/"+room, roomBody(t, `{"capacity":1,"pow_difficulty":12}`), browserAdminToken)
	tab := browsertest.Tab(t, bctx, browsertest.TabOptions{Width: 1200, AcceptLanguage: "en"}, s.url+"/rooms/"+room)
	p := browserWait(tab, t, "admitted after the proof of work", 30*time.Second, func(p browserPage) bool { return p.State == "admitted" })
	st := s.call(ctx, t, http.StatusOK, "GET", "/v1/rooms/"+room, "", browserAdminToken)
	if st["joined_total"] != 1.0 || p.Notice != "" {
		t.Errorf("room after the page's join = %v; notice %q", st, p.Notice)
	}
}

// TestBrowserPoWCost measures the page's proof-of-work solver in Chromium
// at 16, 18 and 20 bits, or at the bits listed in STAMPEDE_POW_BITS (the
// table in docs/waitroom.md), STAMPEDE_POW_RUNS times each (default 15). It runs only
// with STAMPEDE_POW_COST=1 (and -run TestBrowserPoWCost -v).
func TestBrowserPoWCost(t *testing.T) {
	if os.Getenv("STAMPEDE_POW_COST") == "" {
		t.Skip("set STAMPEDE_POW_COST=1 to measure the proof of work's cost in Chromium")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Minute)
	defer cancel()
	bctx := browsertest.Start(t, ctx)
	s := newBrowserServer(t)
	room := "cost-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	// Capacity 1 with someone inside: the page waits and stays idle.
	s.call(ctx, t, http.StatusOK, "PUT", "/v1/rooms/"+room, roomBody(t, `{"capacity":1}`), browserAdminToken)
	s.call(ctx, t, http.StatusCreated, "POST", "/v1/rooms/"+room+"/tickets", `{"user_id":"holder"}`, "")
	tab := browsertest.Tab(t, bctx, browsertest.TabOptions{Width: 1200, AcceptLanguage: "en"}, s.url+"/rooms/"+room)
	browserWait(tab, t, "waiting", 20*time.Second, func(p browserPage) bool { return p.State == "waiting" })
	runs := 15
	if v, err := strconv.Atoi(os.Getenv("STAMPEDE_POW_RUNS")); err == nil && v > 0 {
		runs = v
	}
	bitsList := []int{16, 18, 20}
	if v := os.Getenv("STAMPEDE_POW_BITS"); v != "" {
		bitsList = nil
		for f := range strings.SplitSeq(v, ",") {
			b, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || b < 1 || b > 32 {
				t.Fatalf("STAMPEDE_POW_BITS: %q is not a number of bits", f)
			}
			bitsList = append(bitsList, b)
		}
	}
	for _, bits := range bitsList {
		js := fmt.Sprintf(`(async () => {
			const out = [];
			for (let r = 0; r < %d; r++) {
				const b = new Uint8Array(32); crypto.getRandomValues(b);
				const ch = btoa(String.fromCharCode(...b)).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
				const t0 = performance.now();
				const sol = await window.stampedeSolvePoW(ch, %d);
				out.push({ms: performance.now() - t0, tries: parseInt(sol, 36) + 1, ch: ch, sol: sol});
			}
			return out;
		})()`, runs, bits)
		res, err := chromedp.Run(tab, chromedp.Evaluate[[]struct {
			MS    float64 `json:"ms"`
			Tries float64 `json:"tries"`
			Ch    string  `json:"ch"`
			Sol   string  `json:"sol"`
		}](js, chromedp.EvalAwaitPromise))
		if err != nil {
			t.Fatalf("%d bits: %v", bits, err)
		}
		var ms, rates []float64
		for _, r := range res {
			if !waitroom.SolvesChallenge(r.Ch, r.Sol, bits) {
				t.Fatalf("%d bits: the page's solution %q of %q is wrong", bits, r.Sol, r.Ch)
			}
			ms = append(ms, r.MS)
			rates = append(rates, r.Tries/(r.MS/1000))
		}
		slices.Sort(ms)
		slices.Sort(rates)
		t.Logf("PoW %d bits: %d runs, median %.0f ms (min %.0f, max %.0f), median %.2f M hashes/s",
			bits, len(ms), ms[len(ms)/2], ms[0], ms[len(ms)-1], rates[len(rates)/2]/1e6)
	}
}

// roomOverlay adds fields to the answers of GET /v1/rooms/{room}, standing
// in for room settings (opens_at, paused, closed, message) that the page
// must handle when the server sends them.
type roomOverlay struct {
	next   http.Handler
	mu     sync.Mutex
	fields map[string]any
}

func (o *roomOverlay) set(fields map[string]any) {
	o.mu.Lock()
	o.fields = fields
	o.mu.Unlock()
}

func (o *roomOverlay) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet || !regexp.MustCompile(`^/v1/rooms/[^/]+$`).MatchString(r.URL.Path) {
		o.next.ServeHTTP(w, r)
		return
	}
	rec := httptest.NewRecorder()
	o.next.ServeHTTP(rec, r)
	var v map[string]any
	if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &v) != nil {
		for k, vals := range rec.Header() {
			w.Header()[k] = vals
		}
		w.WriteHeader(rec.Code)
		w.Write(rec.Body.Bytes())
		return
	}
	o.mu.Lock()
	for k, x := range o.fields {
		v[k] = x
	}
	o.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

// TestBrowserRoomStates: the page counts down to a scheduled opening and
// joins at it, says when admission is paused, and when the sale is closed
// shows the room's message and offers no way back in.
func TestBrowserRoomStates(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	bctx := browsertest.Start(t, ctx)
	emb, err := redisstore.StartEmbedded()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(emb.Close)
	client := redis.NewClient(&redis.Options{Addr: emb.Addr()})
	t.Cleanup(func() { client.Close() })
	opts := api.DefaultConfig()
	opts.Secret, opts.AdminToken = browserSecret, browserAdminToken
	opts.Logger = slog.New(slog.DiscardHandler)
	opts.AllowUnsignedUsers = true // the test names the user ahead of the page
	opts.RoomRefresh = 50 * time.Millisecond
	srv, err := startServer(t, context.Background(), redisstore.New(client), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	overlay := &roomOverlay{next: srv.Handler()}
	ts := httptest.NewServer(overlay)
	t.Cleanup(ts.Close)
	s := &browserServer{url: ts.URL, hc: http.DefaultClient}
	dir := browsertest.ShotDir(t)

	room := "states-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	s.call(ctx, t, http.StatusOK, "PUT", "/v1/rooms/"+room, roomBody(t, `{"capacity":1}`), browserAdminToken)
	s.call(ctx, t, http.StatusCreated, "POST", "/v1/rooms/"+room+"/tickets", `{"user_id":"holder"}`, "")

	// Opens in 8 s (a loaded machine can take seconds to open a tab): a
	// countdown, then the page joins by itself.
	overlay.set(map[string]any{"opens_at": time.Now().Add(8 * time.Second).UTC().Format(time.RFC3339Nano)})
	tab := browsertest.Tab(t, bctx, browsertest.TabOptions{Width: 390, AcceptLanguage: browserTexts["ko"].accept}, s.url+"/rooms/"+room)
	countdown := `document.getElementById("countdown").textContent`
	browserWait(tab, t, "the countdown", 10*time.Second, func(p browserPage) bool {
		return p.State == "scheduled" && strings.Contains(p.Text, "오픈까지")
	})
	cd, err := chromedp.Run(tab, chromedp.Evaluate[string](countdown))
	if err != nil || !regexp.MustCompile(`^00:00:0[1-8]$`).MatchString(cd) {
		t.Errorf("countdown = %q, %v", cd, err)
	}
	browsertest.Shot(t, tab, dir, "waitroom-ko-390-0-scheduled", 390, 300)
	if st := s.call(ctx, t, http.StatusOK, "GET", "/v1/rooms/"+room, "", browserAdminToken); st["joined_total"] != 1.0 {
		t.Errorf("the page joined before opening: %v", st)
	}
	browserWait(tab, t, "joined at opening", 15*time.Second, func(p browserPage) bool {
		return p.State == "waiting" && p.Position == "1"
	})

	// Paused: the page says so and keeps the place. The page reads the room
	// every 30 s; reload to see it now.
	overlay.set(map[string]any{"paused": true})
	if err := chromedp.Do(tab, chromedp.Reload()); err != nil {
		t.Fatal(err)
	}
	p := browserWait(tab, t, "the paused notice", 10*time.Second, func(p browserPage) bool {
		return p.State == "waiting" && strings.Contains(p.Notice, "잠시 멈췄습니다")
	})
	if p.Position != "1" {
		t.Errorf("paused: position %q, want 1 (kept)", p.Position)
	}
	browsertest.Shot(t, tab, dir, "waitroom-ko-390-4-paused", 390, 300)

	// Closed with a message: shown, and no way to rejoin.
	overlay.set(map[string]any{"closed": true, "message": "오늘 판매는 매진되었습니다. <b>감사합니다</b>"})
	if err := chromedp.Do(tab, chromedp.Reload()); err != nil {
		t.Fatal(err)
	}
	p = browserWait(tab, t, "closed", 10*time.Second, func(p browserPage) bool { return p.State == "closed" })
	rejoinHidden, _ := chromedp.Run(tab, chromedp.Evaluate[bool](`document.getElementById("rejoin").hidden`))
	if !strings.Contains(p.EndedText, "매진되었습니다. <b>감사합니다</b>") || strings.Contains(p.HTML, "<b>감사") || !rejoinHidden {
		t.Errorf("closed: %s (rejoin hidden %t)", p, rejoinHidden)
	}
	browsertest.Shot(t, tab, dir, "waitroom-ko-390-5-closed", 390, 300)
}

// TestBrowserOnAdmitHook: a page served with data-on-admit (the gate's
// hook) POSTs the admission there with the ticket token once admitted and
// follows the redirect.
func TestBrowserOnAdmitHook(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	bctx := browsertest.Start(t, ctx)
	emb, err := redisstore.StartEmbedded()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(emb.Close)
	client := redis.NewClient(&redis.Options{Addr: emb.Addr()})
	t.Cleanup(func() { client.Close() })
	opts := api.DefaultConfig()
	opts.Secret, opts.AdminToken = browserSecret, browserAdminToken
	opts.Logger = slog.New(slog.DiscardHandler)
	opts.OnAdmit = "/.stampede/admitted"
	srv, err := startServer(t, context.Background(), redisstore.New(client), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	type hookCall struct {
		auth string
		body map[string]string
	}
	calls := make(chan hookCall, 4)
	mux := http.NewServeMux()
	mux.Handle("/", srv.Handler())
	mux.HandleFunc("POST /.stampede/admitted", func(w http.ResponseWriter, r *http.Request) {
		var b map[string]string
		json.NewDecoder(r.Body).Decode(&b)
		calls <- hookCall{auth: r.Header.Get("Authorization"), body: b}
		http.Redirect(w, r, "/welcome", http.StatusSeeOther)
	})
	mux.HandleFunc("GET /welcome", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		io.WriteString(w, "<!doctype html><title>checkout</title><body data-state=welcome><p id=x>checkout</p>")
	})
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	s := &browserServer{url: ts.URL, hc: http.DefaultClient}
	room := "hook-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	s.call(ctx, t, http.StatusOK, "PUT", "/v1/rooms/"+room, roomBody(t, `{"capacity":1}`), browserAdminToken)

	tab := browsertest.Tab(t, bctx, browsertest.TabOptions{Width: 390, AcceptLanguage: "en"}, s.url+"/rooms/"+room)
	select {
	case c := <-calls:
		if !strings.HasPrefix(c.auth, "Bearer ") || c.body["room"] != room || c.body["user_id"] == "" || c.body["admission_token"] == "" {
			t.Errorf("hook called with %q %v", c.auth, c.body)
		} else if keys, _ := waitroom.NewAdmissionSigner(waitroom.KeySpec{Secret: browserSecret, Epoch: waitroom.DefaultKeyEpoch}, nil, nil); keys == nil {
			t.Error("no admission keys")
		} else if _, err := waitroom.VerifyAdmissionJWT(c.body["admission_token"], keys.JWKS(), room, time.Now()); err != nil {
			t.Errorf("the hook's admission token does not verify: %v", err)
		}
	case <-time.After(20 * time.Second):
		p, _ := chromedp.Run(tab, chromedp.Evaluate[browserPage](browserPageJS))
		t.Fatalf("the page never called the on-admit hook; it shows %s", p)
	}
	for {
		u, err := chromedp.Run(tab, chromedp.Evaluate[string](`location.pathname`))
		if err == nil && u == "/welcome" {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the page did not follow the hook's redirect: at %q, %v", u, err)
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// TestBrowserETARange: in a line that moves one place every 3 s, 40
// places back, the page shows the wait as a stable range of minutes
// (the real wait is about two minutes), never seconds and never "0".
func TestBrowserETARange(t *testing.T) {
	if testing.Short() {
		t.Skip("takes 30 s")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	bctx := browsertest.Start(t, ctx)
	s := newBrowserServer(t)
	room := "eta-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	s.call(ctx, t, http.StatusOK, "PUT", "/v1/rooms/"+room, roomBody(t, `{"capacity":1,"lease_seconds":600}`), browserAdminToken)
	const ahead = 40
	tokens := make([]string, ahead)
	for i := range ahead {
		a := s.call(ctx, t, http.StatusCreated, "POST", "/v1/rooms/"+room+"/tickets", fmt.Sprintf(`{"user_id":"u%d"}`, i), "")
		tokens[i], _ = a["ticket_token"].(string)
	}
	// The one slot is handed on every 3 s: 0.33 admissions/s.
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(3 * time.Second)
		defer tick.Stop()
		for i := 0; i < ahead; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			r, _ := http.NewRequestWithContext(ctx, "DELETE", s.url+"/v1/rooms/"+room+fmt.Sprintf("/tickets/u%d", i), nil)
			r.Header.Set("Authorization", "Bearer "+tokens[i])
			if res, err := http.DefaultClient.Do(r); err == nil {
				res.Body.Close()
			}
		}
	}()
	defer func() { close(stop); <-done }()

	tab := browsertest.Tab(t, bctx, browsertest.TabOptions{Width: 390, AcceptLanguage: "en"}, s.url+"/rooms/"+room)
	minutes := regexp.MustCompile(`^about (\d+)–(\d+) min$`)
	var before []string // the texts shown before the first range
	p := browserWait(tab, t, "an ETA in minutes", 40*time.Second, func(p browserPage) bool {
		if p.State == "waiting" && (len(before) == 0 || before[len(before)-1] != p.Position+": "+p.ETA) {
			before = append(before, p.Position+": "+p.ETA)
		}
		return p.State == "waiting" && minutes.MatchString(p.ETA)
	})
	t.Logf("first range: %s; before it (position: ETA): %q", p, before)

	// Watch it for 8 s: it stays a range of minutes and moves little.
	seen := map[string]bool{}
	for end := time.Now().Add(8 * time.Second); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		p, err := chromedp.Run(tab, chromedp.Evaluate[browserPage](browserPageJS))
		if err != nil {
			t.Fatal(err)
		}
		if p.State != "waiting" {
			break
		}
		seen[p.ETA] = true
		m := minutes.FindStringSubmatch(p.ETA)
		if m == nil {
			if p.ETA != "less than a minute" {
				t.Errorf("ETA %q at position %s", p.ETA, p.Position)
			}
			continue
		}
		lo, _ := strconv.Atoi(m[1])
		hi, _ := strconv.Atoi(m[2])
		pos, _ := strconv.Atoi(p.Position)
		real := float64(pos) * 3 / 60
		if lo < 1 || hi <= lo || float64(lo) > real*2+1 || float64(hi) < real/2 {
			t.Errorf("ETA %q at position %d (real wait about %.1f min)", p.ETA, pos, real)
		}
	}
	t.Logf("ETA texts seen over 8 s: %v", slices.Sorted(maps.Keys(seen)))
	if len(seen) > 3 {
		t.Errorf("the ETA jumped between %d texts in 8 s", len(seen))
	}
}

// TestBrowserWaitEstimateAndProgress: a buyer third in a room whose one
// slot is held on a 60-second lease, with nobody leaving, sees an
// estimate in minutes from the first answer (never "Calculating…", never
// "less than a minute"), and a progress bar that fills with the time
// waited although the place does not move, never going back.
func TestBrowserWaitEstimateAndProgress(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	bctx := browsertest.Start(t, ctx)
	s := newBrowserServer(t)
	room := "progress-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	s.call(ctx, t, http.StatusOK, "PUT", "/v1/rooms/"+room, roomBody(t, `{"capacity":1,"lease_seconds":60}`), browserAdminToken)
	for _, u := range []string{"holder", "next"} {
		s.call(ctx, t, http.StatusCreated, "POST", "/v1/rooms/"+room+"/tickets", `{"user_id":"`+u+`"}`, "")
	}
	for s.call(ctx, t, http.StatusOK, "GET", "/v1/rooms/"+room, "", "")["active"] != 1.0 {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(150 * time.Millisecond) // the room refresh (50 ms here) sees the slot held

	tab := browsertest.Tab(t, bctx, browsertest.TabOptions{Width: 390, AcceptLanguage: "en"}, s.url+"/rooms/"+room)
	first := browserWait(tab, t, "the page waiting", 20*time.Second, func(p browserPage) bool { return p.State == "waiting" })
	minutes := regexp.MustCompile(`^about (\d+)–(\d+) min$`)
	if first.Position != "2" || !minutes.MatchString(first.ETA) {
		t.Errorf("the first answer shows %s; want second in line, a wait in minutes", first)
	}
	// Over the next 4 s the place stays; the bar fills, never back.
	last, _ := strconv.Atoi(first.Progress)
	start := last
	for end := time.Now().Add(4 * time.Second); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		p, err := chromedp.Run(tab, chromedp.Evaluate[browserPage](browserPageJS))
		if err != nil {
			t.Fatal(err)
		}
		pct, _ := strconv.Atoi(p.Progress)
		if p.State != "waiting" || pct < last || !minutes.MatchString(p.ETA) {
			t.Errorf("after %s the page shows %s (progress before: %d)", time.Since(end.Add(-4*time.Second)).Round(time.Millisecond), p, last)
		}
		last = pct
	}
	if last <= start {
		t.Errorf("progress %d%% after 4 s of waiting, %d%% at the first answer: the bar did not move", last, start)
	}
	t.Logf("first answer: %s; progress after 4 s: %d%%", first, last)
}
