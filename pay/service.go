package pay

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/stampede-lab/stampede"
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
	// PaymentKey is the create request's payment_key: the key the
	// institution's widget issued (see ClientAuthorized); empty for the
	// other connectors.
	PaymentKey string
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
	// Sleep waits between retries, of approvals and of the write after
	// one (tests inject a fake).
	Sleep retry.Sleeper
	// MaxInFlight is the bulkhead: approvals in flight at once. A request
	// over it is FAILED without being sent.
	MaxInFlight int
	// InquiryTimeout bounds one status inquiry.
	InquiryTimeout time.Duration
	// InquiryConcurrency bounds the status inquiries a reconciliation
	// pass runs at once.
	InquiryConcurrency int
	// ReconcileEvery is how often the reconciler claims the payments due
	// for an inquiry; after each inconclusive inquiry a payment waits
	// ReconcileEvery << min(inquiries, 6) before the next (and a GET of
	// it reads the stored state meanwhile).
	ReconcileEvery time.Duration
	// GiveUpAfter is how long reconciliation passes may keep failing
	// (the store unreachable, say), with none succeeding, before Run
	// gives up and returns the error: a transient failure is retried on
	// the next tick; one that lasts this long is permanent.
	GiveUpAfter time.Duration
	// ClaimLease is how long a claimed payment is left to the instance
	// that claimed it: if that instance dies mid-inquiry, another claims
	// the payment once the lease has run out. It must exceed
	// InquiryTimeout.
	ClaimLease time.Duration
	// TakeoverMargin: a PENDING payment older than ApprovalTimeout plus
	// TakeoverMargin has lost its approval call (a crash, or a write that
	// failed after the institution answered), and a reconciler takes it
	// over as UNKNOWN. A younger one is never touched: its instance may
	// be calling the institution right now. With a Retry policy other
	// than none the margin must cover the further attempts and waits.
	TakeoverMargin time.Duration
	// WriteRetryFor bounds how long the write of an approval's outcome is
	// retried (with backoff, whatever the client does) when the database
	// fails; after it the request fails and the reconciler settles the
	// payment.
	WriteRetryFor time.Duration
	// ReviewAfter is how many inquiries may leave a payment UNKNOWN
	// before it is flagged for manual review.
	ReviewAfter int
	// IdempotencyTTL is how long an Idempotency-Key is remembered.
	IdempotencyTTL time.Duration
	// AuthWindow is how long an authorisation (a manual-capture payment
	// AUTHORIZED) may wait for its capture: the reconciler voids one
	// older than that (counted from the payment's creation). 0 never
	// voids.
	AuthWindow time.Duration
	// CloseAfter is how long an APPROVED or AUTHORIZED payment may wait
	// for the merchant to confirm its order (ConfirmOrder) before the
	// reconciler's ClosurePass cancels it: refunds or voids it. 0 (the
	// default) closes nothing: set it only when every merchant confirms.
	CloseAfter time.Duration
	// CancelRetry is how long a cancellation whose refund the institution
	// declined waits before its next refund, doubled after each decline
	// (at most MaxCancelRefunds refunds).
	CancelRetry time.Duration
	// Now is the clock.
	Now func() time.Time
	// Logger receives the service's logs.
	Logger *slog.Logger
	// Metrics, if set, receives the service's metrics.
	Metrics *Metrics
}

// DefaultConfig returns a 3-second approval timeout, no retries, a
// bulkhead of 1,000, 1-second inquiries (16 at once) every second with
// backoff, 10-second claims, PENDING taken over 2 seconds after its
// approval timeout, outcome writes retried for 10 seconds, review after 8
// inconclusive inquiries, a reconciler that gives up after 5 minutes of
// failures, 24-hour idempotency keys and a 7-day authorisation window.
func DefaultConfig() Config {
	none, _ := retry.New(retry.DefaultConfig(), nil)
	return Config{
		ApprovalTimeout:    3 * time.Second,
		Retry:              none,
		Sleep:              retry.Sleep,
		MaxInFlight:        1000,
		InquiryTimeout:     time.Second,
		InquiryConcurrency: 16,
		ReconcileEvery:     time.Second,
		ClaimLease:         10 * time.Second,
		TakeoverMargin:     2 * time.Second,
		WriteRetryFor:      10 * time.Second,
		GiveUpAfter:        5 * time.Minute,
		ReviewAfter:        8,
		IdempotencyTTL:     DefaultIdempotencyTTL,
		AuthWindow:         DefaultAuthWindow,
		CancelRetry:        5 * time.Second,
		Now:                time.Now,
		Logger:             slog.Default(),
	}
}

