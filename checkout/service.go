package checkout

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/pay"
	"github.com/stampede-lab/stampede/protocol"
)

// Limits of the API.
const (
	MaxEventSeats = 100_000 // seats of one event
	MaxUserLen    = 128     // bytes of a Stampede-User
)

// Admissions verifies a buyer's admission: the token (the
// Stampede-Admission header) signed by the waiting room, for the checkout's
// room, its subject the buyer (the Stampede-User header), and optionally
// still holding its slot. protocol.AdmissionVerifier implements it. Its
// errors are *stampede.Error values naming the header at fault
// (Unauthorized, Forbidden), or Unavailable when it cannot say.
type Admissions interface {
	Verify(ctx context.Context, token, user string) (protocol.AdmissionClaims, error)
}

var _ Admissions = protocol.AdmissionVerifier{}

// Config configures a Service. Its fields' snake_case names in Validate's
// errors are the words of `stampede serve checkout`'s flags.
type Config struct {
	// Store keeps events, holds and orders (checkout/sqlstore).
	Store Store
	// Payer charges orders (checkout/payclient, the flag --pay).
	Payer Payer
	// Admissions verifies every buyer's admission before seats are held
	// and before a hold is paid for: the checkout trusts no header
	// unverified (the flag --waitroom names where the keys are).
	Admissions Admissions
	// MaxHold caps a hold's life: a hold expires with its admission, or
	// MaxHold after it was made, whichever comes first.
	MaxHold time.Duration
	// MaxSeatsPerHold bounds the seats of one hold.
	MaxSeatsPerHold int
	// PayTimeout bounds one call to pay.
	PayTimeout time.Duration
	// SettleAfter is how long a pending order rests before the sweeper
	// asks pay about it (again): longer than pay's approval timeout, so
	// that a first call still in flight is not raced.
	SettleAfter time.Duration
	// SweepEvery is the sweeper's period.
	SweepEvery time.Duration
	// Now is the clock; NewID makes hold and order ids.
	Now   func() time.Time
	NewID func() string
	// Logger receives the sweeper's and the payment path's logs.
	Logger *slog.Logger
	// Metrics, when set, receives the domain counters (NewMetrics).
	Metrics *Metrics
	// Capture is how the money is taken (the flag --capture):
	// CaptureAutomatic (approved at the purchase) or CaptureManual
	// (authorised at the purchase, captured while the order is pending,
	// voided when the order ends another way).
	Capture CaptureMode
}

// DefaultConfig returns 10-minute holds of at most 10 seats, a 10 s pay
// timeout, pending orders asked about every 5 s, a 1 s sweep, the wall
// clock and random UUIDs; Store, Payer and Admissions must be set.
func DefaultConfig() Config {
	return Config{
		MaxHold:         10 * time.Minute,
		MaxSeatsPerHold: 10,
		PayTimeout:      10 * time.Second,
		SettleAfter:     5 * time.Second,
		SweepEvery:      time.Second,
		Now:             time.Now,
		NewID:           uuid.NewString,
		Logger:          slog.Default(),
		Capture:         CaptureAutomatic,
	}
}

// Validate reports every unusable field at once, each by its snake_case
// name.
func (c Config) Validate() error {
	var f stampede.Fields
	if c.Store == nil {
		f.Add("store", "is required")
	}
	if c.Payer == nil {
		f.Add("pay", "is required: the payment service the checkout pays through")
	}
	if c.Admissions == nil {
		f.Add("waitroom", "is required: the waiting room whose admissions the checkout verifies")
	}
	if c.MaxHold <= 0 {
		f.Add("max_hold", "must be positive, got %s", c.MaxHold)
	}
	if c.MaxSeatsPerHold < 1 || c.MaxSeatsPerHold > MaxEventSeats {
		f.Add("max_seats_per_hold", "must be between 1 and %d, got %d", MaxEventSeats, c.MaxSeatsPerHold)
	}
	if c.PayTimeout <= 0 {
		f.Add("pay_timeout", "must be positive, got %s", c.PayTimeout)
	}
	if c.SettleAfter < 0 {
		f.Add("settle_after", "must not be negative, got %s", c.SettleAfter)
	}
	if c.SweepEvery <= 0 {
		f.Add("sweep_every", "must be positive, got %s", c.SweepEvery)
	}
	if c.Now == nil {
		f.Add("now", "must not be nil")
	}
	if c.NewID == nil {
		f.Add("new_id", "must not be nil")
	}
	if c.Logger == nil {
		f.Add("logger", "must not be nil")
	}
	if c.Capture != CaptureAutomatic && c.Capture != CaptureManual {
		f.Add("capture", "must be %s or %s, got %q", CaptureAutomatic, CaptureManual, c.Capture)
	}
	return f.Err()
}

