package waitroom_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/redis/go-redis/v9"

	"github.com/stampede-lab/stampede/internal/httpapi/apitest"
	"github.com/stampede-lab/stampede/internal/testenv"
	"github.com/stampede-lab/stampede/waitroom"
	"github.com/stampede-lab/stampede/waitroom/redisstore"
)

// The names of this file start with "browser" so that they cannot clash with
// the other tests of the package.

const (
	browserAdminToken = "browser-test-admin-token-0123456789"
	// browserShotsEnv names a folder that also receives the test's
	// screenshots, for a person to look at; they always go to t.TempDir().
	browserShotsEnv = "STAMPEDE_BROWSER_SCREENSHOTS"
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

	opts := waitroom.DefaultServerOptions()
	opts.Immediate = true
	opts.Instance = "browser-test"
	opts.Secret, opts.AdminToken = browserSecret, browserAdminToken
	opts.Logger = slog.New(slog.DiscardHandler)
	opts.RoomRefresh = 50 * time.Millisecond
	srv, err := waitroom.NewServer(context.Background(), redisstore.New(client), opts)
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	t.Cleanup(srv.Close)
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	return &browserServer{url: ts.URL, hc: apitest.New(t, waitroom.OpenAPI()).Client(t)}
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
	Room           string `json:"room"`
	State          string `json:"state"`
	Position       string `json:"position"`
	ETA            string `json:"eta"`
	Status         string `json:"status"`
	Error          string `json:"error"`
	ErrorHidden    bool   `json:"errorHidden"`
	TicketHidden   bool   `json:"ticketHidden"`
	AdmittedHidden bool   `json:"admittedHidden"`
	Token          string `json:"token"`
	LeaseExpires   string `json:"leaseExpires"`
	JoinDisabled   bool   `json:"joinDisabled"`
	LeaveDisabled  bool   `json:"leaveDisabled"`
}

func (p browserPage) String() string {
	token := p.Token
	if len(token) > 24 {
		token = token[:24] + "…"
	}
	return fmt.Sprintf("state=%q position=%q eta=%q status=%q error=%q (hidden %t) ticket hidden=%t admitted hidden=%t token=%q lease=%q join disabled=%t leave disabled=%t",
		p.State, p.Position, p.ETA, p.Status, p.Error, p.ErrorHidden, p.TicketHidden, p.AdmittedHidden, token, p.LeaseExpires, p.JoinDisabled, p.LeaveDisabled)
}

