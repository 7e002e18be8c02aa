// Package console is the operator console of a sale: a live web page, for
// holders of the admin token, that shows the rooms of the waiting room
// (waiting, active, rate, ETA, paused or closed), payments by status, the
// flagged payments with a link to their history, the outbox and consumer
// lag and the seats left, and that pauses, resumes and closes a room or
// changes its capacity and outflow.
//
// The console keeps no state of the sale: it reads each part over HTTP
// (the waiting room's admin API, pay's /v1/admin endpoints, the checkout's
// events, the workers' /metrics) and sends controls to the waiting room's
// admin API. A part that does not answer is shown as unavailable; the page
// never fails because one of them is down. Updates reach the page by
// server-sent events.
//
// Security: a login form takes the admin token (compared in constant
// time) and sets a signed session cookie (HttpOnly, SameSite=Strict,
// Path=/console); every control also needs the session's CSRF token in
// the X-CSRF-Token header, which a cross-site form cannot send.
package console

import (
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/internal/httpapi"
)

// Endpoint is a part the console reads: its base URL and the bearer token
// of its admin endpoints.
type Endpoint struct {
	// URL is the base URL, such as http://127.0.0.1:8080; empty means
	// the part is not configured (shown as such).
	URL string
	// Token is sent as "Authorization: Bearer <Token>".
	Token string
}

// configured reports whether the endpoint has a URL.
func (e Endpoint) configured() bool { return e.URL != "" }

// Config configures the console.
type Config struct {
	// AdminToken is what an operator types on the login form; at least
	// 16 bytes. It also keys the session cookies, so changing it logs
	// everyone out.
	AdminToken string
	// Waitroom is the waiting room (an instance or the gate), with its
	// admin token. Required: the controls act on it.
	Waitroom Endpoint
	// Pay is the payment service with its --admin-token (optional).
	Pay Endpoint
	// Checkout is the checkout (optional; no token needed to read an
	// event), and Events the events whose seats left are shown.
	Checkout Endpoint
	Events   []string
	// Workers are the base URLs of the event workers, whose /metrics
	// give the consumer lag (optional).
	Workers []string
	// WorkerToken is the workers' --admin-token: with it, the console
	// lists the parked keys (GET /v1/parked of the first worker that
	// answers; the workers of one consumer share them). Optional.
	WorkerToken string
	// Interval is how often the page is updated.
	Interval time.Duration
	// Timeout bounds each call to a part.
	Timeout time.Duration
	// Session is how long a login lasts.
	Session time.Duration
	// FlaggedLimit is the most flagged payments shown.
	FlaggedLimit int
	// SecureCookie marks the session cookie Secure (serve the console
	// over HTTPS, or behind a proxy that is).
	SecureCookie bool
	// MaxBody is the largest control body accepted, in bytes.
	MaxBody int64
	// Logger receives the request log and the parts' failures; nil means
	// slog.Default().
	Logger *slog.Logger
	// Client makes the calls to the parts; nil means a client of its
	// own.
	Client *http.Client
	// Now is the clock of sessions and snapshots; nil means time.Now.
	Now func() time.Time
	// Registry is served on /metrics, with the request metrics; nil
	// means a new registry.
	Registry *prometheus.Registry
	// HTTP are the limits Run serves with.
	HTTP httpapi.ServerConfig
	// Listener is where Run serves; needed by Run only (a test may serve
	// the Server as an http.Handler instead).
	Listener net.Listener
}

// DefaultConfig updates the page every second, gives each part 1 s to
// answer, keeps a login 12 hours and shows up to 50 flagged payments.
// It serves with httpapi.DefaultServerConfig. AdminToken and Waitroom must
// be set.
func DefaultConfig() Config {
	return Config{Interval: time.Second, Timeout: time.Second, Session: 12 * time.Hour, FlaggedLimit: 50, MaxBody: 4096,
		HTTP: httpapi.DefaultServerConfig()}
}

// minToken is the shortest admin token accepted.
const minToken = 16

// Validate reports every unusable field at once (see stampede.Fields),
// each named in snake_case with the words of the serve console flag that
// sets it: Waitroom.URL is "waitroom", Waitroom.Token "waitroom_token",
// Pay.URL "pay", Checkout.URL "checkout"; the HTTP limits keep their own
// names ("read_header_timeout").
func (c Config) Validate() error {
	var f stampede.Fields
	if len(c.AdminToken) < minToken {
		f.Add("admin_token", "must be at least %d bytes, got %d", minToken, len(c.AdminToken))
	}
	if !c.Waitroom.configured() {
		f.Add("waitroom", "is required: the waiting room whose rooms the console shows and controls")
	}
	if len(c.Waitroom.Token) < minToken {
		f.Add("waitroom_token", "must be the waiting room's admin token, at least %d bytes, got %d", minToken, len(c.Waitroom.Token))
	}
	if c.Pay.configured() && len(c.Pay.Token) < minToken {
		f.Add("pay_token", "must be pay's --admin-token, at least %d bytes, got %d", minToken, len(c.Pay.Token))
	}
	if len(c.Events) > 0 && !c.Checkout.configured() {
		f.Add("events", "need the checkout's URL (checkout)")
	}
	if c.Interval < 100*time.Millisecond || c.Interval > time.Minute {
		f.Add("interval", "must be between 100ms and 1m, got %s", c.Interval)
	}
	if c.Timeout < 10*time.Millisecond || c.Timeout > time.Minute {
		f.Add("timeout", "must be between 10ms and 1m, got %s", c.Timeout)
	}
	if c.Session < time.Minute || c.Session > 30*24*time.Hour {
		f.Add("session", "must be between 1m and 720h, got %s", c.Session)
	}
	if c.FlaggedLimit < 1 || c.FlaggedLimit > 500 {
		f.Add("flagged_limit", "must be between 1 and 500, got %d", c.FlaggedLimit)
	}
	if c.MaxBody < 64 {
		f.Add("max_body", "must be at least 64 bytes, got %d", c.MaxBody)
	}
	f.Check("", checkURL("waitroom", c.Waitroom.URL))
	f.Check("", checkURL("pay", c.Pay.URL))
	f.Check("", checkURL("checkout", c.Checkout.URL))
	for _, u := range c.Workers {
		f.Check("", checkURL("workers", u))
	}
	for _, e := range c.Events {
		if e == "" || strings.ContainsAny(e, "/?#") {
			f.Add("events", "must be event names without '/', '?' or '#', got %q", e)
		}
	}
	f.Check("", c.HTTP.Validate())
	return f.Err()
}

// checkURL accepts an empty URL or an absolute http(s) one.
func checkURL(field, raw string) error {
	if raw == "" {
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return stampede.InvalidField(field, "must be an http or https base URL, got %q", raw)
	}
	return nil
}
