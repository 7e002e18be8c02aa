package waitroom

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stampede-lab/stampede/internal/httpapi"
)

// HandlerConfig configures the HTTP handler made by NewHandler.
type HandlerConfig struct {
	// AdminToken authorizes room configuration ("Authorization: Bearer
	// <AdminToken>"). Required, at least 16 bytes; compared in constant
	// time.
	AdminToken string
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
	PoW PoWConfig
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
	Admissions *AdmissionSigner
}

// minAdminTokenLen is the shortest admin token accepted.
const minAdminTokenLen = 16

// DefaultHandlerConfig returns 24-hour ticket tokens, a 4096-byte body
// limit, slog.Default(), no join limit (the command sets one) and
// DefaultPoWConfig. AdminToken is empty and must be set.
func DefaultHandlerConfig() HandlerConfig {
	return HandlerConfig{TicketTTL: 24 * time.Hour, MaxBody: 4096, Logger: slog.Default(),
		JoinLimit: JoinLimitConfig{MaxClients: DefaultJoinLimitConfig().MaxClients}, PoW: DefaultPoWConfig()}
}

// Validate reports the first unusable field by name.
func (c HandlerConfig) Validate() error {
	switch {
	case len(c.AdminToken) < minAdminTokenLen:
		return fieldError("AdminToken", "must be at least %d bytes, got %d", minAdminTokenLen, len(c.AdminToken))
	case c.TicketTTL < time.Second:
		return fieldError("TicketTTL", "must be at least 1s, got %s", c.TicketTTL)
	case c.MaxBody < 64:
		return fieldError("MaxBody", "must be at least 64 bytes, got %d", c.MaxBody)
	case len(c.SiteSecret) > 0 && len(c.SiteSecret) < minSecretLen:
		return fieldError("SiteSecret", "must be empty or at least %d bytes, got %d", minSecretLen, len(c.SiteSecret))
	case c.CheckoutKey != "" && len(c.CheckoutKey) < minAdminTokenLen:
		return fieldError("CheckoutKey", "must be empty or at least %d bytes, got %d", minAdminTokenLen, len(c.CheckoutKey))
	case c.OnAdmit != "" && (!strings.HasPrefix(c.OnAdmit, "/") || strings.HasPrefix(c.OnAdmit, "//") ||
		strings.ContainsAny(c.OnAdmit, "\\\"'<> \t\r\n")):
		return fieldError("OnAdmit", "must be a same-origin path starting with one '/', got %q", c.OnAdmit)
	}
	if err := c.JoinLimit.Validate(); err != nil {
		e := err.(*Error)
		e.Field = "JoinLimit." + e.Field
		return e
	}
	if err := c.PoW.Validate(); err != nil {
		e := err.(*Error)
		e.Field = "PoW." + e.Field
		return e
	}
	return nil
}

// handler serves the waiting room's HTTP API and its waiting page, on an
// httpapi.API that adds /healthz, /readyz, /metrics and /openapi.json.
type handler struct {
	svc       *Service
	signer    *Signer
	cfg       HandlerConfig
	api       *httpapi.API
	adminHash [sha256.Size]byte
	limiter   *joinLimiter // nil: no join limit
	pow       *powIssuer
	// checkoutHash is the SHA-256 of CheckoutKey; zero when it is empty.
	checkoutHash [sha256.Size]byte
	admissions   *AdmissionSigner
}

