package institution

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stampede-lab/stampede"
)

// Simulator is the institution's state machine: its behaviour, its
// ledger and arrival log, and the requests it holds. It is safe for
// concurrent use. Call Close when done: it releases every held request.
type Simulator struct {
	cfg     Config
	log     *slog.Logger
	now     func() time.Time
	metrics *metrics

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

// New makes a simulator with DefaultBehavior; cfg must pass Validate. It
// starts nothing.
func New(cfg Config) (*Simulator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Metrics)
	if err != nil {
		return nil, err
	}
	return &Simulator{
		cfg:      cfg,
		log:      cfg.Logger,
		now:      cfg.Now,
		metrics:  m,
		done:     make(chan struct{}),
		behavior: DefaultBehavior(),
		state:    newLedgerState(),
		release:  make(chan struct{}),
	}, nil
}

// Config returns the simulator's configuration.
func (s *Simulator) Config() Config { return s.cfg }

// Now reads the simulator's clock.
func (s *Simulator) Now() time.Time { return s.now() }

// Close releases every held request (each fails with CodeReleased) and
// makes every later approval fail at once with CodeShuttingDown,
// recording nothing. The status inquiry and the admin operations keep
// working. Close is idempotent; call it before an HTTP server's shutdown,
// which would otherwise wait for the held requests.
func (s *Simulator) Close() {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		close(s.done)
	})
}

// Hung returns the number of requests held right now.
func (s *Simulator) Hung() int { return int(s.hung.Load()) }

// Behavior returns the current behaviour.
func (s *Simulator) Behavior() Behavior {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.behavior
}

