package institution

import (
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stampede-lab/stampede"
)

// Config configures a Simulator. Start from DefaultConfig. Validate
// names its fields in snake_case, the words of `stampede serve
// institution`'s flags.
type Config struct {
	// MaxHung bounds the requests held at once by the hang modes. A
	// request that would be held beyond it is answered CodeBusy at once,
	// before anything is recorded, so a stampede cannot exhaust the
	// simulator's memory.
	MaxHung int
	// NotFoundWindow is the declared window after which an external key
	// that has no record is definitively not found: the simulator never
	// records a request later than NotFoundWindow after it arrived.
	NotFoundWindow time.Duration
	// MaxArrivals bounds the arrival log; once full, the oldest arrivals
	// are dropped and counted (ArrivalLog.Dropped).
	MaxArrivals int
	// Now is the clock for arrival times, records and the not-found
	// window. Hangs use real timers, not Now.
	Now func() time.Time
	// Logger receives a line per behaviour change or reset.
	Logger *slog.Logger
	// Metrics, when set, receives the simulator's metrics (nil: none are
	// kept).
	Metrics prometheus.Registerer
}

// Limits of Config and Behavior.
const (
	// MaxHangMS is the longest hang a behaviour may ask for: 10 minutes.
	MaxHangMS = 600_000
	// MaxAmount is the largest amount accepted, in minor units: 2^53-1,
	// the largest integer every JSON client represents exactly.
	MaxAmount = 1<<53 - 1
	// MaxExternalKeyLen is the longest external key accepted, in bytes.
	MaxExternalKeyLen = 128
)

// MaxHang is MaxHangMS as a duration: the longest the simulator holds a
// request.
const MaxHang = MaxHangMS * time.Millisecond

// DefaultConfig returns at most 2000 held requests, a 2 s not-found
// window, 200,000 remembered arrivals, time.Now and slog.Default().
func DefaultConfig() Config {
	return Config{
		MaxHung:        2000,
		NotFoundWindow: 2 * time.Second,
		MaxArrivals:    200_000,
		Now:            time.Now,
		Logger:         slog.Default(),
	}
}

// Validate reports every unusable field at once.
func (c Config) Validate() error {
	var f stampede.Fields
	if c.MaxHung < 1 || c.MaxHung > 1_000_000 {
		f.Add("max_hung", "must be between 1 and 1000000, got %d", c.MaxHung)
	}
	if c.NotFoundWindow < time.Millisecond || c.NotFoundWindow > 24*time.Hour {
		f.Add("not_found_window", "must be between 1ms and 24h, got %s", c.NotFoundWindow)
	}
	if c.MaxArrivals < 1 || c.MaxArrivals > 100_000_000 {
		f.Add("max_arrivals", "must be between 1 and 100000000, got %d", c.MaxArrivals)
	}
	if c.Now == nil {
		f.Add("now", "must not be nil")
	}
	if c.Logger == nil {
		f.Add("logger", "must not be nil")
	}
	return f.Err()
}

// Mode is what the institution does with an approval request.
type Mode string

// The behaviour modes.
const (
	// ModeNormal approves and charges.
	ModeNormal Mode = "NORMAL"
	// ModeDecline declines: recorded as declined, nothing charged.
	ModeDecline Mode = "DECLINE"
	// ModeHangBefore holds the request for hang_ms, records nothing and
	// answers 504: the caller has usually timed out by then, not knowing
	// that nothing happened.
	ModeHangBefore Mode = "HANG_BEFORE_PROCESSING"
	// ModeHangAfter charges at once and holds the answer for hang_ms: the
	// money moved, and the caller usually times out without knowing it.
	ModeHangAfter Mode = "HANG_AFTER_PROCESSING"
	// ModeError answers 500 and records nothing.
	ModeError Mode = "ERROR"
)

// Modes lists every Mode.
var Modes = []Mode{ModeNormal, ModeDecline, ModeHangBefore, ModeHangAfter, ModeError}

// StatusAPI says whether the status inquiry (GET /v1/approvals/{key})
// answers.
type StatusAPI string

// The status API states.
const (
	StatusAPIUp   StatusAPI = "UP"
	StatusAPIDown StatusAPI = "DOWN" // every inquiry answers 503
)