// Service is the checkout's logic over a Store and a Payer.
type Service struct {
	cfg   Config
	store Store
	payer Payer
	log   *slog.Logger
}

// New returns a Service for cfg; it starts nothing (Run runs the
// sweeper).
func New(cfg Config) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Service{cfg: cfg, store: cfg.Store, payer: cfg.Payer, log: cfg.Logger}, nil
}

// Store returns the service's store.
func (s *Service) Store() Store { return s.store }

var eventID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// ValidateEventID checks an event id: 1 to 64 letters, digits, '.', '_'
// or '-', starting with a letter or digit.
func ValidateEventID(id string) error {
	if !eventID.MatchString(id) {
		return stampede.InvalidField("event", "must be 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit")
	}
	return nil
}

// CreateEvent creates event id with seats seats at price per seat.
func (s *Service) CreateEvent(ctx context.Context, id string, seats int, price int64, currency string) (Event, error) {
	if err := ValidateEventID(id); err != nil {
		return Event{}, err
	}
	switch {
	case seats < 1 || seats > MaxEventSeats:
		return Event{}, stampede.InvalidField("seats", "must be between 1 and %d, got %d", MaxEventSeats, seats)
	case price < 1 || price > pay.MaxAmount/int64(s.cfg.MaxSeatsPerHold):
		return Event{}, stampede.InvalidField("price", "must be between 1 and %d, got %d", pay.MaxAmount/int64(s.cfg.MaxSeatsPerHold), price)
	case !slices.Contains(pay.Currencies(), currency):
		return Event{}, stampede.InvalidField("currency", "must be one of %s", strings.Join(pay.Currencies(), ", "))
	}
	return s.store.CreateEvent(ctx, Event{ID: id, Seats: seats, SeatsLeft: seats, Price: price, Currency: currency, CreatedAt: s.cfg.Now()})
}

// Event returns an event.
func (s *Service) Event(ctx context.Context, id string) (Event, error) {
	if err := ValidateEventID(id); err != nil {
		return Event{}, err
	}
	return s.store.Event(ctx, id)
}

// Buyer is who asks: the gate's Stampede-User and Stampede-Admission.
type Buyer struct {
	User      string
	Admission string
}

// Validate checks the user header, named as the API names it
// (Stampede-User): present (else unauthorized), and clean text of at most
// MaxUserLen bytes. The admission is left to Config.Admissions, which
// verifies it where one is needed.
func (b Buyer) Validate() error {
	var f stampede.Fields
	if b.User == "" {
		f.Check(protocol.HeaderUser, stampede.Errorf(stampede.Unauthorized,
			"header is required: the checkout is reached through the gate, which names the admitted user"))
	} else {
		f.Check("", pay.ValidateText(protocol.HeaderUser, b.User, MaxUserLen))
	}
	return f.Err()
}

// admission verifies b's admission (Config.Admissions) and returns
// when it ends.
func (s *Service) admission(ctx context.Context, b Buyer) (time.Time, error) {
	c, err := s.cfg.Admissions.Verify(ctx, b.Admission, b.User)
	if err != nil {
		if _, ok := errors.AsType[*Error](err); ok {
			return time.Time{}, err
		}
		return time.Time{}, stampede.UnavailableErr("the waiting room", err)
	}
	return c.Expires, nil
}

