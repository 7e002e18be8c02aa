// Package admission is the lab experiment of the waiting room (after the
// published waiting-room write-up): several service instances on one
// Redis admit users into a room of fixed capacity, under each admission
// mode, while an observer counts the room directly on Redis every
// millisecond.
//
// Users act only through the HTTP API: they join, poll their ticket at the
// interval the service suggests, hold their slot for a while once admitted
// and release it, or abandon it and leave the lease to run out.
package admission

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/lab"
	"github.com/stampede-lab/stampede/waitroom"
)

// Arrival patterns.
const (
	// Burst: every user arrives at the start.
	Burst = "burst"
	// Rate: users arrive as a Poisson process at Config.Rate per second.
	Rate = "rate"
)

// Config holds every parameter of the experiment.
type Config struct {
	// Instances is the number of service instances, each with its own HTTP
	// server and Redis connection pool.
	Instances int
	// Capacity is the room's capacity.
	Capacity int
	// Users is how many users arrive.
	Users int
	// Arrival is Burst or Rate; Rate is the arrival rate for Rate.
	Arrival string
	Rate    float64
	// Hold is the mean time an admitted user keeps the slot (±50 %).
	Hold time.Duration
	// Abandon is the fraction of admitted users who never release; the
	// lease reclaims their slots.
	Abandon float64
	// Lease is the room's lease.
	Lease time.Duration
	// Ticks are the admit intervals compared.
	Ticks []time.Duration
	// Modes are the admission modes compared.
	Modes []waitroom.Mode
	// Immediate lists the settings of immediate admission compared.
	Immediate []bool
	// RedisURL names a real Redis; empty starts an embedded Redis-protocol
	// server for every run.
	RedisURL string
	// Duration is how long each run lasts.
	Duration time.Duration
	// Repeat is how many times each condition runs.
	Repeat int
	// Seed makes arrivals, hold times and abandonment reproducible.
	Seed uint64
	// ObserveEvery is the observer's sampling interval.
	ObserveEvery time.Duration
	// Prequeue is how many of the users join before the room opens: the
	// room's opens_at is OpensAfter after the start of the run, the
	// pre-queue arrives at the start, and the other users arrive after
	// the opening (by Arrival). The room shuffles the pre-queue at its
	// first admission pass after opening; the run reports the Spearman
	// rank correlation between join and admission order of the pre-queue
	// (spearman_rho) and the FIFO inversions among the users admitted
	// after the shuffled ones, who joined after the shuffle
	// (fifo_inversions_after_open). 0: no pre-queue.
	Prequeue int
	// OpensAfter is when the room opens, from the start of a run, with a
	// pre-queue.
	OpensAfter time.Duration
	// AbandonFraction is the fraction of users who stop polling right
	// after joining (closed the tab): if admitted, they never arrive and
	// never release.
	AbandonFraction float64
	// AbandonAfter and ArrivalWindow set the room's abandon_after_seconds
	// and arrival_seconds (0: off). With either set, users poll at least
	// every half of the shorter one, as a live page would.
	AbandonAfter, ArrivalWindow time.Duration
	// ObserveMinSamples is the fewest samples of the room a run's observer
	// must take for the run to be valid. A run also needs, on average, one
	// sample per admit interval (its length divided by its tick), so
	// RequiredSamples is the larger of the two. An observer that falls
	// short (a loaded machine, a slow Redis) has not watched the room
	// closely enough to vouch for the cap, and the run is invalid.
	ObserveMinSamples int
}

// DefaultConfig is the quick profile: 3 instances, a room of 100, a burst of
// 1,000 users holding about a second each, a tenth of them abandoning their
// slot, 3-second leases, ticks of 2 s and 200 ms, every mode, immediate
// admission on and off, 5-second runs.
func DefaultConfig() Config {
	return Config{
		Instances:    3,
		Capacity:     100,
		Users:        1000,
		Arrival:      Burst,
		Rate:         200,
		Hold:         time.Second,
		Abandon:      0.1,
		Lease:        3 * time.Second,
		Ticks:        []time.Duration{2 * time.Second, 200 * time.Millisecond},
		Modes:        Modes(),
		Immediate:    []bool{false, true},
		Duration:     5 * time.Second,
		Repeat:       1,
		Seed:         1,
		OpensAfter:   time.Second,
		ObserveEvery: time.Millisecond,
		// 100 samples: a 5-second run then needs 20 per second at the
		// least, and a 2-second tick never goes unwatched.
		ObserveMinSamples: 100,
	}
}

// FullConfig is the longer profile: 3,000 users, 20-second runs, 3
// repeats.
func FullConfig() Config {
	c := DefaultConfig()
	c.Users, c.Duration, c.Repeat = 3000, 20*time.Second, 3
	return c
}

