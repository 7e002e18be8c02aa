package pay

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/stampede-lab/stampede/retry"
)

// Institution is the payment institution as the payment service sees it.
// An adapter over the real client lives in pay/institutionclient.
type Institution interface {
	// Approve asks for an approval. Its error tells what is known:
	// ErrNotSent (refused before it left: nothing happened),
	// ErrOutcomeUnknown (timeout or lost answer: the money may have
	// moved); a nil error carries the institution's verdict.
	Approve(ctx context.Context, req ApprovalRequest) (Verdict, error)
	// Inquire asks what became of an external key.
	// ErrInquiryUnavailable when the status API is down.
	Inquire(ctx context.Context, externalKey string) (Inquiry, error)
}

// ApprovalRequest is what the service sends to the institution.
type ApprovalRequest struct {
	ExternalKey string
	Amount      int64
	Currency    string
}

// Verdict is the institution's answer to an approval.
type Verdict struct {
	Approved bool // false: declined
}

// Inquiry is the institution's answer to a status inquiry.
type Inquiry struct {
	// Found: the institution knows the key; Approved tells the verdict.
	Found    bool
	Approved bool
	// Definitive: for a key not found, whether no request for it reached
	// the institution within its declared not-found window.
	Definitive bool
	// NotFoundWindow is the window the institution declared. The service
	// also waits that long after its own last request before it reads
	// "not found" as "never processed": a request still in the network
	// has not arrived yet.
	NotFoundWindow time.Duration
}

// Errors an Institution returns.
var (
	ErrNotSent            = errors.New("pay: the approval request was refused before it was sent")
	ErrRejected           = errors.New("pay: the institution rejected the request without processing it")
	ErrOutcomeUnknown     = errors.New("pay: the approval's outcome is unknown (timeout or lost answer)")
	ErrInquiryUnavailable = errors.New("pay: the institution's status API is unavailable")
)

// Config configures a Service.
type Config struct {
	// ApprovalTimeout bounds one approval call.
	ApprovalTimeout time.Duration
	// Retry decides whether an approval whose outcome is unknown is sent
	// again. Production uses none (the default): a timeout is UNKNOWN and
	// a status inquiry settles it. Other policies exist for the lab.
	Retry retry.Policy
	// Sleep waits between retries (tests inject a fake).
	Sleep retry.Sleeper
	// MaxInFlight is the bulkhead: approvals in flight at once. A request
	// over it is FAILED without being sent.
	MaxInFlight int
	// InquiryTimeout bounds one status inquiry.
	InquiryTimeout time.Duration
	// ReconcileEvery is how often the reconciler looks at UNKNOWN
	// payments; each payment's inquiries back off from it exponentially.
	ReconcileEvery time.Duration
	// GiveUpAfter is how long reconciliation passes may keep failing
	// (the store unreachable, say), with none succeeding, before Run
	// gives up and returns the error: a transient failure is retried on
	// the next tick; one that lasts this long is permanent.
	GiveUpAfter time.Duration
	// ReviewAfter is how many inquiries may leave a payment UNKNOWN
	// before it is flagged for manual review.
	ReviewAfter int
	// IdempotencyTTL is how long an Idempotency-Key is remembered.
	IdempotencyTTL time.Duration
	// Now is the clock.
	Now func() time.Time
	// Logger receives the service's logs.
	Logger *slog.Logger
	// Metrics, if set, receives the service's metrics.
	Metrics *Metrics
}

// DefaultConfig returns a 3-second approval timeout, no retries, a
// bulkhead of 1,000, 1-second inquiries every second with backoff, review
// after 8 inconclusive inquiries, a reconciler that gives up after 5
// minutes of failures, and 24-hour idempotency keys.
func DefaultConfig() Config {
	none, _ := retry.New(retry.DefaultConfig(), nil)
	return Config{
		ApprovalTimeout: 3 * time.Second,
		Retry:           none,
		Sleep:           retry.Sleep,
		MaxInFlight:     1000,
		InquiryTimeout:  time.Second,
		ReconcileEvery:  time.Second,
		GiveUpAfter:     5 * time.Minute,
		ReviewAfter:     8,
		IdempotencyTTL:  DefaultIdempotencyTTL,
		Now:             time.Now,
		Logger:          slog.Default(),
	}
}

