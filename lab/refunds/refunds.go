// Package refunds is the refund stampede lab: an event is cancelled and
// every payment of it is refunded at once, while the payment institution
// hangs (every refund is processed and its answer held past the payment
// service's timeout), its status API goes down, and the payment service
// is killed mid-stampede and started again on the same database.
//
// Two conditions run the same stampede. Under "stampede" the payment
// service keeps its discipline: a refund whose answer is lost is UNKNOWN,
// settled by a status inquiry under the same key, never sent again. Under
// "naive" the service's connector is wrapped in a naive retry (a lab-only
// wrapper, NaiveRefunder, that no production code can be configured into):
// a refund whose answer was lost is sent again at once with a new key, as
// a system without an inquiry does. The naive condition must double-refund:
// it shows that the checker can fail.
//
// The checker reads the institution's own records (the simulator's refund
// ledger, GET /admin/refunds), not the payment service's: refunds beyond
// one per payment (double refunds), payments refunded beyond the cancelled
// share (over-refunds), payments the cancellation did not reach
// (unrefunded), and parity between what pay says it refunded and what the
// institution moved; unsettled refunds are pay's refunds still PENDING or
// UNKNOWN when the settle window ends.
//
// Each run starts its own institution simulator and its own payment
// service (SQLite in a temporary directory, the real institution client,
// the real payment API), each behind a real HTTP listener on 127.0.0.1;
// the payment service reaches the institution through a TCP proxy that
// its kill cuts, so that a killed service sends nothing more.
package refunds

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/stampede-lab/stampede/institution"
	"github.com/stampede-lab/stampede/lab"
)

// The conditions.
const (
	// Stampede is the payment service's own discipline: one key per
	// refund, a lost answer UNKNOWN until an inquiry settles it.
	Stampede = "stampede"
	// Naive re-sends a refund whose answer was lost, with a new key.
	Naive = "naive"
)

// Conditions returns every condition, naive first.
func Conditions() []string { return []string{Naive, Stampede} }

// The faults.
const (
	// FaultHang: the institution processes each refund and holds its
	// answer for Hang (HANG_AFTER_PROCESSING), from the start signal
	// until every merchant client has its answer (so that every refund is
	// sent while it holds) and at least Hang after pay's restart.
	FaultHang = "hang"
	// FaultStatusDown: the institution's status API answers 503 from the
	// start signal until StatusDownFor after the hang ended (after pay's
	// restart without the hang).
	FaultStatusDown = "status-down"
	// FaultPayKill: the payment service is killed (its listener, its
	// connections to the institution, its reconciler and its database
	// handle closed at once) KillAt after the start signal, and started
	// again on the same port and database RestartAfter later.
	FaultPayKill = "pay-kill"
)

// Faults returns every fault, in the order they strike.
func Faults() []string { return []string{FaultHang, FaultStatusDown, FaultPayKill} }

// Config holds every parameter of the experiment. Each field is a flag
// of `stampede lab refunds`, named in Validate's errors.
type Config struct {
	// Payments is how many payments the cancelled event has; each is
	// refunded once, all released by one start signal.
	Payments int
	// Hang is how long the institution holds each refund's answer.
	Hang time.Duration
	// Timeout is the payment service's timeout of a refund call.
	Timeout time.Duration
	// Faults are the faults injected (Faults() by default; none is
	// allowed).
	Faults []string
	// Conditions are the conditions run (Conditions() by default).
	Conditions []string
	// KillAt is when the payment service is killed, after the start
	// signal; RestartAfter how long it stays down.
	KillAt, RestartAfter time.Duration
	// StatusDownFor is how long the status API stays down after the
	// hang ends.
	StatusDownFor time.Duration
	// NotFoundWindow is the institution's declared not-found window.
	NotFoundWindow time.Duration
	// ReconcileEvery is the payment service's ReconcileEvery: its
	// reconciler's pace, and the base of its inquiry backoff (×2 per
	// inconclusive inquiry, up to ×64).
	ReconcileEvery time.Duration
	// SettleTimeout bounds the wait, after the faults, for every refund
	// to settle.
	SettleTimeout time.Duration
	// Repeat is how many times each condition runs.
	Repeat int
	// Seed is recorded with the runs (the lab draws nothing at random
	// but the keys).
	Seed uint64
}

// DefaultConfig is the profile the issue names: 2,000 payments, a 4 s
// hang, a 1 s timeout, every fault, both conditions, once.
func DefaultConfig() Config {
	return Config{
		Payments:       2000,
		Hang:           4 * time.Second,
		Timeout:        time.Second,
		Faults:         Faults(),
		Conditions:     Conditions(),
		KillAt:         1500 * time.Millisecond,
		RestartAfter:   time.Second,
		StatusDownFor:  2 * time.Second,
		NotFoundWindow: time.Second,
		ReconcileEvery: 100 * time.Millisecond,
		SettleTimeout:  90 * time.Second,
		Repeat:         1,
		Seed:           1,
	}
}

