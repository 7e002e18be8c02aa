package retry_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/stampede-lab/stampede/retry"
)

func ExampleNew() {
	c := retry.DefaultConfig()
	c.Name = retry.Exponential
	c.MaxAttempts = 4
	p, err := retry.New(c, nil)
	if err != nil {
		panic(err)
	}
	s := p.Start() // one Sequence per operation
	for {
		d, ok := s.Next()
		if !ok {
			break
		}
		fmt.Println(d)
	}
	// Output:
	// 500ms
	// 1s
	// 2s
}

func ExampleDo() {
	c := retry.DefaultConfig()
	c.Name = retry.FullJitter
	p, err := retry.New(c, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		panic(err)
	}
	budget, err := retry.NewBudget(retry.DefaultBudgetConfig())
	if err != nil {
		panic(err)
	}
	p = retry.WithBudget(p, budget)

	errTimeout := errors.New("timeout")
	var slept []time.Duration
	noSleep := func(_ context.Context, d time.Duration) error { slept = append(slept, d); return nil }

	attempts, err := retry.Do(context.Background(), p, noSleep,
		func(_ context.Context, attempt int) error {
			if attempt < 3 {
				return errTimeout
			}
			return nil
		},
		func(err error) bool { return errors.Is(err, errTimeout) })
	fmt.Println(p.Name(), attempts, err, len(slept), budget.Tokens())
	// Output:
	// full-jitter+budget 3 <nil> 2 8.1
}
