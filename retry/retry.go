// Package retry holds the retry policies of Stampede's payment client and a
// retry budget that caps how much extra load retries may add.
//
// A [Policy] is stateless and safe to share: every operation calls
// [Policy.Start] for its own [Sequence], which carries the per-operation
// state (the attempt count and, for decorrelated jitter, the previous wait).
// One policy value can therefore serve any number of concurrent operations.
//
// The policies ([Names]):
//
//   - none: never retries.
//   - exponential: waits Base·Multiplier^(n-1) after failed attempt n,
//     capped at Cap (0.5 s, 1 s, 2 s … with the defaults).
//   - full-jitter: waits U(0, v), v being the exponential wait
//     (Marc Brooker, "Exponential Backoff And Jitter", AWS 2015).
//   - equal-jitter: waits v/2 + U(0, v/2).
//   - decorrelated-jitter: waits min(Cap, U(Base, 3·prev)), prev being the
//     previous wait of the same operation and Base before the first.
//
// The three exponential-envelope policies (exponential, full-jitter,
// equal-jitter) share one schedule v, so comparing exponential with
// full-jitter isolates the effect of jitter alone. Jitter spreads retries
// over time and lowers the peak of a synchronised stampede; it does not
// lower the number of retries. Only not retrying, or a [Budget] wrapped
// around a policy with [WithBudget], does that.
//
// Randomness is injected as a [Rand] and sleeping as a [Sleeper], so tests
// and experiments need neither real time nor luck. [Do] runs an operation
// under a policy.
package retry

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"time"
)

// Policy names accepted by [Config.Name] and [ParseName].
const (
	// None never retries.
	None = "none"
	// Exponential waits Base·Multiplier^(n-1), capped at Cap.
	Exponential = "exponential"
	// FullJitter waits U(0, v) with v the Exponential wait.
	FullJitter = "full-jitter"
	// EqualJitter waits v/2 + U(0, v/2) with v the Exponential wait.
	EqualJitter = "equal-jitter"
	// DecorrelatedJitter waits min(Cap, U(Base, 3·prev)).
	DecorrelatedJitter = "decorrelated-jitter"
)

var names = []string{None, Exponential, FullJitter, EqualJitter, DecorrelatedJitter}

// Names returns the policy names in a fixed order. The slice is a copy.
func Names() []string {
	out := make([]string, len(names))
	copy(out, names)
	return out
}

// ParseName returns the canonical policy name for s. It ignores case and
// surrounding space and accepts '_' for '-' ("Full_Jitter" → "full-jitter").
func ParseName(s string) (string, error) {
	n := strings.ReplaceAll(strings.ToLower(strings.TrimSpace(s)), "_", "-")
	for _, name := range names {
		if n == name {
			return name, nil
		}
	}
	return "", fmt.Errorf("retry: unknown policy %q (want one of %s)", s, strings.Join(names, ", "))
}

// Rand is the source of randomness of the jittered policies. Float64 returns
// a number in [0, 1); values outside are clamped into [0, 1] (NaN counts as
// 0), so a faulty source can never push a wait outside its bounds.
// *rand.Rand of math/rand/v2 satisfies Rand.
type Rand interface {
	Float64() float64
}

// Policy decides whether and when to retry. Implementations are safe for
// concurrent use; per-operation state lives in the [Sequence] that Start
// returns.
type Policy interface {
	// Name identifies the policy in reports ("full-jitter",
	// "full-jitter+budget", …).
	Name() string
	// Start begins the retry schedule of one operation.
	Start() Sequence
}

// Sequence is the retry schedule of one operation. It is not safe for
// concurrent use: one operation, one goroutine, one Sequence.
type Sequence interface {
	// Next is called after each failed attempt. It returns the wait before
	// the next attempt, and false when no retry should happen. Once it has
	// returned false it keeps returning false.
	Next() (time.Duration, bool)
}

// Config selects and parameterises a policy. Start from [DefaultConfig].
type Config struct {
	// Name is one of [Names]: none, exponential, full-jitter, equal-jitter,
	// decorrelated-jitter.
	Name string
	// MaxAttempts is the total number of attempts including the first, so
	// MaxAttempts-1 retries at most. Ignored by none.
	MaxAttempts int
	// Base is the first exponential wait and the lower bound of
	// decorrelated jitter.
	Base time.Duration
	// Cap is the largest single wait.
	Cap time.Duration
	// Multiplier is the growth factor of the exponential schedule shared by
	// exponential, full-jitter and equal-jitter. Decorrelated jitter always
	// uses 3, as in the AWS article.
	Multiplier float64
}

