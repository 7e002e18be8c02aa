package retry

import (
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"
)

func mustBudget(t tb, c BudgetConfig) *Budget {
	t.Helper()
	b, err := NewBudget(c)
	if err != nil {
		t.Fatalf("NewBudget(%+v): %v", c, err)
	}
	return b
}

func TestBudgetConfigValidate(t *testing.T) {
	if c := DefaultBudgetConfig(); c != (BudgetConfig{MaxTokens: 10, TokenRatio: 0.1}) || c.Validate() != nil {
		t.Fatalf("DefaultBudgetConfig() = %+v, Validate = %v", c, c.Validate())
	}
	tests := []struct {
		field string
		mod   func(*BudgetConfig)
	}{
		{"MaxTokens", func(c *BudgetConfig) { c.MaxTokens = 0.5 }},
		{"MaxTokens", func(c *BudgetConfig) { c.MaxTokens = math.NaN() }},
		{"MaxTokens", func(c *BudgetConfig) { c.MaxTokens = math.Inf(1) }},
		{"TokenRatio", func(c *BudgetConfig) { c.TokenRatio = 0 }},
		{"TokenRatio", func(c *BudgetConfig) { c.TokenRatio = -0.1 }},
		{"TokenRatio", func(c *BudgetConfig) { c.TokenRatio = math.NaN() }},
		{"Reserve", func(c *BudgetConfig) { c.Reserve = -1 }},
		{"Reserve", func(c *BudgetConfig) { c.Reserve = 9.5 }},
		{"Reserve", func(c *BudgetConfig) { c.Reserve = math.NaN() }},
		{"Reserve", func(c *BudgetConfig) { c.MaxTokens, c.Reserve = 1.253, 0.254 }},
		{"Reserve", func(c *BudgetConfig) { c.Reserve = math.Inf(1) }},
	}
	for _, tt := range tests {
		c := DefaultBudgetConfig()
		tt.mod(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tt.field+":") {
			t.Errorf("Validate(%+v) = %v, want an error naming %s", c, err, tt.field)
		}
		if b, err := NewBudget(c); err == nil || b != nil {
			t.Errorf("NewBudget(%+v) = %v, %v; want an error", c, b, err)
		}
	}
}

// TestBudgetReserveAtTheLimit: Reserve = MaxTokens-1 is valid whatever
// float64 makes of the subtraction (rapid found 1.253-1 < 0.253), and such
// a budget pays exactly one retry.
func TestBudgetReserveAtTheLimit(t *testing.T) {
	for _, c := range []BudgetConfig{
		{MaxTokens: 1.253, TokenRatio: 0.001, Reserve: 0.253},
		{MaxTokens: 10.1, TokenRatio: 0.1, Reserve: 9.1},
		{MaxTokens: 1, TokenRatio: 0.1, Reserve: 0},
	} {
		b, err := NewBudget(c)
		if err != nil {
			t.Errorf("NewBudget(%+v): %v", c, err)
			continue
		}
		if !b.TryRetry() || b.TryRetry() {
			t.Errorf("NewBudget(%+v) does not pay exactly one retry", c)
		}
	}
}

func TestBudgetBasics(t *testing.T) {
	b := mustBudget(t, DefaultBudgetConfig())
	if got := b.Tokens(); got != 10 {
		t.Fatalf("a new budget holds %v tokens, want 10 (starts full)", got)
	}
	b.OnSuccess()
	if got := b.Tokens(); got != 10 {
		t.Fatalf("after a success on a full budget: %v, want 10 (never above max)", got)
	}
	for i := range 10 {
		if !b.TryRetry() {
			t.Fatalf("retry %d refused with %v tokens", i+1, b.Tokens())
		}
	}
	if got := b.Tokens(); got != 0 {
		t.Fatalf("after 10 retries: %v tokens, want 0", got)
	}
	if b.TryRetry() || b.Tokens() != 0 {
		t.Fatalf("an empty budget paid a retry, now %v", b.Tokens())
	}
	// Ten deposits of 0.1 make exactly one token (fixed-point, no 0.999…).
	for range 9 {
		b.OnSuccess()
	}
	if b.TryRetry() {
		t.Fatalf("0.9 tokens paid a retry")
	}
	b.OnSuccess()
	if got := b.Tokens(); got != 1 {
		t.Fatalf("ten successes deposited %v, want 1", got)
	}
	if !b.TryRetry() || b.Tokens() != 0 {
		t.Fatalf("one token did not pay one retry (now %v)", b.Tokens())
	}
}

