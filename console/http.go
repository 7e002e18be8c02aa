package console

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/internal/httpapi"
	"github.com/stampede-lab/stampede/waitroom"
)

//go:embed page.html login.html payment.html app.js app.css openapi.yaml
var assets embed.FS

var templates = template.Must(template.ParseFS(assets, "page.html", "login.html", "payment.html"))

// openAPI is the console's JSON API description, served on /openapi.json.
var openAPI = httpapi.MustLoadSpec(mustRead("openapi.yaml"))

// OpenAPI returns the console's OpenAPI 3 description (openapi.yaml).
func OpenAPI() *httpapi.Spec { return openAPI }

func mustRead(name string) []byte {
	b, err := assets.ReadFile(name)
	if err != nil {
		panic(err)
	}
	return b
}

// contentSecurity allows the console's own scripts, styles and
// connections only: no inline script, no other origin.
const contentSecurity = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// handler serves the console.
type handler struct {
	cfg  Config
	api  *httpapi.API
	s    *sessions
	g    *gatherer
	log  *slog.Logger
	call caller
	// throttle limits wrong logins per client address.
	throttle *httpapi.FailureThrottle
}

// Server is the console served over HTTP. It implements http.Handler.
type Server struct {
	cfg Config
	api *httpapi.API
}

// New returns the console:
//
//	GET  /                               redirects to /console
//	GET  /console                        the live page, or the login form without a session
//	POST /console/login                  form field "token": the admin token → session cookie
//	POST /console/logout                 ends the session (CSRF header)
//	GET  /console/payments/{id}          a payment's status history (from pay's admin API)
//	GET  /console/app.js, /console/app.css
//	GET  /console/api/snapshot           everything the page shows, as JSON (session)
//	GET  /console/api/stream             the same as server-sent events, every Interval (session)
//	POST /console/api/rooms/{room}/pause, /resume, /close        (session and CSRF header)
//	PATCH /console/api/rooms/{room}      {"capacity", "max_admissions_per_minute"} (session and CSRF header)
//	GET  /healthz, /readyz (the waiting room answers), /metrics, /openapi.json
//
// Nil cfg.Logger, cfg.Now, cfg.Client and cfg.Registry mean
// slog.Default(), time.Now, a client of its own and a new registry; a
// zero cfg.HTTP means httpapi.DefaultServerConfig; the rest of cfg must
// pass Validate. It starts nothing (Run serves).
func New(cfg Config) (*Server, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{}
	}
	if cfg.HTTP == (httpapi.ServerConfig{}) {
		cfg.HTTP = httpapi.DefaultServerConfig()
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	api, err := httpapi.New(httpapi.Config{Name: "console", Logger: cfg.Logger, Registry: cfg.Registry, Spec: openAPI.JSON})
	if err != nil {
		return nil, err
	}
	c := caller{client: cfg.Client, timeout: cfg.Timeout}
	h := &handler{cfg: cfg, api: api, s: newSessions(cfg.AdminToken, cfg.Session, cfg.Now, cfg.SecureCookie),
		g: &gatherer{cfg: cfg, c: c}, log: cfg.Logger, call: c,
		throttle: httpapi.NewFailureThrottle(LoginFailures, time.Minute, cfg.Now)}
	api.AddCheck(httpapi.Check{Name: "waitroom", Ping: func(ctx context.Context) error {
		return h.call.do(ctx, Endpoint{URL: cfg.Waitroom.URL}, http.MethodGet, "/healthz", nil, nil)
	}})
	api.HandleHTTP("/{$}", map[string]http.Handler{http.MethodGet: http.RedirectHandler("/console", http.StatusSeeOther)})
	api.HandleHTTP("/console", map[string]http.Handler{http.MethodGet: http.HandlerFunc(h.page)})
	api.HandleHTTP("/console/login", map[string]http.Handler{http.MethodPost: http.HandlerFunc(h.login)})
	api.Handle("/console/logout", httpapi.Methods{http.MethodPost: h.logout})
	api.HandleHTTP("/console/payments/{id}", map[string]http.Handler{http.MethodGet: http.HandlerFunc(h.payment)})
	api.HandleHTTP("/console/app.js", map[string]http.Handler{http.MethodGet: asset("app.js", "text/javascript; charset=utf-8")})
	api.HandleHTTP("/console/app.css", map[string]http.Handler{http.MethodGet: asset("app.css", "text/css; charset=utf-8")})
	api.Handle("/console/api/snapshot", httpapi.Methods{http.MethodGet: h.snapshot})
	api.HandleHTTP("/console/api/stream", map[string]http.Handler{http.MethodGet: http.HandlerFunc(h.stream)})
	api.Handle("/console/api/rooms/{room}", httpapi.Methods{http.MethodPatch: h.patchRoom})
	api.Handle("/console/api/rooms/{room}/pause", httpapi.Methods{http.MethodPost: h.control(map[string]any{"paused": true})})
	api.Handle("/console/api/rooms/{room}/resume", httpapi.Methods{http.MethodPost: h.control(map[string]any{"paused": false})})
	api.Handle("/console/api/rooms/{room}/close", httpapi.Methods{http.MethodPost: h.control(map[string]any{"closed": true})})
	return &Server{cfg: cfg, api: api}, nil
}

