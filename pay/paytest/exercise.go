package paytest

import (
	"testing"

	"github.com/stampede-lab/stampede/pay"
)

// Options tune Exercise.
type Options struct {
	// Parallel runs the suite's tests in parallel with each other. Some
	// tests count every row of the store, so open must then return a
	// store of the test's own (a fresh database) each time.
	Parallel bool
}

// Exercise runs the conformance suite on the stores open returns, one per
// test: open may return the same store every time (one test at a time
// then), and it owns the store (Exercise never closes it; use
// t.Cleanup).
func Exercise(t *testing.T, open func(t *testing.T) pay.Store, opts Options) {
	run(t, open, opts.Parallel)
}
