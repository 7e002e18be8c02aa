// Package gate is a reverse proxy that puts a waiting room in front of any
// checkout. It embeds a waiting-room instance on the shared store (its
// service, token signers and HTTP handler, given in Config), so any number
// of gates and waiting-room instances on one Redis hold one room's
// capacity together.
//
// A visitor without a valid admission cookie is sent to the waiting page
// (GET /rooms/{room}?join=anonymous, served by the embedded waiting room,
// which the gate also serves the API of), and the address first asked for
// is remembered in a cookie. Once admitted, the page hands its ticket
// token to POST /.stampede/gate/admit: the gate sets the admission cookie
// (the admission JWT; HttpOnly, SameSite=Lax, Secure under TLS) and names
// that address. An API client (Accept: application/json, no text/html)
// gets 503 problem+json with the queue's length and Retry-After instead.
//
// Every admitted request is checked online, against the store (one call
// per admission at a time, the answer fresh for CheckCache, served while
// a renewal is in flight or has failed but never past the lease's end
// less SafetyMargin: see check.go): a released, expired or superseded
// admission, like a tampered or expired cookie, leads back to the waiting
// page. Each admission may send VisitorRate requests a second (bursts of
// VisitorBurst); over it the gate answers 429 without asking the store. Checked
// requests go upstream with Stampede-User and Stampede-Admission headers,
// set after the hop-by-hop headers (those named in Connection too) are
// removed; any Stampede-* header the client sent, in any case and with
// underscores for hyphens, is dropped. Each check slides the lease (now plus
// the room's lease, never past the admission's start plus MaxSession);
// once the cookie's token has less than half of that (plus a second)
// left, the cookie is re-issued with the new expiry, so that one token,
// verified once, serves an active visitor for about half a lease. An
// upstream answer with "Stampede-Release: done" releases the slot and
// clears the cookie.
package gate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"mime"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/internal/httpapi"
	"github.com/stampede-lab/stampede/protocol"
	"github.com/stampede-lab/stampede/waitroom"
)

// AdmitPath is where the waiting page hands an admitted ticket token to
// the gate.
const AdmitPath = "/.stampede/gate/admit"

// The gate's own liveness, readiness and metrics, under its reserved
// prefix (the unprefixed paths are the checkout's): the embedded waiting
// room's /healthz, /readyz (its store answers) and /metrics.
const (
	HealthPath  = "/.stampede/healthz"
	ReadyPath   = "/.stampede/readyz"
	MetricsPath = "/.stampede/metrics"
)

// Config configures a Gate. Validate names each field in snake_case, in
// the words of the `serve gate` flag that sets it.
type Config struct {
	// Room is the waiting room the gate guards.
	Room string
	// Upstream is the checkout the gate proxies to.
	Upstream *url.URL
	// CookieName names the admission cookie; the return-address cookie
	// is CookieName + "_return".
	CookieName string
	// CheckCache is how long an online check's answer is fresh (at most
	// 1 s), from when its store call began: a slot released elsewhere is
	// refused within it plus one store round trip (a request past it
	// while a renewal is in flight gets the cached answer).
	CheckCache time.Duration
	// SafetyMargin: a cached check is not used past the lease's end less
	// this, so that a request in flight reaches upstream before the slot
	// can go to someone else.
	SafetyMargin time.Duration
	// MaxSession caps the sliding lease: the admission ends at its start
	// plus MaxSession, however active the user is.
	MaxSession time.Duration
	// CheckConcurrency bounds the store calls the gate's online checks
	// make at once, for every visitor together: a flood of visitors waits
	// here instead of taking the store client's connections from the
	// room's admission pass.
	CheckConcurrency int
	// CheckBackoff: after a failed online check an admission is not
	// looked up again for CheckBackoff, doubled after each further
	// failure up to 16 times it; meanwhile its still-valid cached answer
	// is served, or else the request gets 503 at once.
	CheckBackoff time.Duration
	// VisitorRate is how many requests a second each admission may send
	// on average, VisitorBurst how many at once (a token bucket per
	// admission); over it a request gets 429 with Retry-After, without
	// touching the store. A VisitorRate of 0 turns the limit off.
	VisitorRate  float64
	VisitorBurst int
	// Logger receives the gate's logs.
	Logger *slog.Logger
	// Now is the gate's clock.
	Now func() time.Time

	// The embedded waiting-room instance, on the store of Room (see
	// package waitroom/api, whose Server gives all four).

	// Service checks, slides and releases admissions.
	Service *waitroom.Service
	// Tickets verifies the ticket tokens the waiting page hands over.
	Tickets *waitroom.Signer
	// Admissions signs and verifies the admission cookie.
	Admissions *waitroom.AdmissionSigner
	// Waitroom serves the waiting room's API and page for Room and the
	// JWKS.
	Waitroom http.Handler

	// HTTP is the address Run listens on; Server its HTTP settings.
	HTTP   string
	Server httpapi.ServerConfig
}

