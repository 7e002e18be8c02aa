package api

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/internal/httpapi"
	"github.com/stampede-lab/stampede/waitroom"
)

// HandlerConfig configures the HTTP handler made by NewHandler.
type HandlerConfig struct {
	// AdminToken authorizes room configuration ("Authorization: Bearer
	// <AdminToken>"). Required, at least 16 bytes; compared in constant
	// time.
	AdminToken string
	// MetricsToken, when set (at least 16 bytes), also reads /metrics,
	// and nothing else: the token to give a Prometheus that should not be
	// able to change rooms. /metrics names every room, announced or not,
	// so it answers only the admin token or this one; /healthz and
	// /readyz stay open.
	MetricsToken string
	// TicketTTL is how long a ticket token stays valid.
	TicketTTL time.Duration
	// MaxBody is the largest request body accepted, in bytes.
	MaxBody int64
	// Logger receives an Info line per request and an Error line per
	// answer with a 5xx status (package httpapi). Nil means
	// slog.Default().
	Logger *slog.Logger
	// JoinLimit limits joins per client address; its zero Rate turns the
	// limit off.
	JoinLimit JoinLimitConfig
	// PoW configures the proof-of-work challenges of rooms that ask for
	// one (RoomConfig.PoWDifficulty).
	PoW waitroom.PoWConfig
	// OnAdmit, when set, is a same-origin path the waiting page POSTs to
	// once its holder is admitted, then follows the answer's redirect
	// (the gate's hook: it sets an admission cookie). Empty: the page
	// just says it is your turn.
	OnAdmit string
	// Now is the clock of the join limit and the challenges; nil means
	// time.Now.
	Now func() time.Time
	// SiteSecret, when set (at least 32 bytes), enables trusted joins: a
	// user_id signed by the site with user_sig and user_expires (see
	// SignUser).
	SiteSecret []byte
	// AllowUnsignedUsers accepts joins with a bare user_id. Off by
	// default: anyone could then join as anyone (though never take over
	// a live ticket).
	AllowUnsignedUsers bool
	// CheckoutKey authorizes POST /v1/rooms/{room}/admissions/check and
	// /done ("Authorization: Bearer <CheckoutKey>"): empty turns them
	// off, else at least 16 bytes; compared in constant time.
	CheckoutKey string
	// Admissions signs the admission tokens (JWTs) and serves their
	// public keys; nil means keys derived from the ticket signer's secret
	// with DefaultKeyEpoch.
	Admissions *waitroom.AdmissionSigner
}

// minAdminTokenLen is the shortest admin token accepted.
const minAdminTokenLen = 16

// DefaultHandlerConfig returns 24-hour ticket tokens, a 4096-byte body
// limit, slog.Default(), no join limit (the command sets one) and
// DefaultPoWConfig. AdminToken is empty and must be set.
func DefaultHandlerConfig() HandlerConfig {
	return HandlerConfig{TicketTTL: 24 * time.Hour, MaxBody: 4096, Logger: slog.Default(),
		JoinLimit: JoinLimitConfig{MaxClients: DefaultJoinLimitConfig().MaxClients}, PoW: waitroom.DefaultPoWConfig()}
}

// Validate reports every unusable field by its snake_case name, the
// words of the `serve waitroom` flag that sets it (admin_token,
// checkout_key, join_rate, ...).
func (c HandlerConfig) Validate() error {
	var f stampede.Fields
	if len(c.AdminToken) < minAdminTokenLen {
		f.Add("admin_token", "must be at least %d bytes, got %d", minAdminTokenLen, len(c.AdminToken))
	}
	if c.TicketTTL < time.Second {
		f.Add("ticket_ttl", "must be at least 1s, got %s", c.TicketTTL)
	}
	if c.MaxBody < 64 {
		f.Add("max_body", "must be at least 64 bytes, got %d", c.MaxBody)
	}
	if len(c.SiteSecret) > 0 && len(c.SiteSecret) < waitroom.MinSecretLen {
		f.Add("site_secret", "must be empty or at least %d bytes, got %d", waitroom.MinSecretLen, len(c.SiteSecret))
	}
	if c.MetricsToken != "" && len(c.MetricsToken) < minAdminTokenLen {
		f.Add("metrics_token", "must be empty or at least %d bytes, got %d", minAdminTokenLen, len(c.MetricsToken))
	}
	if c.CheckoutKey != "" && len(c.CheckoutKey) < minAdminTokenLen {
		f.Add("checkout_key", "must be empty or at least %d bytes, got %d", minAdminTokenLen, len(c.CheckoutKey))
	}
	if c.OnAdmit != "" && (!strings.HasPrefix(c.OnAdmit, "/") || strings.HasPrefix(c.OnAdmit, "//") ||
		strings.ContainsAny(c.OnAdmit, "\\\"'<> \t\r\n")) {
		f.Add("on_admit", "must be a same-origin path starting with one '/', got %q", c.OnAdmit)
	}
	f.Check("", c.JoinLimit.Validate())
	f.Check("pow", c.PoW.Validate())
	return f.Err()
}

// handler serves the waiting room's HTTP API and its waiting page, on an
// httpapi.API that adds /healthz, /readyz, /metrics and /openapi.json.
type handler struct {
	svc       *waitroom.Service
	signer    *waitroom.Signer
	cfg       HandlerConfig
	api       *httpapi.API
	adminHash [sha256.Size]byte
	// metricsHash is the SHA-256 of MetricsToken; zero when it is empty.
	metricsHash [sha256.Size]byte
	// adminThrottle limits wrong admin tokens per client address.
	adminThrottle *httpapi.FailureThrottle
	limiter       *joinLimiter // nil: no join limit
	prefixLimiter *joinLimiter // per network prefix; nil: none
	pow           *waitroom.PoWIssuer
	// checkoutHash is the SHA-256 of CheckoutKey; zero when it is empty.
	checkoutHash [sha256.Size]byte
	admissions   *waitroom.AdmissionSigner
	// tickets remembers the ticket tokens verified already.
	tickets *ticketCache
}