// ServeHTTP serves the console.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.api.ServeHTTP(w, r) }

// Run serves on Config.Listener until ctx ends, then shuts the HTTP server
// down within cfg.HTTP.ShutdownTimeout (open event streams end with it).
func (s *Server) Run(ctx context.Context) error {
	if s.cfg.Listener == nil {
		return stampede.InvalidField("listener", "is required to run: where to serve")
	}
	return httpapi.Serve(ctx, s.cfg.Listener, s, s.cfg.HTTP, s.cfg.Logger)
}

// asset serves an embedded file.
func asset(name, contentType string) http.Handler {
	b := mustRead(name)
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", contentType)
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		_, _ = w.Write(b)
	})
}

// html answers template name with data.
func (h *handler) html(w http.ResponseWriter, r *http.Request, status int, name string, data any) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Security-Policy", contentSecurity)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Referrer-Policy", "same-origin") // "no-referrer" makes form posts say Origin: null
	w.WriteHeader(status)
	if err := templates.ExecuteTemplate(w, name, data); err != nil {
		h.log.Error("console: rendering a page", "page", name, "path", r.URL.Path, "err", err)
	}
}

// pageData is what page.html shows before the first update.
type pageData struct {
	CSRF     string
	Interval int64 // ms
}

func (h *handler) page(w http.ResponseWriter, r *http.Request) {
	v := h.s.session(r)
	if v == "" {
		h.html(w, r, http.StatusOK, "login.html", loginData{})
		return
	}
	h.html(w, r, http.StatusOK, "page.html", pageData{CSRF: h.s.csrf(v), Interval: h.cfg.Interval.Milliseconds()})
}

// loginData is what login.html shows.
type loginData struct{ Error string }

func (h *handler) login(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		h.html(w, r, http.StatusForbidden, "login.html", loginData{Error: "The login must come from the console's own page."})
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, h.cfg.MaxBody)
	if err := r.ParseForm(); err != nil {
		h.html(w, r, http.StatusBadRequest, "login.html", loginData{Error: "The form could not be read."})
		return
	}
	if err := h.throttle.Check(r, "console login"); err != nil {
		w.Header().Set("Retry-After", strconv.Itoa(int(stampede.As(err).RetryAfter.Seconds())))
		h.html(w, r, http.StatusTooManyRequests, "login.html", loginData{Error: "Too many wrong tokens from this address: wait a minute."})
		return
	}
	tok := r.PostForm.Get("token")
	if tok == "" {
		h.html(w, r, http.StatusBadRequest, "login.html", loginData{Error: "Type the admin token (field token)."})
		return
	}
	if !h.s.checkToken(tok) {
		h.throttle.Fail(r)
		h.log.Warn("console: a login with a wrong token", "remote", r.RemoteAddr)
		h.html(w, r, http.StatusUnauthorized, "login.html", loginData{Error: "That token is not the admin token."})
		return
	}
	http.SetCookie(w, h.s.cookie(h.s.issue()))
	http.Redirect(w, r, "/console", http.StatusSeeOther)
}