// DefaultConfig returns cookie "stampede_admission", a one-second check
// cache, a 500 ms safety margin, 30-minute sessions, 8 concurrent store
// calls for the checks, a 250 ms check backoff, 20 requests a second per
// visitor with bursts of 100, and the default HTTP settings on
// 127.0.0.1:8080; Room, Upstream and the waiting-room instance must be
// set.
func DefaultConfig() Config {
	return Config{CookieName: "stampede_admission", CheckCache: time.Second, SafetyMargin: 500 * time.Millisecond,
		MaxSession: 30 * time.Minute, CheckConcurrency: 8, CheckBackoff: 250 * time.Millisecond,
		VisitorRate: 20, VisitorBurst: 100, Logger: slog.Default(), Now: time.Now,
		HTTP: "127.0.0.1:8080", Server: httpapi.DefaultServerConfig()}
}

// Validate reports every unusable field by its snake_case name.
func (c Config) Validate() error {
	var f stampede.Fields
	if err := waitroom.ValidateRoom(c.Room); err != nil {
		f.Add("room", "%s", stampede.As(err).Message)
	}
	if c.Upstream == nil || (c.Upstream.Scheme != "http" && c.Upstream.Scheme != "https") || c.Upstream.Host == "" {
		f.Add("upstream", "must be an http or https URL")
	}
	if c.CookieName == "" || strings.ContainsAny(c.CookieName, "=;, \t\r\n") {
		f.Add("cookie", "must be a cookie name, got %q", c.CookieName)
	}
	if c.CheckCache < 0 || c.CheckCache > time.Second {
		f.Add("check_cache", "must be between 0 and 1s, got %s", c.CheckCache)
	}
	if c.SafetyMargin < 0 || c.SafetyMargin > time.Minute {
		f.Add("safety_margin", "must be between 0 and 1m, got %s", c.SafetyMargin)
	}
	if c.MaxSession < time.Second {
		f.Add("max_session", "must be at least 1s, got %s", c.MaxSession)
	}
	if c.CheckConcurrency < 1 || c.CheckConcurrency > 1024 {
		f.Add("check_concurrency", "must be between 1 and 1024, got %d", c.CheckConcurrency)
	}
	if c.CheckBackoff < time.Millisecond || c.CheckBackoff > time.Minute {
		f.Add("check_backoff", "must be between 1ms and 1m, got %s", c.CheckBackoff)
	}
	if math.IsNaN(c.VisitorRate) || c.VisitorRate < 0 || c.VisitorRate > 1e6 {
		f.Add("visitor_rate", "must be between 0 (no limit) and 1000000 requests a second, got %v", c.VisitorRate)
	}
	if c.VisitorBurst < 0 || c.VisitorBurst > 1e6 || (c.VisitorRate > 0 && c.VisitorBurst < 1) {
		f.Add("visitor_burst", "must be between 1 and 1000000 with a visitor rate, got %d", c.VisitorBurst)
	}
	if c.Logger == nil {
		f.Add("logger", "must not be nil")
	}
	if c.Now == nil {
		f.Add("now", "must not be nil")
	}
	if c.Service == nil {
		f.Add("service", "must not be nil: the embedded waiting room's")
	}
	if c.Tickets.Ready() != nil {
		f.Add("tickets", "must be a signer made by waitroom.NewSigner")
	}
	if c.Admissions == nil {
		f.Add("admissions", "must not be nil: the embedded waiting room's admission signer")
	}
	if c.Waitroom == nil {
		f.Add("waitroom", "must not be nil: the embedded waiting room's HTTP handler")
	}
	if c.HTTP == "" {
		f.Add("http", "must not be empty")
	}
	f.Check("", c.Server.Validate())
	return f.Err()
}