// Validate reports the first unusable field.
func (c Config) Validate() error {
	switch {
	case c.ApprovalTimeout <= 0:
		return Invalid("ApprovalTimeout", "must be positive, got %s", c.ApprovalTimeout)
	case c.Retry == nil:
		return Invalid("Retry", "must not be nil (use the none policy)")
	case c.Sleep == nil:
		return Invalid("Sleep", "must not be nil")
	case c.MaxInFlight < 1:
		return Invalid("MaxInFlight", "must be at least 1, got %d", c.MaxInFlight)
	case c.InquiryTimeout <= 0:
		return Invalid("InquiryTimeout", "must be positive, got %s", c.InquiryTimeout)
	case c.ReconcileEvery <= 0:
		return Invalid("ReconcileEvery", "must be positive, got %s", c.ReconcileEvery)
	case c.GiveUpAfter <= 0:
		return Invalid("GiveUpAfter", "must be positive, got %s", c.GiveUpAfter)
	case c.ReviewAfter < 1:
		return Invalid("ReviewAfter", "must be at least 1, got %d", c.ReviewAfter)
	case c.IdempotencyTTL <= 0:
		return Invalid("IdempotencyTTL", "must be positive, got %s", c.IdempotencyTTL)
	case c.Now == nil:
		return Invalid("Now", "must not be nil")
	case c.Logger == nil:
		return Invalid("Logger", "must not be nil")
	}
	return nil
}

// Service is the payment service's logic: idempotent creation, the
// approval call, and settling UNKNOWN payments by status inquiry.
type Service struct {
	store Store
	inst  Institution
	cfg   Config
	slots chan struct{} // the bulkhead

	mu       sync.Mutex
	inquired map[string]inquiryState // reconciler backoff per payment
}

type inquiryState struct {
	count int
	next  time.Time
}

// NewService returns a Service over store and inst.
func NewService(store Store, inst Institution, cfg Config) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Service{store: store, inst: inst, cfg: cfg, slots: make(chan struct{}, cfg.MaxInFlight), inquired: map[string]inquiryState{}}, nil
}

// CreateRequest is a payment request.
type CreateRequest struct {
	MerchantID string `json:"merchant_id"`
	OrderID    string `json:"order_id"`
	Amount     int64  `json:"amount"`
	Currency   string `json:"currency"`
}

