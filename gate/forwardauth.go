package gate

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/internal/httpapi"
	"github.com/stampede-lab/stampede/protocol"
	"github.com/stampede-lab/stampede/waitroom"
)

// The paths of the forward-auth endpoint. A proxy the team already runs
// (nginx auth_request, Caddy forward_auth, Traefik ForwardAuth, Envoy
// ext_authz over HTTP) asks AuthPath before each request it would send to
// the checkout; it sends the waiting room's own paths (/rooms/{room},
// /v1/rooms/{room}/..., /.well-known/jwks.json and /.stampede/...)
// straight to the forward-auth server.
const (
	// AuthPath answers 200 with Stampede-User and Stampede-Admission for
	// an admitted visitor, and else what the gate answers: 303 to the
	// waiting page for a page, 503 problem+json for an API client. With
	// ?deny=401 (nginx, whose auth_request understands only 2xx, 401 and
	// 403) every refusal is a bare 401 instead, and the proxy asks
	// WaitPath for the answer to give. Envoy appends the original path to
	// it (AuthPath + "/checkout?x=1").
	AuthPath = "/.stampede/auth"
	// WaitPath answers a refused visitor as the gate does (303 to the
	// waiting page remembering the address, or 503 problem+json), for a
	// proxy that cannot pass the refusal through (nginx error_page).
	WaitPath = "/.stampede/wait"
	// ReleasePath (POST) releases the slot of the admission cookie the
	// request carries and clears the cookie: a checkout behind a proxy
	// that cannot pass "Stampede-Release: done" back sends the buyer's
	// browser here (a form), answering 303 to the form's "next" (a
	// same-site path) or 204.
	ReleasePath = "/.stampede/release"
)

// ForwardAuth is the forward-auth server: it decides, for a proxy, whether
// a request may go to the checkout, with the gate's decision code (the
// same online check, cache, sliding lease and cookie), and serves the
// hand-off from the waiting page (AdmitPath), WaitPath, ReleasePath and,
// for every other path, the embedded waiting room (its API and page for
// every room, the JWKS, /healthz, /readyz, /metrics). It is an
// http.Handler.
type ForwardAuth struct {
	g     *Gate            // cfg.Room's
	rooms map[string]*Gate // by room: cfg.Room's and each room rule's
	rules *Rules
}

// NewForwardAuth returns the forward-auth server for cfg, a gate's
// configuration whose Upstream is unused (the proxy sends admitted
// requests to the checkout itself), and rules (nil: cfg.Room guards every
// request). Each room of the rules gets the gate's decision with its own
// cookie, CookieName + "_" + room. It starts nothing.
func NewForwardAuth(cfg Config, rules *Rules) (*ForwardAuth, error) {
	var f stampede.Fields
	f.Check("", ValidateForwardAuth(cfg))
	if rules == nil {
		rules = &Rules{}
	}
	f.Check("rules", rules.Validate())
	if err := f.Err(); err != nil {
		return nil, err
	}
	// The rooms' checks share one set of places: one store client.
	fa := &ForwardAuth{g: newGate(cfg, nil), rooms: map[string]*Gate{}, rules: rules}
	fa.rooms[cfg.Room] = fa.g
	for _, rr := range rules.Rooms {
		if _, ok := fa.rooms[rr.Room]; ok {
			continue
		}
		rc := cfg
		rc.Room, rc.CookieName = rr.Room, cfg.CookieName+"_"+rr.Room
		fa.rooms[rr.Room] = newGate(rc, fa.g.places)
	}
	return fa, nil
}

// ValidateForwardAuth reports every field of cfg unusable for a
// forward-auth server: those of Config.Validate but upstream.
func ValidateForwardAuth(cfg Config) error {
	var bad []error
	for _, e := range stampede.FieldErrors(cfg.Validate()) {
		if e.Field != "upstream" {
			bad = append(bad, e)
		}
	}
	return stampede.Join(bad...)
}