// DefaultConfig returns the write-up's schedule (3 attempts, 500 ms base, ×2,
// 10 s cap) under the name none: approvals are not retried by default,
// because every retry adds load to an institution that is already failing.
// Set Name to turn a retry policy on.
func DefaultConfig() Config {
	return Config{
		Name:        None,
		MaxAttempts: 3,
		Base:        500 * time.Millisecond,
		Cap:         10 * time.Second,
		Multiplier:  2,
	}
}

// Validate reports every invalid field; each error names its field. Name
// may be in any form [ParseName] accepts. All
// fields are checked whatever the Name, so a valid Config stays valid when
// only its Name changes.
func (c Config) Validate() error {
	var errs []error
	if _, err := ParseName(c.Name); err != nil {
		errs = append(errs, fmt.Errorf("retry: Name: unknown policy %q (want one of %s)", c.Name, strings.Join(names, ", ")))
	}
	if c.MaxAttempts < 1 {
		errs = append(errs, fmt.Errorf("retry: MaxAttempts: must be at least 1 (the first attempt), got %d", c.MaxAttempts))
	}
	if c.Base <= 0 {
		errs = append(errs, fmt.Errorf("retry: Base: must be positive, got %s", c.Base))
	}
	if c.Cap < c.Base || c.Cap <= 0 {
		errs = append(errs, fmt.Errorf("retry: Cap: must be positive and at least Base (%s), got %s", c.Base, c.Cap))
	}
	if !(c.Multiplier >= 1) || math.IsInf(c.Multiplier, 0) {
		errs = append(errs, fmt.Errorf("retry: Multiplier: must be a finite number ≥ 1, got %v", c.Multiplier))
	}
	return errors.Join(errs...)
}

// New returns the policy c describes. Name is parsed with [ParseName]. rnd
// feeds the jittered policies; New serialises calls to it, so a
// non-thread-safe source such as a seeded *rand.Rand is fine even when the
// policy is shared. A nil rnd uses the math/rand/v2 top-level generator.
func New(c Config, rnd Rand) (Policy, error) {
	if name, err := ParseName(c.Name); err == nil {
		c.Name = name
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	var r Rand = globalRand{}
	if rnd != nil {
		r = &lockedRand{r: rnd}
	}
	return &policy{cfg: c, rnd: r}, nil
}

// globalRand draws from math/rand/v2's top-level generator, which is safe
// for concurrent use.
type globalRand struct{}

func (globalRand) Float64() float64 { return rand.Float64() }

// lockedRand serialises a caller's source.
type lockedRand struct {
	mu sync.Mutex
	r  Rand
}

func (l *lockedRand) Float64() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.Float64()
}

// policy implements every named policy; its fields never change after New.
type policy struct {
	cfg Config
	rnd Rand
}

func (p *policy) Name() string { return p.cfg.Name }

func (p *policy) Start() Sequence { return &sequence{p: p, prev: p.cfg.Base} }

// unit draws from the source, clamped into [0, 1].
func (p *policy) unit() float64 {
	f := p.rnd.Float64()
	switch {
	case !(f > 0): // also NaN
		return 0
	case f > 1:
		return 1
	}
	return f
}

// exponential is the capped wait after failed attempt n (n ≥ 1).
func (p *policy) exponential(n int) time.Duration {
	return clamp(float64(p.cfg.Base)*math.Pow(p.cfg.Multiplier, float64(n-1)), p.cfg.Cap)
}

// clamp converts f to a Duration in [0, max]; NaN and overflow give max.
func clamp(f float64, max time.Duration) time.Duration {
	switch {
	case f < 0:
		return 0
	case !(f < float64(max)):
		return max
	}
	return min(time.Duration(f), max)
}

// sequence is the per-operation state of a policy.
type sequence struct {
	p    *policy
	n    int           // failed attempts so far
	prev time.Duration // previous wait (decorrelated jitter); Base at first
	done bool
}

func (s *sequence) Next() (time.Duration, bool) {
	if s.done {
		return 0, false
	}
	s.n++
	c := s.p.cfg
	if c.Name == None || s.n >= c.MaxAttempts {
		s.done = true
		return 0, false
	}
	var d time.Duration
	switch c.Name {
	case Exponential:
		d = s.p.exponential(s.n)
	case FullJitter:
		v := s.p.exponential(s.n)
		d = clamp(s.p.unit()*float64(v), v)
	case EqualJitter:
		v := s.p.exponential(s.n)
		half := v / 2
		d = half + clamp(s.p.unit()*float64(v-half), v-half)
	case DecorrelatedJitter:
		lo, hi := float64(c.Base), 3*float64(s.prev)
		d = max(clamp(lo+s.p.unit()*(hi-lo), c.Cap), c.Base)
		s.prev = d
	}
	return d, true
}