// Hash identifies a request body for idempotency: same key, same hash.
func (r CreateRequest) Hash() string {
	b, _ := json.Marshal(r)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Response is what the HTTP layer sends back (and what an idempotency
// record replays).
type Response struct {
	Code int
	Body []byte
	// Replayed: the stored answer to an earlier request with the same
	// idempotency key (the API sets Idempotent-Replayed: true).
	Replayed bool
}

// Create handles a payment request of merchant req.MerchantID under an
// idempotency key, scoped to the merchant (ScopedKey), and returns the
// HTTP response: 201 APPROVED, DECLINED or FAILED, 202 UNKNOWN; or a
// replay of the stored response for a repeated key. An order that already
// has a live or approved payment is *OrderExistsError (409 order_exists).
func (s *Service) Create(ctx context.Context, key string, req CreateRequest) (Response, error) {
	if err := ValidateIdempotencyKey(key); err != nil {
		return Response{}, err
	}
	if err := ValidateCreate(req.MerchantID, req.OrderID, req.Amount, req.Currency); err != nil {
		return Response{}, err
	}
	mid, _ := ParseUUID(req.MerchantID)
	req.MerchantID = mid.String() // the same request hashes the same whatever the case
	now := s.cfg.Now()
	p := Payment{ID: NewID(), MerchantID: req.MerchantID, OrderID: req.OrderID, Amount: req.Amount, Currency: req.Currency}
	idem := IdempotencyRecord{Key: ScopedKey(req.MerchantID, key), RequestHash: req.Hash(), CreatedAt: now, ExpiresAt: now.Add(s.cfg.IdempotencyTTL)}
	p, err := s.store.CreatePending(ctx, p, idem)
	var conflict *IdempotencyConflict
	if errors.As(err, &conflict) {
		return s.replay(conflict.Record, idem.RequestHash)
	}
	if err != nil {
		return Response{}, err
	}

	start := time.Now()
	to, reason := s.approve(ctx, p)
	s.cfg.Metrics.outcome(to, time.Since(start))
	// The outcome is written even if the client went away meanwhile.
	wctx := context.WithoutCancel(ctx)
	code := http.StatusCreated
	if to == StatusUnknown {
		code = http.StatusAccepted
	}
	final := p
	final.Status = to
	final.History = nil // GET shows the history; the stored answer stays small
	body, err := json.Marshal(ViewOf(final))
	if err != nil {
		return Response{}, Internal(err)
	}
	if _, err := s.store.Transition(wctx, p.ID, StatusPending, to, reason, &StoredResponse{Code: code, Body: body}); err != nil {
		return Response{}, err
	}
	// The same bytes a repeated request with this key will get.
	return Response{Code: code, Body: body}, nil
}

// replay answers a repeated idempotency key.
func (s *Service) replay(rec IdempotencyRecord, hash string) (Response, error) {
	switch {
	case rec.RequestHash != hash:
		return Response{}, &Error{Code: CodeMismatch, Field: "Idempotency-Key", Message: "this key was used with a different request body"}
	case rec.State == IdempotencyInFlight:
		return Response{}, &Error{Code: CodeConflict, Field: "Idempotency-Key", Message: "a request with this key is still in flight; retry later", RetryAfter: time.Second}
	default:
		return Response{Code: rec.ResponseCode, Body: rec.ResponseBody, Replayed: true}, nil
	}
}

// approve calls the institution (with the configured retry policy, none
// by default) and returns the status the payment moves to and the public
// reason why (see SafeReason); the raw error goes to the log.
//
// The call is detached from ctx's cancellation: a charge in flight is
// not cut because the client went away (that would leave the payment
// UNKNOWN although the institution answers); ApprovalTimeout bounds each
// attempt.
func (s *Service) approve(ctx context.Context, p Payment) (Status, string) {
	ctx = context.WithoutCancel(ctx)
	select {
	case s.slots <- struct{}{}:
		defer func() { <-s.slots }()
	default:
		return StatusFailed, reason(ReasonBulkheadFull, "%d approvals were in flight; the request was not sent", s.cfg.MaxInFlight)
	}
	var verdict Verdict
	sent := false
	attempts, err := retry.Do(ctx, s.cfg.Retry, s.cfg.Sleep, func(ctx context.Context, attempt int) error {
		actx, cancel := context.WithTimeout(ctx, s.cfg.ApprovalTimeout)
		defer cancel()
		v, err := s.inst.Approve(actx, ApprovalRequest{ExternalKey: p.ExternalKey, Amount: p.Amount, Currency: p.Currency})
		if !errors.Is(err, ErrNotSent) {
			sent = true
		}
		verdict = v
		return err
	}, func(err error) bool { return errors.Is(err, ErrOutcomeUnknown) })
	if err == nil {
		if verdict.Approved {
			return StatusApproved, reason(ReasonApproved, "the institution approved it (attempt %d)", attempts)
		}
		return StatusDeclined, reason(ReasonDeclined, "the institution declined it (attempt %d)", attempts)
	}
	to, why := approvalFailure(err, sent, attempts, s.cfg.ApprovalTimeout)
	s.cfg.Logger.Warn("pay: approval failed", "payment", p.ID, "status", to, "reason", ReasonCode(why), "attempts", attempts, "err", err)
	return to, why
}

// approvalFailure classifies a failed approval: the status the payment
// moves to and its public reason, without the error's text.
func approvalFailure(err error, sent bool, attempts int, timeout time.Duration) (Status, string) {
	switch {
	case !sent:
		return StatusFailed, reason(ReasonNotSent, "the request could not be sent to the institution; nothing was charged")
	case errors.Is(err, ErrRejected):
		return StatusFailed, reason(ReasonRejected, "the institution refused the request without processing it")
	case errors.Is(err, context.DeadlineExceeded):
		return StatusUnknown, reason(ReasonApprovalTimeout, "the institution did not answer within %s (%d attempt(s)); the money may have moved", timeout, attempts)
	default:
		return StatusUnknown, reason(ReasonOutcomeUnknown, "the institution's answer was lost or an error (%d attempt(s)); the money may have moved", attempts)
	}
}

// Get returns a payment; an UNKNOWN payment is first given one status
// inquiry, so a reader sees the settled status as soon as it is known.
func (s *Service) Get(ctx context.Context, id string) (Payment, error) {
	if _, err := ParseUUID(id); err != nil {
		return Payment{}, Invalid("id", "must be a UUID")
	}
	p, err := s.store.Get(ctx, id)
	if err != nil {
		return Payment{}, err
	}
	if p.Status == StatusUnknown {
		if settled, err := s.settle(ctx, p); err == nil {
			return settled, nil
		}
	}
	return p, nil
}

// GetFor returns payment id of merchant merchantID as Get does. Another
// merchant's payment is ErrNotFound, as a payment that does not exist,
// so that payment IDs do not leak between merchants.
func (s *Service) GetFor(ctx context.Context, merchantID, id string) (Payment, error) {
	if _, err := ParseUUID(id); err != nil {
		return Payment{}, Invalid("id", "must be a UUID")
	}
	p, err := s.store.Get(ctx, id)
	if err != nil {
		return Payment{}, err
	}
	if !strings.EqualFold(p.MerchantID, merchantID) {
		return Payment{}, fmt.Errorf("payment %q of another merchant: %w", id, ErrNotFound)
	}
	if p.Status == StatusUnknown {
		if settled, err := s.settle(ctx, p); err == nil {
			return settled, nil
		}
	}
	return p, nil
}

// settle makes one status inquiry for an UNKNOWN payment and moves it to
// APPROVED, DECLINED or FAILED when the answer allows; otherwise the
// payment stays UNKNOWN (never guessed).
func (s *Service) settle(ctx context.Context, p Payment) (Payment, error) {
	ictx, cancel := context.WithTimeout(ctx, s.cfg.InquiryTimeout)
	defer cancel()
	q, err := s.inst.Inquire(ictx, p.ExternalKey)
	if err != nil {
		return p, err
	}
	var (
		to  Status
		why string
	)
	switch {
	case q.Found && q.Approved:
		to, why = StatusApproved, reason(ReasonInquiryApproved, "a status inquiry found it approved")
	case q.Found:
		to, why = StatusDeclined, reason(ReasonInquiryDeclined, "a status inquiry found it declined")
	case q.Definitive && !s.cfg.Now().Before(p.UpdatedAt.Add(q.NotFoundWindow)):
		// p.UpdatedAt is when the payment became UNKNOWN: after its last
		// approval request.
		to, why = StatusFailed, reason(ReasonInquiryNotFound, "a status inquiry did not find it %s after our last request (the institution's not-found window)", q.NotFoundWindow)
	default:
		return p, nil // not found yet, within the window: ask again later
	}
	settled, err := s.store.Transition(context.WithoutCancel(ctx), p.ID, StatusUnknown, to, why, nil)
	if err == nil {
		s.cfg.Metrics.settle(to)
	}
	if errors.Is(err, ErrStaleStatus) {
		return s.store.Get(ctx, p.ID) // someone else settled it
	}
	return settled, err
}

// Recover turns every PENDING payment, left by a crash mid-call, into
// UNKNOWN, for the reconciler to settle. Call it at start-up, before
// serving.
func (s *Service) Recover(ctx context.Context) (int, error) {
	n := 0
	for {
		ps, err := s.store.ListByStatus(ctx, StatusPending, 100)
		if err != nil {
			return n, err
		}
		if len(ps) == 0 {
			s.cfg.Metrics.recover(n)
			return n, nil
		}
		for _, p := range ps {
			p.Status = StatusUnknown
			body, _ := json.Marshal(ViewOf(p))
			_, err := s.store.Transition(ctx, p.ID, StatusPending, StatusUnknown, reason(ReasonRecovered, "PENDING when the service started; the call may have reached the institution"),
				&StoredResponse{Code: http.StatusAccepted, Body: body})
			if err != nil && !errors.Is(err, ErrStaleStatus) {
				return n, err
			}
			n++
		}
	}
}

// Reconcile runs one reconciliation pass over UNKNOWN payments whose
// backoff has elapsed, and returns how many it settled.
func (s *Service) Reconcile(ctx context.Context) (int, error) {
	ps, err := s.store.ListByStatus(ctx, StatusUnknown, 500)
	if err != nil {
		return 0, err
	}
	now := s.cfg.Now()
	settled := 0
	for _, p := range ps {
		s.mu.Lock()
		st := s.inquired[p.ID]
		s.mu.Unlock()
		if now.Before(st.next) {
			continue
		}
		got, err := s.settle(ctx, p)
		if err == nil && got.Status != StatusUnknown {
			settled++
			s.mu.Lock()
			delete(s.inquired, p.ID)
			s.mu.Unlock()
			continue
		}
		st.count++
		backoff := s.cfg.ReconcileEvery << min(st.count, 6)
		st.next = now.Add(backoff)
		s.mu.Lock()
		s.inquired[p.ID] = st
		s.mu.Unlock()
		if st.count == s.cfg.ReviewAfter && !p.ManualReview {
			why := reason(ReasonReviewUnsettled, "still UNKNOWN after %d status inquiries", st.count)
			if errors.Is(err, ErrInquiryUnavailable) {
				why += "; the institution's status API is unavailable"
			}
			s.cfg.Logger.Warn("pay: payment flagged for manual review", "payment", p.ID, "inquiries", st.count, "err", err)
			if ferr := s.store.FlagReview(ctx, p.ID, why); ferr != nil {
				return settled, ferr
			}
			s.cfg.Metrics.flag()
		}
	}
	return settled, nil
}

// Run recovers PENDING payments, then runs the reconciler (RunReconciler)
// until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	if n, err := s.Recover(ctx); err != nil {
		return err
	} else if n > 0 {
		s.cfg.Logger.Warn("pay: recovered PENDING payments as UNKNOWN", "count", n)
	}
	return s.RunReconciler(ctx)
}

