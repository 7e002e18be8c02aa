// Package retrystampede is the lab experiment of the payment service's
// retry policies (as in the published ParityPay write-up): a stampede
// of payments released at one instant against a payment institution that
// hangs, so that every approval times out at the same moment and every
// retry leaves at the same moment too.
//
// Each run starts its own institution simulator and its own payment
// service (SQLite in a temporary directory, the real institution client),
// each behind a real HTTP listener on 127.0.0.1. The institution is set to
// the run's scenario (hang before processing, or hang after processing
// with the institution idempotent or not); the payment service retries
// with the run's policy. The payments go through the payment API over
// HTTP, released together by closing one channel, a start signal that
// cannot half-fire (a barrier that breaks when one party fails would
// release only part of the stampede, which still looks like one).
//
// A run then reads the institution's arrival log (requests, amplification,
// peaks per 100 ms and per 1 s after the first wave) and its ledger
// (charges, double charges), puts the institution back to NORMAL without
// clearing the ledger, lets the reconciler settle every UNKNOWN payment by
// status inquiry, and compares our APPROVED payments with the ledger.
package retrystampede

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/stampede-lab/stampede/institution"
	"github.com/stampede-lab/stampede/lab"
	"github.com/stampede-lab/stampede/retry"
)

// Scenario is what the institution does to the stampede.
type Scenario string

// The scenarios.
const (
	// HangBefore: HANG_BEFORE_PROCESSING, idempotent. Nothing is ever
	// charged; every payment times out (the write-up's experiment).
	HangBefore Scenario = "hang-before"
	// HangAfterIdempotent: HANG_AFTER_PROCESSING, idempotent. The first
	// request charges, the answer is held; a retry is answered with the
	// first result and charges nothing.
	HangAfterIdempotent Scenario = "hang-after-idempotent"
	// HangAfterNonIdempotent: HANG_AFTER_PROCESSING, not idempotent.
	// Every request that arrives charges: a retry is a double charge.
	HangAfterNonIdempotent Scenario = "hang-after-nonidempotent"
)

// Scenarios returns every scenario.
func Scenarios() []Scenario {
	return []Scenario{HangBefore, HangAfterIdempotent, HangAfterNonIdempotent}
}

// Behavior is the institution's behaviour under scenario s with the given
// hang.
func (s Scenario) Behavior(hang time.Duration) institution.Behavior {
	b := institution.DefaultBehavior()
	b.HangMS = hang.Milliseconds()
	b.StatusAPI = institution.StatusAPIUp
	switch s {
	case HangBefore:
		b.Mode, b.Idempotent = institution.ModeHangBefore, true
	case HangAfterIdempotent:
		b.Mode, b.Idempotent = institution.ModeHangAfter, true
	case HangAfterNonIdempotent:
		b.Mode, b.Idempotent = institution.ModeHangAfter, false
	}
	return b
}

// ParseScenario returns the scenario named s.
func ParseScenario(s string) (Scenario, error) {
	sc := Scenario(strings.ToLower(strings.TrimSpace(s)))
	if !slices.Contains(Scenarios(), sc) {
		return "", fmt.Errorf("unknown scenario %q (want %s)", s, joinNames(Scenarios()))
	}
	return sc, nil
}

// ParseScenarios turns names into scenarios, refusing unknown names and
// repeats.
func ParseScenarios(names []string) ([]Scenario, error) {
	var out []Scenario
	for _, n := range names {
		s, err := ParseScenario(n)
		if err != nil {
			return nil, err
		}
		if slices.Contains(out, s) {
			return nil, fmt.Errorf("%q listed twice", s)
		}
		out = append(out, s)
	}
	return out, nil
}

// Budget is the policy name of the retry budget: BudgetPolicy wrapped in
// retry.WithBudget, with one budget (retry.DefaultBudgetConfig) shared by
// every payment of a run.
const Budget = "budget"

// Policies returns every policy name: the retry package's policies and
// Budget.
func Policies() []string { return append(retry.Names(), Budget) }

// ParsePolicy returns the canonical name of policy s.
func ParsePolicy(s string) (string, error) {
	if strings.EqualFold(strings.TrimSpace(s), Budget) {
		return Budget, nil
	}
	name, err := retry.ParseName(s)
	if err != nil {
		return "", fmt.Errorf("unknown policy %q (want %s)", s, joinNames(Policies()))
	}
	return name, nil
}

// ParsePolicies turns names into policy names, refusing unknown names and
// repeats.
func ParsePolicies(names []string) ([]string, error) {
	var out []string
	for _, n := range names {
		p, err := ParsePolicy(n)
		if err != nil {
			return nil, err
		}
		if slices.Contains(out, p) {
			return nil, fmt.Errorf("%q listed twice", p)
		}
		out = append(out, p)
	}
	return out, nil
}

func joinNames[S ~string](names []S) string {
	s := make([]string, len(names))
	for i, n := range names {
		s[i] = string(n)
	}
	return strings.Join(s, ", ")
}

