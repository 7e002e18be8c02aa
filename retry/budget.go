package retry

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
)

// milli is the budget's fixed-point scale: tokens are counted in thousandths,
// as in gRPC's retry throttling (token_ratio has three decimal places), so
// ten deposits of 0.1 make exactly one token.
const milli = 1000

// maxBudgetTokens bounds MaxTokens so that milli-token arithmetic cannot
// overflow.
const maxBudgetTokens = 1e12

// BudgetConfig parameterises a [Budget]. Start from [DefaultBudgetConfig].
// Values are rounded to 0.001 token.
type BudgetConfig struct {
	// MaxTokens is the bucket size and the starting balance: the largest
	// burst of retries the budget can pay for at once.
	MaxTokens float64
	// TokenRatio is what each success deposits. In steady state retries
	// are held to about TokenRatio per success (0.1: one retry per ten
	// successes, at most 10 % extra load).
	TokenRatio float64
	// Reserve is a balance that retries never spend: a retry is granted
	// only if the balance is at least Reserve+1, so at least Reserve stays
	// in the bucket after paying. 0 lets retries spend the whole bucket.
	Reserve float64
}

// DefaultBudgetConfig returns MaxTokens 10, TokenRatio 0.1, Reserve 0.
func DefaultBudgetConfig() BudgetConfig {
	return BudgetConfig{MaxTokens: 10, TokenRatio: 0.1, Reserve: 0}
}

// Validate reports every invalid field; each error names its field.
func (c BudgetConfig) Validate() error {
	var errs []error
	if !(c.MaxTokens >= 1 && c.MaxTokens <= maxBudgetTokens) {
		errs = append(errs, fmt.Errorf("retry: MaxTokens: must be between 1 and %g, got %v", float64(maxBudgetTokens), c.MaxTokens))
	}
	if !(c.TokenRatio >= 0.001 && c.TokenRatio <= maxBudgetTokens) {
		errs = append(errs, fmt.Errorf("retry: TokenRatio: must be at least 0.001 (a budget that never refills stops retrying for good), got %v", c.TokenRatio))
	}
	// Compared in milli-tokens, as NewBudget rounds them: in float64,
	// 1.253-1 is 0.25299999999999989 and would refuse Reserve 0.253.
	if !(c.Reserve >= 0 && c.Reserve <= maxBudgetTokens && toMilli(c.Reserve)+milli <= toMilli(c.MaxTokens)) {
		errs = append(errs, fmt.Errorf("retry: Reserve: must be at least 0 and at most MaxTokens-1 (%v) so that one retry can be paid, got %v", float64(toMilli(c.MaxTokens)-milli)/milli, c.Reserve))
	}
	return errors.Join(errs...)
}

// Budget is a token bucket that limits retries across many operations, in
// the manner of gRPC retry throttling and Finagle's RetryBudget. It is safe
// for concurrent use.
//
// The budget starts full at MaxTokens. Every success deposits TokenRatio
// (never above MaxTokens); every granted retry spends exactly 1 (never
// below Reserve, hence never below 0). Over any history the retries granted
// are at most MaxTokens + TokenRatio·successes.
//
// Unlike gRPC, a failure costs nothing by itself: the token is spent by the
// retry the failure asks for (TryRetry), as in Finagle. A failure that is
// not retried — the last attempt, or an error that is not retryable — is
// free. gRPC instead charges every failed attempt and refuses retries once
// the balance is at or below MaxTokens/2; set Reserve to about MaxTokens/2
// for a comparable floor.
type Budget struct {
	maxTokens int64 // milli-tokens
	ratio     int64
	floor     int64 // reserve + one token: the least balance that can pay

	mu     sync.Mutex
	tokens int64
}

// toMilli rounds a token amount to whole milli-tokens.
func toMilli(f float64) int64 { return int64(math.Round(f * milli)) }

// NewBudget returns a full budget, or the error of cfg.Validate.
func NewBudget(cfg BudgetConfig) (*Budget, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	b := &Budget{
		maxTokens: toMilli(cfg.MaxTokens),
		ratio:     toMilli(cfg.TokenRatio),
		floor:     toMilli(cfg.Reserve) + milli,
	}
	b.tokens = b.maxTokens
	return b, nil
}

// OnSuccess deposits TokenRatio, up to MaxTokens.
func (b *Budget) OnSuccess() {
	b.mu.Lock()
	b.tokens = min(b.tokens+b.ratio, b.maxTokens)
	b.mu.Unlock()
}

// TryRetry spends one token and reports true if the balance is at least
// Reserve+1; otherwise it spends nothing and reports false.
func (b *Budget) TryRetry() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.tokens < b.floor {
		return false
	}
	b.tokens -= milli
	return true
}

// Tokens returns the current balance.
func (b *Budget) Tokens() float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return float64(b.tokens) / milli
}

// SuccessRecorder is implemented by a [Sequence] that wants to hear about
// success. [Do] calls OnSuccess on the operation's Sequence when an attempt
// succeeds; the sequences of a [WithBudget] policy forward it to the
// budget, which is how operations run with Do earn the budget's tokens.
type SuccessRecorder interface {
	OnSuccess()
}

// WithBudget returns the budget policy: a retry happens only if p allows it
// and then b pays for it. b is asked only after p agrees, so a retry that p
// refuses costs no token. Its Name is p's name + "+budget". Successes must
// reach b: [Do] reports them; code that does not use Do calls b.OnSuccess
// itself. WithBudget panics if p or b is nil.
func WithBudget(p Policy, b *Budget) Policy {
	if p == nil || b == nil {
		panic("retry: WithBudget needs a policy and a budget")
	}
	return &budgeted{inner: p, b: b}
}

type budgeted struct {
	inner Policy
	b     *Budget
}

func (p *budgeted) Name() string { return p.inner.Name() + "+budget" }

func (p *budgeted) Start() Sequence { return &budgetedSeq{inner: p.inner.Start(), b: p.b} }

type budgetedSeq struct {
	inner Sequence
	b     *Budget
	done  bool
}

func (s *budgetedSeq) Next() (time.Duration, bool) {
	if s.done {
		return 0, false
	}
	d, ok := s.inner.Next()
	if !ok || !s.b.TryRetry() {
		s.done = true
		return 0, false
	}
	return d, true
}

// OnSuccess deposits into the budget and passes the news on to the inner
// sequence if it wants it.
func (s *budgetedSeq) OnSuccess() {
	s.b.OnSuccess()
	if r, ok := s.inner.(SuccessRecorder); ok {
		r.OnSuccess()
	}
}