// Validate reports every unusable field at once, each named in
// snake_case as serve pay's flag that sets it, if any: ApprovalTimeout is
// "timeout" (--timeout).
func (c Config) Validate() error {
	var f stampede.Fields
	if c.ApprovalTimeout <= 0 {
		f.Add("timeout", "must be positive, got %s", c.ApprovalTimeout)
	}
	if c.Retry == nil {
		f.Add("retry", "must not be nil (use the none policy)")
	}
	if c.Sleep == nil {
		f.Add("sleep", "must not be nil")
	}
	if c.MaxInFlight < 1 {
		f.Add("max_in_flight", "must be at least 1, got %d", c.MaxInFlight)
	}
	if c.InquiryTimeout <= 0 {
		f.Add("inquiry_timeout", "must be positive, got %s", c.InquiryTimeout)
	}
	if c.InquiryConcurrency < 1 {
		f.Add("inquiry_concurrency", "must be at least 1, got %d", c.InquiryConcurrency)
	}
	if c.ReconcileEvery <= 0 {
		f.Add("reconcile_every", "must be positive, got %s", c.ReconcileEvery)
	}
	if c.GiveUpAfter <= 0 {
		f.Add("give_up_after", "must be positive, got %s", c.GiveUpAfter)
	}
	if c.ClaimLease <= c.InquiryTimeout {
		f.Add("claim_lease", "must exceed inquiry_timeout (%s), got %s", c.InquiryTimeout, c.ClaimLease)
	}
	if c.TakeoverMargin <= 0 {
		f.Add("takeover_margin", "must be positive, got %s", c.TakeoverMargin)
	}
	if c.WriteRetryFor < 0 {
		f.Add("write_retry_for", "must not be negative, got %s", c.WriteRetryFor)
	}
	if c.ReviewAfter < 1 {
		f.Add("review_after", "must be at least 1, got %d", c.ReviewAfter)
	}
	if c.IdempotencyTTL <= 0 {
		f.Add("idempotency_ttl", "must be positive, got %s", c.IdempotencyTTL)
	}
	if c.AuthWindow < 0 {
		f.Add("auth_window", "must not be negative, got %s", c.AuthWindow)
	}
	if c.CancelRetry <= 0 {
		f.Add("cancel_retry", "must be positive, got %s", c.CancelRetry)
	}
	if c.CloseAfter < 0 {
		f.Add("close_unconfirmed_after", "must not be negative, got %s", c.CloseAfter)
	}
	if c.Now == nil {
		f.Add("now", "must not be nil")
	}
	if c.Logger == nil {
		f.Add("logger", "must not be nil")
	}
	return f.Err()
}

// Service is the payment service's logic: idempotent creation, the
// approval call, and settling UNKNOWN payments (and PENDING ones whose
// call was lost) by status inquiry. Its inquiry state lives in the store,
// so several instances share one database and a restart loses nothing.
type Service struct {
	store Store
	inst  Institution
	cfg   Config
	slots chan struct{} // the bulkhead

	// reads lets one GET per payment at a time ask the institution;
	// concurrent GETs of the payment wait for that answer.
	reads singleflight.Group
}

// NewService returns a Service over store and inst.
func NewService(store Store, inst Institution, cfg Config) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Service{store: store, inst: inst, cfg: cfg, slots: make(chan struct{}, cfg.MaxInFlight)}, nil
}

// Now reads the service's clock (Config.Now).
func (s *Service) Now() time.Time { return s.cfg.Now() }

// CreateRequest is a payment request.
type CreateRequest struct {
	MerchantID string `json:"merchant_id"`
	OrderID    string `json:"order_id"`
	Amount     int64  `json:"amount"`
	Currency   string `json:"currency"`
	// PaymentKey is the key the institution's widget issued to the
	// buyer's browser (Toss Payments' paymentKey): required by a
	// ClientAuthorized connector, refused by the others. Left out of the
	// hash when empty, so that a request without it hashes as before.
	PaymentKey string `json:"payment_key,omitempty"`
	// Capture is "automatic" (the default) or "manual": the approval is
	// then an authorisation (AUTHORIZED), captured or voided later. Left
	// out of the hash when automatic, so that a request without it
	// hashes as before.
	Capture CaptureMode `json:"capture,omitempty"`
}