// Validate reports every unusable field at once, each named in snake_case
// as the `stampede lab admission` flag that sets it (Duration is
// "seconds"; ObserveEvery, which no flag sets, "observe_every").
func (c Config) Validate() error {
	var f stampede.Fields
	if c.Instances < 1 || c.Instances > 32 {
		f.Add("instances", "must be 1 to 32, got %d", c.Instances)
	}
	if c.Capacity < 1 || c.Capacity > 100_000 {
		f.Add("capacity", "must be 1 to 100000, got %d", c.Capacity)
	}
	usersOK := c.Users >= 1 && c.Users <= 100_000
	if !usersOK {
		f.Add("users", "must be 1 to 100000, got %d", c.Users)
	}
	if c.Arrival != Burst && c.Arrival != Rate {
		f.Add("arrival", "want %q or %q, got %q", Burst, Rate, c.Arrival)
	} else if c.Arrival == Rate && (!(c.Rate > 0) || math.IsInf(c.Rate, 0)) {
		f.Add("rate", "must be a positive number of users per second, got %v", c.Rate)
	}
	if c.Hold <= 0 {
		f.Add("hold", "must be positive, got %s", c.Hold)
	}
	if c.Abandon < 0 || c.Abandon > 1 {
		f.Add("abandon", "must be in [0, 1], got %v", c.Abandon)
	}
	leaseOK := c.Lease >= time.Second
	if !leaseOK {
		f.Add("lease", "must be at least 1s, got %s", c.Lease)
	}
	if len(c.Ticks) == 0 {
		f.Add("ticks", "need at least one")
	}
	if len(c.Modes) == 0 {
		f.Add("modes", "need at least one")
	}
	if len(c.Immediate) == 0 {
		f.Add("immediate", "need on, off or both")
	}
	durationOK := c.Duration > 0
	if !durationOK {
		f.Add("seconds", "must be positive, got %s", c.Duration)
	}
	if c.Repeat < 1 {
		f.Add("repeat", "must be at least 1, got %d", c.Repeat)
	}
	if c.ObserveEvery <= 0 || c.ObserveEvery > time.Millisecond {
		f.Add("observe_every", "must be in (0, 1ms], got %s", c.ObserveEvery)
	}
	if c.ObserveMinSamples < 1 {
		f.Add("observe_min_samples", "must be at least 1, got %d", c.ObserveMinSamples)
	}
	// The prequeue is bounded by the users, the opening by the run and
	// the arrival window by the lease: each is checked only when the
	// field it depends on is valid.
	prequeueOK := c.Prequeue >= 0 && (!usersOK || c.Prequeue <= c.Users)
	if !prequeueOK {
		f.Add("prequeue", "must be 0 to users (%d), got %d", c.Users, c.Prequeue)
	}
	if prequeueOK && durationOK && c.Prequeue > 0 && (c.OpensAfter < 100*time.Millisecond || c.OpensAfter >= c.Duration) {
		f.Add("opens_after", "must be at least 100ms and shorter than the run (%s), got %s", c.Duration, c.OpensAfter)
	}
	if c.AbandonFraction < 0 || c.AbandonFraction > 1 {
		f.Add("abandon_fraction", "must be in [0, 1], got %v", c.AbandonFraction)
	}
	if c.AbandonAfter != 0 && (c.AbandonAfter < time.Second || c.AbandonAfter > time.Hour) {
		f.Add("abandon_after", "must be 0 (off) or 1s to 1h, got %s", c.AbandonAfter)
	}
	if leaseOK && c.ArrivalWindow != 0 && (c.ArrivalWindow < time.Second || c.ArrivalWindow > c.Lease) {
		f.Add("arrival_window", "must be 0 (off) or 1s to the lease (%s), got %s", c.Lease, c.ArrivalWindow)
	}
	for _, tick := range c.Ticks {
		room := waitroom.DefaultRoomConfig()
		room.AdmitInterval = tick
		if err := room.Validate(); err != nil {
			f.Add("ticks", "%s: %v", tick, err)
			break
		}
	}
	for _, m := range c.Modes {
		if _, err := ParseMode(string(m)); err != nil {
			f.Check("modes", err)
			break
		}
	}
	return f.Err()
}

// Experiment is the admission experiment; it implements lab.Experiment.
type Experiment struct {
	cfg Config
}

var _ lab.Experiment = (*Experiment)(nil)

// New returns the experiment for cfg.
func New(cfg Config) (*Experiment, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Experiment{cfg: cfg}, nil
}

// Name implements lab.Experiment.
func (e *Experiment) Name() string { return "admission" }

// Repeats implements lab.Experiment.
func (e *Experiment) Repeats() int { return e.cfg.Repeat }