// Run listens on cfg.HTTP and serves until ctx ends (httpapi.Serve). The
// embedded waiting room's admission is run by its owner.
func (f *ForwardAuth) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", f.g.cfg.HTTP)
	if err != nil {
		return stampede.InvalidField("http", "%v", err)
	}
	f.g.cfg.Logger.Info("forward-auth listening", "addr", ln.Addr().String(), "room", f.g.cfg.Room)
	if err := httpapi.Serve(ctx, ln, f, f.g.cfg.Server, f.g.cfg.Logger); err != nil {
		return fmt.Errorf("forward-auth: http server: %w", err)
	}
	return nil
}

// ServeHTTP routes the forward-auth paths, and everything else to the
// embedded waiting room.
func (f *ForwardAuth) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	switch {
	case p == AuthPath || strings.HasPrefix(p, AuthPath+"/"):
		f.auth(w, r)
	case p == WaitPath:
		orig, err := original(r)
		if err != nil {
			httpapi.WriteProblem(w, err, "stampede-forward-auth")
			return
		}
		d := f.rules.decide(orig, f.g.cfg.Room, f.g.cfg.Now())
		if d.room == "" {
			httpapi.WriteProblem(w, stampede.Errorf(stampede.Forbidden, "this address is not served"), "stampede-forward-auth")
			return
		}
		g := f.rooms[d.room]
		_, cerr := orig.Cookie(g.cfg.CookieName)
		g.wait(w, orig, cerr == nil)
	case p == ReleasePath:
		f.release(w, r)
	case p == AdmitPath:
		f.admitGate(r).admit(w, r)
	default:
		f.g.cfg.Waitroom.ServeHTTP(w, r)
	}
}