// Hash identifies a request body for idempotency: same key, same hash.
func (r CreateRequest) Hash() string {
	b, _ := json.Marshal(r)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Create handles a payment request of merchant req.MerchantID under an
// idempotency key, scoped to the merchant (ScopedKey), and returns the
// payment as its approval left it: APPROVED, DECLINED or FAILED, or
// UNKNOWN when the outcome is not known yet. A repeated key whose
// payment's outcome is written returns that payment as it stands now,
// with replayed true; one still in flight is CodeConflict (with a
// Retry-After), one with a different request CodeMismatch. An order that
// already has a live or approved payment is *OrderExistsError
// (order_exists).
func (s *Service) Create(ctx context.Context, key string, req CreateRequest) (p Payment, replayed bool, err error) {
	if err := ValidateIdempotencyKey(key); err != nil {
		return Payment{}, false, err
	}
	if err := ValidateCreate(req.MerchantID, req.OrderID, req.Amount, req.Currency); err != nil {
		return Payment{}, false, err
	}
	if req.Capture == CaptureAutomatic {
		req.Capture = ""
	}
	if req.Capture != "" && !req.Capture.Valid() {
		return Payment{}, false, Invalid("capture", "must be one of %v, got %q", CaptureModes(), req.Capture)
	}
	externalKey, err := s.checkInstitution(req)
	if err != nil {
		return Payment{}, false, err
	}
	mid, _ := ParseUUID(req.MerchantID)
	req.MerchantID = mid.String() // the same request hashes the same whatever the case
	now := s.cfg.Now()
	p = Payment{ID: NewID(), MerchantID: req.MerchantID, OrderID: req.OrderID, Amount: req.Amount, Currency: req.Currency,
		ExternalKey: externalKey, CaptureMode: req.Capture,
		// Until then the payment is ours; after it a reconciler may take
		// it over.
		NextInquiryAt: now.Add(s.cfg.ApprovalTimeout + s.cfg.TakeoverMargin)}
	idem := IdempotencyRecord{Key: ScopedKey(req.MerchantID, key), RequestHash: req.Hash(), CreatedAt: now, ExpiresAt: now.Add(s.cfg.IdempotencyTTL)}
	p, err = s.store.CreatePending(ctx, p, idem)
	if conflict, ok := errors.AsType[*IdempotencyConflict](err); ok {
		p, err := s.replay(ctx, conflict.Record, idem.RequestHash)
		return p, err == nil, err
	}
	if err != nil {
		return Payment{}, false, err
	}

	start := time.Now()
	to, reason := s.approve(ctx, p, req.PaymentKey)
	s.cfg.Metrics.outcome(to, time.Since(start))
	// The outcome is written even if the client went away meanwhile.
	p, err = s.finish(context.WithoutCancel(ctx), p, to, reason)
	return p, false, err
}

// checkInstitution checks a create request against the connector's
// rules before anything is written, and returns the payment's external
// key: the order id for a ClientAuthorized connector, empty (the
// payment's id) otherwise.
func (s *Service) checkInstitution(req CreateRequest) (string, error) {
	if req.Capture == CaptureManual {
		_, ok := s.inst.(Capturer)
		if caps := CapabilitiesOf(s.inst); !ok || !caps.ManualCapture || !caps.Void {
			e := errUnsupported(s.inst, "manual capture")
			e.Field = "capture"
			return "", e
		}
	}
	if ca, ok := s.inst.(ClientAuthorized); ok {
		if err := ca.CheckCreate(req.OrderID, req.Currency, req.PaymentKey); err != nil {
			return "", err
		}
		return req.OrderID, nil
	}
	if req.PaymentKey != "" {
		name := "this"
		if c, ok := s.inst.(Connector); ok {
			name = "the " + c.Name()
		}
		return "", Invalid("payment_key", "is not used by %s connector: only a connector whose buyer authorises the payment in the institution's widget (toss) takes one", name)
	}
	return "", nil
}

// finish writes the outcome of p's approval (PENDING to `to`) and returns
// the payment as written. A database failure is retried with backoff for
// up to WriteRetryFor; if the payment has moved meanwhile (a reconciler
// took it over, or an earlier attempt's commit went through
// unacknowledged), the verdict is written over UNKNOWN, or the payment is
// returned as it stands.
func (s *Service) finish(ctx context.Context, p Payment, to Status, why string) (Payment, error) {
	start := s.cfg.Now()
	backoff := 10 * time.Millisecond
	for attempt := 1; ; attempt++ {
		cur, err := s.writeOutcome(ctx, p, to, why)
		if err == nil || ErrorCode(err) != CodeUnavailable ||
			attempt >= maxWriteAttempts || s.cfg.Now().Sub(start) >= s.cfg.WriteRetryFor {
			if err != nil {
				s.cfg.Logger.Error("pay: writing an approval's outcome failed; the reconciler will settle it",
					"payment", p.ID, "status", to, "attempts", attempt, "err", err)
			}
			return cur, err
		}
		s.cfg.Logger.Warn("pay: writing an approval's outcome failed; retrying", "payment", p.ID, "status", to, "attempt", attempt, "err", err)
		if err := s.cfg.Sleep(ctx, backoff); err != nil {
			return Payment{}, Unavailable(err)
		}
		backoff = min(2*backoff, time.Second)
	}
}

// maxWriteAttempts bounds the attempts of finish whatever the clock says.
const maxWriteAttempts = 100

// writeOutcome makes one attempt of finish.
func (s *Service) writeOutcome(ctx context.Context, p Payment, to Status, why string) (Payment, error) {
	cur, err := s.store.Transition(ctx, p.ID, StatusPending, to, why)
	if !errors.Is(err, ErrStaleStatus) {
		return cur, err
	}
	if cur, err = s.store.Get(ctx, p.ID); err != nil {
		return Payment{}, err
	}
	if cur.Status == StatusUnknown && to.Settled() {
		// Taken over while we waited: our verdict settles it.
		settled, err := s.store.Transition(ctx, p.ID, StatusUnknown, to, why)
		if !errors.Is(err, ErrStaleStatus) {
			return settled, err
		}
		if cur, err = s.store.Get(ctx, p.ID); err != nil {
			return Payment{}, err
		}
	}
	return cur, nil
}

// replay answers a repeated idempotency key with the payment it created,
// as it stands now.
func (s *Service) replay(ctx context.Context, rec IdempotencyRecord, hash string) (Payment, error) {
	switch {
	case rec.RequestHash != hash:
		return Payment{}, &Error{Code: CodeMismatch, Field: "Idempotency-Key", Message: "this key was used with a different request body"}
	case rec.State == IdempotencyInFlight:
		return Payment{}, &Error{Code: CodeConflict, Field: "Idempotency-Key", Message: "a request with this key is still in flight; retry later", RetryAfter: time.Second}
	default:
		return s.store.Get(ctx, rec.PaymentID)
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
func (s *Service) approve(ctx context.Context, p Payment, paymentKey string) (Status, string) {
	ctx = context.WithoutCancel(ctx)
	select {
	case s.slots <- struct{}{}:
		defer func() { <-s.slots }()
	default:
		return StatusFailed, reason(ReasonBulkheadFull, "%d approvals were in flight; the request was not sent", s.cfg.MaxInFlight)
	}
	var verdict Verdict
	sent := false
	// The payment is ours until NextInquiryAt less TakeoverMargin: the
	// first call must end by then, however long recording the payment
	// took (a slow database must not leave a call in flight past the
	// moment another instance may take the payment over).
	owned := p.NextInquiryAt.Add(-s.cfg.TakeoverMargin).Sub(s.cfg.Now())
	if owned <= 0 {
		return StatusFailed, reason(ReasonNotSent, "recording the payment took its whole approval timeout (%s); the request was not sent", s.cfg.ApprovalTimeout)
	}
	attempts, err := retry.Do(ctx, s.cfg.Retry, s.cfg.Sleep, func(ctx context.Context, attempt int) error {
		timeout := s.cfg.ApprovalTimeout
		if attempt == 1 {
			timeout = min(timeout, owned)
		}
		actx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		req := ApprovalRequest{ExternalKey: p.ExternalKey, Amount: p.Amount, Currency: p.Currency, PaymentKey: paymentKey}
		var (
			v   Verdict
			err error
		)
		if c, ok := s.inst.(Capturer); ok && p.Manual() {
			v, err = c.Authorize(actx, req)
		} else {
			v, err = s.inst.Approve(actx, req)
		}
		if !errors.Is(err, ErrNotSent) {
			sent = true
		}
		verdict = v
		return err
	}, func(err error) bool { return errors.Is(err, ErrOutcomeUnknown) })
	if err == nil {
		if verdict.Approved && p.Manual() {
			return StatusAuthorized, reason(ReasonAuthorized, "the institution authorised it; capture or void it (attempt %d)", attempts)
		}
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

// Get returns a payment. An UNKNOWN payment due for an inquiry is first
// given one, so a reader sees the settled status as soon as it is known;
// one GET at a time asks (single-flight per payment, and the claim on the
// stored NextInquiryAt across instances), the others read the stored
// state. An inconclusive inquiry defers the next one like the
// reconciler's, so reads ask at most once per backoff interval.
func (s *Service) Get(ctx context.Context, id string) (Payment, error) {
	if _, err := ParseUUID(id); err != nil {
		return Payment{}, Invalid("id", "must be a UUID")
	}
	p, err := s.store.Get(ctx, id)
	if err != nil {
		return Payment{}, err
	}
	return s.read(ctx, p), nil
}

// read returns p, first given one status inquiry when it is UNKNOWN and
// due (see Get); on any failure of that inquiry it returns p as stored.
func (s *Service) read(ctx context.Context, p Payment) Payment {
	if p.Status != StatusUnknown || s.cfg.Now().Before(p.NextInquiryAt) {
		return p
	}
	id := p.ID
	v, err, _ := s.reads.Do(id, func() (any, error) {
		// Detached: the GETs sharing this inquiry are not cut short by
		// the first one's client leaving.
		ictx := context.WithoutCancel(ctx)
		now := s.cfg.Now()
		claimed, ok, err := s.store.ClaimOne(ictx, id, now, now.Add(s.cfg.ClaimLease))
		if err != nil {
			return nil, err
		}
		if ok {
			if _, err := s.inquire(ictx, claimed); err != nil {
				s.cfg.Logger.Warn("pay: inquiry on read failed", "payment", id, "err", err)
			}
		}
		// One read of the outcome for every GET that waited on it.
		return s.store.Get(ictx, id)
	})
	if err != nil {
		s.cfg.Logger.Warn("pay: inquiry on read failed; answering the stored payment", "payment", id, "err", err)
		return p
	}
	return v.(Payment)
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
	return s.read(ctx, p), nil
}

// inquire makes one status inquiry for a claimed UNKNOWN payment and moves
// it to APPROVED, DECLINED or FAILED when the answer allows; otherwise the
// payment stays UNKNOWN (never guessed), its inquiry is counted, the next
// one deferred, and the payment flagged for review after ReviewAfter
// inquiries. It reports whether the payment is settled; the error is the
// inquiry's or the store's.
func (s *Service) inquire(ctx context.Context, p Payment) (bool, error) {
	return s.record(ctx, s.ask(ctx, p))
}

// answer is what one status inquiry of a claimed UNKNOWN payment found:
// the status it settles the payment in, or settles false.
type answer struct {
	p       Payment
	settles bool
	to      Status
	why     string
	err     error // the inquiry's, if it failed
}

// ask makes one status inquiry for a claimed UNKNOWN payment and reads
// its answer; it writes nothing.
func (s *Service) ask(ctx context.Context, p Payment) answer {
	ictx, cancel := context.WithTimeout(ctx, s.cfg.InquiryTimeout)
	q, err := s.inst.Inquire(ictx, p.ExternalKey)
	cancel()
	a := answer{p: p, err: err}
	if err == nil {
		a.to, a.why, a.settles = s.verdict(p, q)
	}
	return a
}

// record writes what a (from ask) found: the transition it settles the
// payment in, or else the deferral of its next inquiry. It reports
// whether the payment is settled; the error is the inquiry's or the
// store's.
func (s *Service) record(ctx context.Context, a answer) (bool, error) {
	if a.settles {
		_, err := s.store.Transition(ctx, a.p.ID, StatusUnknown, a.to, a.why)
		switch {
		case err == nil:
			s.cfg.Metrics.settle(a.to)
			return true, nil
		case errors.Is(err, ErrStaleStatus):
			return true, nil // someone else settled it
		default:
			return false, err // the claim runs out and the payment is asked about again
		}
	}
	return s.deferInquiry(ctx, a.p, a.err)
}

// deferInquiry records an inquiry of p that settled nothing (ierr is the
// inquiry's error, if any): the next one is deferred, and the payment
// flagged for review after ReviewAfter inquiries. It reports whether the
// payment turned out settled meanwhile.
func (s *Service) deferInquiry(ctx context.Context, p Payment, ierr error) (bool, error) {
	n := p.Inquiries + 1
	deferred, err := s.store.DeferInquiry(ctx, p.ID, StatusUnknown, s.cfg.Now().Add(s.cfg.ReconcileEvery<<min(n, 6)))
	if errors.Is(err, ErrStaleStatus) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	if deferred.Inquiries >= s.cfg.ReviewAfter && !deferred.ManualReview {
		why := reason(ReasonReviewUnsettled, "still UNKNOWN after %d status inquiries", deferred.Inquiries)
		if errors.Is(ierr, ErrInquiryUnavailable) {
			why += "; the institution's status API is unavailable"
		}
		s.cfg.Logger.Warn("pay: payment flagged for manual review", "payment", p.ID, "inquiries", deferred.Inquiries, "err", ierr)
		if err := s.store.FlagReview(ctx, p.ID, why); err != nil {
			return false, err
		}
		s.cfg.Metrics.flag()
	}
	return false, ierr
}

// settleRequest is the store's transition for an answer that settles
// its payment.
func settleRequest(a answer) TransitionRequest {
	return TransitionRequest{ID: a.p.ID, From: StatusUnknown, To: a.to, Reason: a.why}
}

// verdict reads an inquiry's answer about p: the status it settles p in
// and why, or ok false when it settles nothing yet.
func (s *Service) verdict(p Payment, q Inquiry) (to Status, why string, ok bool) {
	switch {
	case q.Found && q.Approved && p.Manual():
		return StatusAuthorized, reason(ReasonInquiryApproved, "a status inquiry found it authorised"), true
	case q.Found && q.Approved:
		return StatusApproved, reason(ReasonInquiryApproved, "a status inquiry found it approved"), true
	case q.Found:
		return StatusDeclined, reason(ReasonInquiryDeclined, "a status inquiry found it declined"), true
	case q.Definitive && !s.cfg.Now().Before(p.UpdatedAt.Add(q.NotFoundWindow)):
		// p.UpdatedAt is when the payment became UNKNOWN: after its last
		// approval request.
		return StatusFailed, reason(ReasonInquiryNotFound, "a status inquiry did not find it %s after our last request (the institution's not-found window)", q.NotFoundWindow), true
	default:
		return "", "", false // not found yet, within the window: ask again later
	}
}

// PassResult counts what one reconciliation pass did.
type PassResult struct {
	// Claimed counts the payments claimed (each asked about once).
	Claimed int
	// TakenOver counts the PENDING payments turned UNKNOWN because their
	// approval call must have ended without its outcome being written.
	TakenOver int
	// Settled counts the payments an inquiry settled.
	Settled int
}

// Pass runs one reconciliation pass: it claims the payments due for an
// inquiry, batch after batch until none is due, and asks about each with
// at most InquiryConcurrency inquiries at once. A PENDING payment is due
// only once its approval call must have ended (NextInquiryAt, set at
// creation); it is turned UNKNOWN first. Errors of single payments are
// logged (their claim runs out and a later pass retries them); the error
// returned is a failed claim's.
//
// Three stages run at once, so that the inquiries, which take the time,
// never wait for the database: the claimer claims the next batch while
// the last is being asked about; the inquirers only ask; answerWriters
// writers write the answers, those that settle their payment in one
// transaction per batch when the store is a BatchTransitioner.
func (s *Service) Pass(ctx context.Context) (PassResult, error) {
	var (
		res              PassResult
		mu               sync.Mutex
		inquirers, write sync.WaitGroup
		// Claimed payments wait here for a free inquiry: the next batch
		// is claimed while the last one is being asked about.
		work    = make(chan Payment, 2*s.cfg.InquiryConcurrency)
		answers = make(chan answer, 2*s.cfg.InquiryConcurrency)
		batch   = 2 * s.cfg.InquiryConcurrency
	)
	for range s.cfg.InquiryConcurrency {
		inquirers.Go(func() {
			for p := range work {
				p, tookOver, ok := s.takeOver(ctx, p)
				mu.Lock()
				res.Claimed++
				if tookOver {
					res.TakenOver++
				}
				mu.Unlock()
				if ok {
					answers <- s.ask(ctx, p)
				}
			}
		})
	}
	for range answerWriters {
		write.Go(func() {
			settled := s.writeAnswers(ctx, answers)
			mu.Lock()
			res.Settled += settled
			mu.Unlock()
		})
	}
	var err error
claim:
	for ctx.Err() == nil {
		now := s.cfg.Now()
		var ps []Payment
		ps, err = s.store.ClaimDue(ctx, now, now.Add(s.cfg.ClaimLease), batch)
		if err != nil || len(ps) == 0 {
			break
		}
		for _, p := range ps {
			select {
			case work <- p:
			case <-ctx.Done():
				break claim
			}
		}
	}
	close(work)
	inquirers.Wait()
	close(answers)
	write.Wait()
	if res.TakenOver > 0 {
		s.cfg.Metrics.recover(res.TakenOver)
		s.cfg.Logger.Warn("pay: took over PENDING payments whose approval call ended unrecorded", "count", res.TakenOver)
	}
	return res, err
}

// takeOver readies a claimed payment for its inquiry: a PENDING one is
// turned UNKNOWN and claimed again, so that nobody else asks about it
// while we do. It returns the payment to ask about, whether it took a
// PENDING payment over, and ok false when there is nothing to ask (its
// approval's outcome was written meanwhile, or another claim has it).
func (s *Service) takeOver(ctx context.Context, p Payment) (_ Payment, tookOver, ok bool) {
	if p.Status != StatusPending {
		return p, false, true
	}
	_, err := s.store.Transition(ctx, p.ID, StatusPending, StatusUnknown,
		reason(ReasonRecovered, "still PENDING %s after it was created; the call may have reached the institution", s.cfg.ApprovalTimeout+s.cfg.TakeoverMargin))
	if errors.Is(err, ErrStaleStatus) {
		return p, false, false // its approval's outcome was written meanwhile
	}
	if err != nil {
		s.cfg.Logger.Warn("pay: taking over a PENDING payment failed", "payment", p.ID, "err", err)
		return p, false, false
	}
	// UNKNOWN is due at once: claim it again.
	now := s.cfg.Now()
	p, ok, err = s.store.ClaimOne(ctx, p.ID, now, now.Add(s.cfg.ClaimLease))
	if err != nil || !ok {
		return p, true, false // another claim has it
	}
	return p, true, true
}

// answerWriters is how many writers write a pass's answers at once: on
// a database whose writers run in parallel (PostgreSQL) one batch's
// round trips overlap another's; on SQLite the group commit folds their
// transactions into one.
const answerWriters = 4

// maxAnswerBatch bounds the answers the writer writes in one transaction.
const maxAnswerBatch = 64

// writeAnswers writes the answers of a pass as they come, until answers
// is closed, and returns how many payments are settled. Whatever has
// arrived while it wrote is written next, together: the batch grows with
// the backlog, up to maxAnswerBatch.
func (s *Service) writeAnswers(ctx context.Context, answers <-chan answer) (settled int) {
	batch := make([]answer, 0, maxAnswerBatch)
	for a := range answers {
		batch = append(batch[:0], a)
	more:
		for len(batch) < maxAnswerBatch {
			select {
			case a, ok := <-answers:
				if !ok {
					break more
				}
				batch = append(batch, a)
			default:
				break more
			}
		}
		settled += s.writeBatch(ctx, batch)
	}
	return settled
}

// writeBatch writes the answers of batch and returns how many payments
// are settled. The transitions of those that settle their payment are
// written in one transaction when the store is a BatchTransitioner (each
// alone if that transaction fails); the others are deferred one by one.
func (s *Service) writeBatch(ctx context.Context, batch []answer) (settled int) {
	var (
		reqs     []TransitionRequest
		settling []answer
	)
	bt, batched := s.store.(BatchTransitioner)
	for _, a := range batch {
		if a.settles && batched {
			reqs, settling = append(reqs, settleRequest(a)), append(settling, a)
			continue
		}
		if s.recordOne(ctx, a) {
			settled++
		}
	}
	if len(reqs) == 0 {
		return settled
	}
	errs, err := bt.TransitionBatch(ctx, reqs)
	if err != nil {
		s.cfg.Logger.Warn("pay: writing a batch of inquiry outcomes failed; writing them one by one", "count", len(reqs), "err", err)
		for _, a := range settling {
			if s.recordOne(ctx, a) {
				settled++
			}
		}
		return settled
	}
	for i, a := range settling {
		switch {
		case errs[i] == nil:
			s.cfg.Metrics.settle(a.to)
			settled++
		case errors.Is(errs[i], ErrStaleStatus):
			settled++ // someone else settled it
		default:
			s.cfg.Logger.Warn("pay: inquiry failed", "payment", a.p.ID, "err", errs[i])
		}
	}
	return settled
}

// recordOne writes one answer (record) and logs a failure other than an
// unavailable status API.
func (s *Service) recordOne(ctx context.Context, a answer) bool {
	settled, err := s.record(ctx, a)
	if err != nil && !errors.Is(err, ErrInquiryUnavailable) {
		s.cfg.Logger.Warn("pay: inquiry failed", "payment", a.p.ID, "err", err)
	}
	return settled
}

// Recover runs one reconciliation pass and returns how many PENDING
// payments it took over. Only PENDING payments whose approval must have
// ended are touched, never those another live instance is approving; Run
// does the same every ReconcileEvery.
func (s *Service) Recover(ctx context.Context) (int, error) {
	res, err := s.Pass(ctx)
	return res.TakenOver, err
}

// Reconcile runs one reconciliation pass and returns how many payments it
// settled.
func (s *Service) Reconcile(ctx context.Context) (int, error) {
	res, err := s.Pass(ctx)
	return res.Settled, err
}

// Run runs the reconciler (RunReconciler) until ctx ends.
func (s *Service) Run(ctx context.Context) error { return s.RunReconciler(ctx) }

// RunReconciler runs a reconciliation pass (payments, then refunds:
// RefundPass, OperationPass, AuthWindowPass, ClosurePass, CancellationPass) at once and then every ReconcileEvery, and deletes expired idempotency keys, until ctx ends
// (then it returns nil). A failed pass is logged and retried on the next
// tick; when passes have kept failing for GiveUpAfter, it returns the
// last error.
func (s *Service) RunReconciler(ctx context.Context) error {
	t := time.NewTicker(s.cfg.ReconcileEvery)
	defer t.Stop()
	var (
		failingSince time.Time
		failures     int
	)
	for {
		res, err := s.Pass(ctx)
		if err == nil {
			var n int
			n, err = s.RefundPass(ctx)
			res.Settled += n
		}
		if err == nil {
			var n int
			n, err = s.OperationPass(ctx)
			res.Settled += n
		}
		if err == nil {
			_, err = s.AuthWindowPass(ctx)
		}
		if err == nil {
			_, err = s.ClosurePass(ctx)
		}
		if err == nil {
			var n int
			n, err = s.CancellationPass(ctx)
			res.Settled += n
		}
		if err == nil {
			_, err = s.store.DeleteExpiredIdempotency(ctx, s.cfg.Now())
		}
		if ctx.Err() != nil {
			return nil
		}
		switch {
		case err != nil:
			now := s.cfg.Now()
			if failures == 0 {
				failingSince = now
			}
			failures++
			if elapsed := now.Sub(failingSince); elapsed >= s.cfg.GiveUpAfter {
				return fmt.Errorf("pay: reconciler gave up after %d failed passes in %s: %w", failures, elapsed.Round(time.Millisecond), err)
			}
			s.cfg.Logger.Warn("pay: reconciliation failed; retrying", "err", err, "failures", failures)
		default:
			if failures > 0 {
				s.cfg.Logger.Info("pay: reconciler recovered", "failures", failures)
				failures = 0
			}
			if res.Settled > 0 {
				s.cfg.Logger.Info("pay: settled payments by status inquiry", "count", res.Settled)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