// Gate is the reverse proxy. It is an http.Handler.
type Gate struct {
	cfg   Config
	proxy *httputil.ReverseProxy

	// mu guards cache, what the gate knows of each admission (check.go).
	mu    sync.Mutex
	cache map[admissionKey]*entry
	// sweptAt is when the entries of no use were last dropped;
	// batching: a batch of checks is in flight; renewAt: from then on
	// some answer is due for renewal (zero: none; check.go).
	sweptAt  time.Time
	batching bool
	renewAt  time.Time
	// flights reads the room's status once for every refused API client
	// asking at the same time; places holds CheckConcurrency places for
	// the checks' store calls.
	flights singleflight.Group
	places  chan struct{}
	// tokens remembers the verified admission tokens, limits each
	// admission's bucket (nil without a limit).
	tokens *tokenCache
	limits *visitorLimits
	// room is the room's status read at roomAt (guarded by mu), for the
	// answers to API clients that must wait.
	room   waitroom.RoomStatus
	roomAt time.Time
}

// admissionKey identifies one admission.
type admissionKey struct {
	user string
	seq  int64
}

// newGate returns a Gate for cfg, without its proxy, whose checks take
// their places among places (a new set of cfg.CheckConcurrency when nil).
func newGate(cfg Config, places chan struct{}) *Gate {
	if places == nil {
		places = make(chan struct{}, cfg.CheckConcurrency)
	}
	return &Gate{cfg: cfg, cache: map[admissionKey]*entry{}, places: places,
		tokens: &tokenCache{m: map[string]verified{}}, limits: newVisitorLimits(cfg.VisitorRate, cfg.VisitorBurst)}
}

// New returns a Gate for cfg in front of cfg.Upstream. It starts
// nothing: serve it (it is an http.Handler) or Run it.
func New(cfg Config) (*Gate, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	g := newGate(cfg, nil)
	transport := http.DefaultTransport.(*http.Transport).Clone()
	// One upstream: keep its connections instead of churning ports (the
	// default transport keeps 100 idle connections in all, and a burst of
	// more concurrent requests would close and dial again every one
	// above).
	transport.MaxIdleConns, transport.MaxIdleConnsPerHost = 1024, 1024
	g.proxy = &httputil.ReverseProxy{
		Transport:  observed{transport, cfg.Service, cfg.Room},
		BufferPool: copyBuffers{},
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(cfg.Upstream)
			pr.SetXForwarded()
			pr.Out.Host = pr.In.Host
			// The proxy has removed the hop-by-hop headers (those named
			// in Connection too) before Rewrite: the identity set here
			// cannot be dropped by the client.
			stripStampede(pr.Out.Header)
			if a, ok := pr.In.Context().Value(admissionCtxKey{}).(admitted); ok {
				pr.Out.Header.Set(protocol.HeaderUser, a.claims.User)
				pr.Out.Header.Set(protocol.HeaderAdmission, a.token)
			}
		},
		ModifyResponse: g.modifyResponse,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			cfg.Logger.Warn("gate: upstream failed", "err", err)
			httpapi.WriteProblem(w, stampede.UnavailableErr("the checkout", err), "stampede-gate")
		},
	}
	return g, nil
}