func TestBudgetReserve(t *testing.T) {
	b := mustBudget(t, BudgetConfig{MaxTokens: 10, TokenRatio: 0.5, Reserve: 5})
	granted := 0
	for b.TryRetry() {
		granted++
	}
	if granted != 5 || b.Tokens() != 5 {
		t.Fatalf("granted %d, left %v; want 5 granted and the reserve of 5 kept", granted, b.Tokens())
	}
	b.OnSuccess()
	if b.TryRetry() {
		t.Fatal("5.5 tokens with reserve 5 paid a retry")
	}
	b.OnSuccess()
	if !b.TryRetry() || b.Tokens() != 5 {
		t.Fatalf("6 tokens with reserve 5 did not pay a retry down to 5 (now %v)", b.Tokens())
	}
}

// budgetModel is the budget in integer milli-tokens, with the counters
// needed for the invariants.
type budgetModel struct {
	max, ratio, floor, tokens int64
	successes, granted        int64
}

func drawBudgetConfig(t *rapid.T) BudgetConfig {
	maxT := float64(rapid.IntRange(1000, 50_000).Draw(t, "maxMilli")) / 1000
	return BudgetConfig{
		MaxTokens:  maxT,
		TokenRatio: float64(rapid.IntRange(1, 3000).Draw(t, "ratioMilli")) / 1000,
		Reserve:    float64(rapid.Int64Range(0, int64(maxT*1000)-1000).Draw(t, "reserveMilli")) / 1000,
	}
}

func checkBudgetInvariants(t interface{ Fatalf(string, ...any) }, c BudgetConfig, tokens float64, successes, granted int64) {
	if tokens < 0 || tokens > c.MaxTokens {
		t.Fatalf("tokens = %v outside [0, %v]", tokens, c.MaxTokens)
	}
	// granted ≤ initial + ratio·successes, in exact milli-tokens.
	initial, ratio := int64(math.Round(c.MaxTokens*1000)), int64(math.Round(c.TokenRatio*1000))
	if granted*1000 > initial+ratio*successes {
		t.Fatalf("%d retries granted > %v + %v·%d", granted, c.MaxTokens, c.TokenRatio, successes)
	}
}

// TestBudgetProperty: any interleaving of successes and retries matches
// the model exactly and keeps 0 ≤ tokens ≤ max and granted ≤ initial +
// ratio·successes.
func TestBudgetProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		c := drawBudgetConfig(rt)
		b := mustBudget(rt, c)
		m := budgetModel{
			max:   int64(math.Round(c.MaxTokens * 1000)),
			ratio: int64(math.Round(c.TokenRatio * 1000)),
			floor: int64(math.Round(c.Reserve*1000)) + 1000,
		}
		m.tokens = m.max
		rt.Repeat(map[string]func(*rapid.T){
			"success": func(*rapid.T) {
				b.OnSuccess()
				m.successes++
				m.tokens = min(m.tokens+m.ratio, m.max)
			},
			"retry": func(rt *rapid.T) {
				got := b.TryRetry()
				want := m.tokens >= m.floor
				if got != want {
					rt.Fatalf("TryRetry = %v with %d milli-tokens (floor %d), want %v", got, m.tokens, m.floor, want)
				}
				if got {
					m.granted++
					m.tokens -= 1000
				}
			},
			"": func(rt *rapid.T) {
				if got := b.Tokens(); got != float64(m.tokens)/1000 {
					rt.Fatalf("Tokens = %v, model %v", got, float64(m.tokens)/1000)
				}
				checkBudgetInvariants(rt, c, b.Tokens(), m.successes, m.granted)
			},
		})
	})
}