// NewHandler returns the waiting room's HTTP handler:
//
//	GET    /v1/rooms                        every room with its configuration (admin token)
//	PUT    /v1/rooms/{room}                 create a room or replace its whole configuration (admin token)
//	PATCH  /v1/rooms/{room}                 change the named configuration fields (admin token)
//	DELETE /v1/rooms/{room}                 remove the room and all its data (admin token)
//	GET    /v1/rooms/{room}                 the room's counters and configuration
//	GET    /v1/rooms/{room}/challenge       a proof-of-work challenge, when the room asks for one
//	POST   /v1/rooms/{room}/tickets         join (anonymous, trusted or ticket token; see identity.go; with
//	                                        "challenge" and "solution" when the room asks for proof of work) → ticket and ticket_token
//	GET    /v1/rooms/{room}/tickets/{user}  the ticket (ticket token); admission_token (a JWT) once admitted
//	DELETE /v1/rooms/{room}/tickets/{user}  leave the queue or release the slot (ticket token)
//	POST   /v1/rooms/{room}/admissions/check  is an admission token's slot still held? (checkout key)
//	POST   /v1/rooms/{room}/admissions/done   release an admission token's slot (checkout key)
//	GET    /.well-known/jwks.json           the admission tokens' public keys
//	GET    /rooms/{room}                    the waiting page (HTML)
//	GET    /healthz                         {"status":"ok"}: the process is alive
//	GET    /readyz                          200 when the store answers a ping within 1 s, else 503
//	GET    /metrics                         Prometheus metrics from reg (admin or metrics token)
//	GET    /openapi.json                    the OpenAPI description (OpenAPI)
//
// Every API answer is JSON; errors are RFC 9457 application/problem+json
// with the status of their code (package httpapi). signer signs ticket
// and admission tokens.
//
// reg is served on /metrics, to the admin token or the metrics token
// only (the room gauges name every room, unannounced ones too), and receives the HTTP request metrics
// (http_requests_total, http_request_duration_seconds) and a collector
// that reads every room's gauges from the store at scrape time; nil means
// a new registry holding only those. A registry serves at most one
// handler. To expose the admission counters too, register NewMetrics on
// the same registry and set ServiceConfig.OnPass to its OnPass (New
// does all of this).
func NewHandler(svc *waitroom.Service, signer *waitroom.Signer, cfg HandlerConfig, reg *prometheus.Registry) (http.Handler, error) {
	if svc == nil {
		return nil, fieldError("svc", "must not be nil")
	}
	if err := signer.Ready(); err != nil {
		return nil, fieldError("signer", "must be made by NewSigner")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	if err := reg.Register(waitroom.NewRoomCollector(svc, cfg.Logger)); err != nil {
		return nil, fmt.Errorf("waitroom: registering the room gauges: %w (use one registry per handler)", err)
	}
	var h *handler // set below, before anything is served
	api, err := httpapi.New(httpapi.Config{
		Name: "waitroom", Logger: cfg.Logger, Registry: reg, MapError: mapError, Spec: OpenAPI().JSON,
		MetricsAuth: func(r *http.Request) error { return h.authMetrics(r) },
	})
	if err != nil {
		return nil, err
	}
	api.AddCheck(httpapi.Check{Name: "redis", Ping: svc.Ping})
	if cfg.Admissions == nil {
		if cfg.Admissions, err = waitroom.NewAdmissionSigner(waitroom.KeySpec{Secret: signer.Secret(), Epoch: waitroom.DefaultKeyEpoch}, nil, signer.Now); err != nil {
			return nil, err
		}
	}
	h = &handler{svc: svc, signer: signer, cfg: cfg, api: api, adminHash: sha256.Sum256([]byte(cfg.AdminToken)), admissions: cfg.Admissions,
		tickets:       newTicketCache(),
		adminThrottle: httpapi.NewFailureThrottle(AdminFailures, time.Minute, nil),
		pow:           waitroom.NewPoWIssuer(signer.Secret(), cfg.PoW, cfg.Now)}
	if cfg.MetricsToken != "" {
		h.metricsHash = sha256.Sum256([]byte(cfg.MetricsToken))
	}
	if cfg.CheckoutKey != "" {
		h.checkoutHash = sha256.Sum256([]byte(cfg.CheckoutKey))
	}
	if jl := cfg.JoinLimit; jl.Rate > 0 {
		h.limiter = newJoinLimiter(jl.Rate, jl.Burst, jl.MaxClients, cfg.Now)
		h.prefixLimiter = newJoinLimiter(jl.PrefixRate, jl.PrefixBurst, jl.MaxClients, cfg.Now)
	}

	api.Handle("/v1/rooms", httpapi.Methods{
		http.MethodGet: h.listRooms,
	})
	api.Handle("/v1/rooms/{room}", httpapi.Methods{
		http.MethodGet:    h.getRoom,
		http.MethodPut:    h.putRoom,
		http.MethodPatch:  h.patchRoom,
		http.MethodDelete: h.deleteRoom,
	})
	api.Handle("/v1/rooms/{room}/log", httpapi.Methods{
		http.MethodGet: h.getLog,
	})
	api.Handle("/v1/rooms/{room}/challenge", httpapi.Methods{
		http.MethodGet: h.challenge,
	})
	api.Handle("/v1/rooms/{room}/tickets", httpapi.Methods{
		http.MethodPost: h.join,
	})
	api.Handle("/v1/rooms/{room}/tickets/{user}", httpapi.Methods{
		http.MethodGet:    h.getTicket,
		http.MethodDelete: h.leave,
	})
	api.Handle("/v1/rooms/{room}/admissions/check", httpapi.Methods{
		http.MethodPost: h.checkAdmission,
	})
	api.Handle("/v1/rooms/{room}/admissions/done", httpapi.Methods{
		http.MethodPost: h.doneAdmission,
	})
	api.Handle("/.well-known/jwks.json", httpapi.Methods{
		http.MethodGet: h.serveJWKS,
	})
	api.HandleHTTP("/rooms/{room}", map[string]http.Handler{
		http.MethodGet: http.HandlerFunc(h.page),
	})
	return api, nil
}

// writeJSON answers v as JSON with status.
func writeJSON(w http.ResponseWriter, status int, v any) { httpapi.WriteJSON(w, status, v) }

// decodeJSON reads a request body holding exactly one JSON object into dst
// strictly (see httpapi.DecodeJSON).
func (h *handler) decodeJSON(w http.ResponseWriter, r *http.Request, dst any, allowed string) error {
	return httpapi.DecodeJSON(w, r, dst, h.cfg.MaxBody, allowed)
}

// roomParam returns the validated {room} of the path.
func roomParam(r *http.Request) (string, error) {
	room := r.PathValue("room")
	return room, waitroom.ValidateRoom(room)
}

// ticketParams returns the validated {room} and {user} of the path.
func ticketParams(r *http.Request) (room, user string, err error) {
	if room, err = roomParam(r); err != nil {
		return "", "", err
	}
	user = r.PathValue("user")
	return room, user, waitroom.ValidateUser(user)
}

// bearer returns the request's bearer token, or an unauthorized error
// naming what is expected.
func bearer(r *http.Request, what string) (string, error) {
	h := r.Header.Get("Authorization")
	scheme, token, ok := strings.Cut(h, " ")
	if h == "" || !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
		return "", &waitroom.Error{Code: waitroom.CodeUnauthorized, Message: fmt.Sprintf("missing Authorization: Bearer <%s>", what)}
	}
	return strings.TrimSpace(token), nil
}

// authAdmin checks the admin token in constant time (hashing first, so that
// not even the length leaks).
func (h *handler) authAdmin(r *http.Request) error {
	token, err := bearer(r, "admin token")
	if err != nil {
		return err
	}
	if err := h.adminThrottle.Check(r, "admin token"); err != nil {
		return err
	}
	got := sha256.Sum256([]byte(token))
	if subtle.ConstantTimeCompare(got[:], h.adminHash[:]) != 1 {
		h.adminThrottle.Fail(r)
		return &waitroom.Error{Code: waitroom.CodeUnauthorized, Message: "admin token invalid"}
	}
	return nil
}

// authMetrics lets the admin token or the metrics token read /metrics;
// wrong tokens count against the same per-address throttle as the admin
// token's.
func (h *handler) authMetrics(r *http.Request) error {
	token, err := bearer(r, "admin token or metrics token")
	if err != nil {
		return err
	}
	if err := h.adminThrottle.Check(r, "admin token"); err != nil {
		return err
	}
	got := sha256.Sum256([]byte(token))
	admin := subtle.ConstantTimeCompare(got[:], h.adminHash[:])
	metrics := 0
	if h.cfg.MetricsToken != "" {
		metrics = subtle.ConstantTimeCompare(got[:], h.metricsHash[:])
	}
	if admin|metrics != 1 {
		h.adminThrottle.Fail(r)
		return &waitroom.Error{Code: waitroom.CodeUnauthorized, Message: "the metrics need the admin token or the metrics token"}
	}
	return nil
}

