package waitroom

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/stampede-lab/stampede"
)

// Adaptive outflow. A room with an outflow limit (MaxAdmissionsPerMinute)
// may let a controller lower its admission rate below that limit while
// the checkout behind the room is unwell, and raise it back as it
// recovers: additive increase, multiplicative decrease (AIMD). The
// signals are the upstream's answers seen by the gates (ObserveUpstream:
// latency and failures) and pay's share of payments left UNKNOWN by the
// institution (ObservePayments). The controller only lowers the outflow;
// the capacity stays exact, since the store's admission script still
// counts every slot.

// Health is what the controller sees of the checkout over one interval.
type Health struct {
	// Requests counts upstream answers; Failures those that failed (a
	// 5xx, or no answer); P99 is their 99th percentile latency.
	Requests, Failures int
	P99                time.Duration
	// Payments counts payments created, Unknown those the institution
	// left UNKNOWN (a timeout or a lost answer).
	Payments, Unknown int64
}

// OutflowConfig tunes the controller (ServiceConfig.Outflow).
type OutflowConfig struct {
	// P99 is the upstream latency above which the checkout is unwell.
	P99 time.Duration
	// MaxFailureRate and MaxUnknownRate are the shares of failed answers
	// and of UNKNOWN payments above which it is unwell.
	MaxFailureRate, MaxUnknownRate float64
	// MinRequests and MinPayments are the fewest answers (payments) an
	// interval needs for its latency and failure share (UNKNOWN share)
	// to count.
	MinRequests int
	MinPayments int64
	// Decrease multiplies the rate on an unwell interval; Increase is the
	// share of the room's limit added back on a well one.
	Decrease, Increase float64
	// Floor is the lowest rate, as a share of the room's limit.
	Floor float64
}

// DefaultOutflowConfig: unwell above a 1 s p99, 5 % failures or 5 %
// UNKNOWN payments, from 20 answers or 5 payments an interval; halve on
// an unwell interval, add back a tenth of the limit on a well one, never
// below a tenth of it.
func DefaultOutflowConfig() OutflowConfig {
	return OutflowConfig{P99: time.Second, MaxFailureRate: 0.05, MaxUnknownRate: 0.05, MinRequests: 20, MinPayments: 5,
		Decrease: 0.5, Increase: 0.1, Floor: 0.1}
}

// Validate reports every unusable field, by the snake_case words of the
// serve flag that sets it (--outflow-p99 and so on).
func (c OutflowConfig) Validate() error {
	var f stampede.Fields
	if c.P99 <= 0 {
		f.Add("outflow_p99", "must be positive, got %s", c.P99)
	}
	share := func(x float64) bool { return x > 0 && x <= 1 }
	if !share(c.MaxFailureRate) {
		f.Add("outflow_max_failures", "must be a share in (0, 1], got %v", c.MaxFailureRate)
	}
	if !share(c.MaxUnknownRate) {
		f.Add("outflow_max_unknown", "must be a share in (0, 1], got %v", c.MaxUnknownRate)
	}
	if c.MinRequests < 1 || c.MinPayments < 1 {
		f.Add("outflow_min_samples", "must be at least 1, got %d answers and %d payments", c.MinRequests, c.MinPayments)
	}
	if !(c.Decrease > 0 && c.Decrease < 1) {
		f.Add("outflow_decrease", "must be in (0, 1), got %v", c.Decrease)
	}
	if !share(c.Increase) {
		f.Add("outflow_increase", "must be a share in (0, 1], got %v", c.Increase)
	}
	if !(c.Floor > 0 && c.Floor <= 1) {
		f.Add("outflow_floor", "must be a share in (0, 1], got %v", c.Floor)
	}
	return f.Err()
}

// OutflowController is the AIMD controller of one room's outflow. It is
// not safe for concurrent use (one per room, stepped once an interval).
type OutflowController struct {
	cfg    OutflowConfig
	rate   float64 // admissions a minute; 0 until the first step
	reason string
	last   int // the rate last logged
}