// observed is the upstream's transport, telling the room's service when
// each request starts and whether its answer failed (a 5xx or none): the
// signals of the adaptive outflow (waitroom.Service.StartUpstream; a
// request still unanswered counts once it is slow).
type observed struct {
	next http.RoundTripper
	svc  *waitroom.Service
	room string
}

func (o observed) RoundTrip(r *http.Request) (*http.Response, error) {
	done := o.svc.StartUpstream(o.room)
	resp, err := o.next.RoundTrip(r)
	done(err != nil || resp.StatusCode >= 500)
	return resp, err
}

// copyBuffers lends the proxy its 32 KiB copy buffers again and again
// instead of allocating one per request.
type copyBuffers struct{}

var copyBufferPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (copyBuffers) Get() []byte  { return *copyBufferPool.Get().(*[]byte) }
func (copyBuffers) Put(b []byte) { copyBufferPool.Put(&b) }

// Run listens on cfg.HTTP and serves the gate until ctx ends, then shuts
// the HTTP server down (httpapi.Serve). It does not run the embedded
// waiting room's admission: its owner does.
func (g *Gate) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", g.cfg.HTTP)
	if err != nil {
		return stampede.InvalidField("http", "%v", err)
	}
	g.cfg.Logger.Info("gate listening", "addr", ln.Addr().String(), "room", g.cfg.Room, "upstream", g.cfg.Upstream.String())
	if err := httpapi.Serve(ctx, ln, g, g.cfg.Server, g.cfg.Logger); err != nil {
		return fmt.Errorf("gate: http server: %w", err)
	}
	return nil
}

// ServeHTTP routes the waiting room's own paths to the embedded instance,
// the hand-off to admit, and everything else upstream or to the waiting
// page.
func (g *Gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	switch {
	case p == AdmitPath:
		g.admit(w, r)
	case p == HealthPath, p == ReadyPath, p == MetricsPath:
		// The embedded waiting room's own /healthz, /readyz and /metrics,
		// under the gate's reserved prefix: every other path belongs to
		// the checkout behind it.
		r2 := r.Clone(r.Context())
		r2.URL.Path, r2.URL.RawPath = strings.TrimPrefix(p, "/.stampede"), ""
		g.cfg.Waitroom.ServeHTTP(w, r2)
	case p == "/rooms/"+g.cfg.Room, p == "/v1/rooms/"+g.cfg.Room, strings.HasPrefix(p, "/v1/rooms/"+g.cfg.Room+"/"), p == "/.well-known/jwks.json":
		g.cfg.Waitroom.ServeHTTP(w, r)
	default:
		g.guard(w, r)
	}
}

// guard proxies an admitted request upstream or sends the visitor to wait.
func (g *Gate) guard(w http.ResponseWriter, r *http.Request) {
	stripStampede(r.Header)
	// Only a cookie that verifies as an admission to this room is the
	// gate's: another room's (another gate on this host, with the same
	// cookie name), a tampered or an expired one is left alone (the
	// hand-off replaces it), never deleted.
	var (
		c     protocol.AdmissionClaims
		value string
	)
	for _, ck := range r.CookiesNamed(g.cfg.CookieName) {
		if v, _, err := g.verify(ck.Value, false); err == nil {
			c, value = v, ck.Value
			break
		}
	}
	if value == "" {
		g.wait(w, r, false)
		return
	}
	if ok, wait := g.limits.allow(admissionKey{c.User, c.Seq}, g.cfg.Now()); !ok {
		tooMany(w, r, wait)
		return
	}
	token, ok, err := g.check(r.Context(), c, value)
	if err != nil {
		httpapi.WriteProblem(w, err, "stampede-gate")
		return
	}
	if !ok {
		g.wait(w, r, true)
		return
	}
	if token != value {
		http.SetCookie(w, g.cookie(r, g.cfg.CookieName, token, 0))
	}
	g.proxy.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), admissionCtxKey{}, admitted{c, token})))
}