// Behavior is the institution's fault configuration, the body of PUT
// /admin/behavior.
type Behavior struct {
	// Mode decides what an approval request does.
	Mode Mode `json:"mode"`
	// HangMS is how long the hang modes hold a request, in milliseconds:
	// 0 to MaxHangMS.
	HangMS int64 `json:"hang_ms"`
	// Idempotent makes a repeated external key return the first result
	// without charging again. Off, every request that reaches processing
	// charges again.
	Idempotent bool `json:"idempotent"`
	// StatusAPI is UP or DOWN.
	StatusAPI StatusAPI `json:"status_api"`
}

// DefaultBehavior is NORMAL, an 8-second hang (the published ParityPay write-up's),
// idempotent, status API up. A reset returns to it.
func DefaultBehavior() Behavior {
	return Behavior{Mode: ModeNormal, HangMS: 8000, Idempotent: true, StatusAPI: StatusAPIUp}
}

// Hang returns HangMS as a duration.
func (b Behavior) Hang() time.Duration { return time.Duration(b.HangMS) * time.Millisecond }

// Validate reports every unusable field at once, each by its JSON name.
func (b Behavior) Validate() error {
	var f stampede.Fields
	f.Check("", validateMode(b.Mode))
	f.Check("", validateHangMS(b.HangMS))
	f.Check("", validateStatusAPI(b.StatusAPI))
	return f.Err()
}

func validateMode(m Mode) error {
	if !slices.Contains(Modes, m) {
		return stampede.InvalidField("mode", "must be one of %s, got %q", joinQuoted(Modes), m)
	}
	return nil
}

func validateHangMS(ms int64) error {
	if ms < 0 || ms > MaxHangMS {
		return stampede.InvalidField("hang_ms", "must be between 0 and %d, got %d", MaxHangMS, ms)
	}
	return nil
}

func validateStatusAPI(s StatusAPI) error {
	if s != StatusAPIUp && s != StatusAPIDown {
		return stampede.InvalidField("status_api", "must be %q or %q, got %q", StatusAPIUp, StatusAPIDown, s)
	}
	return nil
}

// Currencies lists the currencies the institution accepts.
var Currencies = []string{"KRW", "USD", "EUR", "JPY", "GBP"}

// externalKeyPattern is what an external key may hold: it appears in a
// URL path, so no slash, space or percent sign.
var externalKeyPattern = regexp.MustCompile(`^[A-Za-z0-9._:-]+$`)

// ValidateExternalKey reports whether key is a usable external key: 1 to
// MaxExternalKeyLen bytes of letters, digits, '.', '_', ':' and '-'.
func ValidateExternalKey(key string) error {
	switch {
	case key == "":
		return stampede.InvalidField("external_key", "must not be empty")
	case len(key) > MaxExternalKeyLen:
		return stampede.InvalidField("external_key", "must be at most %d bytes, got %d", MaxExternalKeyLen, len(key))
	case !externalKeyPattern.MatchString(key):
		return stampede.InvalidField("external_key", "may hold only letters, digits, '.', '_', ':' and '-', got %q", key)
	}
	return nil
}

// ApproveRequest is an approval request: the body of POST /v1/approvals.
type ApproveRequest struct {
	// ExternalKey is the caller's idempotency key for this approval.
	ExternalKey string `json:"external_key"`
	// Amount is in minor units (won, cents): 1 to MaxAmount.
	Amount int64 `json:"amount"`
	// Currency is one of Currencies.
	Currency string `json:"currency"`
	// Capture is "manual" for an authorisation only (the record is
	// AUTHORIZED until captured or voided), "" or "automatic" for a
	// charge.
	Capture string `json:"capture,omitempty"`
}

// Validate reports every unusable field at once, each by its JSON name.
func (r ApproveRequest) Validate() error {
	var f stampede.Fields
	f.Check("", ValidateExternalKey(r.ExternalKey))
	if r.Amount < 1 || r.Amount > MaxAmount {
		f.Add("amount", "must be a whole number of minor units between 1 and %d, got %d", int64(MaxAmount), r.Amount)
	}
	if !slices.Contains(Currencies, r.Currency) {
		f.Add("currency", "must be one of %s, got %q", joinQuoted(Currencies), r.Currency)
	}
	if r.Capture != "" && r.Capture != "automatic" && r.Capture != "manual" {
		f.Add("capture", `must be "automatic" or "manual", got %q`, r.Capture)
	}
	return f.Err()
}

// joinQuoted lists values as "A", "B", "C".
func joinQuoted[S ~string](values []S) string {
	q := make([]string, len(values))
	for i, v := range values {
		q[i] = fmt.Sprintf("%q", v)
	}
	return strings.Join(q, ", ")
}