// TestBudgetConcurrentProperty runs rapid-drawn plans of successes and
// retries on several goroutines at once (run with -race): whatever the
// interleaving, the invariants hold, and the final balance is exactly what
// some serial order would give.
func TestBudgetConcurrentProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		c := drawBudgetConfig(rt)
		b := mustBudget(rt, c)
		workers := rapid.IntRange(2, 8).Draw(rt, "workers")
		plans := make([][]bool, workers) // true = success, false = retry
		for w := range plans {
			plans[w] = rapid.SliceOfN(rapid.Bool(), 0, 200).Draw(rt, "plan")
		}
		var successes, granted atomic.Int64
		var wg sync.WaitGroup
		for _, plan := range plans {
			wg.Go(func() {
				for _, success := range plan {
					if success {
						b.OnSuccess()
						successes.Add(1)
					} else if b.TryRetry() {
						granted.Add(1)
					}
					if tk := b.Tokens(); tk < 0 || tk > c.MaxTokens {
						rt.Errorf("tokens = %v outside [0, %v]", tk, c.MaxTokens)
					}
				}
			})
		}
		wg.Wait()
		checkBudgetInvariants(rt, c, b.Tokens(), successes.Load(), granted.Load())
	})
}

func TestWithBudget(t *testing.T) {
	b := mustBudget(t, BudgetConfig{MaxTokens: 2, TokenRatio: 0.5})
	inner := mustNew(t, cfg(Exponential, func(c *Config) { c.MaxAttempts = 3 }), nil)
	p := WithBudget(inner, b)
	if p.Name() != "exponential+budget" {
		t.Fatalf("Name() = %q", p.Name())
	}
	// The inner policy allows 2 retries and the budget pays both.
	if got := waits(t, p, 10); len(got) != 2 || got[0] != 500*ms || got[1] != time.Second {
		t.Fatalf("waits = %v, want [500ms 1s]", got)
	}
	// The inner policy's refusal (3rd Next) cost nothing.
	if b.Tokens() != 0 {
		t.Fatalf("tokens = %v, want 0 (two retries paid, the refused one free)", b.Tokens())
	}
	// Empty budget: the first retry is refused, and the sequence stays stopped
	// even after the budget refills.
	s := p.Start()
	if _, ok := s.Next(); ok {
		t.Fatal("an empty budget paid for a retry")
	}
	b.OnSuccess()
	b.OnSuccess()
	if _, ok := s.Next(); ok {
		t.Fatal("a stopped sequence restarted")
	}
	// A policy that never retries never touches the budget.
	none := WithBudget(mustNew(t, DefaultConfig(), nil), b)
	if got := waits(t, none, 10); len(got) != 0 || b.Tokens() != 1 {
		t.Fatalf("none+budget waits %v, tokens %v; want none and 1", got, b.Tokens())
	}
	// The sequence forwards success to the budget.
	s = p.Start()
	s.(SuccessRecorder).OnSuccess()
	if b.Tokens() != 1.5 {
		t.Fatalf("tokens after a success = %v, want 1.5", b.Tokens())
	}
}

func TestWithBudgetPanicsOnNil(t *testing.T) {
	p := mustNew(t, DefaultConfig(), nil)
	b := mustBudget(t, DefaultBudgetConfig())
	for name, f := range map[string]func(){
		"nil policy": func() { WithBudget(nil, b) },
		"nil budget": func() { WithBudget(p, nil) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}

// TestBudgetCapsStampede: 150 operations fail at once under a 3-attempt
// policy. Without a budget the institution sees 450 requests (3.00×); with
// the default budget, 150 + 10.
func TestBudgetCapsStampede(t *testing.T) {
	const ops = 150
	inner := mustNew(t, cfg(FullJitter, nil), constRand(0.5))
	b := mustBudget(t, DefaultBudgetConfig())
	for _, tc := range []struct {
		p    Policy
		want int
	}{{inner, 3 * ops}, {WithBudget(inner, b), ops + 10}} {
		var mu sync.Mutex
		requests := 0
		var wg sync.WaitGroup
		for range ops {
			wg.Go(func() {
				s := tc.p.Start()
				for {
					mu.Lock()
					requests++
					mu.Unlock()
					if _, ok := s.Next(); !ok {
						return
					}
				}
			})
		}
		wg.Wait()
		if requests != tc.want {
			t.Errorf("%s: %d requests, want %d", tc.p.Name(), requests, tc.want)
		}
	}
}
