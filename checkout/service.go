package checkout

import (
	"context"
	"encoding/base64"
	"encoding/json"
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
)

// Limits of the API.
const (
	MaxEventSeats = 100_000 // seats of one event
	MaxUserLen    = 128     // bytes of a Stampede-User
)

// Config configures a Service.
type Config struct {
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
	// Checker, when set, is asked online whether the admission still
	// holds its slot before seats are held and before a hold is paid for.
	// Nil trusts the gate.
	Checker AdmissionChecker
	// Now is the clock; NewID makes hold and order ids.
	Now   func() time.Time
	NewID func() string
	// Logger receives the sweeper's and the payment path's logs.
	Logger *slog.Logger
	// Metrics, when set, receives the domain counters (NewMetrics).
	Metrics *Metrics
}

// DefaultConfig returns 10-minute holds of at most 10 seats, a 10 s pay
// timeout, pending orders asked about every 5 s, a 1 s sweep, no
// admission checker, the wall clock and random UUIDs.
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
	}
}

// Validate reports the first unusable field by name.
func (c Config) Validate() error {
	switch {
	case c.MaxHold <= 0:
		return stampede.InvalidField("MaxHold", "must be positive, got %s", c.MaxHold)
	case c.MaxSeatsPerHold < 1 || c.MaxSeatsPerHold > MaxEventSeats:
		return stampede.InvalidField("MaxSeatsPerHold", "must be between 1 and %d, got %d", MaxEventSeats, c.MaxSeatsPerHold)
	case c.PayTimeout <= 0:
		return stampede.InvalidField("PayTimeout", "must be positive, got %s", c.PayTimeout)
	case c.SettleAfter < 0:
		return stampede.InvalidField("SettleAfter", "must not be negative, got %s", c.SettleAfter)
	case c.SweepEvery <= 0:
		return stampede.InvalidField("SweepEvery", "must be positive, got %s", c.SweepEvery)
	case c.Now == nil:
		return stampede.InvalidField("Now", "must not be nil")
	case c.NewID == nil:
		return stampede.InvalidField("NewID", "must not be nil")
	case c.Logger == nil:
		return stampede.InvalidField("Logger", "must not be nil")
	}
	return nil
}

// Service is the checkout's logic over a Store and a Payer.
type Service struct {
	cfg   Config
	store Store
	payer Payer
	log   *slog.Logger
}

// NewService returns a Service.
func NewService(store Store, payer Payer, cfg Config) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if store == nil {
		return nil, stampede.InvalidField("Store", "must not be nil")
	}
	if payer == nil {
		return nil, stampede.InvalidField("Payer", "must not be nil")
	}
	return &Service{cfg: cfg, store: store, payer: payer, log: cfg.Logger}, nil
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

// validate checks the user header.
func (b Buyer) validate() error {
	if b.User == "" {
		return &Error{Code: stampede.Unauthorized, Field: "Stampede-User",
			Message: "header is required: the checkout is reached through the gate, which names the admitted user"}
	}
	return pay.ValidateText("Stampede-User", b.User, MaxUserLen)
}

// admission returns when b's admission ends: asked online when a Checker
// is set (and then it must hold its slot, for b.User), else read from the
// token without verifying it (the gate verified it), else the zero time.
func (s *Service) admission(ctx context.Context, b Buyer) (time.Time, error) {
	if s.cfg.Checker == nil {
		exp, _ := AdmissionExpiry(b.Admission)
		return exp, nil
	}
	if b.Admission == "" {
		return time.Time{}, &Error{Code: stampede.Unauthorized, Field: "Stampede-Admission", Message: "header is required: the admission the gate sends"}
	}
	a, err := s.cfg.Checker.CheckAdmission(ctx, b.Admission)
	if err != nil {
		if _, ok := errors.AsType[*Error](err); ok {
			return time.Time{}, err
		}
		return time.Time{}, stampede.UnavailableErr("the waiting room", err)
	}
	if !a.Held {
		return time.Time{}, &Error{Code: stampede.Forbidden, Field: "Stampede-Admission",
			Message: "the admission no longer holds its slot (" + a.Reason + "); join the waiting room again"}
	}
	if a.User != "" && a.User != b.User {
		return time.Time{}, &Error{Code: stampede.Forbidden, Field: "Stampede-Admission", Message: "the admission is another user's"}
	}
	return a.ExpiresAt, nil
}

// AdmissionExpiry reads the "exp" claim (Unix seconds) of an admission
// token without verifying it: the JSON payload of a JWT (its second
// part) or of a waiting-room HMAC token (its first part). It is for a
// checkout that trusts the gate, which verified the token.
func AdmissionExpiry(token string) (time.Time, bool) {
	if token == "" || len(token) > 8192 {
		return time.Time{}, false
	}
	for part := range strings.SplitSeq(token, ".") {
		raw, err := base64.RawURLEncoding.DecodeString(part)
		if err != nil || len(raw) == 0 || raw[0] != '{' {
			continue
		}
		var claims struct {
			Exp *int64 `json:"exp"`
		}
		if json.Unmarshal(raw, &claims) == nil && claims.Exp != nil && *claims.Exp > 0 {
			return time.Unix(*claims.Exp, 0).UTC(), true
		}
	}
	return time.Time{}, false
}

// Hold puts n seats of event on hold for buyer b, until b's admission
// expires (at most Config.MaxHold).
func (s *Service) Hold(ctx context.Context, event string, b Buyer, n int) (Hold, error) {
	if err := ValidateEventID(event); err != nil {
		return Hold{}, err
	}
	if err := b.validate(); err != nil {
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
	if !adm.IsZero() && adm.Before(exp) {
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
	if err := b.validate(); err != nil {
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
			return s.pay(ctx, o, b.Admission)
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

// pay makes o's payment and applies the outcome.
func (s *Service) pay(ctx context.Context, o Order, admission string) (Order, error) {
	pctx, cancel := context.WithTimeout(ctx, s.cfg.PayTimeout)
	defer cancel()
	p, err := s.payer.Pay(pctx, o.request(admission))
	return s.apply(ctx, o, p, err)
}

// settle asks pay about pending order o again: the payment's status when
// its id is known, else the same request under the same key (pay replays
// it, or says it is still in flight).
func (s *Service) settle(ctx context.Context, o Order, admission string) (Order, error) {
	if o.PaymentID == "" {
		return s.pay(ctx, o, admission)
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
	case pay.StatusApproved:
		return s.store.Settle(ctx, o.ID, true, p.ID, p.Status, "", now)
	case pay.StatusDeclined, pay.StatusFailed:
		return s.store.Settle(ctx, o.ID, false, p.ID, p.Status, strings.ToLower(string(p.Status)), now)
	}
	return s.store.RecordPayment(ctx, o.ID, p.ID, p.Status, now)
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

// RunSweeper sweeps every SweepEvery until ctx ends; failures are logged
// and retried on the next tick. It returns nil when ctx ends.
func (s *Service) RunSweeper(ctx context.Context) error {
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
