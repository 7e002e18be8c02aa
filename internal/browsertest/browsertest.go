// Package browsertest drives headless Chromium (through chromedp) for the
// tests that look at a page as a person would: the waiting page, the gate
// and the console. It starts the browser, opens tabs of a given width and
// language, and saves full-page screenshots, so that every browser test
// does these the same way.
//
// A machine without Chromium skips the test, or fails it in CI
// (testenv.Chromium). STAMPEDE_SCREENSHOTS names a folder (relative to the
// module root) to keep the screenshots in; without it they go to a
// temporary folder.
package browsertest

import (
	"bytes"
	"context"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/stampede-lab/stampede/internal/testenv"
)

// ShotsEnv names the folder screenshots are kept in.
const ShotsEnv = "STAMPEDE_SCREENSHOTS"

// Height is the height of every tab's viewport, in CSS pixels.
const Height = 860

// output is the browser's output, kept for a failing test's log.
type output struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write keeps the first MiB.
func (l *output) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.buf.Len() < 1<<20 {
		l.buf.Write(p)
	}
	return len(p), nil
}

// String is the output without the lines about D-Bus, which a machine
// without a session bus prints by the dozen.
func (l *output) String() string {
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

// Start starts headless Chromium for the test and returns its chromedp
// context; the browser is closed when the test ends, and its output is
// logged if the test failed.
func Start(t *testing.T, ctx context.Context) context.Context {
	t.Helper()
	chromium := testenv.Chromium(t) // skips, or fails in CI, without one
	out := &output{}
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
		chromedp.Flag("autoplay-policy", "no-user-gesture-required"),
		chromedp.Flag("font-render-hinting", "none"),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.CombinedOutput(out),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	bctx, cancelBrowser := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("browser output (without its D-Bus complaints):\n%s", out)
		}
		// Close the browser gracefully, and wait for it.
		if err := chromedp.Cancel(bctx); err != nil && ctx.Err() == nil {
			t.Logf("closing the browser: %v", err)
		}
		cancelBrowser()
		cancelAlloc()
	})
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("starting %s: %v", chromium, err)
	}
	return bctx
}

// TabOptions say how to open a tab.
type TabOptions struct {
	// Width is the viewport's width in CSS pixels; below 600 the tab
	// emulates a phone.
	Width int64
	// AcceptLanguage is sent on every request of the tab, when set.
	AcceptLanguage string
	// OwnCookies opens the tab in a browser context of its own, so that
	// it shares no cookies with other tabs (another buyer).
	OwnCookies bool
}

// Tab opens a tab of o.Width × Height CSS pixels and loads url in it; the
// tab is closed when the test ends.
func Tab(t *testing.T, bctx context.Context, o TabOptions, url string) context.Context {
	t.Helper()
	var opts []chromedp.ContextOption
	if o.OwnCookies {
		opts = append(opts, chromedp.WithNewBrowserContext())
	}
	tab, cancel := chromedp.NewContext(bctx, opts...)
	t.Cleanup(cancel)
	err := chromedp.Do(tab,
		chromedp.EmulateViewport(o.Width, Height, func(p *emulation.SetDeviceMetricsOverrideParams, _ *emulation.SetTouchEmulationEnabledParams) {
			p.Mobile = o.Width < 600
		}),
		chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			if o.AcceptLanguage == "" {
				return nil
			}
			if _, err := cdp.Call(ctx, tg, network.Enable, network.EnableParams{}); err != nil {
				return err
			}
			_, err := cdp.Call(ctx, tg, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{
				Headers: network.Headers{"Accept-Language": o.AcceptLanguage}})
			return err
		}),
		chromedp.Navigate(url),
	)
	if err != nil {
		t.Fatalf("opening %s: %v", url, err)
	}
	return tab
}

// ShotDir is where the test's screenshots go: $STAMPEDE_SCREENSHOTS (a
// relative path is the module root's), or a temporary folder.
func ShotDir(t *testing.T) string {
	dir := os.Getenv(ShotsEnv)
	if dir == "" {
		return t.TempDir()
	}
	// go test runs in the package's folder: a relative path is the module
	// root's, as typed there.
	for root, _ := os.Getwd(); !filepath.IsAbs(dir) && root != filepath.Dir(root); root = filepath.Dir(root) {
		if _, err := os.Stat(filepath.Join(root, "go.mod")); err == nil {
			dir = filepath.Join(root, dir)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("%s: %v", ShotsEnv, err)
	}
	return dir
}

// Shot saves a full-page PNG of tab as dir/name.png, and checks that it
// decodes and is width pixels wide (width 0: any) and at least minHeight
// tall.
func Shot(t *testing.T, tab context.Context, dir, name string, width, minHeight int) {
	t.Helper()
	shot, err := chromedp.Run(tab, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	img, err := png.Decode(bytes.NewReader(shot))
	if err != nil {
		t.Fatalf("screenshot %s (%d bytes) is not a PNG: %v", name, len(shot), err)
	}
	if b := img.Bounds(); (width > 0 && b.Dx() != width) || b.Dy() < minHeight {
		t.Errorf("screenshot %s is %dx%d, want %d wide and at least %d tall", name, b.Dx(), b.Dy(), width, minHeight)
	}
	path := filepath.Join(dir, name+".png")
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s", path)
}