// NewHandler returns the waiting room's HTTP handler:
//
//	PUT    /v1/rooms/{room}                 configure a room (admin token)
//	GET    /v1/rooms/{room}                 the room's counters
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
//	GET    /metrics                         Prometheus metrics from reg
//	GET    /openapi.json                    the OpenAPI description (OpenAPI)
//
// Every API answer is JSON; errors are RFC 9457 application/problem+json
// with the status of their code (package httpapi). signer signs ticket
// and admission tokens.
//
// reg is served on /metrics and receives the HTTP request metrics
// (http_requests_total, http_request_duration_seconds) and a collector
// that reads every room's gauges from the store at scrape time; nil means
// a new registry holding only those. A registry serves at most one
// handler. To expose the admission counters too, register NewMetrics on
// the same registry and set ServiceConfig.OnPass to its OnPass (NewServer
// does all of this).
func NewHandler(svc *Service, signer *Signer, cfg HandlerConfig, reg *prometheus.Registry) (http.Handler, error) {
	if svc == nil {
		return nil, fieldError("svc", "must not be nil")
	}
	if err := signer.ready(); err != nil {
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
	if err := reg.Register(newRoomCollector(svc, cfg.Logger)); err != nil {
		return nil, fmt.Errorf("waitroom: registering the room gauges: %w (use one registry per handler)", err)
	}
	api, err := httpapi.New(httpapi.Config{
		Name: "waitroom", Logger: cfg.Logger, Registry: reg, MapError: mapError, Spec: OpenAPI().JSON,
	})
	if err != nil {
		return nil, err
	}
	api.AddCheck(httpapi.Check{Name: "redis", Ping: svc.store.Ping})
	if cfg.Admissions == nil {
		if cfg.Admissions, err = NewAdmissionSigner(KeySpec{Secret: signer.key, Epoch: DefaultKeyEpoch}, nil, signer.now); err != nil {
			return nil, err
		}
	}
	h := &handler{svc: svc, signer: signer, cfg: cfg, api: api, adminHash: sha256.Sum256([]byte(cfg.AdminToken)), admissions: cfg.Admissions,
		pow: newPoWIssuer(signer.key, cfg.PoW, cfg.Now)}
	if cfg.CheckoutKey != "" {
		h.checkoutHash = sha256.Sum256([]byte(cfg.CheckoutKey))
	}
	if cfg.JoinLimit.Rate > 0 {
		h.limiter = newJoinLimiter(cfg.JoinLimit, cfg.Now)
	}

	api.Handle("/v1/rooms/{room}", httpapi.Methods{
		http.MethodGet: h.getRoom,
		http.MethodPut: h.putRoom,
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
		http.MethodGet: h.admissions.serveJWKS,
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
	return room, ValidateRoom(room)
}

// ticketParams returns the validated {room} and {user} of the path.
func ticketParams(r *http.Request) (room, user string, err error) {
	if room, err = roomParam(r); err != nil {
		return "", "", err
	}
	user = r.PathValue("user")
	return room, user, ValidateUser(user)
}

// bearer returns the request's bearer token, or an unauthorized error
// naming what is expected.
func bearer(r *http.Request, what string) (string, error) {
	h := r.Header.Get("Authorization")
	scheme, token, ok := strings.Cut(h, " ")
	if h == "" || !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
		return "", &Error{Code: CodeUnauthorized, Message: fmt.Sprintf("missing Authorization: Bearer <%s>", what)}
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
	got := sha256.Sum256([]byte(token))
	if subtle.ConstantTimeCompare(got[:], h.adminHash[:]) != 1 {
		return &Error{Code: CodeUnauthorized, Message: "admin token invalid"}
	}
	return nil
}

// authTicket checks that the request carries a valid ticket token for
// exactly room and user.
func (h *handler) authTicket(r *http.Request, room, user string) error {
	token, err := bearer(r, "ticket_token")
	if err != nil {
		return err
	}
	c, err := h.signer.Verify(token, TicketToken)
	if err != nil {
		return err
	}
	if c.Room != room || c.User != user {
		return &Error{Code: CodeForbidden, Message: "the ticket token is for another user or room"}
	}
	return nil
}

// roomConfigJSON is the body of PUT /v1/rooms/{room} and its answer.
type roomConfigJSON struct {
	Room            string  `json:"room,omitempty"`
	Capacity        int     `json:"capacity"`
	LeaseSeconds    float64 `json:"lease_seconds"`
	AdmitIntervalMS int64   `json:"admit_interval_ms"`
	Mode            Mode    `json:"mode"`
	PoWDifficulty   int     `json:"pow_difficulty"`
	// Template is omitted when the room has none.
	Template *RoomTemplate `json:"template,omitempty"`
}

const roomConfigFields = `"capacity", "lease_seconds", "admit_interval_ms", "mode", "pow_difficulty", "template"`

func (h *handler) putRoom(w http.ResponseWriter, r *http.Request) error {
	if err := h.authAdmin(r); err != nil {
		return err
	}
	room, err := roomParam(r)
	if err != nil {
		return err
	}
	var body struct {
		Capacity        *int          `json:"capacity"`
		LeaseSeconds    *float64      `json:"lease_seconds"`
		AdmitIntervalMS *int64        `json:"admit_interval_ms"`
		Mode            *string       `json:"mode"`
		PoWDifficulty   *int          `json:"pow_difficulty"`
		Template        *RoomTemplate `json:"template"`
	}
	if err := h.decodeJSON(w, r, &body, roomConfigFields); err != nil {
		return err
	}
	cfg := DefaultRoomConfig()
	if body.Capacity != nil {
		cfg.Capacity = *body.Capacity
	}
	if s := body.LeaseSeconds; s != nil {
		// Checked here: a huge float does not convert to a Duration.
		if !(*s >= 1 && *s <= 86400) {
			return fieldError("lease_seconds", "must be between 1 and 86400, got %v", *s)
		}
		cfg.Lease = time.Duration(*s * float64(time.Second))
	}
	if ms := body.AdmitIntervalMS; ms != nil {
		if *ms < 10 || *ms > 60000 {
			return fieldError("admit_interval_ms", "must be between 10 and 60000, got %d", *ms)
		}
		cfg.AdmitInterval = time.Duration(*ms) * time.Millisecond
	}
	if body.Mode != nil {
		cfg.Mode = Mode(*body.Mode)
	}
	if body.PoWDifficulty != nil {
		cfg.PoWDifficulty = *body.PoWDifficulty
	}
	if body.Template != nil {
		cfg.Template = *body.Template
	}
	if err := h.svc.Configure(r.Context(), room, cfg); err != nil {
		return err
	}
	v := roomConfigJSON{
		Room: room, Capacity: cfg.Capacity, LeaseSeconds: cfg.Lease.Seconds(),
		AdmitIntervalMS: cfg.AdmitInterval.Milliseconds(), Mode: cfg.Mode, PoWDifficulty: cfg.PoWDifficulty,
	}
	if !cfg.Template.IsZero() {
		v.Template = &cfg.Template
	}
	writeJSON(w, http.StatusOK, v)
	return nil
}

// roomJSON is the answer of GET /v1/rooms/{room}.
type roomJSON struct {
	Room          string  `json:"room"`
	Capacity      int64   `json:"capacity"`
	Active        int64   `json:"active"`
	Waiting       int64   `json:"waiting"`
	AdmittedTotal int64   `json:"admitted_total"`
	ExpiredTotal  int64   `json:"expired_total"`
	ReleasedTotal int64   `json:"released_total"`
	LeftTotal     int64   `json:"left_total"`
	JoinedTotal   int64   `json:"joined_total"`
	AdmissionRate float64 `json:"admission_rate_per_s"`
	PoWDifficulty int     `json:"pow_difficulty"`
}

func (h *handler) getRoom(w http.ResponseWriter, r *http.Request) error {
	room, err := roomParam(r)
	if err != nil {
		return err
	}
	st, err := h.svc.Room(r.Context(), room)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, roomJSON{
		Room: room, Capacity: st.Capacity, Active: st.Active, Waiting: st.Waiting,
		AdmittedTotal: st.AdmittedTotal, ExpiredTotal: st.ExpiredTotal, ReleasedTotal: st.ReleasedTotal,
		LeftTotal: st.LeftTotal, JoinedTotal: st.JoinedTotal, AdmissionRate: st.AdmissionRate,
		PoWDifficulty: st.Config.PoWDifficulty,
	})
	return nil
}

// ticketJSON is a ticket as the API shows it.
type ticketJSON struct {
	Room   string `json:"room"`
	UserID string `json:"user_id"`
	State  State  `json:"state"`
	// Position is null unless waiting.
	Position *int64 `json:"position"`
	// ETASeconds is null unless waiting with a measured admission rate;
	// 0 once admitted.
	ETASeconds     *float64 `json:"eta_seconds"`
	PollAfterMS    int64    `json:"poll_after_ms"`
	TicketToken    string   `json:"ticket_token,omitempty"`
	AdmissionToken string   `json:"admission_token,omitempty"`
	LeaseExpiresAt string   `json:"lease_expires_at,omitempty"`
}

// ticketView shows t with the service's wait estimate.
func (h *handler) ticketView(t Ticket) ticketJSON {
	eta, poll := h.svc.Estimate(t)
	v := ticketJSON{Room: t.Room, UserID: t.User, State: t.State, PollAfterMS: poll.Milliseconds()}
	switch t.State {
	case StateWaiting:
		if t.Position >= 0 {
			pos := t.Position
			v.Position = &pos
		}
		if eta >= 0 {
			s := math.Round(eta.Seconds()*10) / 10
			v.ETASeconds = &s
		}
	case StateAdmitted:
		zero := 0.0
		v.ETASeconds = &zero
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
}

// joinFields lists joinBody's fields for the unknown-field message.
const joinFields = `"user_id", "user_sig", "user_expires", "challenge", "solution"`

// joinUser decides who a join is for and whether the request proves that
// it holds the user's ticket (a ticket token for them). See identity.go.
func (h *handler) joinUser(r *http.Request, room string, body joinBody) (user string, owner bool, err error) {
	var tokenUser string
	if r.Header.Get("Authorization") != "" {
		token, err := bearer(r, "ticket_token")
		if err != nil {
			return "", false, err
		}
		c, err := h.signer.Verify(token, TicketToken)
		if err != nil {
			return "", false, err
		}
		if c.Room != room {
			return "", false, &Error{Code: CodeForbidden, Message: "the ticket token is for another room"}
		}
		tokenUser = c.User
	}
	if body.UserID == nil {
		if body.UserSig != nil || body.UserExpires != nil {
			return "", false, fieldError("user_id", "is required with user_sig and user_expires")
		}
		if tokenUser != "" {
			return tokenUser, true, nil
		}
		return AnonymousID(), false, nil
	}
	user = *body.UserID
	if err := ValidateUser(user); err != nil {
		return "", false, err
	}
	if tokenUser != "" && tokenUser != user {
		return "", false, &Error{Code: CodeForbidden, Message: "the ticket token is for another user"}
	}
	switch {
	case body.UserSig != nil || body.UserExpires != nil:
		if body.UserSig == nil {
			return "", false, fieldError("user_sig", "is required with user_expires")
		}
		if body.UserExpires == nil {
			return "", false, fieldError("user_expires", "is required with user_sig")
		}
		if err := VerifyUser(h.cfg.SiteSecret, room, user, *body.UserSig, *body.UserExpires, h.signer.now()); err != nil {
			return "", false, err
		}
	case tokenUser != "":
	case strings.HasPrefix(user, anonPrefix):
		return "", false, &Error{Code: CodeForbidden, Field: "user_id",
			Message: "anon- ids are assigned by the server; present the ticket_token to join again"}
	case !h.cfg.AllowUnsignedUsers:
		return "", false, &Error{Code: CodeForbidden, Field: "user_sig",
			Message: "unsigned user ids are not accepted: omit user_id for an anonymous ticket, or sign it (user_sig, user_expires)"}
	}
	return user, tokenUser != "", nil
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
	user, owner, err := h.joinUser(r, room, body)
	if err != nil {
		return err
	}
	cfg, err := h.svc.RoomConfig(r.Context(), room)
	if err != nil {
		return err
	}
	if cfg.PoWDifficulty > 0 {
		if err := h.pow.check(room, cfg.PoWDifficulty, body.Challenge, body.Solution); err != nil {
			return err
		}
	}
	t, err := h.svc.Join(r.Context(), room, user)
	if err != nil {
		return err
	}
	if !t.Created && !owner {
		// Never reveal nor replace a live ticket's token.
		return &Error{Code: CodeConflict, Field: "user_id",
			Message: "user already holds a ticket; present its ticket_token (Authorization: Bearer) to join again"}
	}
	status := http.StatusOK // an existing ticket, returned unchanged
	if t.Created {
		status = http.StatusCreated
	}
	v := h.ticketView(t)
	v.TicketToken, err = h.signer.Sign(Claims{Kind: TicketToken, Room: room, User: user, Expires: h.signer.now().Add(h.cfg.TicketTTL)})
	if err != nil {
		return &Error{Code: CodeInternal, Message: "cannot sign the ticket token", Err: err}
	}
	writeJSON(w, status, v)
	return nil
}

func (h *handler) getTicket(w http.ResponseWriter, r *http.Request) error {
	room, user, err := ticketParams(r)
	if err != nil {
		return err
	}
	if err := h.authTicket(r, room, user); err != nil {
		return err
	}
	t, err := h.svc.Ticket(r.Context(), room, user)
	if err != nil {
		return err
	}
	v := h.ticketView(t)
	if t.State == StateAdmitted && !t.LeaseExpires.IsZero() {
		v.LeaseExpiresAt = t.LeaseExpires.UTC().Format(time.RFC3339Nano)
		// Tokens count whole seconds: a lease ending within this second
		// gets no token (it is over for any checkout that would see it).
		if t.LeaseExpires.Unix() > h.signer.now().Unix() {
			if v.AdmissionToken, err = h.admissionToken(r.Context(), t); err != nil {
				return err
			}
		}
	}
	writeJSON(w, http.StatusOK, v)
	return nil
}

func (h *handler) leave(w http.ResponseWriter, r *http.Request) error {
	room, user, err := ticketParams(r)
	if err != nil {
		return err
	}
	if err := h.authTicket(r, room, user); err != nil {
		return err
	}
	t, err := h.svc.Leave(r.Context(), room, user)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, h.ticketView(t))
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
		v.Challenge, exp = h.pow.issue(room, cfg.PoWDifficulty)
		v.ExpiresAt = exp.UTC().Format(time.RFC3339)
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, v)
	return nil
}