// Hold puts n seats of event on hold for buyer b, until b's admission
// expires (at most Config.MaxHold).
func (s *Service) Hold(ctx context.Context, event string, b Buyer, n int) (Hold, error) {
	if err := ValidateEventID(event); err != nil {
		return Hold{}, err
	}
	if err := b.Validate(); err != nil {
		return Hold{}, err
	}
	if n < 1 || n > s.cfg.MaxSeatsPerHold {
		return Hold{}, stampede.InvalidField("seats", "must be between 1 and %d, got %d", s.cfg.MaxSeatsPerHold, n)
	}
	adm, err := s.admission(ctx, b)
	if err != nil {
		return Hold{}, err
	}
	now := s.cfg.Now()
	exp := now.Add(s.cfg.MaxHold)
	if adm.Before(exp) {
		exp = adm
	}
	if !exp.After(now) {
		return Hold{}, &Error{Code: stampede.Forbidden, Field: "Stampede-Admission", Message: "the admission has expired; join the waiting room again"}
	}
	e, err := s.store.Event(ctx, event)
	if err != nil {
		return Hold{}, err
	}
	h := Hold{ID: s.cfg.NewID(), EventID: e.ID, User: b.User, Amount: e.Price * int64(n), Currency: e.Currency,
		State: HoldHeld, ExpiresAt: exp, CreatedAt: now, UpdatedAt: now}
	for attempt := 0; ; attempt++ {
		got, err := s.store.Hold(ctx, h, n)
		_, soldOut := errors.AsType[*SoldOutError](err)
		if err == nil {
			s.cfg.Metrics.hold("held")
		} else if soldOut && attempt > 0 {
			s.cfg.Metrics.hold("sold_out")
		}
		if !soldOut || attempt > 0 {
			return got, err
		}
		// Expired holds not swept yet still count: release them and
		// try once more.
		freed, rerr := s.store.ReleaseExpired(ctx, event, now, 100)
		s.cfg.Metrics.expired(freed)
		if rerr != nil || freed == 0 {
			s.cfg.Metrics.hold("sold_out")
			return got, err
		}
	}
}

// GetHold returns buyer b's hold.
func (s *Service) GetHold(ctx context.Context, id string, b Buyer) (Hold, error) {
	h, err := s.store.GetHold(ctx, id)
	if err != nil {
		return Hold{}, err
	}
	if h.User != b.User {
		return Hold{}, fmt.Errorf("hold %s of another user: %w", id, ErrNotFound)
	}
	return h, nil
}

// Purchase pays for buyer b's hold: it starts the hold's order (once;
// repeated calls return the same order) and calls pay with the order's
// idempotency key. The order comes back paid or failed when the payment
// ended, pending when it did not (an UNKNOWN payment, or no answer).
func (s *Service) Purchase(ctx context.Context, holdID string, b Buyer) (Order, error) {
	if err := b.Validate(); err != nil {
		return Order{}, err
	}
	h, err := s.GetHold(ctx, holdID, b)
	if err != nil {
		return Order{}, err
	}
	if h.State == HoldHeld {
		if _, err := s.admission(ctx, b); err != nil {
			return Order{}, err
		}
		now := s.cfg.Now()
		id := s.cfg.NewID()
		o := Order{ID: id, HoldID: h.ID, EventID: h.EventID, User: h.User, Seats: h.Seats, Amount: h.Amount, Currency: h.Currency,
			Status: OrderPending, IdempotencyKey: "checkout-order-" + id, CreatedAt: now, UpdatedAt: now}
		o, err = s.store.StartOrder(ctx, o, now)
		if err == nil {
			return s.pay(ctx, o, b.Admission, false)
		}
		if se, ok := errors.AsType[*StateError](err); !ok || se.Expired || se.State == HoldHeld {
			return Order{}, err
		}
		// A concurrent purchase started the order: carry on with it.
	}
	o, err := s.store.OrderOfHold(ctx, h.ID)
	if errors.Is(err, ErrNotFound) {
		return Order{}, &StateError{State: HoldReleased} // released by expiry, never paid for
	}
	if err != nil || o.Status.Ended() {
		return o, err
	}
	return s.settle(ctx, o, b.Admission)
}

// Order returns an order: the buyer's own (admin: any). A pending order
// is asked about at pay first.
func (s *Service) Order(ctx context.Context, id string, b Buyer, admin bool) (Order, error) {
	o, err := s.store.GetOrder(ctx, id)
	if err != nil {
		return Order{}, err
	}
	if !admin && o.User != b.User {
		return Order{}, fmt.Errorf("order %s of another user: %w", id, ErrNotFound)
	}
	if o.Status.Ended() {
		return o, nil
	}
	return s.settle(ctx, o, b.Admission)
}

