package institution

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/internal/httpapi"
)

// Server is the institution simulator. It implements http.Handler (see
// the package doc for the routes) and is safe for concurrent use. Call
// Close when done: it releases every held request.
type Server struct {
	cfg       Config
	log       *slog.Logger
	now       func() time.Time
	adminHash [sha256.Size]byte
	metrics   *metrics
	api       *httpapi.API

	// hung counts the requests held right now; at most cfg.MaxHung.
	hung atomic.Int64
	// done is closed by Close.
	done      chan struct{}
	closeOnce sync.Once

	mu       sync.Mutex
	behavior Behavior
	state    ledgerState
	// release is closed, and replaced, by Reset: every request held
	// before the reset waits on the old one.
	release  chan struct{}
	closed   bool
	approval uint64 // the last approval id's number
}

// NewServer makes a simulator with DefaultBehavior. Nil cfg.Now,
// cfg.Logger and cfg.Registry mean time.Now, slog.Default() and a new
// registry; the rest of cfg must pass Validate.
func NewServer(cfg Config) (*Server, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	m, err := newMetrics(cfg.Registry)
	if err != nil {
		return nil, err
	}
	s := &Server{
		cfg:       cfg,
		log:       cfg.Logger,
		now:       cfg.Now,
		adminHash: sha256.Sum256([]byte(cfg.AdminToken)),
		metrics:   m,
		done:      make(chan struct{}),
		behavior:  DefaultBehavior(),
		state:     newLedgerState(),
		release:   make(chan struct{}),
	}
	if s.api, err = s.newAPI(); err != nil {
		return nil, err
	}
	return s, nil
}

// ServeHTTP serves the simulator's API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.api.ServeHTTP(w, r) }

// Close releases every held request (each answers 504 released) and makes
// every later approval request fail at once with 503 shutting_down,
// recording nothing. The status inquiry and the admin endpoints keep
// working. Close is idempotent; call it before http.Server.Shutdown, which
// would otherwise wait for the held requests.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		close(s.done)
	})
}

// Hung returns the number of requests held right now.
func (s *Server) Hung() int { return int(s.hung.Load()) }

// Behavior returns the current behaviour.
func (s *Server) Behavior() Behavior {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.behavior
}

// SetBehavior validates b and makes it the current behaviour. Requests
// already held keep the behaviour they arrived under.
func (s *Server) SetBehavior(b Behavior) error {
	if err := b.Validate(); err != nil {
		return err
	}
	s.mu.Lock()
	s.behavior = b
	s.mu.Unlock()
	s.log.Info("institution: behaviour set", "mode", b.Mode, "hang_ms", b.HangMS, "idempotent", b.Idempotent, "status_api", b.StatusAPI)
	return nil
}

// Reset clears the ledger, the arrival log and the attempts, returns to
// DefaultBehavior, and releases every held request at once (each answers
// 504 released). It returns how many requests were held.
func (s *Server) Reset() int {
	s.mu.Lock()
	n := s.Hung()
	s.behavior = DefaultBehavior()
	s.state = newLedgerState()
	close(s.release)
	s.release = make(chan struct{})
	s.mu.Unlock()
	s.log.Info("institution: reset", "released", n)
	return n
}

// Ledger returns the ledger's records and totals.
func (s *Server) Ledger() Ledger {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state.ledger()
}

// Arrivals returns the arrival log in time order.
func (s *Server) Arrivals() ArrivalLog {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state.arrivalLog()
}

// newAPI builds the simulator's HTTP API on httpapi: its routes, plus
// /healthz, /readyz (no dependencies: ready once serving), /metrics and
// /openapi.json.
func (s *Server) newAPI() (*httpapi.API, error) {
	a, err := httpapi.New(httpapi.Config{Name: "institution", Logger: s.log, Registry: s.cfg.Registry, Spec: OpenAPI().JSON})
	if err != nil {
		return nil, err
	}
	a.Handle("/v1/approvals", httpapi.Methods{http.MethodPost: s.approve})
	a.Handle("/v1/approvals/{external_key}", httpapi.Methods{http.MethodGet: s.status})
	a.Handle("/admin/behavior", httpapi.Methods{
		http.MethodGet: s.admin(s.getBehavior),
		http.MethodPut: s.admin(s.putBehavior),
	})
	a.Handle("/admin/arrivals", httpapi.Methods{http.MethodGet: s.admin(s.getArrivals)})
	a.Handle("/admin/approvals", httpapi.Methods{http.MethodGet: s.admin(s.getApprovals)})
	a.Handle("/admin/reset", httpapi.Methods{http.MethodPost: s.admin(s.postReset)})
	return a, nil
}

