// Package soak is the soak lab (`stampede lab soak`): a rolling sale on
// the sale lab's rig — every part of Stampede a real child process of the
// same binary, on the embedded defaults or on real Redis, PostgreSQL and
// NATS — for minutes or hours: buyers arrive at a steady, moderate rate
// and leave, pay, their events reach the fulfilment workers, and some paid
// orders are refunded.
//
// Every Sample period it records each process's resident memory,
// goroutines and open files, the Redis's memory and keys, the databases'
// sizes (per payment), the event stream's size (per payment) and the p99
// latencies of each minute (join to admission, payment). After the
// warm-up it fits a least-squares line to each series and judges its
// slope an hour against a tolerance: a series that keeps growing is a
// leak, and fails the run, as does any broken invariant (oversell, double
// charge, double refund, parity) or a part that exited.
package soak

import (
	"os/exec"
	"time"

	"github.com/stampede-lab/stampede"
)

// Config configures the soak.
type Config struct {
	// Duration is how long buyers arrive; Warmup the first stretch of it
	// whose samples the slopes leave out (0: a fifth of Duration, and
	// SettleTime for a run of an hour or more).
	Duration time.Duration
	Warmup   time.Duration
	// Sample is the sampling period.
	Sample time.Duration
	// MinWindow is the shortest stretch after the warm-up whose slopes
	// are judged: a shorter run reports them without a verdict.
	MinWindow time.Duration
	// Rate is how many buyers arrive a second (Poisson arrivals).
	Rate float64
	// RefundShare is the share of paid orders refunded, RefundAfter after
	// the payment.
	RefundShare float64
	RefundAfter time.Duration
	// QueueAbandon and CheckoutAbandon are the shares of buyers who walk
	// away in the queue (after 1 to 8 s) and with a seat on hold.
	QueueAbandon    float64
	CheckoutAbandon float64
	// Capacity, Lease and Retention are the room's.
	Capacity  int
	Lease     time.Duration
	Retention time.Duration
	// Tolerances are the growth an hour allowed to each family of series.
	Tolerances map[string]Tolerance
	// LeakRate, when positive, starts one more process beside the parts
	// that retains LeakRate bytes and a goroutine a second (lab
	// soak-leak): a planted leak the verdict must catch.
	LeakRate int64
	// Redis, Postgres and NATS name real services; empty: embedded.
	Redis, Postgres, NATS string
	// Seed seeds the arrivals and the buyers' choices.
	Seed uint64
	// Dir holds the run's data and process logs; Keep keeps them.
	Dir  string
	Keep bool
	// Cmd returns the command that runs this binary with args.
	Cmd func(args []string) *exec.Cmd
	// Log receives progress lines; nil: none.
	Log func(format string, args ...any)
}

// Families of series, each drawn in one chart with one tolerance.
const (
	FamilyRSS  = "rss"
	FamilyHeap = "heap"
	// FamilyRuntime is reported only: a Go process's heap memory freed
	// and kept from the OS, and its stacks, to read its resident memory
	// against its heap.
	FamilyRuntime    = "go_runtime"
	FamilyGoroutines = "goroutines"
	FamilyFiles      = "open_files"
	FamilyRedisKeys  = "redis_keys"
	FamilyRedisBytes = "redis_bytes"
	FamilyStore      = "store_bytes_per_payment"
	FamilyStream     = "stream_bytes_per_payment"
	FamilyLogEntry   = "log_bytes_per_entry"
	FamilyLatency    = "p99_ms"
)

// DefaultTolerances are the growth an hour allowed to each family: a
// tenth of the mean, and at least 8 MiB of memory (resident, or the Go
// heap in use), 20 goroutines or open
// files, 10 keys, 1 MiB of Redis memory, 100 bytes per payment or per
// admission log entry; a quarter of the mean and at least 50 ms for a
// p99.
func DefaultTolerances() map[string]Tolerance {
	return map[string]Tolerance{
		FamilyRSS:        {Relative: 0.10, Absolute: 8 << 20},
		FamilyHeap:       {Relative: 0.10, Absolute: 8 << 20},
		FamilyGoroutines: {Relative: 0.10, Absolute: 20},
		FamilyFiles:      {Relative: 0.10, Absolute: 20},
		FamilyRedisKeys:  {Relative: 0.10, Absolute: 10},
		FamilyRedisBytes: {Relative: 0.10, Absolute: 1 << 20},
		FamilyStore:      {Relative: 0.10, Absolute: 100},
		FamilyStream:     {Relative: 0.10, Absolute: 100},
		FamilyLogEntry:   {Relative: 0.10, Absolute: 100},
		FamilyLatency:    {Relative: 0.25, Absolute: 50},
	}
}

