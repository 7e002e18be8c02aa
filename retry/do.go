package retry

import (
	"context"
	"fmt"
	"time"
)

// Sleeper waits d or until ctx is done, whichever comes first, and returns
// ctx's error in the second case. Tests inject one that records the waits
// and returns at once.
type Sleeper func(ctx context.Context, d time.Duration) error

// Sleep is the default [Sleeper]: a timer that ctx can cut short. A
// non-positive d returns at once with ctx.Err().
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Do runs op under a fresh [Sequence] of p until it succeeds, fails with an
// error that retryable rejects, p stops retrying, or ctx is done. It returns
// the number of times op ran (attempts are numbered from 1) and:
//
//   - nil on success; the sequence is told through [SuccessRecorder], so a
//     [WithBudget] policy earns its deposit;
//   - op's last error, unchanged, if it was not retryable or p refused
//     another attempt (MaxAttempts reached, budget exhausted);
//   - an error that wraps both ctx.Err() and op's last error (errors.Is
//     matches either) if ctx ended the retries; Do starts no attempt once
//     ctx is done, and returns ctx.Err() with 0 attempts if it was done
//     before the first.
//
// sleep nil means [Sleep]; retryable nil means every error is retryable.
// Do panics if p or op is nil.
func Do(ctx context.Context, p Policy, sleep Sleeper, op func(ctx context.Context, attempt int) error, retryable func(error) bool) (attempts int, err error) {
	if p == nil || op == nil {
		panic("retry: Do needs a policy and an operation")
	}
	if sleep == nil {
		sleep = Sleep
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	seq := p.Start()
	for attempt := 1; ; attempt++ {
		err := op(ctx, attempt)
		if err == nil {
			if r, ok := seq.(SuccessRecorder); ok {
				r.OnSuccess()
			}
			return attempt, nil
		}
		if retryable != nil && !retryable(err) {
			return attempt, err
		}
		if cerr := ctx.Err(); cerr != nil {
			return attempt, stopped(cerr, err)
		}
		d, ok := seq.Next()
		if !ok {
			return attempt, err
		}
		if serr := sleep(ctx, d); serr != nil {
			return attempt, stopped(serr, err)
		}
		if cerr := ctx.Err(); cerr != nil {
			return attempt, stopped(cerr, err)
		}
	}
}

func stopped(cause, last error) error {
	return fmt.Errorf("retry: stopped: %w (last attempt: %w)", cause, last)
}