// AdminFailures is how many wrong admin tokens one client address (an
// IPv6 /64) may send in a minute; past that every admin call from it
// answers 429 with Retry-After until the minute ends.
const AdminFailures = 10

// authTicket checks that the request carries a valid ticket token for
// exactly room and user, and returns the join it names (its generation).
func (h *handler) authTicket(r *http.Request, room, user string) (generation int64, err error) {
	c, err := h.ticketClaims(r, room, user)
	return c.Generation, err
}

// ticketClaims verifies the request's ticket token for user in room and
// returns its claims.
func (h *handler) ticketClaims(r *http.Request, room, user string) (waitroom.Claims, error) {
	token, err := bearer(r, "ticket_token")
	if err != nil {
		return waitroom.Claims{}, err
	}
	c, err := h.tickets.verify(h.signer, token)
	if err != nil {
		return waitroom.Claims{}, err
	}
	if c.Room != room || c.User != user {
		return waitroom.Claims{}, &waitroom.Error{Code: waitroom.CodeForbidden, Message: "the ticket token is for another user or room"}
	}
	return c, nil
}

// errEarlierJoin answers a ticket token of a join that is not the user's
// current one: it reads, releases and proves nothing of a later join.
func errEarlierJoin() error {
	return &waitroom.Error{Code: waitroom.CodeForbidden, Field: "Authorization",
		Message: "the ticket token is for an earlier join of this user, which has ended; it proves nothing about a later one"}
}

// ownTicket reads user's ticket in room for the bearer of a token of the
// join generation: errEarlierJoin when the user's ticket is of another
// join.
func (h *handler) ownTicket(r *http.Request, room, user string, generation int64) (waitroom.Ticket, error) {
	t, err := h.svc.Ticket(r.Context(), room, user)
	if err != nil {
		return t, err
	}
	if t.Generation != generation {
		return waitroom.Ticket{}, errEarlierJoin()
	}
	return t, nil
}

// roomConfigJSON is a room's configuration as the API shows it: the
// answer of PUT and PATCH /v1/rooms/{room}, and part of GET's.
type roomConfigJSON struct {
	Room                   string  `json:"room,omitempty"`
	Capacity               int     `json:"capacity"`
	LeaseSeconds           float64 `json:"lease_seconds"`
	AdmitIntervalMS        int64   `json:"admit_interval_ms"`
	MaxAdmissionsPerMinute int     `json:"max_admissions_per_minute"`
	// OpensAt is RFC 3339, or null for a room open from the start.
	OpensAt             *string `json:"opens_at"`
	Paused              bool    `json:"paused"`
	Closed              bool    `json:"closed"`
	ClosedMessage       string  `json:"closed_message"`
	AbandonAfterSeconds float64 `json:"abandon_after_seconds"`
	ArrivalSeconds      float64 `json:"arrival_seconds"`
	RetentionSeconds    float64 `json:"retention_seconds"`
	PoWDifficulty       int     `json:"pow_difficulty"`
	// Template is null when the room has none.
	Template *waitroom.RoomTemplate `json:"template"`
	// QueueShards: see RoomConfig.QueueShards.
	QueueShards int `json:"queue_shards"`
	// MaxWaiting and MaxJoinsPerSecond: see RoomConfig.
	MaxWaiting        int `json:"max_waiting"`
	MaxJoinsPerSecond int `json:"max_joins_per_second"`
	// ClosesAt is RFC 3339, or null for a room that closes only when told.
	ClosesAt *string `json:"closes_at"`
	// Schedule is the room's windows ([] for none).
	Schedule   []windowJSON `json:"schedule"`
	InviteOnly bool         `json:"invite_only"`
	// InviteKey is the Ed25519 public key of the room's invites, or "".
	InviteKey string `json:"invite_key"`
}

// windowJSON is a window of a room's schedule.
type windowJSON struct {
	Start string `json:"start"`
	// End is null for a window that runs until the next one's start (or
	// the room's closes_at).
	End                    *string `json:"end"`
	Capacity               int     `json:"capacity"`
	MaxAdmissionsPerMinute int     `json:"max_admissions_per_minute"`
	AdmitIntervalMS        int64   `json:"admit_interval_ms"`
	InviteOnly             bool    `json:"invite_only"`
}

// rfc3339 formats t, or nil for the zero time.
func rfc3339(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := t.UTC().Format(time.RFC3339Nano)
	return &s
}

// configView shows cfg.
func configView(room string, cfg waitroom.RoomConfig) roomConfigJSON {
	v := roomConfigJSON{
		Room: room, Capacity: cfg.Capacity, LeaseSeconds: cfg.Lease.Seconds(),
		AdmitIntervalMS: cfg.AdmitInterval.Milliseconds(), MaxAdmissionsPerMinute: cfg.MaxAdmissionsPerMinute,
		Paused: cfg.Paused, Closed: cfg.Closed, ClosedMessage: cfg.ClosedMessage,
		AbandonAfterSeconds: cfg.AbandonAfter.Seconds(), ArrivalSeconds: cfg.Arrival.Seconds(),
		RetentionSeconds: cfg.Retention.Seconds(), PoWDifficulty: cfg.PoWDifficulty, QueueShards: cfg.QueueShards,
		MaxWaiting: cfg.MaxWaiting, MaxJoinsPerSecond: cfg.MaxJoinsPerSecond,
	}
	if !cfg.OpensAt.IsZero() {
		at := cfg.OpensAt.UTC().Format(time.RFC3339Nano)
		v.OpensAt = &at
	}
	if !cfg.Template.IsZero() {
		t := cfg.Template
		v.Template = &t
	}
	v.ClosesAt, v.InviteOnly, v.InviteKey = rfc3339(cfg.ClosesAt), cfg.InviteOnly, cfg.InviteKey
	v.Schedule = make([]windowJSON, len(cfg.Schedule))
	for i, w := range cfg.Schedule {
		v.Schedule[i] = windowJSON{Start: *rfc3339(w.Start), End: rfc3339(w.End), Capacity: w.Capacity,
			MaxAdmissionsPerMinute: w.MaxAdmissionsPerMinute, AdmitIntervalMS: w.AdmitInterval.Milliseconds(), InviteOnly: w.InviteOnly}
	}
	return v
}

// windowFields lists a window's members for error messages.
const windowFields = `"start", "end", "capacity", "max_admissions_per_minute", "admit_interval_ms", "invite_only"`