// DefaultConfig is a 60-minute soak at 2 buyers a second.
func DefaultConfig() Config {
	return Config{
		Duration: time.Hour, Sample: 10 * time.Second, MinWindow: 5 * time.Minute,
		Rate: 2, RefundShare: 0.1, RefundAfter: 5 * time.Second,
		QueueAbandon: 0.02, CheckoutAbandon: 0.03,
		Capacity: 50, Lease: 30 * time.Second, Retention: 2 * time.Minute,
		Tolerances: DefaultTolerances(),
		Seed:       1,
	}
}

// SettleTime is how long the rig's parts take to reach their level at
// the default rate: a gate keeps each admission it checked for the
// admission's session (serve gate --max-session, 30 minutes), so its
// memory grows for that long before the first entries are dropped.
const SettleTime = 30 * time.Minute

// warmup is the configured warm-up; by default a fifth of the run, and
// SettleTime for a run of an hour or more (a shorter one cannot wait that
// long and keep a window to judge).
func (c Config) warmup() time.Duration {
	if c.Warmup > 0 {
		return c.Warmup
	}
	if c.Duration >= 2*SettleTime {
		return max(c.Duration/5, SettleTime)
	}
	return c.Duration / 5
}

// seats is the event's seats: every buyer's and a margin, at most the
// checkout's limit.
func (c Config) seats() int {
	return min(100_000, int(c.Rate*c.Duration.Seconds()*1.3)+100)
}

// Validate reports every unusable field at once, named as the flag that
// sets it.
func (c Config) Validate() error {
	var f stampede.Fields
	share := func(x float64) bool { return x >= 0 && x <= 1 }
	if c.Duration <= 0 {
		f.Add("minutes", "must be positive, got %s", c.Duration)
	}
	if c.Warmup < 0 || (c.Duration > 0 && c.Warmup >= c.Duration) {
		f.Add("warmup", "must be shorter than the run (%s), and not negative; got %s", c.Duration, c.Warmup)
	}
	if c.Sample < 100*time.Millisecond {
		f.Add("sample", "must be at least 100ms, got %s", c.Sample)
	}
	if c.MinWindow < 0 {
		f.Add("min_window", "must not be negative, got %s", c.MinWindow)
	}
	if c.Rate <= 0 || c.Rate > 100 {
		f.Add("rate", "must be above 0 and at most 100 buyers a second, got %v", c.Rate)
	}
	if !share(c.RefundShare) {
		f.Add("refund_share", "must be between 0 and 1, got %v", c.RefundShare)
	}
	if c.RefundAfter < 0 {
		f.Add("refund_after", "must not be negative, got %s", c.RefundAfter)
	}
	if !share(c.QueueAbandon) {
		f.Add("queue_abandon", "must be between 0 and 1, got %v", c.QueueAbandon)
	}
	if !share(c.CheckoutAbandon) {
		f.Add("checkout_abandon", "must be between 0 and 1, got %v", c.CheckoutAbandon)
	}
	if c.Capacity < 1 {
		f.Add("capacity", "must be at least 1, got %d", c.Capacity)
	}
	if c.Lease < time.Second {
		f.Add("lease", "must be at least 1s, got %s", c.Lease)
	}
	if c.Retention < time.Second {
		f.Add("retention", "must be at least 1s, got %s", c.Retention)
	}
	if c.LeakRate < 0 {
		f.Add("plant_leak", "must not be negative, got %d", c.LeakRate)
	}
	for _, fam := range []string{FamilyRSS, FamilyHeap, FamilyGoroutines, FamilyFiles, FamilyRedisKeys, FamilyRedisBytes, FamilyStore, FamilyStream, FamilyLatency} {
		if t, ok := c.Tolerances[fam]; !ok || t.Relative < 0 || t.Absolute < 0 {
			f.Add("tolerances", "needs a non-negative tolerance for %s", fam)
		}
	}
	if c.Cmd == nil {
		f.Add("cmd", "must be set: it starts the parts")
	}
	return f.Err()
}