// MaxPayments bounds Payments: every refund in flight holds about six
// sockets (client, API, proxy both sides, institution).
const MaxPayments = 3000

// Validate reports every unusable field at once, by its flag name.
func (c Config) Validate() error {
	var bad []string
	add := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }
	if c.Payments < 1 || c.Payments > MaxPayments {
		add("payments: must be 1 to %d, got %d", MaxPayments, c.Payments)
	}
	if c.Hang <= 0 || c.Hang.Milliseconds() > institution.MaxHangMS {
		add("hang: must be 1ms to %s, got %s", time.Duration(institution.MaxHangMS)*time.Millisecond, c.Hang)
	}
	if c.Timeout <= 0 || c.Timeout > time.Minute {
		add("timeout: must be positive and at most 1m, got %s", c.Timeout)
	} else if slices.Contains(c.Faults, FaultHang) && c.Hang <= c.Timeout {
		add("hang: must be longer than --timeout (%s) or no answer is lost, got %s", c.Timeout, c.Hang)
	}
	for _, f := range c.Faults {
		if !slices.Contains(Faults(), f) {
			add("faults: unknown fault %q (want some of %s, or none)", f, strings.Join(Faults(), ", "))
		}
	}
	if hasDup(c.Faults) {
		add("faults: a fault is listed twice")
	}
	if len(c.Conditions) == 0 {
		add("conditions: need at least one (%s)", strings.Join(Conditions(), ", "))
	}
	for _, n := range c.Conditions {
		if !slices.Contains(Conditions(), n) {
			add("conditions: unknown condition %q (want %s)", n, strings.Join(Conditions(), ", "))
		}
	}
	if hasDup(c.Conditions) {
		add("conditions: a condition is listed twice")
	}
	if c.KillAt < 0 || c.RestartAfter <= 0 {
		add("kill-at, restart-after: must be at least 0 and positive, got %s and %s", c.KillAt, c.RestartAfter)
	}
	if c.StatusDownFor <= 0 {
		add("status-down-for: must be positive, got %s", c.StatusDownFor)
	}
	if c.NotFoundWindow < time.Millisecond || c.NotFoundWindow > time.Minute {
		add("not-found-window: must be 1ms to 1m, got %s", c.NotFoundWindow)
	}
	if c.ReconcileEvery < time.Millisecond || c.ReconcileEvery > 10*time.Second {
		add("reconcile-every: must be 1ms to 10s, got %s", c.ReconcileEvery)
	}
	if c.SettleTimeout <= 0 {
		add("settle-timeout: must be positive, got %s", c.SettleTimeout)
	}
	if c.Repeat < 1 {
		add("repeat: must be at least 1, got %d", c.Repeat)
	}
	if len(bad) > 0 {
		return fmt.Errorf("refunds: %s", strings.Join(bad, "; "))
	}
	return nil
}

func hasDup(xs []string) bool {
	for i, x := range xs {
		if slices.Contains(xs[:i], x) {
			return true
		}
	}
	return false
}

func (c Config) has(fault string) bool { return slices.Contains(c.Faults, fault) }

// Experiment is the refund stampede experiment; it implements
// lab.Experiment.
type Experiment struct {
	cfg Config
}

var _ lab.Experiment = (*Experiment)(nil)

// New returns the experiment for cfg.
func New(cfg Config) (*Experiment, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Faults = slices.Clone(cfg.Faults)
	cfg.Conditions = slices.Clone(cfg.Conditions)
	return &Experiment{cfg: cfg}, nil
}

// Name implements lab.Experiment.
func (e *Experiment) Name() string { return "refunds" }

// Repeats implements lab.Experiment.
func (e *Experiment) Repeats() int { return e.cfg.Repeat }

// Profile implements lab.Profiled: "quick" for DefaultConfig, the lab's
// only profile (whatever the seed), "custom" once a flag changed it.
func (e *Experiment) Profile() string {
	c := e.cfg
	c.Seed = 1
	if reflect.DeepEqual(c, DefaultConfig()) {
		return "quick"
	}
	return "custom"
}

// Params implements lab.Experiment.
func (e *Experiment) Params() any {
	c := e.cfg
	return map[string]any{
		"payments":            c.Payments,
		"hang_ms":             c.Hang.Milliseconds(),
		"timeout_ms":          c.Timeout.Milliseconds(),
		"faults":              c.Faults,
		"conditions":          c.Conditions,
		"kill_at_ms":          c.KillAt.Milliseconds(),
		"restart_after_ms":    c.RestartAfter.Milliseconds(),
		"status_down_for_ms":  c.StatusDownFor.Milliseconds(),
		"not_found_window_ms": c.NotFoundWindow.Milliseconds(),
		"settle_timeout_ms":   c.SettleTimeout.Milliseconds(),
		"reconcile_every_ms":  c.ReconcileEvery.Milliseconds(),
		"repeat":              c.Repeat,
		"seed":                c.Seed,
		"payment":             "amount = 2 × share (a basket of two events); the cancelled event's share is refunded, so a second refund of it fits within the amount and only the checker can see it",
		"start_signal":        "close of one channel after every client prepared its refund request",
		"system":              "institution simulator and payment API (SQLite, fresh per run, reconciler running) on real HTTP listeners, 127.0.0.1; pay reaches the institution through a TCP proxy its kill cuts",
		"pay":                 "ApprovalTimeout and InquiryTimeout = timeout, TakeoverMargin = timeout, ClaimLease = 3 × timeout, ReconcileEvery = reconcile_every, WriteRetryFor 1 s, ReviewAfter 1000 (nothing flagged within the lab's windows); the rest pay.DefaultConfig",
		"checker":             "the institution's refund ledger (GET /admin/refunds): refunds per payment, refunded sum per payment",
	}
}