// Config holds every parameter of the experiment. Each field is a flag of
// `stampede lab retry-stampede`, named in Validate's errors.
type Config struct {
	// Payments is how many payments the stampede releases at once.
	Payments int
	// Hang is how long the institution holds a request.
	Hang time.Duration
	// Timeout is the payment service's approval timeout (per attempt).
	Timeout time.Duration
	// Attempts is the retry policies' MaxAttempts: the first attempt
	// included.
	Attempts int
	// Base is the retry schedule's base wait (×2 per retry, 10 s cap).
	Base time.Duration
	// BudgetPolicy is the policy the budget wraps.
	BudgetPolicy string
	// Scenarios and Policies are crossed into the conditions, scenario
	// major.
	Scenarios []Scenario
	Policies  []string
	// ExcludeFirst: peaks count only arrivals more than ExcludeFirst after
	// the start signal (the write-up: 1 s), leaving out the first wave, which
	// the clients make alike under every policy. It must be shorter than
	// Timeout, before which no retry can leave.
	ExcludeFirst time.Duration
	// NotFoundWindow is the institution's declared not-found window: the
	// reconciler turns "not found" into FAILED only once it has passed
	// since the payment's last request.
	NotFoundWindow time.Duration
	// ReconcileTimeout bounds the reconciliation after the stampede.
	ReconcileTimeout time.Duration
	// Repeat is how many times each condition runs.
	Repeat int
	// Seed seeds the jittered policies (plus the repeat number).
	Seed uint64
}

// The peak windows: the lab reads arrival peaks per 100 ms and per 1 s
// (a jitter window of 0.5 s is invisible at 1 s).
const (
	FineWindow   = 100 * time.Millisecond
	CoarseWindow = time.Second
)

// DefaultConfig is the quick profile: the write-up's stampede with the hang and
// the timeout halved — 150 payments, a 4 s hang, a 1.5 s timeout, 3
// attempts, a 500 ms base, peaks after the first second — for none,
// exponential, full-jitter and budget, against the hang-before and the
// non-idempotent hang-after institution, once: eight runs, about a minute.
//
// The retry schedule, the peak windows and the first-wave exclusion stay
// the write-up's because they are what the write-up measured: a 500 ms jitter
// window read per 100 ms (visible) and per 1 s (invisible). Scaling them
// down with the timeout would not keep that shape: the payment service
// takes the first wave in over about a tenth of a second (its SQLite
// writes queue), and that width does not scale.
func DefaultConfig() Config {
	return Config{
		Payments:         150,
		Hang:             4 * time.Second,
		Timeout:          1500 * time.Millisecond,
		Attempts:         3,
		Base:             500 * time.Millisecond,
		BudgetPolicy:     retry.Exponential,
		Scenarios:        []Scenario{HangBefore, HangAfterNonIdempotent},
		Policies:         []string{retry.None, retry.Exponential, retry.FullJitter, Budget},
		ExcludeFirst:     time.Second,
		NotFoundWindow:   time.Second,
		ReconcileTimeout: 15 * time.Second,
		Repeat:           1,
		Seed:             1,
	}
}

// FullConfig is the write-up's profile: an 8 s hang, a 3 s timeout, every
// scenario × none, exponential, full-jitter, decorrelated-jitter and
// budget, 3 repeats.
func FullConfig() Config {
	c := DefaultConfig()
	c.Hang, c.Timeout = 8*time.Second, 3*time.Second
	c.Scenarios = Scenarios()
	c.Policies = []string{retry.None, retry.Exponential, retry.FullJitter, retry.DecorrelatedJitter, Budget}
	c.Repeat = 3
	return c
}

// MaxPayments bounds Payments: every payment holds four sockets at once
// (client, payment API, institution client, institution).
const MaxPayments = 5000

