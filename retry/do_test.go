package retry

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

var (
	errTransient = errors.New("transient")
	errFatal     = errors.New("fatal")
)

func isTransient(err error) bool { return errors.Is(err, errTransient) }

// recorder is a Sleeper that records the requested waits and returns at
// once (or ctx's error).
type recorder struct{ waits []time.Duration }

func (r *recorder) sleep(ctx context.Context, d time.Duration) error {
	r.waits = append(r.waits, d)
	return ctx.Err()
}

// failing returns an operation that fails with errs[i] on attempt i+1 and
// succeeds after them; it records the attempt numbers it saw.
func failing(seen *[]int, errs ...error) func(context.Context, int) error {
	return func(_ context.Context, attempt int) error {
		*seen = append(*seen, attempt)
		if attempt <= len(errs) {
			return errs[attempt-1]
		}
		return nil
	}
}

func exp(maxAttempts int) Policy {
	c := DefaultConfig()
	c.Name, c.MaxAttempts = Exponential, maxAttempts
	p, err := New(c, nil)
	if err != nil {
		panic(err)
	}
	return p
}

func TestDo(t *testing.T) {
	ctx := t.Context()
	tests := []struct {
		name         string
		p            Policy
		errs         []error
		retryable    func(error) bool
		wantAttempts int
		wantErr      error
		wantWaits    []time.Duration
	}{
		{"first attempt succeeds", exp(3), nil, isTransient, 1, nil, nil},
		{"succeeds on the second", exp(3), []error{errTransient}, isTransient, 2, nil, []time.Duration{500 * ms}},
		{"succeeds on the last", exp(3), []error{errTransient, errTransient}, isTransient, 3, nil, []time.Duration{500 * ms, time.Second}},
		{"stops after MaxAttempts", exp(3), []error{errTransient, errTransient, errTransient, errTransient}, isTransient, 3, errTransient, []time.Duration{500 * ms, time.Second}},
		{"stops after MaxAttempts 4", exp(4), slices.Repeat([]error{errTransient}, 9), isTransient, 4, errTransient, []time.Duration{500 * ms, time.Second, 2 * time.Second}},
		{"stops on a non-retryable error", exp(3), []error{errFatal}, isTransient, 1, errFatal, nil},
		{"non-retryable after a retry", exp(3), []error{errTransient, errFatal}, isTransient, 2, errFatal, []time.Duration{500 * ms}},
		{"nil retryable retries everything", exp(3), []error{errFatal, errFatal}, nil, 3, nil, []time.Duration{500 * ms, time.Second}},
		{"none never retries", mustNew(t, DefaultConfig(), nil), []error{errTransient}, isTransient, 1, errTransient, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var seen []int
			var rec recorder
			n, err := Do(ctx, tt.p, rec.sleep, failing(&seen, tt.errs...), tt.retryable)
			if n != tt.wantAttempts || err != tt.wantErr {
				t.Fatalf("Do = %d, %v; want %d, %v", n, err, tt.wantAttempts, tt.wantErr)
			}
			if want := seqInts(n); !slices.Equal(seen, want) {
				t.Errorf("attempt numbers %v, want %v", seen, want)
			}
			if !slices.Equal(rec.waits, tt.wantWaits) {
				t.Errorf("waits %v, want %v", rec.waits, tt.wantWaits)
			}
		})
	}
}

func seqInts(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i + 1
	}
	return out
}