// admissionCtxKey carries the request's admission (an admitted) to the
// proxy's Rewrite and to modifyResponse.
type admissionCtxKey struct{}

// admitted is a checked admission and the token sent upstream with it.
type admitted struct {
	claims protocol.AdmissionClaims
	token  string
}

// stripStampede deletes every header that reads as a Stampede-* header
// in any spelling: any case, and with underscores for hyphens (CGI, WSGI
// and PHP turn both Stampede-User and Stampede_User into
// HTTP_STAMPEDE_USER). Only the gate sets these upstream.
func stripStampede(h http.Header) {
	for name := range h {
		if isStampedeHeader(name) {
			delete(h, name)
		}
	}
}

// isStampedeHeader reports a header name that starts with "stampede-" or
// "stampede_", in any case.
func isStampedeHeader(name string) bool {
	const p = "stampede"
	return len(name) > len(p) && strings.EqualFold(name[:len(p)], p) && (name[len(p)] == '-' || name[len(p)] == '_')
}

// modifyResponse releases the slot when upstream says "Stampede-Release:
// done", before the answer reaches the client.
func (g *Gate) modifyResponse(resp *http.Response) error {
	v := resp.Header.Get(protocol.HeaderRelease)
	resp.Header.Del(protocol.HeaderRelease)
	if !strings.EqualFold(strings.TrimSpace(v), protocol.ReleaseDone) {
		return nil
	}
	a, ok := resp.Request.Context().Value(admissionCtxKey{}).(admitted)
	if !ok {
		return nil
	}
	c := a.claims
	g.released(admissionKey{c.User, c.Seq}, c)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := g.cfg.Service.ReleaseAdmission(ctx, g.cfg.Room, c.User, c.Seq); err != nil {
		g.cfg.Logger.Warn("gate: releasing the slot failed; it ends with its lease", "user", c.User, "err", err)
	}
	resp.Header.Add("Set-Cookie", g.cookie(resp.Request, g.cfg.CookieName, "", -1).String())
	return nil
}

// wantsJSON reports an API client: Accept names application/json (or
// problem+json) and not text/html.
func wantsJSON(r *http.Request) bool {
	json, html := false, false
	for part := range strings.SplitSeq(r.Header.Get("Accept"), ",") {
		mt, _, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil {
			continue
		}
		switch mt {
		case "application/json", "application/problem+json":
			json = true
		case "text/html":
			html = true
		}
	}
	return json && !html
}

// wait answers a request that may not go upstream: 503 problem+json for
// an API client, else a redirect to the waiting page that remembers the
// address (of a page, not of a sub-resource: isNavigation). clear drops a bad admission cookie.
func (g *Gate) wait(w http.ResponseWriter, r *http.Request, clear bool) {
	if clear {
		http.SetCookie(w, g.cookie(r, g.cfg.CookieName, "", -1))
	}
	if wantsJSON(r) {
		e := &stampede.Error{Code: stampede.Unavailable, RetryAfter: 5 * time.Second,
			Message: fmt.Sprintf("the checkout is full: join the waiting room %q", g.cfg.Room),
			Extra:   map[string]any{"room": g.cfg.Room, "join": "/v1/rooms/" + g.cfg.Room + "/tickets"}}
		if st, ok := g.roomStatus(r.Context()); ok {
			e.Extra["waiting"] = st.Waiting
			if st.AdmissionRate > 0 {
				e.RetryAfter = time.Duration(math.Min(300, float64(st.Waiting+1)/st.AdmissionRate)) * time.Second
			}
		}
		httpapi.WriteProblem(w, e, "stampede-gate")
		return
	}
	if (r.Method == http.MethodGet || r.Method == http.MethodHead) && isNavigation(r) {
		http.SetCookie(w, g.cookie(r, g.cfg.CookieName+"_return", url.QueryEscape(r.URL.RequestURI()), 0))
	}
	w.Header().Set("Cache-Control", "no-store")
	to := "/rooms/" + g.cfg.Room + "?join=anonymous"
	if lang := r.URL.Query().Get("lang"); lang != "" {
		// The page's language, as the visitor asked for it.
		to += "&lang=" + url.QueryEscape(lang)
	}
	http.Redirect(w, r, to, http.StatusSeeOther)
}