// SetBehavior validates b and makes it the current behaviour. Requests
// already held keep the behaviour they arrived under.
func (s *Simulator) SetBehavior(b Behavior) error {
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
func (s *Simulator) Reset() int {
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
func (s *Simulator) Ledger() Ledger {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state.ledger()
}

// Arrivals returns the arrival log in time order.
func (s *Simulator) Arrivals() ArrivalLog {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state.arrivalLog()
}

// Attempt is one approval request as it arrived.
type Attempt struct {
	// At is when it arrived; zero means now.
	At time.Time
	// Path is the path it was sent to, for the arrival log.
	Path string
	// Request is what it asked for; with Invalid set, only its
	// ExternalKey is read (for the arrival log).
	Request ApproveRequest
	// Invalid, when set, is why the request cannot be processed (its body
	// did not decode or validate): the arrival is logged, nothing else
	// happens, and Approve returns Invalid.
	Invalid error
}

// Approve handles an approval attempt under the current behaviour: it
// logs the arrival, then approves and charges (NORMAL), declines
// (DECLINE), fails recording nothing (ERROR), holds it for the hang and
// fails recording nothing (HANG_BEFORE_PROCESSING, a Timeout error), or
// charges and then holds the answer (HANG_AFTER_PROCESSING). A hold ends
// early with an error when ctx ends, a Reset releases it or the
// simulator closes; beyond Config.MaxHung held requests, the answer is
// CodeBusy at once.
func (s *Simulator) Approve(ctx context.Context, a Attempt) (ApprovalResult, error) {
	at := a.At
	if at.IsZero() {
		at = s.now()
	}
	at = at.UTC()
	s.metrics.arrivals.Inc()
	req, err := a.Request, a.Invalid

	s.mu.Lock()
	b, release, closed := s.behavior, s.release, s.closed
	arrivalKey := req.ExternalKey
	if len(arrivalKey) > MaxExternalKeyLen {
		arrivalKey = arrivalKey[:MaxExternalKeyLen]
	}
	s.state.addArrival(Arrival{At: at, UnixNano: at.UnixNano(), ExternalKey: arrivalKey, Path: a.Path, Mode: b.Mode}, s.cfg.MaxArrivals)
	if err == nil {
		s.state.noteAttempt(req.ExternalKey, at)
	}
	s.mu.Unlock()
	if err != nil {
		return ApprovalResult{}, err
	}

	if closed {
		return ApprovalResult{}, &Error{Code: CodeShuttingDown, Kind: stampede.Unavailable, Message: "the institution is shutting down; nothing was recorded"}
	}
	switch b.Mode {
	case ModeError:
		return ApprovalResult{}, &Error{Code: CodeInstitution, Kind: stampede.Internal, Message: "the institution failed (mode ERROR); nothing was recorded"}
	case ModeHangBefore:
		if !s.acquireHung() {
			return ApprovalResult{}, s.busy()
		}
		defer s.releaseHung()
		if err := s.hold(ctx, b.Hang(), release); err != nil {
			return ApprovalResult{}, err
		}
		return ApprovalResult{}, &Error{Code: stampede.Timeout, Message: fmt.Sprintf("held for %d ms before processing (mode HANG_BEFORE_PROCESSING); nothing was recorded", b.HangMS)}
	case ModeHangAfter:
		if !s.acquireHung() {
			return ApprovalResult{}, s.busy()
		}
		defer s.releaseHung()
		res, err := s.process(req, b)
		if err != nil {
			return ApprovalResult{}, err
		}
		if err := s.hold(ctx, b.Hang(), release); err != nil {
			return ApprovalResult{}, err
		}
		return res, nil
	default: // ModeNormal, ModeDecline
		return s.process(req, b)
	}
}

// ValidateApproveBody checks the decoded fields of an approval request,
// naming the first one wrong (a nil field is missing).
func ValidateApproveBody(key *string, amount *int64, currency *string) error {
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
func (s *Simulator) busy() error {
	s.metrics.busy.Inc()
	return &Error{Code: CodeBusy, Kind: stampede.Unavailable, Message: fmt.Sprintf("the institution is holding %d requests, its limit; nothing was recorded", s.cfg.MaxHung)}
}

// acquireHung takes one of the MaxHung slots, or reports that none is
// free.
func (s *Simulator) acquireHung() bool {
	if s.hung.Add(1) > int64(s.cfg.MaxHung) {
		s.hung.Add(-1)
		return false
	}
	s.metrics.hung.Inc()
	return true
}

func (s *Simulator) releaseHung() {
	s.hung.Add(-1)
	s.metrics.hung.Dec()
}

// hold waits for d in the handler's own goroutine, returning nil when d
// passed, or an error to answer if the caller left, a Reset released the
// request or the server is closing.
func (s *Simulator) hold(ctx context.Context, d time.Duration, release <-chan struct{}) error {
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
func (s *Simulator) process(req ApproveRequest, b Behavior) (ApprovalResult, error) {
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
	if req.Capture == "manual" {
		// An authorisation holds the money; the capture charges it.
		if rec.Status == StatusDeclined {
			rec.Status, rec.ApprovalID, rec.ApprovedAt, rec.Manual = StatusAuthorized, id, now, true
		}
		s.metrics.approvals.WithLabelValues(StatusAuthorized).Inc()
		return ApprovalResult{ExternalKey: req.ExternalKey, Status: StatusAuthorized, ApprovalID: rec.ApprovalID}, nil
	}
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
	MemberExternalKey    = "external_key"
	MemberDefinitive     = "definitive"
	MemberNotFoundWindow = "not_found_window_ms"
	MemberFirstAttempt   = "first_attempt_at"
	MemberLastAttempt    = "last_attempt_at"
)

// Status answers the status inquiry about an external key: its record,
// or a NotFound error whose Extra members say whether not-found is
// definitive, or CodeStatusDown while the status API is down.
func (s *Simulator) Status(key string) (Record, error) {
	if err := ValidateExternalKey(key); err != nil {
		return Record{}, err
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
		return Record{}, &Error{Code: CodeStatusDown, Kind: stampede.Unavailable, Message: "the status API is down (status_api DOWN); try again later and do not read this as not found"}
	case found:
		return rec, nil
	}
	definitive := !attempted || now.Sub(a.last) >= s.cfg.NotFoundWindow
	extra := map[string]any{
		MemberExternalKey:    key,
		MemberDefinitive:     definitive,
		MemberNotFoundWindow: s.cfg.NotFoundWindow.Milliseconds(),
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
		extra[MemberFirstAttempt], extra[MemberLastAttempt] = a.first, a.last
	}
	return Record{}, &Error{Code: stampede.NotFound, Message: msg, Extra: extra}
}

// BehaviorPatch changes some fields of the behaviour: the body of PUT
// /admin/behavior. A nil field stays as it is.
type BehaviorPatch struct {
	Mode       *string `json:"mode"`
	HangMS     *int64  `json:"hang_ms"`
	Idempotent *bool   `json:"idempotent"`
	StatusAPI  *string `json:"status_api"`
}

// PatchBehavior validates p and applies it to the current behaviour,
// which it returns. Requests already held keep the behaviour they arrived
// under.
func (s *Simulator) PatchBehavior(p BehaviorPatch) (Behavior, error) {
	if p.Mode != nil {
		if err := validateMode(Mode(*p.Mode)); err != nil {
			return Behavior{}, err
		}
	}
	if p.HangMS != nil {
		if err := validateHangMS(*p.HangMS); err != nil {
			return Behavior{}, err
		}
	}
	if p.StatusAPI != nil {
		if err := validateStatusAPI(StatusAPI(*p.StatusAPI)); err != nil {
			return Behavior{}, err
		}
	}
	s.mu.Lock()
	b := s.behavior
	if p.Mode != nil {
		b.Mode = Mode(*p.Mode)
	}
	if p.HangMS != nil {
		b.HangMS = *p.HangMS
	}
	if p.Idempotent != nil {
		b.Idempotent = *p.Idempotent
	}
	if p.StatusAPI != nil {
		b.StatusAPI = StatusAPI(*p.StatusAPI)
	}
	s.behavior = b
	s.mu.Unlock()
	s.log.Info("institution: behaviour set", "mode", b.Mode, "hang_ms", b.HangMS, "idempotent", b.Idempotent, "status_api", b.StatusAPI)
	return b, nil
}

// ResetResult is the answer of a reset (POST /admin/reset).
type ResetResult struct {
	// Released counts the held requests the reset released.
	Released int `json:"released"`
	// Behavior is the behaviour after the reset: DefaultBehavior.
	Behavior Behavior `json:"behavior"`
}