// browserPageJS reads a browserPage. It runs through the DevTools protocol
// (Runtime.evaluate), which the page's CSP does not restrict. The test polls
// it from Go rather than with chromedp.Poll so that a timeout can say what
// the page showed last.
const browserPageJS = `(() => {
	const $ = (id) => document.getElementById(id);
	return {
		room: $("room").textContent,
		state: $("state").textContent,
		position: $("position").textContent,
		eta: $("eta").textContent,
		status: $("status").textContent,
		error: $("error").textContent,
		errorHidden: $("error").hidden,
		ticketHidden: $("ticket").hidden,
		admittedHidden: $("admitted").hidden,
		token: $("admission-token").textContent,
		leaseExpires: $("lease-expires").textContent,
		joinDisabled: $("join").disabled,
		leaveDisabled: $("leave").disabled,
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

// browserLog is the browser's output, kept for a failing test's log.
type browserLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *browserLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.buf.Len() < 1<<20 {
		l.buf.Write(p)
	}
	return len(p), nil
}

// String is the output without the lines about D-Bus, which a machine
// without a session bus prints by the dozen.
func (l *browserLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var keep []string
	for line := range strings.Lines(l.buf.String()) {
		if !strings.Contains(line, "dbus") {
			keep = append(keep, line)
		}
	}
	return strings.Join(keep, "")
}

// TestBrowserWaitingToAdmitted drives the waiting page in headless
// Chromium: bob joins a full room, waits first in line behind alice, is
// admitted when she releases her slot, sees an admission token that
// verifies, and leaves.
func TestBrowserWaitingToAdmitted(t *testing.T) {
	chromium := testenv.Chromium(t) // skips, or fails in CI, without one
	s := newBrowserServer(t)

	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()

	// The browser starts first: alice's lease runs from her admission, and
	// a slow browser start must not eat it.
	out := &browserLog{}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium),
		chromedp.NoSandbox,
		chromedp.Headless,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("no-first-run", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.CombinedOutput(out),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(allocCtx)
	defer func() {
		// Close the browser gracefully, and wait for it.
		if err := chromedp.Cancel(bctx); err != nil && ctx.Err() == nil {
			t.Logf("closing the browser: %v", err)
		}
		cancelBrowser()
	}()
	defer func() {
		if t.Failed() {
			t.Logf("browser output (without its D-Bus complaints):\n%s", out)
		}
	}()
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("starting %s: %v", chromium, err)
	}

	// A full room: capacity 1, and alice holds the slot.
	room := "browser-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	s.call(ctx, t, http.StatusOK, "PUT", "/v1/rooms/"+room,
		roomBody(t, `{"capacity":1,"lease_seconds":10,"admit_interval_ms":100}`), browserAdminToken)
	alice := s.call(ctx, t, http.StatusCreated, "POST", "/v1/rooms/"+room+"/tickets", `{"user_id":"alice"}`, "")
	aliceToken, _ := alice["ticket_token"].(string)
	if aliceToken == "" {
		t.Fatalf("alice's join has no ticket_token: %v", alice)
	}
	for {
		got := s.call(ctx, t, http.StatusOK, "GET", "/v1/rooms/"+room+"/tickets/alice", "", aliceToken)
		if got["state"] == "admitted" {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("alice was never admitted: %v", got)
		case <-time.After(20 * time.Millisecond):
		}
	}

	// bob joins on the page and waits first in line.
	err := chromedp.Do(bctx,
		chromedp.Navigate(s.url+"/rooms/"+room),
		chromedp.WaitVisible(chromedp.ID("join")),
		chromedp.SendKeys(chromedp.ID("user"), "bob"),
		chromedp.Click(chromedp.ID("join")),
	)
	if err != nil {
		t.Fatalf("joining on the page: %v", err)
	}
	waiting := browserWait(bctx, t, `#state "waiting" and #position "0"`, 15*time.Second, func(p browserPage) bool {
		return p.State == "waiting" && p.Position == "0"
	})
	t.Logf("waiting: %s", waiting)
	if waiting.Room != room || waiting.TicketHidden || !waiting.AdmittedHidden || waiting.Token != "" ||
		!waiting.JoinDisabled || waiting.LeaveDisabled || !waiting.ErrorHidden || waiting.ETA == "" || waiting.ETA == "—" {
		t.Errorf("while waiting (room %q) the page shows room %q, %s", room, waiting.Room, waiting)
	}

	// alice leaves: her slot goes to bob, and the page shows it.
	released := s.call(ctx, t, http.StatusOK, "DELETE", "/v1/rooms/"+room+"/tickets/alice", "", aliceToken)
	if released["state"] != "released" {
		t.Fatalf("alice's release = %v", released)
	}
	admitted := browserWait(bctx, t, `#state "admitted" with an admission token`, 30*time.Second, func(p browserPage) bool {
		return p.State == "admitted" && !p.AdmittedHidden && p.Token != ""
	})
	if err := chromedp.Do(bctx, chromedp.WaitVisible(chromedp.ID("admitted")), chromedp.WaitVisible(chromedp.ID("admission-token"))); err != nil {
		t.Fatalf("the admitted block is not visible: %v", err)
	}
	t.Logf("admitted: %s", admitted)
	if admitted.Position != "—" || admitted.ETA != "—" || admitted.LeaseExpires == "—" || admitted.LeaveDisabled || !admitted.ErrorHidden {
		t.Errorf("once admitted the page shows %s", admitted)
	}
	claims, err := waitroom.VerifyAdmission(admitted.Token, browserSecret, room, time.Now())
	if err != nil {
		t.Fatalf("the page's admission token %q does not verify: %v", admitted.Token, err)
	}
	if claims.Room != room || claims.User != "bob" || claims.Kind != waitroom.AdmissionToken {
		t.Errorf("the page's admission token says %+v, want room %q, user bob", claims, room)
	}

	shot, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	shotPath := filepath.Join(t.TempDir(), "admitted.png")
	if err := os.WriteFile(shotPath, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(shot))
	if err != nil {
		t.Fatalf("the screenshot (%d bytes) is not a PNG: %v", len(shot), err)
	}
	if b := img.Bounds(); b.Dx() < 100 || b.Dy() < 100 {
		t.Errorf("the screenshot is only %dx%d", b.Dx(), b.Dy())
	}
	t.Logf("screenshot: %s (%dx%d, %d bytes)", shotPath, img.Bounds().Dx(), img.Bounds().Dy(), len(shot))
	if dir := os.Getenv(browserShotsEnv); dir != "" {
		keep := filepath.Join(dir, "waitroom-admitted.png")
		if err := os.WriteFile(keep, shot, 0o644); err != nil {
			t.Errorf("%s: %v", browserShotsEnv, err)
		} else {
			t.Logf("screenshot kept in %s", keep)
		}
	}

	// bob leaves on the page.
	if err := chromedp.Do(bctx, chromedp.Click(chromedp.ID("leave"))); err != nil {
		t.Fatalf("clicking #leave: %v", err)
	}
	left := browserWait(bctx, t, `#state "released"`, 15*time.Second, func(p browserPage) bool {
		return p.State == "released"
	})
	t.Logf("left: %s", left)
	if !left.AdmittedHidden || left.Token != "" || left.JoinDisabled || !left.LeaveDisabled || !left.ErrorHidden ||
		!strings.Contains(left.Status, "You left the room.") {
		t.Errorf("after leaving the page shows %s", left)
	}
	st := s.call(ctx, t, http.StatusOK, "GET", "/v1/rooms/"+room, "", "")
	if st["active"] != 0.0 || st["waiting"] != 0.0 || st["admitted_total"] != 2.0 || st["released_total"] != 2.0 {
		t.Errorf("the room after bob left = %v", st)
	}
}