// isNavigation reports a request for a page: Sec-Fetch-Dest is document
// (or absent, from an older browser or a plain client). A sub-resource
// the browser fetches on its own (the favicon of the waiting page, an
// image) must not replace the address to return to.
func isNavigation(r *http.Request) bool {
	d := r.Header.Get("Sec-Fetch-Dest")
	return d == "" || d == "document"
}

// cookie makes an HttpOnly, SameSite=Lax cookie for the whole site,
// Secure under TLS; maxAge -1 deletes it, 0 makes a session cookie.
func (g *Gate) cookie(r *http.Request, name, value string, maxAge int) *http.Cookie {
	return &http.Cookie{Name: name, Value: value, Path: "/", HttpOnly: true, SameSite: http.SameSiteLaxMode,
		Secure: r.TLS != nil, MaxAge: maxAge}
}

// admit is POST /.stampede/gate/admit: the waiting page hands over an
// admitted ticket token (Authorization: Bearer); the gate sets the
// admission cookie and answers {"redirect": the address first asked for}.
func (g *Gate) admit(w http.ResponseWriter, r *http.Request) {
	fail := func(err error) { httpapi.WriteProblem(w, err, "stampede-gate") }
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		fail(stampede.Errorf(stampede.MethodNotAllowed, "use POST"))
		return
	}
	auth := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(auth, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(tok) == "" {
		fail(stampede.Errorf(stampede.Unauthorized, "missing Authorization: Bearer <ticket_token>"))
		return
	}
	c, err := g.cfg.Tickets.Verify(strings.TrimSpace(tok), waitroom.TicketToken)
	if err != nil {
		fail(err)
		return
	}
	if c.Room != g.cfg.Room {
		fail(stampede.Errorf(stampede.Forbidden, "the ticket token is for another room"))
		return
	}
	svc := g.cfg.Service
	t, err := svc.Ticket(r.Context(), g.cfg.Room, c.User)
	if errors.Is(err, waitroom.ErrNoTicket) {
		fail(stampede.Errorf(stampede.NotFound, "no ticket; join first"))
		return
	}
	if err != nil {
		fail(err)
		return
	}
	if t.Generation != c.Generation {
		// A token of the user's earlier join proves nothing of this one.
		fail(stampede.Errorf(stampede.Forbidden, "the ticket token is for an earlier join of this user, which has ended"))
		return
	}
	if t.State != waitroom.StateAdmitted {
		fail(stampede.Errorf(stampede.Conflict, "the ticket is %s, not admitted", t.State))
		return
	}
	token, err := svc.SignAdmission(r.Context(), g.cfg.Admissions, t, g.cfg.Now())
	if err != nil || token == "" {
		fail(stampede.Errorf(stampede.Conflict, "the admission is ending; join again"))
		return
	}
	http.SetCookie(w, g.cookie(r, g.cfg.CookieName, token, 0))
	redirect := "/"
	if rc, err := r.Cookie(g.cfg.CookieName + "_return"); err == nil {
		if p, err := url.QueryUnescape(rc.Value); err == nil && safeReturn(p) {
			redirect = p
		}
	}
	http.SetCookie(w, g.cookie(r, g.cfg.CookieName+"_return", "", -1))
	httpapi.WriteJSON(w, http.StatusOK, map[string]string{"redirect": redirect, "user_id": t.User})
}

// safeReturn accepts a same-site path: it starts with one slash and is
// not a waiting-room path.
func safeReturn(p string) bool {
	return strings.HasPrefix(p, "/") && !strings.HasPrefix(p, "//") && !strings.ContainsAny(p, "\\\r\n") &&
		!strings.HasPrefix(p, "/rooms/") && !strings.HasPrefix(p, "/.stampede/")
}