// NewOutflowController returns a controller for cfg.
func NewOutflowController(cfg OutflowConfig) (*OutflowController, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &OutflowController{cfg: cfg}, nil
}

// Step takes one interval's health and the room's limit (admissions a
// minute, > 0) and returns the rate to admit at (within [Floor·limit,
// limit]), why, and whether it changed since the last step.
func (c *OutflowController) Step(h Health, limit int) (rate int, reason string, changed bool) {
	lim := float64(limit)
	before := int(math.Round(c.rate))
	if c.rate == 0 || c.rate > lim {
		c.rate = lim
	}
	why := c.unwell(h)
	if why != "" {
		c.rate = max(c.rate*c.cfg.Decrease, c.cfg.Floor*lim)
		c.reason = why
	} else if c.rate < lim {
		c.rate = min(c.rate+c.cfg.Increase*lim, lim)
		c.reason = "recovering: the checkout is well"
		if c.rate == lim {
			c.reason = "at the room's limit: the checkout is well"
		}
	} else if c.reason == "" {
		c.reason = "at the room's limit: the checkout is well"
	}
	rate = max(1, int(math.Round(c.rate)))
	return rate, c.reason, rate != before
}

// unwell returns why h shows an unwell checkout, or "".
func (c *OutflowController) unwell(h Health) string {
	if h.Requests >= c.cfg.MinRequests {
		if h.P99 > c.cfg.P99 {
			return fmt.Sprintf("upstream p99 %s over %s", h.P99.Round(time.Millisecond), c.cfg.P99)
		}
		if r := float64(h.Failures) / float64(h.Requests); r > c.cfg.MaxFailureRate {
			return fmt.Sprintf("upstream failures %.0f%% over %.0f%%", 100*r, 100*c.cfg.MaxFailureRate)
		}
	}
	if h.Payments >= c.cfg.MinPayments {
		if r := float64(h.Unknown) / float64(h.Payments); r > c.cfg.MaxUnknownRate {
			return fmt.Sprintf("UNKNOWN payments %.0f%% over %.0f%%", 100*r, 100*c.cfg.MaxUnknownRate)
		}
	}
	return ""
}

// OutflowStore is a Store that holds a room's adaptive outflow: the rate
// its admission passes admit at (below the room's limit) and why. A rate
// not set again within OutflowLapse lapses: the room's limit applies
// again, so that instances stopped or started without the controller
// never leave a room throttled.
type OutflowStore interface {
	// SetOutflow sets room's adaptive rate (admissions a minute; 0 lifts
	// it) and its reason.
	SetOutflow(ctx context.Context, room string, perMinute int, reason string) error
	// Outflow returns room's adaptive rate (0: none) and its reason.
	Outflow(ctx context.Context, room string) (perMinute int, reason string, err error)
}

// OutflowLapse is how long an adaptive rate holds unless set again.
const OutflowLapse = 3 * time.Second

// maxLatencies bounds the latencies one interval keeps per room for its
// p99 (a 99th percentile of the first ones beyond it).
const maxLatencies = 8192

// healthWindow gathers one room's signals between two steps.
type healthWindow struct {
	mu        sync.Mutex
	latencies []time.Duration
	failures  int
	// payTotal, payUnknown are the last cumulative counts seen; base* at
	// the last step.
	payTotal, payUnknown   int64
	baseTotal, baseUnknown int64
	payKnown               bool
}

func (w *healthWindow) take() Health {
	w.mu.Lock()
	defer w.mu.Unlock()
	h := Health{Requests: len(w.latencies), Failures: w.failures}
	if n := len(w.latencies); n > 0 {
		slices.Sort(w.latencies)
		h.P99 = w.latencies[min(n-1, int(math.Ceil(0.99*float64(n)))-1)]
	}
	if w.payKnown {
		h.Payments, h.Unknown = w.payTotal-w.baseTotal, w.payUnknown-w.baseUnknown
		w.baseTotal, w.baseUnknown = w.payTotal, w.payUnknown
	}
	w.latencies, w.failures = w.latencies[:0], 0
	return h
}