// request is the payment request of o.
func (o Order) request(admission string) PaymentRequest {
	return PaymentRequest{OrderID: o.ID, IdempotencyKey: o.IdempotencyKey, Amount: o.Amount, Currency: o.Currency, Admission: admission}
}

// pay makes o's payment and applies the outcome; retry says an earlier
// attempt's answer was lost.
func (s *Service) pay(ctx context.Context, o Order, admission string, retry bool) (Order, error) {
	pctx, cancel := context.WithTimeout(ctx, s.cfg.PayTimeout)
	defer cancel()
	req := o.request(admission)
	req.Manual = s.cfg.Capture == CaptureManual
	p, err := s.payer.Pay(pctx, req)
	if rej, ok := errors.AsType[*RejectedError](err); ok && retry {
		p, err = s.refusedRetry(ctx, o, rej)
		if err == nil && p.ID == "" {
			return o, nil // no proof either way yet: the order stays pending
		}
	}
	return s.apply(ctx, o, p, err)
}

// refusedRetry decides what a refusal of a retried payment means. An
// earlier attempt of o's payment got no answer, so it may have been made
// after all: pay checks a new payment's admission before it can see the
// key of an attempt still in flight, and the buyer's admission may have
// ended meanwhile. The refusal is no proof that no payment exists: pay is
// asked for the order's payment, and the refusal stands (the seats go
// back) only when there is none this long after the first attempt, longer
// than any call of that attempt can last (three pay timeouts). Until then
// an empty Payment and no error keep the order pending.
func (s *Service) refusedRetry(ctx context.Context, o Order, rej *RejectedError) (Payment, error) {
	pctx, cancel := context.WithTimeout(ctx, s.cfg.PayTimeout)
	defer cancel()
	p, found, err := s.payer.PaymentOfOrder(pctx, o.ID)
	switch {
	case err != nil:
		s.log.Warn("checkout: pay refused a retried payment and cannot say whether the first attempt made one; the order stays pending",
			"order", o.ID, "code", rej.Code, "err", err)
		return Payment{}, nil
	case found:
		s.log.Info("checkout: pay refused a retried payment, but the first attempt made it", "order", o.ID, "payment", p.ID, "status", p.Status)
		return p, nil
	case s.cfg.Now().Sub(o.CreatedAt) < 3*s.cfg.PayTimeout:
		return Payment{}, nil
	}
	return Payment{}, rej
}

// settle asks pay about pending order o again: the payment's status when
// its id is known, else the same request under the same key (pay replays
// it, or says it is still in flight).
func (s *Service) settle(ctx context.Context, o Order, admission string) (Order, error) {
	if o.PaymentID == "" {
		return s.pay(ctx, o, admission, true)
	}
	pctx, cancel := context.WithTimeout(ctx, s.cfg.PayTimeout)
	defer cancel()
	p, err := s.payer.Payment(pctx, o.PaymentID)
	return s.apply(ctx, o, p, err)
}

// apply records what pay answered for pending order o.
func (s *Service) apply(ctx context.Context, o Order, p Payment, err error) (Order, error) {
	got, err := s.record(ctx, o, p, err)
	if err == nil {
		s.cfg.Metrics.ended(got) // o was pending (two settling at once may both count it)
	}
	return got, err
}

// record is apply's store write.
func (s *Service) record(ctx context.Context, o Order, p Payment, err error) (Order, error) {
	now := s.cfg.Now()
	if rej, ok := errors.AsType[*RejectedError](err); ok {
		s.log.Warn("checkout: pay refused the payment; the seats go back", "order", o.ID, "code", rej.Code, "status", rej.Status)
		return s.store.Settle(ctx, o.ID, false, o.PaymentID, o.PaymentStatus, "rejected: "+rej.Code, now)
	}
	if err != nil {
		// The outcome is unknown: the seats stay held until pay says.
		s.log.Warn("checkout: no answer from pay; the order stays pending", "order", o.ID, "err", err)
		if o2, rerr := s.store.RecordPayment(ctx, o.ID, o.PaymentID, o.PaymentStatus, now); rerr == nil {
			o = o2
		}
		return o, nil
	}
	switch p.Status {
	case pay.StatusAuthorized:
		return s.capture(ctx, o, p)
	case pay.StatusApproved:
		return s.confirm(ctx, o, p)
	case pay.StatusDeclined, pay.StatusFailed, pay.StatusVoided:
		return s.store.Settle(ctx, o.ID, false, p.ID, p.Status, strings.ToLower(string(p.Status)), now)
	}
	return s.store.RecordPayment(ctx, o.ID, p.ID, p.Status, now)
}