// decodeSchedule reads a schedule: null or an array of windows, each an
// object of windowFields. Every bad member of every window is reported at
// once, by its path ("schedule[1].capacity"); the ranges and the order are
// RoomConfig.Validate's.
func decodeSchedule(r json.RawMessage) ([]waitroom.Window, error) {
	if string(r) == "null" {
		return nil, nil
	}
	var raw []json.RawMessage
	if json.Unmarshal(r, &raw) != nil {
		return nil, fieldError("schedule", "must be an array of windows or null, got %s", truncate(r))
	}
	if len(raw) > waitroom.MaxWindows {
		return nil, fieldError("schedule", "must hold at most %d windows, got %d", waitroom.MaxWindows, len(raw))
	}
	var f stampede.Fields
	out := make([]waitroom.Window, len(raw))
	for i, wr := range raw {
		p := fmt.Sprintf("schedule[%d]", i)
		var m map[string]json.RawMessage
		if json.Unmarshal(wr, &m) != nil || m == nil {
			f.Add(p, "must be an object of %s", windowFields)
			continue
		}
		w := &out[i]
		tm := func(name string, required bool) time.Time {
			v, ok := m[name]
			delete(m, name)
			if !ok || string(v) == "null" {
				if required {
					f.Add(p+"."+name, "is required: an RFC 3339 time")
				}
				return time.Time{}
			}
			var at time.Time
			if json.Unmarshal(v, &at) != nil {
				f.Add(p+"."+name, "must be an RFC 3339 time, got %s", truncate(v))
			}
			return at.UTC()
		}
		num := func(name string, required bool) int64 {
			v, ok := m[name]
			delete(m, name)
			if !ok {
				if required {
					f.Add(p+"."+name, "is required: a whole number")
				}
				return 0
			}
			var n int64
			if json.Unmarshal(v, &n) != nil || string(v) == "null" {
				f.Add(p+"."+name, "must be a whole number, got %s", truncate(v))
			}
			return n
		}
		w.Start, w.End = tm("start", true), tm("end", false)
		w.Capacity = int(clampInt(num("capacity", true)))
		w.MaxAdmissionsPerMinute = int(clampInt(num("max_admissions_per_minute", false)))
		w.AdmitInterval = time.Duration(clampInt(num("admit_interval_ms", false))) * time.Millisecond
		if v, ok := m["invite_only"]; ok {
			delete(m, "invite_only")
			if json.Unmarshal(v, &w.InviteOnly) != nil || string(v) == "null" {
				f.Add(p+".invite_only", "must be true or false, got %s", truncate(v))
			}
		}
		for k := range m {
			f.Add(p+"."+k, "is not a window's member; a window has %s", windowFields)
		}
	}
	return out, f.Err()
}

// clampInt keeps n within ±1e9, so that a huge number stays out of range
// (and reported as such) instead of wrapping.
func clampInt(n int64) int64 { return min(max(n, -1_000_000_000), 1_000_000_000) }

// truncate shows at most 40 bytes of a raw value in a message.
func truncate(r json.RawMessage) string {
	if len(r) > 40 {
		return string(r[:40]) + "…"
	}
	return string(r)
}

// roomConfigBody is the body of PUT and PATCH /v1/rooms/{room}: every
// field raw, so that an absent field (empty) differs from a null one.
type roomConfigBody struct {
	Capacity               json.RawMessage `json:"capacity"`
	LeaseSeconds           json.RawMessage `json:"lease_seconds"`
	AdmitIntervalMS        json.RawMessage `json:"admit_interval_ms"`
	MaxAdmissionsPerMinute json.RawMessage `json:"max_admissions_per_minute"`
	OpensAt                json.RawMessage `json:"opens_at"`
	Paused                 json.RawMessage `json:"paused"`
	Closed                 json.RawMessage `json:"closed"`
	ClosedMessage          json.RawMessage `json:"closed_message"`
	AbandonAfterSeconds    json.RawMessage `json:"abandon_after_seconds"`
	ArrivalSeconds         json.RawMessage `json:"arrival_seconds"`
	RetentionSeconds       json.RawMessage `json:"retention_seconds"`
	PoWDifficulty          json.RawMessage `json:"pow_difficulty"`
	Template               json.RawMessage `json:"template"`
	MaxWaiting             json.RawMessage `json:"max_waiting"`
	MaxJoinsPerSecond      json.RawMessage `json:"max_joins_per_second"`
	ClosesAt               json.RawMessage `json:"closes_at"`
	Schedule               json.RawMessage `json:"schedule"`
	InviteOnly             json.RawMessage `json:"invite_only"`
	InviteKey              json.RawMessage `json:"invite_key"`
	// QueueShards is optional, and fixed once the room exists.
	QueueShards json.RawMessage `json:"queue_shards"`
}

// raw lists the body's fields by JSON name, in RoomConfigFields order.
func (b *roomConfigBody) raw() []json.RawMessage {
	return []json.RawMessage{b.Capacity, b.LeaseSeconds, b.AdmitIntervalMS, b.MaxAdmissionsPerMinute, b.OpensAt,
		b.Paused, b.Closed, b.ClosedMessage, b.AbandonAfterSeconds, b.ArrivalSeconds, b.RetentionSeconds,
		b.PoWDifficulty, b.Template, b.MaxWaiting, b.MaxJoinsPerSecond, b.ClosesAt, b.Schedule, b.InviteOnly, b.InviteKey}
}

// present returns the JSON names of the fields the body sets.
func (b *roomConfigBody) present() []string {
	var out []string
	for i, r := range b.raw() {
		if len(r) > 0 {
			out = append(out, waitroom.RoomConfigFields[i])
		}
	}
	if len(b.QueueShards) > 0 {
		out = append(out, "queue_shards")
	}
	if len(b.LeaseSeconds) > 0 && len(b.ArrivalSeconds) == 0 {
		// A shorter lease may lower the arrival window (see applyAs).
		out = append(out, "arrival_seconds")
	}
	return out
}

// seconds parses a number of seconds within [lo, hi] (checked before the
// conversion: a huge float does not convert to a Duration).
func seconds(field string, r json.RawMessage, lo, hi float64) (time.Duration, error) {
	var v float64
	if err := json.Unmarshal(r, &v); err != nil || string(r) == "null" {
		return 0, fieldError(field, "must be a number of seconds, got %s", r)
	}
	if !(v == 0 && lo == 0 || v >= lo && v <= hi) {
		return 0, fieldError(field, "must be between %v and %v, got %v", lo, hi, v)
	}
	return time.Duration(v * float64(time.Second)), nil
}

// merge is apply for PATCH: an object (the template) is merged into the
// current one as RFC 7396 says (a member set to null is removed, others
// replaced, the rest kept), not replaced.
func (b *roomConfigBody) merge(cfg *waitroom.RoomConfig) error { return b.applyAs(cfg, true) }

// apply sets the fields the body names on cfg, checking each one's type
// and range; an object replaces the current one (PUT).
func (b *roomConfigBody) apply(cfg *waitroom.RoomConfig) error { return b.applyAs(cfg, false) }