// approveFields lists the fields of POST /v1/approvals.
const approveFields = `"external_key", "amount", "currency"`

// approve serves POST /v1/approvals.
func (s *Server) approve(w http.ResponseWriter, r *http.Request) error {
	at := s.now().UTC()
	s.metrics.arrivals.Inc()
	var body struct {
		ExternalKey *string `json:"external_key"`
		Amount      *int64  `json:"amount"`
		Currency    *string `json:"currency"`
	}
	err := s.decodeJSON(w, r, &body, approveFields)
	var req ApproveRequest
	if body.ExternalKey != nil {
		req.ExternalKey = *body.ExternalKey
	}
	if err == nil {
		err = validateApproveBody(body.ExternalKey, body.Amount, body.Currency)
	}
	if err == nil {
		req.Amount, req.Currency = *body.Amount, *body.Currency
	}

	s.mu.Lock()
	b, release, closed := s.behavior, s.release, s.closed
	arrivalKey := req.ExternalKey
	if len(arrivalKey) > MaxExternalKeyLen {
		arrivalKey = arrivalKey[:MaxExternalKeyLen]
	}
	s.state.addArrival(Arrival{At: at, UnixNano: at.UnixNano(), ExternalKey: arrivalKey, Path: r.URL.Path, Mode: b.Mode}, s.cfg.MaxArrivals)
	if err == nil {
		s.state.noteAttempt(req.ExternalKey, at)
	}
	s.mu.Unlock()
	if err != nil {
		return err
	}

	if closed {
		return &Error{Code: CodeShuttingDown, Kind: stampede.Unavailable, Message: "the institution is shutting down; nothing was recorded"}
	}
	switch b.Mode {
	case ModeError:
		return &Error{Code: CodeInstitution, Kind: stampede.Internal, Message: "the institution failed (mode ERROR); nothing was recorded"}
	case ModeHangBefore:
		if !s.acquireHung() {
			return s.busy()
		}
		defer s.releaseHung()
		if err := s.hold(r.Context(), b.Hang(), release); err != nil {
			return err
		}
		return &Error{Code: stampede.Timeout, Message: fmt.Sprintf("held for %d ms before processing (mode HANG_BEFORE_PROCESSING); nothing was recorded", b.HangMS)}
	case ModeHangAfter:
		if !s.acquireHung() {
			return s.busy()
		}
		defer s.releaseHung()
		res, err := s.process(req, b)
		if err != nil {
			return err
		}
		if err := s.hold(r.Context(), b.Hang(), release); err != nil {
			return err
		}
		httpapi.WriteJSON(w, http.StatusOK, res)
		return nil
	default: // ModeNormal, ModeDecline
		res, err := s.process(req, b)
		if err != nil {
			return err
		}
		httpapi.WriteJSON(w, http.StatusOK, res)
		return nil
	}
}

// validateApproveBody checks the decoded fields of an approval request,
// naming the first one wrong.
func validateApproveBody(key *string, amount *int64, currency *string) error {
	switch {
	case key == nil:
		return stampede.InvalidField("external_key", "is required")
	case amount == nil:
		if err := ValidateExternalKey(*key); err != nil {
			return err
		}
		return stampede.InvalidField("amount", "is required")
	case currency == nil:
		if err := (ApproveRequest{ExternalKey: *key, Amount: *amount, Currency: Currencies[0]}).Validate(); err != nil {
			return err
		}
		return stampede.InvalidField("currency", "is required")
	}
	return ApproveRequest{ExternalKey: *key, Amount: *amount, Currency: *currency}.Validate()
}

// busy is the answer when MaxHung requests are held.
func (s *Server) busy() error {
	s.metrics.busy.Inc()
	return &Error{Code: CodeBusy, Kind: stampede.Unavailable, Message: fmt.Sprintf("the institution is holding %d requests, its limit; nothing was recorded", s.cfg.MaxHung)}
}