// capture takes the money of pending order o's authorisation p (manual
// capture): it confirms the order at pay first, then captures under the order's capture key: a lost answer is asked again
// under the same key, never a second capture. Once the capture
// succeeded the order is confirmed (confirm); a declined or refused
// capture cancels the payment (a void) and gives the seats back; an
// unsettled one keeps the order pending.
func (s *Service) capture(ctx context.Context, o Order, p Payment) (Order, error) {
	if s.cfg.Capture != CaptureManual {
		// An authorisation the checkout did not ask for: leave it to pay's
		// authorisation window, and keep asking.
		s.log.Warn("checkout: an authorisation in automatic mode; the order stays pending", "order", o.ID, "payment", p.ID)
		return s.store.RecordPayment(ctx, o.ID, p.ID, p.Status, s.cfg.Now())
	}
	// Confirm first: a confirmed payment is never closed by pay, so the
	// money this capture takes is never given back under a live order
	// (which would leave a ticket without a seat). A payment pay is
	// closing already is not captured: pay voids it.
	cctx, ccancel := context.WithTimeout(ctx, s.cfg.PayTimeout)
	defer ccancel()
	if err := s.payer.Confirm(cctx, p.ID); err != nil {
		if rej, ok := errors.AsType[*RejectedError](err); ok && rej.Code == string(pay.CodeCancelExists) {
			s.log.Warn("checkout: pay closed the authorisation before the order was confirmed; the seats go back", "order", o.ID, "payment", p.ID)
			return s.store.Settle(ctx, o.ID, false, p.ID, p.Status, "closed", s.cfg.Now())
		} else if !ok || rej.Code != string(pay.CodeNotSupported) {
			s.log.Warn("checkout: no confirmation of the order at pay; the order stays pending", "order", o.ID, "payment", p.ID, "err", err)
			return s.store.RecordPayment(ctx, o.ID, p.ID, p.Status, s.cfg.Now())
		}
	}
	pctx, cancel := context.WithTimeout(ctx, s.cfg.PayTimeout)
	defer cancel()
	st, err := s.payer.Capture(pctx, p.ID, captureKey(o.ID))
	if rej, ok := errors.AsType[*RejectedError](err); ok {
		// Nothing was captured by this request: the authorisation was
		// voided (its window, pay's closure) or another operation holds it.
		return s.release(ctx, o, p, "capture refused: "+rej.Code)
	}
	switch {
	case err != nil:
		s.log.Warn("checkout: no answer to a capture; the order stays pending", "order", o.ID, "payment", p.ID, "err", err)
		return s.store.RecordPayment(ctx, o.ID, p.ID, p.Status, s.cfg.Now())
	case st == OperationSucceeded:
		return s.confirm(ctx, o, Payment{ID: p.ID, Status: pay.StatusApproved})
	case st == OperationFailed:
		return s.release(ctx, o, p, "capture_declined")
	}
	return s.store.RecordPayment(ctx, o.ID, p.ID, p.Status, s.cfg.Now())
}

// release ends pending order o failed because its payment p must not be
// kept: it cancels p at pay first (under the order's cancel key: a void
// of an authorisation, a refund of an approval), and keeps the order
// pending while pay cannot say it recorded the cancellation.
func (s *Service) release(ctx context.Context, o Order, p Payment, why string) (Order, error) {
	pctx, cancel := context.WithTimeout(ctx, s.cfg.PayTimeout)
	defer cancel()
	err := s.payer.Cancel(pctx, p.ID, cancelKey(o.ID))
	if _, ok := errors.AsType[*RejectedError](err); !ok && err != nil {
		s.log.Warn("checkout: no answer to a cancellation; the order stays pending", "order", o.ID, "payment", p.ID, "err", err)
		return s.store.RecordPayment(ctx, o.ID, p.ID, p.Status, s.cfg.Now())
	} else if err != nil {
		s.log.Warn("checkout: pay refused the cancellation of a payment the order gives up", "order", o.ID, "payment", p.ID, "err", err)
	}
	s.log.Info("checkout: the order gives up its payment; the seats go back", "order", o.ID, "payment", p.ID, "why", why)
	return s.store.Settle(ctx, o.ID, false, p.ID, p.Status, why, s.cfg.Now())
}