// Validate reports the first unusable field by its flag name.
func (c Config) Validate() error {
	switch {
	case c.Payments < 1 || c.Payments > MaxPayments:
		return fmt.Errorf("retry-stampede: payments: must be 1 to %d, got %d", MaxPayments, c.Payments)
	case c.Hang <= 0 || c.Hang.Milliseconds() > institution.MaxHangMS:
		return fmt.Errorf("retry-stampede: hang: must be 1ms to %s, got %s", time.Duration(institution.MaxHangMS)*time.Millisecond, c.Hang)
	case c.Timeout <= 0:
		return fmt.Errorf("retry-stampede: timeout: must be positive, got %s", c.Timeout)
	case c.Attempts < 1 || c.Attempts > 10:
		return fmt.Errorf("retry-stampede: attempts: must be 1 to 10, got %d", c.Attempts)
	case c.Base <= 0:
		return fmt.Errorf("retry-stampede: base: must be positive, got %s", c.Base)
	case len(c.Scenarios) == 0:
		return errors.New("retry-stampede: scenarios: need at least one")
	case len(c.Policies) == 0:
		return errors.New("retry-stampede: policies: need at least one")
	case c.ExcludeFirst < 0 || c.ExcludeFirst >= c.Timeout:
		return fmt.Errorf("retry-stampede: exclude-first: must be at least 0 and shorter than --timeout (%s), or it hides retries; got %s", c.Timeout, c.ExcludeFirst)
	case c.NotFoundWindow < time.Millisecond || c.NotFoundWindow > time.Minute:
		return fmt.Errorf("retry-stampede: not-found-window: must be 1ms to 1m, got %s", c.NotFoundWindow)
	case c.ReconcileTimeout <= 0:
		return fmt.Errorf("retry-stampede: reconcile-timeout: must be positive, got %s", c.ReconcileTimeout)
	case c.Repeat < 1:
		return fmt.Errorf("retry-stampede: repeat: must be at least 1, got %d", c.Repeat)
	}
	if p, err := ParsePolicy(c.BudgetPolicy); err != nil || p == Budget || p == retry.None {
		return fmt.Errorf("retry-stampede: budget-policy: want a retrying policy (%s), got %q",
			strings.Join(retry.Names()[1:], ", "), c.BudgetPolicy)
	}
	for _, s := range c.Scenarios {
		if _, err := ParseScenario(string(s)); err != nil {
			return fmt.Errorf("retry-stampede: scenarios: %w", err)
		}
	}
	for _, p := range c.Policies {
		if name, err := ParsePolicy(p); err != nil || name != p {
			return fmt.Errorf("retry-stampede: policies: unknown policy %q (want %s)", p, joinNames(Policies()))
		}
	}
	if _, err := retry.New(c.retryConfig(retry.Exponential), nil); err != nil {
		return fmt.Errorf("retry-stampede: base, attempts: %w", err)
	}
	return nil
}

// retryConfig is the retry schedule of the policy named name (not Budget).
func (c Config) retryConfig(name string) retry.Config {
	rc := retry.DefaultConfig()
	rc.Name, rc.MaxAttempts, rc.Base = name, c.Attempts, c.Base
	rc.Cap = max(rc.Cap, c.Base)
	return rc
}

// Experiment is the retry-stampede experiment; it implements
// lab.Experiment.
type Experiment struct {
	cfg Config

	mu     sync.Mutex
	models map[uintptr]PeakModel // fullJitterModel's, by peak function
}

var _ lab.Experiment = (*Experiment)(nil)

// New returns the experiment for cfg.
func New(cfg Config) (*Experiment, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Scenarios = slices.Clone(cfg.Scenarios)
	cfg.Policies = slices.Clone(cfg.Policies)
	return &Experiment{cfg: cfg}, nil
}

// Name implements lab.Experiment.
func (e *Experiment) Name() string { return "retry-stampede" }

// Repeats implements lab.Experiment.
func (e *Experiment) Repeats() int { return e.cfg.Repeat }

// Params implements lab.Experiment.
func (e *Experiment) Params() any {
	c := e.cfg
	return map[string]any{
		"payments":       c.Payments,
		"hang_ms":        c.Hang.Milliseconds(),
		"timeout_ms":     c.Timeout.Milliseconds(),
		"attempts":       c.Attempts,
		"base_ms":        c.Base.Milliseconds(),
		"multiplier":     2,
		"cap_ms":         c.retryConfig(retry.Exponential).Cap.Milliseconds(),
		"budget":         fmt.Sprintf("%s wrapped in retry.WithBudget, one budget per run shared by every payment (max_tokens %g, token_ratio %g, reserve %g)", c.BudgetPolicy, retry.DefaultBudgetConfig().MaxTokens, retry.DefaultBudgetConfig().TokenRatio, retry.DefaultBudgetConfig().Reserve),
		"scenarios":      c.Scenarios,
		"policies":       c.Policies,
		"peaks_after_ms": ms(c.ExcludeFirst),
		"peak_windows": "peak_100ms, peak_1s: the most arrivals in any window of 100 ms or 1 s (sliding, a window may start anywhere); " +
			"peak_100ms_fixed, peak_1s_fixed: fixed windows aligned to the start signal, like the write-up's histogram",
		"not_found_window_ms":  c.NotFoundWindow.Milliseconds(),
		"reconcile_timeout_ms": c.ReconcileTimeout.Milliseconds(),
		"repeat":               c.Repeat,
		"seed":                 c.Seed,
		"start_signal":         "close of one channel after every client prepared its request",
		"system":               "institution simulator and payment API (SQLite, fresh per run) on real HTTP listeners, 127.0.0.1",
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Conditions implements lab.Experiment: scenario major, policy minor, so
// the policies of one scenario run back to back.
func (e *Experiment) Conditions() []lab.Condition {
	var out []lab.Condition
	for _, s := range e.cfg.Scenarios {
		for _, p := range e.cfg.Policies {
			out = append(out, lab.Condition{
				Label:  fmt.Sprintf("%s %s", p, s),
				Values: map[string]any{"scenario": string(s), "policy": p},
				Keys:   []string{"scenario", "policy"},
			})
		}
	}
	return out
}

// Columns implements lab.Experiment.
func (e *Experiment) Columns() []string {
	return []string{"institution_requests", "amplification", "retry_requests", "peak_100ms", "peak_1s",
		"client_p50_ms", "approvals", "double_charges", "unknown", "resolved", "parity_mismatches"}
}