// acquireHung takes one of the MaxHung slots, or reports that none is
// free.
func (s *Server) acquireHung() bool {
	if s.hung.Add(1) > int64(s.cfg.MaxHung) {
		s.hung.Add(-1)
		return false
	}
	s.metrics.hung.Inc()
	return true
}

func (s *Server) releaseHung() {
	s.hung.Add(-1)
	s.metrics.hung.Dec()
}

// hold waits for d in the handler's own goroutine, returning nil when d
// passed, or an error to answer if the caller left, a Reset released the
// request or the server is closing.
func (s *Server) hold(ctx context.Context, d time.Duration, release <-chan struct{}) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-release:
		return &Error{Code: CodeReleased, Kind: stampede.Timeout, Message: "the held request was released by a reset"}
	case <-s.done:
		return &Error{Code: CodeReleased, Kind: stampede.Timeout, Message: "the held request was released: the institution is shutting down"}
	case <-ctx.Done():
		return &Error{Code: stampede.Timeout, Message: "the caller left while the request was held"}
	}
}

// process records req under behaviour b (NORMAL, DECLINE or
// HANG_AFTER_PROCESSING, which approves) and returns the answer.
func (s *Server) process(req ApproveRequest, b Behavior) (ApprovalResult, error) {
	now := s.now().UTC()
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, seen := s.state.records[req.ExternalKey]
	switch {
	case seen && b.Idempotent:
		if rec.Amount != req.Amount || rec.Currency != req.Currency {
			return ApprovalResult{}, &Error{Code: stampede.Conflict, Field: "external_key",
				Message: fmt.Sprintf("already used for %d %s; a repeat must carry the same amount and currency", rec.Amount, rec.Currency)}
		}
		rec.Requests++
		s.metrics.replays.Inc()
		return ApprovalResult{ExternalKey: rec.ExternalKey, Status: rec.Status, ApprovalID: rec.ApprovalID, Replayed: true}, nil
	case seen:
		rec.Requests++
	default:
		rec = &Record{ExternalKey: req.ExternalKey, Amount: req.Amount, Currency: req.Currency, Status: StatusDeclined, Requests: 1}
		s.state.records[req.ExternalKey] = rec
		s.state.order = append(s.state.order, req.ExternalKey)
	}
	if b.Mode == ModeDecline {
		if rec.DeclinedAt.IsZero() {
			rec.DeclinedAt = now
		}
		s.metrics.approvals.WithLabelValues(StatusDeclined).Inc()
		return ApprovalResult{ExternalKey: req.ExternalKey, Status: StatusDeclined}, nil
	}
	s.approval++
	id := fmt.Sprintf("apv_%010d", s.approval)
	if rec.Charges == 0 {
		rec.Status, rec.ApprovalID, rec.ApprovedAt = StatusApproved, id, now
	}
	rec.Charges++
	s.state.charges++
	s.metrics.charges.Inc()
	s.metrics.approvals.WithLabelValues(StatusApproved).Inc()
	return ApprovalResult{ExternalKey: req.ExternalKey, Status: StatusApproved, ApprovalID: id}, nil
}

// The extension members of the status inquiry's 404 problem, beside
// code "not_found": the key; whether not-found is definitive (no request
// for the key arrived within the last NotFoundWindow, so it will never be
// recorded); the window in milliseconds; and, when requests for the key
// arrived, the first and the last arrival (RFC 3339, UTC).
const (
	memberExternalKey    = "external_key"
	memberDefinitive     = "definitive"
	memberNotFoundWindow = "not_found_window_ms"
	memberFirstAttempt   = "first_attempt_at"
	memberLastAttempt    = "last_attempt_at"
)