// Params implements lab.Experiment.
func (e *Experiment) Params() any {
	c := e.cfg
	ticks := make([]int64, len(c.Ticks))
	for i, t := range c.Ticks {
		ticks[i] = t.Milliseconds()
	}
	redis := "embedded (in-process Redis-protocol server, fresh per run)"
	if c.RedisURL != "" {
		redis = "real Redis (URL given, password hidden)"
	}
	return map[string]any{
		"instances": c.Instances, "capacity": c.Capacity, "users": c.Users,
		"arrival": c.Arrival, "rate_per_s": c.Rate, "hold_ms": c.Hold.Milliseconds(),
		"abandon": c.Abandon, "lease_ms": c.Lease.Milliseconds(), "ticks_ms": ticks,
		"modes": c.Modes, "immediate": c.Immediate, "redis": redis,
		"seconds": c.Duration.Seconds(), "repeat": c.Repeat, "seed": c.Seed,
		"observe_every_us": c.ObserveEvery.Microseconds(), "observe_min_samples": c.ObserveMinSamples,
		"prequeue": c.Prequeue, "opens_after_ms": c.OpensAfter.Milliseconds(), "abandon_fraction": c.AbandonFraction,
		"abandon_after_ms": c.AbandonAfter.Milliseconds(), "arrival_ms": c.ArrivalWindow.Milliseconds(),
	}
}

// RequiredSamples is the fewest observer samples a run of length d with
// admit interval tick needs to be valid: ObserveMinSamples, or one per admit
// interval on average when that is more.
func (c Config) RequiredSamples(d, tick time.Duration) int {
	perTick := 0
	if tick > 0 {
		perTick = int((d + tick - 1) / tick)
	}
	return max(c.ObserveMinSamples, perTick)
}

// Conditions implements lab.Experiment: tick, then immediate, then mode.
func (e *Experiment) Conditions() []lab.Condition {
	var out []lab.Condition
	for _, tick := range e.cfg.Ticks {
		for _, imm := range e.cfg.Immediate {
			for _, m := range e.cfg.Modes {
				out = append(out, lab.Condition{
					Label:  fmt.Sprintf("%s tick=%s immediate=%s", m, tick, onOff(imm)),
					Values: map[string]any{"mode": string(m), "tick_ms": float64(tick.Milliseconds()), "immediate": onOff(imm)},
					Keys:   []string{"mode", "tick_ms", "immediate"},
				})
			}
		}
	}
	return out
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// Columns implements lab.Experiment.
func (e *Experiment) Columns() []string {
	cols := []string{"instances", "capacity", "max_active_observed", "over_cap_samples", "admitted",
		"admissions_per_s", "slot_utilization", "live_slot_utilization", "wait_p50_ms", "wait_p99_ms", "fifo_inversions",
		"round_trips_per_admission", "expired", "lost_users"}
	if e.cfg.Prequeue > 0 {
		cols = append(cols, "spearman_rho", "fifo_inversions_after_open")
	}
	if e.cfg.AbandonFraction > 0 || e.cfg.AbandonAfter > 0 || e.cfg.ArrivalWindow > 0 {
		cols = append(cols, "no_shows", "abandoned")
	}
	return cols
}

// ParseModes turns names into modes, refusing unknown names and repeats.
func ParseModes(names []string) ([]waitroom.Mode, error) {
	var out []waitroom.Mode
	for _, n := range names {
		m, err := ParseMode(strings.TrimSpace(n))
		if err != nil {
			return nil, err
		}
		for _, have := range out {
			if have == m {
				return nil, fmt.Errorf("%q listed twice", m)
			}
		}
		out = append(out, m)
	}
	return out, nil
}

// ParseOnOff turns "on", "off" into booleans.
func ParseOnOff(names []string) ([]bool, error) {
	var out []bool
	for _, n := range names {
		switch strings.TrimSpace(n) {
		case "on":
			out = append(out, true)
		case "off":
			out = append(out, false)
		default:
			return nil, fmt.Errorf("want on or off, got %q", n)
		}
	}
	return out, nil
}

// runContext carries one run's condition.
type runContext struct {
	mode      waitroom.Mode
	tick      time.Duration
	immediate bool
	seed      uint64
}

func (e *Experiment) parse(c lab.Condition, repeat int) runContext {
	tick := time.Duration(c.Values["tick_ms"].(float64)) * time.Millisecond
	return runContext{
		mode:      waitroom.Mode(c.Values["mode"].(string)),
		tick:      tick,
		immediate: c.Values["immediate"] == "on",
		seed:      e.cfg.Seed + uint64(repeat),
	}
}

// Run implements lab.Experiment.
func (e *Experiment) Run(ctx context.Context, c lab.Condition, repeat int) (lab.RunResult, error) {
	return e.run(ctx, e.parse(c, repeat))
}