func (h *handler) logout(w http.ResponseWriter, r *http.Request) error {
	if err := h.s.authorizeControl(r); err != nil {
		return err
	}
	h.s.revoke(h.s.session(r))
	http.SetCookie(w, h.s.cookie(""))
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (h *handler) snapshot(w http.ResponseWriter, r *http.Request) error {
	if _, err := h.s.authorize(r); err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, h.g.snapshot(r.Context()))
	return nil
}

// stream sends a snapshot as a server-sent event ("snapshot") every
// Interval until the client leaves or the session ends ("logout").
func (h *handler) stream(w http.ResponseWriter, r *http.Request) {
	v, err := h.s.authorize(r)
	if err != nil {
		h.api.Fail(w, r, err)
		return
	}
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fmt.Fprintf(w, "retry: %d\n\n", h.cfg.Interval.Milliseconds())
	t := time.NewTicker(h.cfg.Interval)
	defer t.Stop()
	for {
		if !h.s.valid(v) {
			fmt.Fprint(w, "event: logout\ndata: {}\n\n")
			_ = rc.Flush()
			return
		}
		// The server's write timeout would end the stream: each event
		// gets its own deadline instead.
		_ = rc.SetWriteDeadline(time.Now().Add(h.cfg.Interval + 4*h.cfg.Timeout + 5*time.Second))
		b, err := json.Marshal(h.g.snapshot(r.Context()))
		if err != nil {
			h.log.Error("console: encoding a snapshot", "err", err)
			return
		}
		if _, err := fmt.Fprintf(w, "event: snapshot\ndata: %s\n\n", b); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-t.C:
		}
	}
}

// roomParam is the path's validated {room}.
func roomParam(r *http.Request) (string, error) {
	room := r.PathValue("room")
	return room, waitroom.ValidateRoom(room)
}

// control returns the handler of a control that sets fields of a room's
// configuration.
func (h *handler) control(fields map[string]any) httpapi.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		if err := h.s.authorizeControl(r); err != nil {
			return err
		}
		room, err := roomParam(r)
		if err != nil {
			return err
		}
		return h.apply(w, r, room, fields)
	}
}

// roomChange is PATCH /console/api/rooms/{room}'s body.
type roomChange struct {
	Capacity               *int `json:"capacity"`
	MaxAdmissionsPerMinute *int `json:"max_admissions_per_minute"`
}

func (h *handler) patchRoom(w http.ResponseWriter, r *http.Request) error {
	if err := h.s.authorizeControl(r); err != nil {
		return err
	}
	room, err := roomParam(r)
	if err != nil {
		return err
	}
	var b roomChange
	if err := httpapi.DecodeJSON(w, r, &b, h.cfg.MaxBody, `"capacity", "max_admissions_per_minute"`); err != nil {
		return err
	}
	fields := map[string]any{}
	if b.Capacity != nil {
		if *b.Capacity < 1 || *b.Capacity > 1_000_000 {
			return stampede.InvalidField("capacity", "must be between 1 and 1000000, got %d", *b.Capacity)
		}
		fields["capacity"] = *b.Capacity
	}
	if b.MaxAdmissionsPerMinute != nil {
		if *b.MaxAdmissionsPerMinute < 0 || *b.MaxAdmissionsPerMinute > 60_000_000 {
			return stampede.InvalidField("max_admissions_per_minute", "must be between 0 (no limit) and 60000000, got %d", *b.MaxAdmissionsPerMinute)
		}
		fields["max_admissions_per_minute"] = *b.MaxAdmissionsPerMinute
	}
	if len(fields) == 0 {
		return stampede.InvalidField("capacity", "name capacity or max_admissions_per_minute (or both)")
	}
	return h.apply(w, r, room, fields)
}