// confirm goes on with pending order o, whose payment p is APPROVED: it
// confirms the order at pay first (so that pay's closure pass leaves the
// payment alone) and then sells the seats. A payment pay cancelled first
// (its closure) fails the order; no answer keeps it pending. An order
// that ended failed meanwhile (another settlement raced this one) gets
// its payment cancelled: no money is kept for seats given back.
func (s *Service) confirm(ctx context.Context, o Order, p Payment) (Order, error) {
	pctx, cancel := context.WithTimeout(ctx, s.cfg.PayTimeout)
	defer cancel()
	err := s.payer.Confirm(pctx, p.ID)
	if rej, ok := errors.AsType[*RejectedError](err); ok {
		switch rej.Code {
		case string(pay.CodeCancelExists):
			s.log.Warn("checkout: pay closed the payment before the order was confirmed; the seats go back", "order", o.ID, "payment", p.ID)
			return s.store.Settle(ctx, o.ID, false, p.ID, p.Status, "closed", s.cfg.Now())
		case string(pay.CodeNotSupported):
			// pay keeps no confirmations (and so closes nothing).
		default:
			s.log.Warn("checkout: pay refused the order's confirmation; the order stays pending", "order", o.ID, "payment", p.ID, "code", rej.Code)
			return s.store.RecordPayment(ctx, o.ID, p.ID, p.Status, s.cfg.Now())
		}
	} else if err != nil {
		s.log.Warn("checkout: no answer to the order's confirmation; the order stays pending", "order", o.ID, "payment", p.ID, "err", err)
		return s.store.RecordPayment(ctx, o.ID, p.ID, p.Status, s.cfg.Now())
	}
	got, err := s.store.Settle(ctx, o.ID, true, p.ID, p.Status, "", s.cfg.Now())
	if err == nil && got.Status != OrderPaid {
		cctx, cancel := context.WithTimeout(ctx, s.cfg.PayTimeout)
		defer cancel()
		cerr := s.payer.Cancel(cctx, p.ID, cancelKey(o.ID))
		s.log.Warn("checkout: a payment approved for an order that ended failed; cancelled at pay", "order", o.ID, "payment", p.ID, "err", cerr)
	}
	return got, err
}

// Sweep releases the holds whose admission expired and asks pay about
// the orders pending for SettleAfter; it returns how many holds it
// released and how many orders ended.
func (s *Service) Sweep(ctx context.Context) (released, settled int, err error) {
	now := s.cfg.Now()
	for {
		n, err := s.store.ReleaseExpired(ctx, "", now, 100)
		released += n
		s.cfg.Metrics.expired(n)
		if err != nil {
			return released, settled, err
		}
		if n < 100 {
			break
		}
	}
	pending, err := s.store.PendingOrders(ctx, now.Add(-s.cfg.SettleAfter), 100)
	if err != nil {
		return released, settled, err
	}
	for _, o := range pending {
		got, err := s.settle(ctx, o, "")
		if err != nil {
			s.log.Warn("checkout: settling a pending order failed", "order", o.ID, "err", err)
			continue
		}
		if got.Status.Ended() {
			settled++
		}
	}
	return released, settled, nil
}

// Run runs the sweeper: it sweeps every SweepEvery until ctx ends;
// failures are logged and retried on the next tick. It returns nil when
// ctx ends.
func (s *Service) Run(ctx context.Context) error {
	t := time.NewTicker(s.cfg.SweepEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		released, settled, err := s.Sweep(ctx)
		if err != nil && ctx.Err() == nil {
			s.log.Warn("checkout: sweep failed", "err", err)
		}
		if released > 0 || settled > 0 {
			s.log.Info("checkout: swept", "released_holds", released, "settled_orders", settled)
		}
	}
}