// status serves GET /v1/approvals/{external_key}.
func (s *Server) status(w http.ResponseWriter, r *http.Request) error {
	key := r.PathValue("external_key")
	if err := ValidateExternalKey(key); err != nil {
		return err
	}
	now := s.now()
	s.mu.Lock()
	down := s.behavior.StatusAPI == StatusAPIDown
	var rec Record
	p, found := s.state.records[key]
	if found {
		rec = *p
	}
	a, attempted := s.state.attempts[key]
	s.mu.Unlock()
	switch {
	case down:
		return &Error{Code: CodeStatusDown, Kind: stampede.Unavailable, Message: "the status API is down (status_api DOWN); try again later and do not read this as not found"}
	case found:
		httpapi.WriteJSON(w, http.StatusOK, rec)
		return nil
	}
	definitive := !attempted || now.Sub(a.last) >= s.cfg.NotFoundWindow
	extra := map[string]any{
		memberExternalKey:    key,
		memberDefinitive:     definitive,
		memberNotFoundWindow: s.cfg.NotFoundWindow.Milliseconds(),
	}
	msg := fmt.Sprintf("no record for external key %q", key)
	switch {
	case definitive && attempted:
		msg += fmt.Sprintf("; definitive: its last request arrived over %s ago", s.cfg.NotFoundWindow)
	case definitive:
		msg += "; no request for it arrived (one still in the network is not covered: wait not_found_window_ms after sending it)"
	default:
		msg += fmt.Sprintf("; not definitive: a request for it arrived %s ago, within the %s not-found window", now.Sub(a.last).Round(time.Millisecond), s.cfg.NotFoundWindow)
	}
	if attempted {
		extra[memberFirstAttempt], extra[memberLastAttempt] = a.first, a.last
	}
	return &Error{Code: stampede.NotFound, Message: msg, Extra: extra}
}

// behaviorFields lists the fields of PUT /admin/behavior.
const behaviorFields = `"mode", "hang_ms", "idempotent", "status_api"`

func (s *Server) getBehavior(w http.ResponseWriter, r *http.Request) error {
	httpapi.WriteJSON(w, http.StatusOK, s.Behavior())
	return nil
}

// putBehavior serves PUT /admin/behavior: the fields given replace the
// current ones, the others stay.
func (s *Server) putBehavior(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		Mode       *string `json:"mode"`
		HangMS     *int64  `json:"hang_ms"`
		Idempotent *bool   `json:"idempotent"`
		StatusAPI  *string `json:"status_api"`
	}
	if err := s.decodeJSON(w, r, &body, behaviorFields); err != nil {
		return err
	}
	if body.Mode != nil {
		if err := validateMode(Mode(*body.Mode)); err != nil {
			return err
		}
	}
	if body.HangMS != nil {
		if err := validateHangMS(*body.HangMS); err != nil {
			return err
		}
	}
	if body.StatusAPI != nil {
		if err := validateStatusAPI(StatusAPI(*body.StatusAPI)); err != nil {
			return err
		}
	}
	s.mu.Lock()
	b := s.behavior
	if body.Mode != nil {
		b.Mode = Mode(*body.Mode)
	}
	if body.HangMS != nil {
		b.HangMS = *body.HangMS
	}
	if body.Idempotent != nil {
		b.Idempotent = *body.Idempotent
	}
	if body.StatusAPI != nil {
		b.StatusAPI = StatusAPI(*body.StatusAPI)
	}
	s.behavior = b
	s.mu.Unlock()
	s.log.Info("institution: behaviour set", "mode", b.Mode, "hang_ms", b.HangMS, "idempotent", b.Idempotent, "status_api", b.StatusAPI)
	httpapi.WriteJSON(w, http.StatusOK, b)
	return nil
}

func (s *Server) getArrivals(w http.ResponseWriter, r *http.Request) error {
	httpapi.WriteJSON(w, http.StatusOK, s.Arrivals())
	return nil
}

func (s *Server) getApprovals(w http.ResponseWriter, r *http.Request) error {
	httpapi.WriteJSON(w, http.StatusOK, s.Ledger())
	return nil
}

// ResetResult is the answer of POST /admin/reset.
type ResetResult struct {
	// Released counts the held requests the reset released.
	Released int `json:"released"`
	// Behavior is the behaviour after the reset: DefaultBehavior.
	Behavior Behavior `json:"behavior"`
}

func (s *Server) postReset(w http.ResponseWriter, r *http.Request) error {
	n := s.Reset()
	httpapi.WriteJSON(w, http.StatusOK, ResetResult{Released: n, Behavior: s.Behavior()})
	return nil
}