// apply sends fields to the waiting room's PATCH /v1/rooms/{room} and
// answers the room as the page shows it. The waiting room's refusals pass
// through with their status and field; a waiting room that does not
// answer is 503.
func (h *handler) apply(w http.ResponseWriter, r *http.Request, room string, fields map[string]any) error {
	path := "/v1/rooms/" + url.PathEscape(room)
	if err := h.call.do(r.Context(), h.cfg.Waitroom, http.MethodPatch, path, fields, nil); err != nil {
		return h.upstream(err)
	}
	var a roomAnswer
	if err := h.call.do(r.Context(), h.cfg.Waitroom, http.MethodGet, path, nil, &a); err != nil {
		return h.upstream(err)
	}
	h.log.Info("console: room changed", "room", room, "fields", fields, "remote", r.RemoteAddr)
	httpapi.WriteJSON(w, http.StatusOK, roomOf(room, a))
	return nil
}

// upstream turns a part's failure into the console's answer: its 4xx as
// they are (a room that does not exist, a field out of range), anything
// else 503. The console's own credentials being refused is a 503 too:
// the operator did nothing wrong.
func (h *handler) upstream(err error) error {
	e, ok := errors.AsType[*stampede.Error](err)
	if ok && e.Status >= 400 && e.Status < 500 && e.Status != http.StatusUnauthorized && e.Status != http.StatusForbidden {
		return &stampede.Error{Code: e.Code, Field: e.Field, Message: e.Message, Extra: e.Extra}
	}
	return &stampede.Error{Code: stampede.Unavailable, Message: "the waiting room is unavailable (" + partError(err) + "); nothing was changed", Err: err}
}

// paymentData is what payment.html shows.
type paymentData struct {
	ID      string
	Error   string
	Payment *paymentView
}

// paymentView is pay's admin view of one payment.
type paymentView struct {
	ID           string `json:"id"`
	MerchantID   string `json:"merchant_id"`
	OrderID      string `json:"order_id"`
	Amount       int64  `json:"amount"`
	Currency     string `json:"currency"`
	Status       string `json:"status"`
	ManualReview bool   `json:"manual_review"`
	ReviewReason string `json:"review_reason"`
	CreatedAt    string `json:"created_at"`
	UpdatedAt    string `json:"updated_at"`
	History      []struct {
		From   string `json:"from"`
		To     string `json:"to"`
		Code   string `json:"code"`
		Reason string `json:"reason"`
		At     string `json:"at"`
	} `json:"history"`
}

// payment shows one payment's history, read from pay's admin API.
func (h *handler) payment(w http.ResponseWriter, r *http.Request) {
	if h.s.session(r) == "" {
		http.Redirect(w, r, "/console", http.StatusSeeOther)
		return
	}
	id := r.PathValue("id")
	d := paymentData{ID: id}
	if !h.cfg.Pay.configured() {
		d.Error = "The console was not given pay's address (--pay)."
		h.html(w, r, http.StatusOK, "payment.html", d)
		return
	}
	var p paymentView
	err := h.call.do(r.Context(), h.cfg.Pay, http.MethodGet, "/v1/admin/payments/"+url.PathEscape(id), nil, &p)
	status := http.StatusOK
	switch e, _ := errors.AsType[*stampede.Error](err); {
	case err == nil:
		d.Payment = &p
	case e != nil && (e.Status == http.StatusNotFound || e.Status == http.StatusBadRequest) && e.Code != "":
		status, d.Error = e.Status, "Pay has no payment "+id+"."
	default:
		status, d.Error = http.StatusServiceUnavailable, "Pay is unavailable ("+partError(err)+")."
	}
	h.html(w, r, status, "payment.html", d)
}