// applyAs is apply, merging objects when merge is set.
func (b *roomConfigBody) applyAs(cfg *waitroom.RoomConfig, merge bool) error {
	integer := func(field string, r json.RawMessage, lo, hi int64) (int64, error) {
		var v int64
		if err := json.Unmarshal(r, &v); err != nil || string(r) == "null" {
			return 0, fieldError(field, "must be a whole number, got %s", r)
		}
		if v < lo || v > hi {
			return 0, fieldError(field, "must be between %d and %d, got %d", lo, hi, v)
		}
		return v, nil
	}
	boolean := func(field string, r json.RawMessage) (bool, error) {
		var v bool
		if err := json.Unmarshal(r, &v); err != nil || string(r) == "null" {
			return false, fieldError(field, "must be true or false, got %s", r)
		}
		return v, nil
	}
	var err error
	if r := b.Capacity; len(r) > 0 {
		var n int64
		n, err = integer("capacity", r, 1, 1_000_000)
		cfg.Capacity = int(n)
	}
	if r := b.LeaseSeconds; err == nil && len(r) > 0 {
		cfg.Lease, err = seconds("lease_seconds", r, 1, 86400)
	}
	if r := b.AdmitIntervalMS; err == nil && len(r) > 0 {
		var n int64
		n, err = integer("admit_interval_ms", r, 10, 60000)
		cfg.AdmitInterval = time.Duration(n) * time.Millisecond
	}
	if r := b.MaxAdmissionsPerMinute; err == nil && len(r) > 0 {
		var n int64
		n, err = integer("max_admissions_per_minute", r, 0, 60_000_000)
		cfg.MaxAdmissionsPerMinute = int(n)
	}
	if r := b.OpensAt; err == nil && len(r) > 0 {
		cfg.OpensAt = time.Time{}
		if string(r) != "null" {
			var at time.Time
			if json.Unmarshal(r, &at) != nil {
				return fieldError("opens_at", "must be an RFC 3339 time or null, got %s", r)
			}
			cfg.OpensAt = at.UTC()
		}
	}
	if r := b.ClosesAt; err == nil && len(r) > 0 {
		cfg.ClosesAt = time.Time{}
		if string(r) != "null" {
			var at time.Time
			if json.Unmarshal(r, &at) != nil {
				return fieldError("closes_at", "must be an RFC 3339 time or null, got %s", truncate(r))
			}
			cfg.ClosesAt = at.UTC()
		}
	}
	if r := b.Schedule; err == nil && len(r) > 0 {
		cfg.Schedule, err = decodeSchedule(r)
	}
	if r := b.InviteOnly; err == nil && len(r) > 0 {
		cfg.InviteOnly, err = boolean("invite_only", r)
	}
	if r := b.InviteKey; err == nil && len(r) > 0 {
		cfg.InviteKey = ""
		if string(r) != "null" && json.Unmarshal(r, &cfg.InviteKey) != nil {
			return fieldError("invite_key", "must be a string (an Ed25519 public key, base64url) or null, got %s", truncate(r))
		}
	}
	if r := b.Paused; err == nil && len(r) > 0 {
		cfg.Paused, err = boolean("paused", r)
	}
	if r := b.Closed; err == nil && len(r) > 0 {
		cfg.Closed, err = boolean("closed", r)
	}
	if r := b.ClosedMessage; err == nil && len(r) > 0 {
		if json.Unmarshal(r, &cfg.ClosedMessage) != nil || string(r) == "null" {
			return fieldError("closed_message", "must be a string, got %s", r)
		}
	}
	if r := b.AbandonAfterSeconds; err == nil && len(r) > 0 {
		cfg.AbandonAfter, err = seconds("abandon_after_seconds", r, 0, 86400)
		if err == nil && cfg.AbandonAfter != 0 && cfg.AbandonAfter < time.Second {
			err = fieldError("abandon_after_seconds", "must be 0 (off) or between 1 and 86400, got %v", cfg.AbandonAfter.Seconds())
		}
	}
	if r := b.ArrivalSeconds; err == nil && len(r) > 0 {
		cfg.Arrival, err = seconds("arrival_seconds", r, 0, 86400)
	}
	if r := b.RetentionSeconds; err == nil && len(r) > 0 {
		cfg.Retention, err = seconds("retention_seconds", r, 1, 30*86400)
	}
	if r := b.PoWDifficulty; err == nil && len(r) > 0 {
		var n int64
		n, err = integer("pow_difficulty", r, 0, waitroom.MaxPoWDifficulty)
		cfg.PoWDifficulty = int(n)
	}
	if r := b.MaxWaiting; err == nil && len(r) > 0 {
		var n int64
		n, err = integer("max_waiting", r, 0, 100_000_000)
		cfg.MaxWaiting = int(n)
	}
	if r := b.MaxJoinsPerSecond; err == nil && len(r) > 0 {
		var n int64
		n, err = integer("max_joins_per_second", r, 0, 1_000_000)
		cfg.MaxJoinsPerSecond = int(n)
	}
	if r := b.QueueShards; err == nil && len(r) > 0 {
		var n int64
		n, err = integer("queue_shards", r, 0, waitroom.MaxQueueShards)
		cfg.QueueShards = int(n)
	}
	if r := b.Template; err == nil && len(r) > 0 {
		// null and {} both mean no template.
		var t waitroom.RoomTemplate
		if merge && string(r) != "null" {
			r = mergeObject(cfg.Template, r)
		}
		if string(r) != "null" {
			dec := json.NewDecoder(bytes.NewReader(r))
			dec.DisallowUnknownFields()
			if derr := dec.Decode(&t); derr != nil {
				// The decoder's own words name Go types: only an unknown
				// field is passed on.
				extra := ""
				if f, ok := strings.CutPrefix(derr.Error(), "json: unknown field "); ok {
					extra = "; unknown field " + f
				}
				return fieldError("template", "must be an object of title, logo_url, primary_color, background_color, text_ko and text_en, or null%s", extra)
			}
		}
		if err = t.Validate(); err == nil {
			cfg.Template = t
		}
	}
	if err == nil && len(b.ArrivalSeconds) == 0 && cfg.Arrival > cfg.Lease {
		// A lease shorter than the arrival window it did not name (the
		// default's, or the room's): the window follows the lease down.
		cfg.Arrival = cfg.Lease
	}
	return err
}

// roomConfigAllowed lists the configuration fields for error messages.
var roomConfigAllowed = `"` + strings.Join(waitroom.RoomConfigFields, `", "`) + `"`

// putRoom creates a room or replaces its configuration: capacity is
// required, every other field the body leaves out takes its default
// (waitroom.DefaultRoomConfig).
func (h *handler) putRoom(w http.ResponseWriter, r *http.Request) error {
	if err := h.authAdmin(r); err != nil {
		return err
	}
	room, err := roomParam(r)
	if err != nil {
		return err
	}
	var body roomConfigBody
	if err := h.decodeJSON(w, r, &body, roomConfigAllowed); err != nil {
		return err
	}
	if len(body.Capacity) == 0 {
		return &waitroom.Error{Code: waitroom.CodeInvalid, Field: "capacity", Extra: map[string]any{"missing_fields": []string{"capacity"}},
			Message: "PUT needs capacity; every other field has a default (see DefaultRoomConfig in the API description)"}
	}
	cfg := waitroom.DefaultRoomConfig()
	if err := body.apply(&cfg); err != nil {
		return err
	}
	if err := h.svc.Configure(r.Context(), room, cfg); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, configView(room, cfg))
	return nil
}

// patchRoom changes the fields the body names and leaves the others.
func (h *handler) patchRoom(w http.ResponseWriter, r *http.Request) error {
	if err := h.authAdmin(r); err != nil {
		return err
	}
	room, err := roomParam(r)
	if err != nil {
		return err
	}
	var body roomConfigBody
	if err := h.decodeJSON(w, r, &body, roomConfigAllowed); err != nil {
		return err
	}
	cfg, err := h.svc.Update(r.Context(), room, body.present(), body.merge)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, configView(room, cfg))
	return nil
}