// RunReconciler reconciles every ReconcileEvery and deletes expired
// idempotency keys, until ctx ends (then it returns nil). A failed pass
// is logged and retried on the next tick; when passes have kept failing
// for GiveUpAfter, it returns the last error.
func (s *Service) RunReconciler(ctx context.Context) error {
	t := time.NewTicker(s.cfg.ReconcileEvery)
	defer t.Stop()
	var (
		failingSince time.Time
		failures     int
	)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		n, err := s.Reconcile(ctx)
		if err == nil {
			_, err = s.store.DeleteExpiredIdempotency(ctx, s.cfg.Now())
		}
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			now := s.cfg.Now()
			if failures == 0 {
				failingSince = now
			}
			failures++
			if elapsed := now.Sub(failingSince); elapsed >= s.cfg.GiveUpAfter {
				return fmt.Errorf("pay: reconciler gave up after %d failed passes in %s: %w", failures, elapsed.Round(time.Millisecond), err)
			}
			s.cfg.Logger.Warn("pay: reconciliation failed; retrying", "err", err, "failures", failures)
			continue
		}
		if failures > 0 {
			s.cfg.Logger.Info("pay: reconciler recovered", "failures", failures)
			failures = 0
		}
		if n > 0 {
			s.cfg.Logger.Info("pay: settled UNKNOWN payments", "count", n)
		}
	}
}