// window returns room's health window.
func (s *Service) window(room string) *healthWindow {
	s.mu.Lock()
	defer s.mu.Unlock()
	w, ok := s.health[room]
	if !ok {
		w = &healthWindow{}
		s.health[room] = w
	}
	return w
}

// ObserveUpstream records one answer of the checkout behind room (a
// gate's proxied request): how long it took and whether it failed.
func (s *Service) ObserveUpstream(room string, took time.Duration, failed bool) {
	if s.cfg.Outflow == nil {
		return
	}
	w := s.window(room)
	w.mu.Lock()
	if len(w.latencies) < maxLatencies {
		w.latencies = append(w.latencies, took)
	}
	if failed {
		w.failures++
	}
	w.mu.Unlock()
}

// ObservePayments records pay's cumulative counts of payments created
// and of those left UNKNOWN, as read now (from pay's metrics); a count
// that went down (pay restarted) starts the counting again.
func (s *Service) ObservePayments(room string, total, unknown int64) {
	if s.cfg.Outflow == nil {
		return
	}
	w := s.window(room)
	w.mu.Lock()
	if !w.payKnown || total < w.payTotal || unknown < w.payUnknown {
		w.baseTotal, w.baseUnknown = total, unknown
	}
	w.payTotal, w.payUnknown, w.payKnown = total, unknown, true
	w.mu.Unlock()
}

// steerOutflow runs one step of room's controller (once a RoomRefresh)
// and, when the rate changes, writes it to the store, logs it and tells
// OnOutflow. A room without an outflow limit is left alone; one whose
// limit was lifted gets its adaptive rate lifted too.
func (s *Service) steerOutflow(ctx context.Context, room string, cfg RoomConfig) {
	os, ok := s.store.(OutflowStore)
	if s.cfg.Outflow == nil || !ok {
		return
	}
	s.mu.Lock()
	c := s.controllers[room]
	if c == nil {
		c = &OutflowController{cfg: *s.cfg.Outflow}
		s.controllers[room] = c
	}
	s.mu.Unlock()
	h := s.window(room).take()
	if cfg.MaxAdmissionsPerMinute <= 0 {
		return
	}
	rate, reason, changed := c.Step(h, cfg.MaxAdmissionsPerMinute)
	// Written every step: the store lets a rate lapse when no instance
	// has renewed it for a while (OutflowStore).
	if err := os.SetOutflow(ctx, room, rate, reason); err != nil {
		s.cfg.Logger.Warn("waitroom: setting the adaptive outflow failed", "room", room, "err", err)
		return
	}
	if !changed {
		return
	}
	// Lowered is worth a warning: the checkout is unwell.
	level := slog.LevelInfo
	if prev := c.last; rate < prev {
		level = slog.LevelWarn
	}
	c.last = rate
	s.cfg.Logger.Log(ctx, level, "waitroom: outflow changed", "room", room, "per_minute", rate, "limit", cfg.MaxAdmissionsPerMinute,
		"reason", reason, "p99", h.P99, "requests", h.Requests, "failures", h.Failures, "payments", h.Payments, "unknown", h.Unknown)
	if hook := s.cfg.OnOutflow; hook != nil {
		hook(room, rate, reason)
	}
}

// Outflow returns room's adaptive outflow (admissions a minute, 0 when
// none is set) and why; ok is false when the store keeps none.
func (s *Service) Outflow(ctx context.Context, room string) (perMinute int, reason string, ok bool, err error) {
	os, ok := s.store.(OutflowStore)
	if !ok {
		return 0, "", false, nil
	}
	perMinute, reason, err = os.Outflow(ctx, room)
	return perMinute, reason, err == nil, err
}