// Conditions implements lab.Experiment.
func (e *Experiment) Conditions() []lab.Condition {
	var out []lab.Condition
	for _, n := range e.cfg.Conditions {
		out = append(out, lab.Condition{Label: n, Values: map[string]any{"retry": n}, Keys: []string{"retry"}})
	}
	return out
}

// Columns implements lab.Experiment.
func (e *Experiment) Columns() []string {
	return []string{"double_refunds", "over_refunds", "unsettled_refunds", "parity_mismatches", "unrefunded",
		"refund_p99_ms", "institution_refund_requests", "resent", "merchant_reissued"}
}

// Expectations implements lab.Experiment: under the discipline, no
// double refund, no over-refund, nothing unsettled, parity clean, every
// payment refunded; under the naive retry (when the hang loses answers),
// more than 0 double refunds.
func (e *Experiment) Expectations(r *lab.Result) *lab.Expectations {
	x := &lab.Expectations{}
	med := func(cond, metric string) (float64, bool) { return r.Median(metric, map[string]any{"retry": cond}) }
	if slices.Contains(e.cfg.Conditions, Stampede) {
		for _, m := range []string{"double_refunds", "over_refunds", "unsettled_refunds", "parity_mismatches", "unrefunded"} {
			claim := fmt.Sprintf("stampede: %s = 0", m)
			v, ok := med(Stampede, m)
			if !ok {
				x.Missing(claim, m)
				continue
			}
			x.Check(claim, fmt.Sprintf("%.0f", v), v == 0)
		}
	}
	if slices.Contains(e.cfg.Conditions, Naive) {
		claim := "naive: double_refunds > 0 (the checker catches a refund re-sent with a new key)"
		switch v, ok := med(Naive, "double_refunds"); {
		case !e.cfg.has(FaultHang):
			x.Skip(claim, "without the hang fault no refund answer is lost, so the naive retry never re-sends; add --faults hang")
		case !ok:
			x.Missing(claim, "double_refunds")
		default:
			x.Check(claim, fmt.Sprintf("%.0f", v), v > 0)
		}
	}
	for _, c := range e.cfg.Conditions {
		if v, ok := med(c, "refund_p99_ms"); ok {
			x.Report(c+": refund p99 (first send to a 201/202 answer, retries across the kill included)", fmt.Sprintf("%.0f ms", v))
		}
	}
	return x
}

// Render implements lab.Experiment: what the numbers mean.
func (e *Experiment) Render(r *lab.Result, _ string) (string, error) {
	c := e.cfg
	var b strings.Builder
	fmt.Fprintf(&b, "%d payments, each of amount 2 × its share (a basket of two events); the event is cancelled and every payment's share refunded at once, "+
		"released by one start signal. Faults: %s. The institution holds each refund's answer for %s after processing it; pay's refund timeout is %s; "+
		"the hang lasts until every merchant has its answer; the status API is down from the start signal until %s after the hang ends; "+
		"pay is killed %s after the start signal and started again %s later on the same port and database (the kill closes the in-process service's "+
		"listener, database handle and institution connections; `kill_took_ms` in the JSON is how long that took).\n\n",
		c.Payments, orNone(c.Faults), c.Hang, c.Timeout, c.StatusDownFor, c.KillAt, c.RestartAfter)
	b.WriteString("Counted from the institution's ledger: `double_refunds` is the money movements beyond one per payment (a refund key refunded twice, " +
		"or a second key for the same payment); `over_refunds` the payments refunded beyond their cancelled share; `unrefunded` the payments " +
		"the cancellation never reached. `unsettled_refunds` counts pay's refunds still PENDING or UNKNOWN when the settle window ended; " +
		"`parity_mismatches` the payments whose SUCCEEDED refunds in pay differ from what the institution refunded, plus the payments' own parity. " +
		"`refund_p99_ms` is the merchant's wait from the first send to a 201 or 202 answer (the client retries with the same key across the kill). " +
		"`resent` counts the naive wrapper's re-sends; `merchant_reissued` the refunds the merchant asked for again under a new key after its first one " +
		"settled FAILED (the institution never carried it out: a request cut by the kill that never reached it, found nothing after the not-found window), " +
		"which is when asking again is safe.\n\n")
	return b.String(), nil
}

func orNone(xs []string) string {
	if len(xs) == 0 {
		return "none"
	}
	return strings.Join(xs, ", ")
}