// View is a payment as the API shows it.
type View struct {
	ID           string       `json:"id"`
	MerchantID   string       `json:"merchant_id"`
	OrderID      string       `json:"order_id"`
	Amount       int64        `json:"amount"`
	Currency     string       `json:"currency"`
	Status       Status       `json:"status"`
	ManualReview bool         `json:"manual_review"`
	ReviewReason string       `json:"review_reason,omitempty"`
	CreatedAt    time.Time    `json:"created_at"`
	UpdatedAt    time.Time    `json:"updated_at"`
	History      []ChangeView `json:"history,omitempty"`
}

// ChangeView is one status change as the API shows it: Code is the
// reason's code (such as approval_timeout), Reason the code with safe
// text.
type ChangeView struct {
	From   Status    `json:"from,omitempty"`
	To     Status    `json:"to"`
	Code   string    `json:"code"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
}

// ViewOf renders p for the API. Reasons pass through SafeReason, so that
// reasons stored before they were made safe show no internals either.
func ViewOf(p Payment) View {
	v := View{ID: p.ID, MerchantID: p.MerchantID, OrderID: p.OrderID, Amount: p.Amount, Currency: p.Currency,
		Status: p.Status, ManualReview: p.ManualReview, CreatedAt: p.CreatedAt, UpdatedAt: p.UpdatedAt}
	if p.ReviewReason != "" {
		v.ReviewReason = SafeReason(p.ReviewReason)
	}
	for _, h := range p.History {
		r := SafeReason(h.Reason)
		v.History = append(v.History, ChangeView{From: h.From, To: h.To, Code: ReasonCode(r), Reason: r, At: h.At})
	}
	return v
}