// auth is the question a proxy asks before each request: 200 with the
// identity headers for an admitted visitor, else a refusal.
func (f *ForwardAuth) auth(w http.ResponseWriter, r *http.Request) {
	deny401 := r.URL.Path == AuthPath && r.URL.Query().Get("deny") == "401"
	orig, err := original(r)
	if err != nil {
		httpapi.WriteProblem(w, err, "stampede-forward-auth")
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	d := f.rules.decide(orig, f.g.cfg.Room, f.g.cfg.Now())
	switch {
	case d.allow:
		// No identity, said as empty values: a proxy that copies these
		// headers (Caddy 2.6 copies a missing one as its placeholder's
		// text) then sends the checkout none.
		w.Header()[protocol.HeaderUser] = []string{""}
		w.Header()[protocol.HeaderAdmission] = []string{""}
		w.WriteHeader(http.StatusOK)
		return
	case d.deny:
		httpapi.WriteProblem(w, stampede.Errorf(stampede.Forbidden, "this address is not served"), "stampede-forward-auth")
		return
	}
	g := f.rooms[d.room]
	refuse := func(clear bool) {
		if deny401 {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		g.wait(w, orig, clear)
	}
	ck, err := orig.Cookie(g.cfg.CookieName)
	if err != nil {
		refuse(false)
		return
	}
	// A cookie that outlived its token (a proxy that does not pass the
	// re-issued cookie back) still counts: the check answers with the
	// freshest token of its admission, re-signed by the store's touch.
	c, _, err := g.verify(ck.Value, true)
	if err != nil {
		refuse(true)
		return
	}
	if ok, wait := g.limits.allow(admissionKey{c.User, c.Seq}, g.cfg.Now()); !ok {
		tooMany(w, orig, wait)
		return
	}
	token, ok, err := g.check(r.Context(), c, ck.Value)
	if err != nil {
		httpapi.WriteProblem(w, err, "stampede-forward-auth")
		return
	}
	if !ok {
		refuse(true)
		return
	}
	if token != ck.Value {
		http.SetCookie(w, g.cookie(orig, g.cfg.CookieName, token, 0))
	}
	w.Header().Set(protocol.HeaderUser, c.User)
	w.Header().Set(protocol.HeaderAdmission, token)
	w.WriteHeader(http.StatusOK)
}

// tokenExpiry reads the exp claim of a token without verifying it (the
// caller verifies it next).
func tokenExpiry(token string) (time.Time, error) {
	tok, err := jwt.ParseSigned(token, []jose.SignatureAlgorithm{jose.EdDSA})
	if err != nil {
		return time.Time{}, err
	}
	var std jwt.Claims
	if err := tok.UnsafeClaimsWithoutVerification(&std); err != nil || std.Expiry == nil {
		return time.Time{}, errors.New("no expiry")
	}
	return std.Expiry.Time(), nil
}

// original rebuilds the request the proxy is asking about: its method
// from X-Forwarded-Method (or X-Original-Method), its address from
// X-Forwarded-Uri (Caddy, Traefik, and the nginx snippet) or
// X-Original-URI, else the path after AuthPath (Envoy), else /. Headers
// (Cookie, Accept, Sec-Fetch-Dest) are the proxy's copy of the
// visitor's. X-Forwarded-Proto https marks the cookies Secure.
func original(r *http.Request) (*http.Request, error) {
	o := r.Clone(r.Context())
	if m := firstHeader(r, "X-Forwarded-Method", "X-Original-Method"); m != "" {
		if strings.ContainsAny(m, " \t\r\n") || len(m) > 32 {
			return nil, stampede.InvalidField("X-Forwarded-Method", "must be an HTTP method")
		}
		o.Method = strings.ToUpper(m)
	}
	uri := firstHeader(r, "X-Forwarded-Uri", "X-Original-URI", "X-Original-Uri")
	if uri == "" && strings.HasPrefix(r.URL.Path, AuthPath+"/") {
		uri = strings.TrimPrefix(r.URL.RequestURI(), AuthPath)
	}
	if uri == "" {
		uri = "/"
	}
	u, err := url.ParseRequestURI(uri)
	if err != nil || !strings.HasPrefix(uri, "/") || strings.HasPrefix(uri, "//") || len(uri) > 8192 ||
		strings.ContainsFunc(uri, func(c rune) bool { return c <= ' ' || c == 0x7f }) {
		return nil, stampede.InvalidField("X-Forwarded-Uri", "must be the request's path and query, starting with /")
	}
	o.URL = u
	o.RequestURI = uri
	if strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https") && o.TLS == nil {
		o.TLS = &tls.ConnectionState{}
	}
	return o, nil
}

// firstHeader returns the first of the named headers that r carries.
func firstHeader(r *http.Request, names ...string) string {
	for _, n := range names {
		if v := r.Header.Get(n); v != "" {
			return v
		}
	}
	return ""
}

// release is POST ReleasePath: it releases the slot of the admission
// cookie (if it verifies) and clears the cookie, then answers 303 to the
// form's "next" or 204. Only POST: a cross-site form does not carry the
// SameSite=Lax cookie, so another site cannot end a buyer's admission.
func (f *ForwardAuth) release(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		httpapi.WriteProblem(w, stampede.Errorf(stampede.MethodNotAllowed, "use POST"), "stampede-forward-auth")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 4096)
	next := ""
	if err := r.ParseForm(); err == nil {
		next = r.PostForm.Get("next")
	}
	if next != "" && !safeReturn(next) {
		httpapi.WriteProblem(w, stampede.InvalidField("next", "must be a path on this site, starting with one /"), "stampede-forward-auth")
		return
	}
	for _, g := range f.rooms {
		ck, err := r.Cookie(g.cfg.CookieName)
		if err != nil {
			continue
		}
		if c, _, err := g.verify(ck.Value, true); err == nil {
			g.released(admissionKey{c.User, c.Seq}, c)
			if _, err := g.cfg.Service.ReleaseAdmission(r.Context(), g.cfg.Room, c.User, c.Seq); err != nil {
				httpapi.WriteProblem(w, err, "stampede-forward-auth")
				return
			}
		}
		http.SetCookie(w, g.cookie(r, g.cfg.CookieName, "", -1))
	}
	if next == "" {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// admitGate is the gate of the room named by the ticket token of a
// hand-off to AdmitPath; the default room's when the token does not
// verify (its admit then says why).
func (f *ForwardAuth) admitGate(r *http.Request) *Gate {
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return f.g
	}
	c, err := f.g.cfg.Tickets.Verify(strings.TrimSpace(tok), waitroom.TicketToken)
	if err != nil {
		return f.g
	}
	if g, ok := f.rooms[c.Room]; ok {
		return g
	}
	return f.g
}