func TestDoContext(t *testing.T) {
	t.Run("done before the first attempt", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		var seen []int
		n, err := Do(ctx, exp(3), (&recorder{}).sleep, failing(&seen), nil)
		if n != 0 || !errors.Is(err, context.Canceled) || len(seen) != 0 {
			t.Fatalf("Do = %d, %v after %v; want 0 attempts and context.Canceled", n, err, seen)
		}
	})
	t.Run("cancelled during an attempt", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		var rec recorder
		calls := 0
		n, err := Do(ctx, exp(5), rec.sleep, func(context.Context, int) error {
			calls++
			if calls == 2 {
				cancel()
			}
			return errTransient
		}, isTransient)
		if n != 2 || !errors.Is(err, context.Canceled) || !errors.Is(err, errTransient) {
			t.Fatalf("Do = %d, %v; want 2 attempts, an error matching Canceled and the last error", n, err)
		}
		if !slices.Equal(rec.waits, []time.Duration{500 * ms}) {
			t.Fatalf("waits %v, want only the one before attempt 2", rec.waits)
		}
	})
	t.Run("cancelled during a wait", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		var waits []time.Duration
		sleep := func(ctx context.Context, d time.Duration) error {
			waits = append(waits, d)
			cancel()
			return ctx.Err()
		}
		var seen []int
		n, err := Do(ctx, exp(5), sleep, failing(&seen, errTransient, errTransient), isTransient)
		if n != 1 || !errors.Is(err, context.Canceled) || !errors.Is(err, errTransient) || len(waits) != 1 {
			t.Fatalf("Do = %d, %v, waits %v; want 1 attempt, Canceled and the last error", n, err, waits)
		}
	})
	t.Run("sleeper that ignores ctx", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		var seen []int
		sleep := func(context.Context, time.Duration) error { cancel(); return nil }
		n, err := Do(ctx, exp(5), sleep, failing(&seen, errTransient, errTransient), isTransient)
		if n != 1 || !errors.Is(err, context.Canceled) {
			t.Fatalf("Do = %d, %v; want no attempt after ctx is done", n, err)
		}
	})
	t.Run("deadline with the default sleeper", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 20*ms)
		defer cancel()
		start := time.Now()
		c := DefaultConfig()
		c.Name, c.MaxAttempts, c.Base, c.Cap = Exponential, 3, time.Hour, time.Hour
		var seen []int
		n, err := Do(ctx, mustNew(t, c, nil), nil, failing(&seen, errTransient, errTransient), nil)
		if n != 1 || !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, errTransient) {
			t.Fatalf("Do = %d, %v", n, err)
		}
		if el := time.Since(start); el > 10*time.Second {
			t.Fatalf("took %v: the default sleeper ignored the deadline", el)
		}
	})
}

func TestSleep(t *testing.T) {
	if err := Sleep(t.Context(), 0); err != nil {
		t.Fatal(err)
	}
	if err := Sleep(t.Context(), -time.Second); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := Sleep(t.Context(), 5*ms); err != nil || time.Since(start) < 5*ms {
		t.Fatalf("Sleep(5ms) = %v after %v", err, time.Since(start))
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep on a cancelled ctx = %v", err)
	}
	if err := Sleep(ctx, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep(0) on a cancelled ctx = %v", err)
	}
}

func TestDoWithBudget(t *testing.T) {
	b := mustBudget(t, BudgetConfig{MaxTokens: 1, TokenRatio: 0.5})
	p := WithBudget(exp(5), b)
	var rec recorder
	var seen []int
	// One token: one retry, then the budget refuses.
	n, err := Do(t.Context(), p, rec.sleep, failing(&seen, errTransient, errTransient, errTransient), isTransient)
	if n != 2 || err != errTransient || b.Tokens() != 0 {
		t.Fatalf("Do = %d, %v, tokens %v; want 2 attempts, the last error, 0 tokens", n, err, b.Tokens())
	}
	// Successes through Do refill the budget.
	for range 2 {
		if n, err := Do(t.Context(), p, rec.sleep, failing(&seen), isTransient); n != 1 || err != nil {
			t.Fatalf("Do = %d, %v", n, err)
		}
	}
	if b.Tokens() != 1 {
		t.Fatalf("tokens after two successes = %v, want 1", b.Tokens())
	}
}

func TestDoPanicsOnNil(t *testing.T) {
	for name, f := range map[string]func(){
		"nil policy": func() { Do(t.Context(), nil, nil, func(context.Context, int) error { return nil }, nil) },
		"nil op":     func() { Do(t.Context(), exp(3), nil, nil, nil) },
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