// deleteRoom removes a room and everything in it.
func (h *handler) deleteRoom(w http.ResponseWriter, r *http.Request) error {
	if err := h.authAdmin(r); err != nil {
		return err
	}
	room, err := roomParam(r)
	if err != nil {
		return err
	}
	if err := h.svc.DeleteRoom(r.Context(), room); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// listRooms answers every room with its configuration (admin).
func (h *handler) listRooms(w http.ResponseWriter, r *http.Request) error {
	if err := h.authAdmin(r); err != nil {
		return err
	}
	names, err := h.svc.ListRooms(r.Context())
	if err != nil {
		return err
	}
	out := struct {
		Rooms []roomConfigJSON `json:"rooms"`
	}{Rooms: []roomConfigJSON{}}
	for _, name := range names {
		cfg, err := h.svc.RoomConfig(r.Context(), name)
		if errors.Is(err, waitroom.ErrNoRoom) {
			continue // deleted meanwhile
		}
		if err != nil {
			return err
		}
		out.Rooms = append(out.Rooms, configView(name, cfg))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// publicRoomJSON is the answer of GET /v1/rooms/{room} without the admin
// token: what the waiting page needs, nothing of the room's totals or
// configuration.
type publicRoomJSON struct {
	Room          string  `json:"room"`
	Capacity      int64   `json:"capacity"`
	Active        int64   `json:"active"`
	Waiting       int64   `json:"waiting"`
	AdmissionRate float64 `json:"admission_rate_per_s"`
	PoWDifficulty int     `json:"pow_difficulty"`
	// OpensAt, Paused, Closed and Message (the closed_message) mirror the
	// configuration for the waiting page.
	OpensAt *string `json:"opens_at"`
	Paused  bool    `json:"paused"`
	Closed  bool    `json:"closed"`
	Message string  `json:"message"`
	saleJSON
	// Fairness is the seed's commitment (the seed once drawn) and the
	// admission log's head; absent when the store keeps none.
	Fairness *fairnessJSON `json:"fairness,omitempty"`
	// Outflow is the adaptive outflow while a controller holds the room
	// below its limit; absent otherwise.
	Outflow *outflowJSON `json:"outflow,omitempty"`
}

// saleJSON is where the room's sale stands, by this instance's clock (see
// waitroom.RoomConfig.SaleAt): part of the room's and of a ticket's view.
type saleJSON struct {
	// Sale is before, open, between (two windows of the schedule) or
	// closed (closed, past closes_at or past the last window).
	Sale waitroom.Phase `json:"sale"`
	// ClosesAt mirrors the configuration (null: none).
	ClosesAt *string `json:"closes_at"`
	// Window is the index in the schedule of the window in force, or of
	// the next to open; null without a schedule or after it.
	Window *int `json:"window"`
	// WindowStartsAt and WindowEndsAt bound that window (null: open-ended).
	WindowStartsAt *string `json:"window_starts_at"`
	WindowEndsAt   *string `json:"window_ends_at"`
	// InviteRequired says that a join needs an invite now.
	InviteRequired bool `json:"invite_required"`
}

// saleView shows what cfg says at now.
func saleView(cfg waitroom.RoomConfig, now time.Time) saleJSON {
	sa := cfg.SaleAt(now)
	v := saleJSON{Sale: sa.Phase, ClosesAt: rfc3339(cfg.ClosesAt), InviteRequired: sa.InviteRequired}
	if sa.Window >= 0 {
		i := sa.Window
		v.Window, v.WindowStartsAt, v.WindowEndsAt = &i, rfc3339(sa.Starts), rfc3339(sa.Ends)
	}
	return v
}

// roomJSON is the answer of GET /v1/rooms/{room} with the admin token:
// the public view, every counter and the configuration.
type roomJSON struct {
	publicRoomJSON
	Away           int64 `json:"away"`
	AdmittedTotal  int64 `json:"admitted_total"`
	ExpiredTotal   int64 `json:"expired_total"`
	ReleasedTotal  int64 `json:"released_total"`
	LeftTotal      int64 `json:"left_total"`
	JoinedTotal    int64 `json:"joined_total"`
	ClosedTotal    int64 `json:"closed_total"`
	AbandonedTotal int64 `json:"abandoned_total"`
	NoShowTotal    int64 `json:"no_show_total"`
	// InvitesUsedTotal counts the invites that got a place,
	// InvitesRefusedTotal the joins refused for an invite used already,
	// and InvitesHeld the used invites the store remembers (until a day
	// after each expires).
	InvitesUsedTotal    int64          `json:"invites_used_total"`
	InvitesRefusedTotal int64          `json:"invites_refused_total"`
	InvitesHeld         int64          `json:"invites_held"`
	Config              roomConfigJSON `json:"config"`
}

// getRoom answers the public view, or with the admin token the admin
// view (a wrong token is a 401).
func (h *handler) getRoom(w http.ResponseWriter, r *http.Request) error {
	admin := r.Header.Get("Authorization") != ""
	if admin {
		if err := h.authAdmin(r); err != nil {
			return err
		}
	}
	room, err := roomParam(r)
	if err != nil {
		return err
	}
	cfg, err := h.svc.RoomConfig(r.Context(), room)
	if err != nil {
		return err
	}
	st, err := h.svc.Room(r.Context(), room)
	if err != nil {
		return err
	}
	c := configView("", cfg)
	now := h.signer.Now()
	// The capacity in force: a window's, in a room with a schedule.
	pub := publicRoomJSON{Room: room, Capacity: int64(cfg.SaleAt(now).Capacity), Active: st.Active, Waiting: st.Waiting,
		AdmissionRate: st.AdmissionRate, PoWDifficulty: c.PoWDifficulty,
		OpensAt: c.OpensAt, Paused: c.Paused, Closed: c.Closed, Message: c.ClosedMessage, saleJSON: saleView(cfg, now)}
	if pub.Fairness, err = h.fairnessView(r, room); err != nil {
		return err
	}
	if pub.Outflow, err = h.outflowView(r, room); err != nil {
		return err
	}
	if !admin {
		writeJSON(w, http.StatusOK, pub)
		return nil
	}
	writeJSON(w, http.StatusOK, roomJSON{publicRoomJSON: pub, Away: st.Away,
		AdmittedTotal: st.AdmittedTotal, ExpiredTotal: st.ExpiredTotal, ReleasedTotal: st.ReleasedTotal,
		LeftTotal: st.LeftTotal, JoinedTotal: st.JoinedTotal, ClosedTotal: st.ClosedTotal,
		AbandonedTotal: st.AbandonedTotal, NoShowTotal: st.NoShowTotal, Config: c,
		InvitesUsedTotal: st.InvitesUsed, InvitesRefusedTotal: st.InvitesRefused, InvitesHeld: st.InvitesHeld,
	})
	return nil
}

// ticketJSON is a ticket as the API shows it.
type ticketJSON struct {
	Room   string         `json:"room"`
	UserID string         `json:"user_id"`
	State  waitroom.State `json:"state"`
	// Position is the user's place in line, 1 for the next one admitted,
	// and Ahead the users before them (Position - 1); both null unless
	// waiting.
	Position *int64 `json:"position"`
	Ahead    *int64 `json:"ahead"`
	// ETASeconds is the middle of the expected wait, ETALowSeconds and
	// ETAHighSeconds its range, and ETABasis what it rests on
	// (waitroom.EstimateWait): null (and no basis) when there is no
	// estimate (not waiting, a paused room); 0 once admitted.
	ETASeconds     *float64               `json:"eta_seconds"`
	ETALowSeconds  *float64               `json:"eta_low_seconds"`
	ETAHighSeconds *float64               `json:"eta_high_seconds"`
	ETABasis       waitroom.EstimateBasis `json:"eta_basis,omitempty"`
	PollAfterMS    int64                  `json:"poll_after_ms"`
	TicketToken    string                 `json:"ticket_token,omitempty"`
	AdmissionToken string                 `json:"admission_token,omitempty"`
	LeaseExpiresAt string                 `json:"lease_expires_at,omitempty"`
	// Message is the room's closing message on a closed ticket.
	Message string `json:"message,omitempty"`
	// Sale is where the room's sale stands (see saleJSON), and
	// SaleResumesAt, while it is before or between windows, when
	// admission starts again (null otherwise).
	Sale          waitroom.Phase `json:"sale,omitempty"`
	SaleResumesAt *string        `json:"sale_resumes_at,omitempty"`
}

// withSale adds where room's sale stands to v (nothing when the room's
// configuration cannot be read: the ticket is the answer).
func (h *handler) withSale(r *http.Request, v ticketJSON) ticketJSON {
	cfg, err := h.svc.RoomConfig(r.Context(), v.Room)
	if err != nil {
		return v
	}
	sa := cfg.SaleAt(h.signer.Now())
	v.Sale = sa.Phase
	if sa.Phase == waitroom.PhaseBefore || sa.Phase == waitroom.PhaseBetween {
		v.SaleResumesAt = rfc3339(sa.Starts)
	}
	return v
}

// ticketView shows t with the service's wait estimate.
func (h *handler) ticketView(t waitroom.Ticket) ticketJSON {
	est, poll := h.svc.Estimate(t)
	v := ticketJSON{Room: t.Room, UserID: t.User, State: t.State, PollAfterMS: poll.Milliseconds()}
	tenths := func(d time.Duration) *float64 {
		s := math.Round(d.Seconds()*10) / 10
		return &s
	}
	switch t.State {
	case waitroom.StateWaiting:
		if t.Position >= 0 {
			// The store counts the users ahead; people count from 1.
			ahead, pos := t.Position, t.Position+1
			v.Position, v.Ahead = &pos, &ahead
		}
		if est.Known() {
			v.ETASeconds, v.ETALowSeconds, v.ETAHighSeconds = tenths(est.Mid()), tenths(est.Low), tenths(est.High)
			v.ETABasis = est.Basis
		}
	case waitroom.StateAdmitted:
		v.ETASeconds, v.ETALowSeconds, v.ETAHighSeconds = tenths(0), tenths(0), tenths(0)
	case waitroom.StateClosed:
		v.Message = t.Message
	}
	return v
}

// joinBody is the body of POST /v1/rooms/{room}/tickets. Every field is
// optional: no user_id is an anonymous join.
type joinBody struct {
	UserID      *string `json:"user_id"`
	UserSig     *string `json:"user_sig"`
	UserExpires *int64  `json:"user_expires"`
	// Challenge and Solution are the proof of work of a room that asks
	// for one (see pow.go).
	Challenge *string `json:"challenge"`
	Solution  *string `json:"solution"`
	// Invite is an invite token signed by the site (see
	// waitroom.SignInvite): the join is for the invite's place.
	Invite *string `json:"invite"`
}

// joinFields lists joinBody's fields for the unknown-field message.
const joinFields = `"user_id", "user_sig", "user_expires", "challenge", "solution", "invite"`

// joinProof is what a join request proves about its user.
type joinProof struct {
	// generation is the join a ticket token presented names (0: none).
	generation int64
	// tokenOnly says that the token is the only proof of the user: it
	// may get back the ticket of its own join, never start a new one.
	tokenOnly bool
	// invite says that a verified invite names the place: every device
	// presenting it gets that place's ticket, as its own token would.
	invite bool
	// keyed says that an anonymous join's Idempotency-Key named the
	// user: the key's holder gets that ticket back, as its token would.
	keyed bool
}

// joinUser decides who a join is for and what the request proves: a
// ticket token for them (its join), a signature, or nothing needed. See
// identity.go.
func (h *handler) joinUser(r *http.Request, room string, body joinBody) (user string, proof joinProof, err error) {
	var tokenUser string
	if r.Header.Get("Authorization") != "" {
		token, err := bearer(r, "ticket_token")
		if err != nil {
			return "", proof, err
		}
		c, err := h.signer.Verify(token, waitroom.TicketToken)
		if err != nil {
			return "", proof, err
		}
		if c.Room != room {
			return "", proof, &waitroom.Error{Code: waitroom.CodeForbidden, Message: "the ticket token is for another room"}
		}
		tokenUser, proof.generation = c.User, c.Generation
	}
	if body.Invite != nil {
		// The invite names the place: it proves it as a ticket token does.
		if body.UserID != nil || body.UserSig != nil || body.UserExpires != nil {
			return "", proof, fieldError("invite", "cannot be combined with user_id, user_sig or user_expires: the invite names the place")
		}
		cfg, err := h.svc.RoomConfig(r.Context(), room)
		if err != nil {
			return "", proof, err
		}
		inv, err := waitroom.VerifyInvite(cfg.InviteKey, room, *body.Invite, h.signer.Now())
		if err != nil {
			return "", proof, err
		}
		if tokenUser != "" && tokenUser != inv.User() {
			return "", proof, &waitroom.Error{Code: waitroom.CodeForbidden, Message: "the ticket token is for another user"}
		}
		return inv.User(), joinProof{invite: true}, nil
	}
	if body.UserID == nil {
		if body.UserSig != nil || body.UserExpires != nil {
			return "", proof, fieldError("user_id", "is required with user_sig and user_expires")
		}
		if tokenUser != "" {
			proof.tokenOnly = true
			return tokenUser, proof, nil
		}
		if key := r.Header.Get("Idempotency-Key"); key != "" {
			if err := waitroom.ValidateJoinKey(key); err != nil {
				return "", proof, err
			}
			proof.keyed = true
			return waitroom.KeyedAnonymousID(h.signer.Secret(), room, key), proof, nil
		}
		return waitroom.AnonymousID(), proof, nil
	}
	user = *body.UserID
	if err := waitroom.ValidateUser(user); err != nil {
		return "", proof, err
	}
	if tokenUser != "" && tokenUser != user {
		return "", proof, &waitroom.Error{Code: waitroom.CodeForbidden, Message: "the ticket token is for another user"}
	}
	switch {
	case body.UserSig != nil || body.UserExpires != nil:
		if body.UserSig == nil {
			return "", proof, fieldError("user_sig", "is required with user_expires")
		}
		if body.UserExpires == nil {
			return "", proof, fieldError("user_expires", "is required with user_sig")
		}
		if err := waitroom.VerifyUser(h.cfg.SiteSecret, room, user, *body.UserSig, *body.UserExpires, h.signer.Now()); err != nil {
			return "", proof, err
		}
	case strings.HasPrefix(user, waitroom.InvitePrefix):
		if tokenUser == "" {
			return "", proof, &waitroom.Error{Code: waitroom.CodeForbidden, Field: "user_id",
				Message: "invite- ids belong to invites; join with the invite"}
		}
		proof.tokenOnly = true
	case strings.HasPrefix(user, waitroom.AnonPrefix):
		if tokenUser == "" {
			return "", proof, &waitroom.Error{Code: waitroom.CodeForbidden, Field: "user_id",
				Message: "anon- ids are assigned by the server; present the ticket_token to get the ticket back, or omit user_id for a new one"}
		}
		proof.tokenOnly = true
	case !h.cfg.AllowUnsignedUsers:
		if tokenUser == "" {
			return "", proof, &waitroom.Error{Code: waitroom.CodeForbidden, Field: "user_sig",
				Message: "unsigned user ids are not accepted: omit user_id for an anonymous ticket, or sign it (user_sig, user_expires)"}
		}
		proof.tokenOnly = true
	}
	return user, proof, nil
}

func (h *handler) join(w http.ResponseWriter, r *http.Request) error {
	room, err := roomParam(r)
	if err != nil {
		return err
	}
	if err := h.limitJoin(r); err != nil {
		return err
	}
	var body joinBody
	if err := h.decodeJSON(w, r, &body, joinFields); err != nil {
		return err
	}
	user, proof, err := h.joinUser(r, room, body)
	if err != nil {
		return err
	}
	if proof.tokenOnly {
		// A token gets back the ticket of its own join, if still live;
		// it never starts a new join (that takes user_sig).
		t, err := h.ownTicket(r, room, user, proof.generation)
		if err != nil && !errors.Is(err, waitroom.ErrNoTicket) {
			return err
		}
		if err != nil || t.State.Done() {
			return errEarlierJoin()
		}
	}
	cfg, err := h.svc.RoomConfig(r.Context(), room)
	if err != nil {
		return err
	}
	if cfg.PoWDifficulty > 0 {
		if err := h.pow.Check(room, cfg.PoWDifficulty, body.Challenge, body.Solution); err != nil {
			return err
		}
		if err := h.svc.SpendChallenge(r.Context(), room, *body.Challenge); err != nil {
			return err
		}
	}
	var t waitroom.Ticket
	if body.Invite != nil {
		inv, _ := waitroom.ParseInvite(*body.Invite) // verified by joinUser
		t, err = h.svc.JoinInvite(r.Context(), room, inv)
	} else {
		t, err = h.svc.Join(r.Context(), room, user)
	}
	if err != nil {
		return err
	}
	owner := proof.invite || proof.keyed || (proof.generation != 0 && t.Generation == proof.generation)
	if t.Created && proof.tokenOnly {
		// The token's join ended between the check above and this join:
		// undo the join it cannot prove.
		if _, err := h.svc.Leave(r.Context(), room, user); err != nil {
			return err
		}
		return errEarlierJoin()
	}
	if !t.Created && !owner {
		// Never reveal nor replace a live ticket's token.
		return &waitroom.Error{Code: waitroom.CodeConflict, Field: "user_id",
			Message: "user already holds a ticket; present its ticket_token (Authorization: Bearer) to join again"}
	}
	status := http.StatusOK // an existing ticket, returned unchanged
	if t.Created {
		status = http.StatusCreated
	}
	v := h.withSale(r, h.ticketView(t))
	if v.TicketToken, err = h.signTicket(room, user, t); err != nil {
		return err
	}
	writeTicket(w, status, v)
	return nil
}

// signTicket signs the ticket token of t's join, with its place.
func (h *handler) signTicket(room, user string, t waitroom.Ticket) (string, error) {
	tok, err := h.signer.Sign(waitroom.Claims{Kind: waitroom.TicketToken, Room: room, User: user, Generation: t.Generation,
		Place: t.Place, Expires: h.signer.Now().Add(h.cfg.TicketTTL)})
	if err != nil {
		return "", &waitroom.Error{Code: waitroom.CodeInternal, Message: "cannot sign the ticket token", Err: err}
	}
	return tok, nil
}

func (h *handler) getTicket(w http.ResponseWriter, r *http.Request) error {
	room, user, err := ticketParams(r)
	if err != nil {
		return err
	}
	c, err := h.ticketClaims(r, room, user)
	if err != nil {
		return err
	}
	// A waiting buyer behind the frontier is answered from the room view
	// (no store call); any other poll reads the store.
	t, err := h.svc.Poll(r.Context(), room, user, c.Generation, c.Place)
	if err != nil {
		return err
	}
	if t.Generation != c.Generation {
		return errEarlierJoin()
	}
	v := h.withSale(r, h.ticketView(t))
	if t.Place != nil {
		// A store read: a new token carries the place, so that the next
		// polls, on any instance, can be answered from the view.
		if v.TicketToken, err = h.signTicket(room, user, t); err != nil {
			return err
		}
	}
	if t.State == waitroom.StateAdmitted && !t.LeaseExpires.IsZero() {
		v.LeaseExpiresAt = t.LeaseExpires.UTC().Format(time.RFC3339Nano)
		// Tokens count whole seconds: a lease ending within this second
		// gets no token (it is over for any checkout that would see it).
		if t.LeaseExpires.Unix() > h.signer.Now().Unix() {
			if v.AdmissionToken, err = h.admissionToken(r.Context(), t); err != nil {
				return err
			}
		}
	}
	writeTicket(w, http.StatusOK, v)
	return nil
}

func (h *handler) leave(w http.ResponseWriter, r *http.Request) error {
	room, user, err := ticketParams(r)
	if err != nil {
		return err
	}
	gen, err := h.authTicket(r, room, user)
	if err != nil {
		return err
	}
	// The ticket must be of the token's join. (A join that ends between
	// this read and the leave is over anyway; a new join of the user in
	// that instant would be left too: the window is one store round trip.)
	if _, err := h.ownTicket(r, room, user, gen); err != nil {
		return err
	}
	t, err := h.svc.Leave(r.Context(), room, user)
	if err != nil {
		return err
	}
	writeTicket(w, http.StatusOK, h.ticketView(t))
	return nil
}

// challengeJSON is the answer of GET /v1/rooms/{room}/challenge.
type challengeJSON struct {
	Room       string `json:"room"`
	Difficulty int    `json:"difficulty"`
	// Challenge and ExpiresAt are omitted when the room asks for no
	// proof of work (Difficulty 0).
	Challenge string `json:"challenge,omitempty"`
	ExpiresAt string `json:"expires_at,omitempty"`
}

func (h *handler) challenge(w http.ResponseWriter, r *http.Request) error {
	room, err := roomParam(r)
	if err != nil {
		return err
	}
	cfg, err := h.svc.RoomConfig(r.Context(), room)
	if err != nil {
		return err
	}
	v := challengeJSON{Room: room, Difficulty: cfg.PoWDifficulty}
	if cfg.PoWDifficulty > 0 {
		var exp time.Time
		v.Challenge, exp = h.pow.Issue(room, cfg.PoWDifficulty)
		v.ExpiresAt = exp.UTC().Format(time.RFC3339)
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, v)
	return nil
}

// mergeObject returns the JSON of cur with patch merged into it as RFC
// 7396 says: a member of patch set to null is removed, any other
// replaces cur's. A patch that is not an object is returned as it is
// (replacing cur, and refused by the caller's decoding if it is not a
// valid value).
func mergeObject(cur any, patch json.RawMessage) json.RawMessage {
	var p map[string]json.RawMessage
	if json.Unmarshal(patch, &p) != nil || p == nil {
		return patch
	}
	base, err := json.Marshal(cur)
	if err != nil {
		return patch
	}
	m := map[string]json.RawMessage{}
	if json.Unmarshal(base, &m) != nil {
		return patch
	}
	for k, v := range p {
		if string(v) == "null" {
			delete(m, k)
		} else {
			m[k] = v
		}
	}
	out, err := json.Marshal(m)
	if err != nil {
		return patch
	}
	return out
}
