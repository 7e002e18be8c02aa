package waitroom

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/stampede-lab/stampede"
)

// Adaptive outflow. A room with an outflow limit (MaxAdmissionsPerMinute)
// may let a controller lower its admission rate below that limit while
// the checkout behind the room is unwell, and raise it back as it
// recovers (AIMD: a multiplicative decrease, an increase that doubles
// back). The signals are the upstream's answers seen by the gates
// (StartUpstream, ObserveUpstream: latency, counting a request still
// unanswered once it is older than the p99 bar, and failures) and pay's
// share of payments left UNKNOWN by the institution (ObservePayments).
// The controller only lowers the outflow; the capacity stays exact, since
// the store's admission script still counts every slot.

// Health is what the controller sees of the checkout over one interval.
type Health struct {
	// Requests counts upstream answers, and the requests still
	// unanswered that became older than OutflowConfig.P99 in the
	// interval (each counted once, at their age then); Failures those
	// that failed (a 5xx, or no answer); Slow those slower than
	// OutflowConfig.P99; P99 is their 99th percentile latency.
	Requests, Failures, Slow int
	P99                      time.Duration
	// Fresh counts the answers (in this interval or earlier ones) of
	// requests begun after both the last cut and the latest request seen
	// slow or failed, all fast by construction; Pending the requests begun
	// after both and still unanswered once older than a quarter of
	// OutflowConfig.P99: their answers are yet to tell (a purchase into
	// a hanging institution is one before it crosses the bar).
	Fresh, Pending int
	// LastBad is when the latest request seen slow or failed began
	// (zero: none yet).
	LastBad time.Time
	// Payments counts payments created, Unknown those the institution
	// left UNKNOWN (a timeout or a lost answer).
	Payments, Unknown int64
	// At is the end of the interval.
	At time.Time
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
	// Decrease multiplies the rate on an unwell interval, or less when
	// the share of bad samples (slow or failed answers, UNKNOWN payments)
	// is larger: the rate is multiplied by the smaller of Decrease and 1
	// minus that share. On a well interval the rate grows by the larger
	// of Increase (a share of the room's limit) and Recover (a factor of
	// the rate: the rate doubles back to the limit with 2).
	Decrease, Increase, Recover float64
	// Floor is the lowest rate, as a share of the room's limit.
	Floor float64
	// UnknownLag is how late pay's UNKNOWN share tells of a cut's
	// effect: a buyer admitted after the cut reaches the payment a
	// little later (the sale lab: 1 to 2 s, their next poll), and pay
	// counts the payment UNKNOWN when its call to the institution times
	// out (pay's approval timeout, serve pay --timeout, 3 s by default).
	// For this long after a cut, or after the start of the latest request
	// seen slow or failed, a high UNKNOWN share is taken as news of what
	// was cut for (or already seen) and cuts nothing.
	UnknownLag time.Duration
	// Quiet is how long after a cut the rate holds while there is no
	// evidence either way (too few answers since the cut, or some still
	// pending); after it the rate grows as on a well interval, so that an
	// instance that sees no traffic never keeps a room throttled.
	Quiet time.Duration
}

// DefaultOutflowConfig: unwell above a 1 s p99, 5 % failures or 5 %
// UNKNOWN payments, from 5 answers or 5 payments an interval; on an
// unwell interval halve the rate (or cut it by the share of bad samples
// when larger), never below a tenth of the limit; back to the rate before
// the cuts once 5 answers begun since the last cut were all fast with
// none pending, holding up to 5 s without such evidence, then doubling
// (at least a tenth of the limit added), never above the limit.
func DefaultOutflowConfig() OutflowConfig {
	return OutflowConfig{P99: time.Second, MaxFailureRate: 0.05, MaxUnknownRate: 0.05, MinRequests: 5, MinPayments: 5,
		Decrease: 0.5, Increase: 0.1, Recover: 2, Floor: 0.1, UnknownLag: 5 * time.Second, Quiet: 5 * time.Second}
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
	if !(c.Recover >= 1 && c.Recover <= 10) {
		f.Add("outflow_recover", "must be a factor in [1, 10], got %v", c.Recover)
	}
	if !(c.Floor > 0 && c.Floor <= 1) {
		f.Add("outflow_floor", "must be a share in (0, 1], got %v", c.Floor)
	}
	if c.UnknownLag < 0 {
		f.Add("outflow_unknown_lag", "must not be negative, got %s", c.UnknownLag)
	}
	if c.Quiet < 0 {
		f.Add("outflow_quiet", "must not be negative, got %s", c.Quiet)
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
	// cutAt is the end of the interval of the last cut (Health.At).
	cutAt time.Time
	// high is the rate before the first of the cuts not yet recovered
	// from (0: none).
	high float64
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
//
// An unwell interval cuts the rate (see OutflowConfig.Decrease). The
// controller cuts once for one cause: the window (Service) leaves out of
// h the upstream samples of requests begun before the last cut, and pay's
// UNKNOWN share, which counts a payment when pay's call to the
// institution ends, up to UnknownLag after the buyer asked, is old news
// within UnknownLag of the last cut, or of the start of the latest
// request seen slow (Health.LastBad: the payments of the requests that
// hung are counted until then): it then cuts nothing. Later, a high
// UNKNOWN share with the upstream answering well enough to judge holds the
// rate; with too few answers, it cuts.
//
// After a cut the rate returns at once to what it was before the cuts
// when an interval has evidence that the checkout is well again: at
// least MinRequests answers of requests begun after the last cut and
// after the latest request seen slow or failed (Health.Fresh), and none
// of those requests still pending (Health.Pending). The slow answers and
// the UNKNOWN payments of requests begun before are then old news: the
// hang is over. Without that evidence it holds: an interval with no
// answer, or with only the quick ones while the slow ones are still on
// their way, says nothing. A slow answer among too few to judge holds it
// too. Once Quiet has passed since the last cut with no evidence either
// way, it grows as AIMD does (see OutflowConfig.Recover).
func (c *OutflowController) Step(h Health, limit int) (rate int, reason string, changed bool) {
	lim := float64(limit)
	before := int(math.Round(c.rate))
	if c.rate == 0 || c.rate > lim {
		c.rate = lim
	}
	why, bad, unknownOnly := c.unwell(h)
	judged := h.Requests >= c.cfg.MinRequests
	oldNews := unknownOnly && ((!c.cutAt.IsZero() && h.At.Add(-c.cfg.UnknownLag).Before(c.cutAt)) ||
		(!h.LastBad.IsZero() && h.At.Add(-c.cfg.UnknownLag).Before(h.LastBad)))
	well := h.Fresh >= c.cfg.MinRequests && h.Pending == 0
	quiet := c.cutAt.IsZero() || !h.At.Before(c.cutAt.Add(c.cfg.Quiet))
	news := ""
	if oldNews {
		news = " (" + why + ", from before the last cut)"
	}
	switch {
	case well && c.high > 0 && c.rate < lim:
		c.rate, c.high = min(max(c.rate, c.high), lim), 0
		c.reason = fmt.Sprintf("recovered: %d upstream answers begun since the last cut and the latest slow one, all fast", h.Fresh)
		if why != "" {
			c.reason += " (" + why + ", from requests begun before)"
		}
		if c.rate == lim {
			c.reason = "at the room's limit: " + c.reason
		}
	case why != "" && !oldNews && !(unknownOnly && judged):
		if c.high == 0 {
			c.high = c.rate
		}
		c.rate = max(c.rate*min(c.cfg.Decrease, 1-bad), c.cfg.Floor*lim)
		c.reason, c.cutAt = why, h.At
	case why != "" && !oldNews:
		c.reason = "holding: " + why + ", but the upstream answers well"
	case c.rate >= lim:
		c.high = 0
		if !strings.HasPrefix(c.reason, "at the room's limit") {
			c.reason = "at the room's limit: the checkout is well"
		}
	case h.Slow > 0:
		c.reason = "holding: a slow upstream answer among too few to judge" + news
	case !well && !quiet:
		c.reason = "holding: too few upstream answers since the last cut to judge" + news
		if h.Pending > 0 {
			c.reason = fmt.Sprintf("holding: %d upstream requests since the last cut still unanswered%s", h.Pending, news)
		}
	default:
		c.rate = min(max(c.rate*c.cfg.Recover, c.rate+c.cfg.Increase*lim), lim)
		c.reason = "recovering: nothing unwell since the last cut" + news
		if c.rate == lim {
			c.reason, c.high = "at the room's limit: the checkout is well", 0
		}
	}
	rate = max(1, int(math.Round(c.rate)))
	return rate, c.reason, rate != before
}

// unwell returns why h shows an unwell checkout ("" when it does not),
// the share of bad samples of the signal that says so, and unknownOnly
// when that signal is pay's UNKNOWN share alone.
func (c *OutflowController) unwell(h Health) (why string, bad float64, unknownOnly bool) {
	judged := h.Requests >= c.cfg.MinRequests
	if judged {
		if h.P99 > c.cfg.P99 {
			return fmt.Sprintf("upstream p99 %s over %s", h.P99.Round(time.Millisecond), c.cfg.P99), float64(h.Slow) / float64(h.Requests), false
		}
		if r := float64(h.Failures) / float64(h.Requests); r > c.cfg.MaxFailureRate {
			return fmt.Sprintf("upstream failures %.0f%% over %.0f%%", 100*r, 100*c.cfg.MaxFailureRate), r, false
		}
	}
	if h.Payments >= c.cfg.MinPayments {
		if r := float64(h.Unknown) / float64(h.Payments); r > c.cfg.MaxUnknownRate {
			return fmt.Sprintf("UNKNOWN payments %.0f%% over %.0f%%", 100*r, 100*c.cfg.MaxUnknownRate), r, true
		}
	}
	return "", 0, false
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

// maxLatencies bounds the samples one interval keeps per room for its
// p99 (a 99th percentile of the first ones beyond it).
const maxLatencies = 8192

// healthWindow gathers one room's signals between two steps.
type healthWindow struct {
	mu      sync.Mutex
	samples []sample
	// inflight holds the upstream requests not answered yet.
	inflight map[*flight]struct{}
	// payTotal, payUnknown are the last cumulative counts seen; base* at
	// the last step.
	payTotal, payUnknown   int64
	baseTotal, baseUnknown int64
	payKnown               bool
	// lastBad is when the latest request seen slow or failed began.
	lastBad time.Time
	// fresh holds when the requests answered since freshFrom began
	// (answers of requests begun after it, across intervals): the fresh
	// ones, kept until the point moves on.
	fresh     []time.Time
	freshFrom time.Time
}

// sample is one upstream request's latency (unless noLatency: its
// latency was taken while it was unanswered) and whether it failed, with
// when it began.
type sample struct {
	start     time.Time
	took      time.Duration
	failed    bool
	noLatency bool
}

// flight is one upstream request not answered yet; counted once it was
// taken as a slow sample (its answer then adds no latency again).
type flight struct {
	start   time.Time
	counted bool
}

// take returns the interval's health as of now, from the samples of
// requests begun after since (the last cut: older ones tell of what the
// controller already cut for), and starts the next interval. A request
// unanswered for longer than slow is a sample of its age now, once: a
// hanging checkout shows in the interval it began to hang in, not only
// when its answers come back. Answers of requests begun after since and
// after the latest request seen slow or failed are fresh, counted across
// intervals until that point moves on; such a request unanswered for
// longer than a quarter of slow is pending.
func (w *healthWindow) take(now time.Time, slow time.Duration, since time.Time) Health {
	w.mu.Lock()
	defer w.mu.Unlock()
	h := Health{At: now}
	for f := range w.inflight {
		if age := now.Sub(f.start); !f.counted && age > slow {
			f.counted = true
			if len(w.samples) < maxLatencies {
				w.samples = append(w.samples, sample{start: f.start, took: age})
			}
		}
	}
	for _, x := range w.samples {
		if (x.failed || (!x.noLatency && x.took > slow)) && x.start.After(w.lastBad) {
			w.lastBad = x.start
		}
	}
	fresh := since
	if w.lastBad.After(fresh) {
		fresh = w.lastBad
	}
	if !fresh.Equal(w.freshFrom) {
		kept := w.fresh[:0]
		for _, t := range w.fresh {
			if t.After(fresh) {
				kept = append(kept, t)
			}
		}
		w.fresh, w.freshFrom = kept, fresh
	}
	for f := range w.inflight {
		if f.start.After(fresh) && now.Sub(f.start) > slow/4 {
			h.Pending++
		}
	}
	var lat []time.Duration
	for _, x := range w.samples {
		if !x.start.After(since) {
			continue
		}
		if x.failed {
			h.Failures++
		}
		if !x.noLatency {
			lat = append(lat, x.took)
		}
		if x.start.After(fresh) && len(w.fresh) < maxLatencies {
			w.fresh = append(w.fresh, x.start)
		}
	}
	h.Fresh, h.LastBad = len(w.fresh), w.lastBad
	h.Requests = len(lat)
	if n := len(lat); n > 0 {
		slices.Sort(lat)
		h.P99 = lat[min(n-1, int(math.Ceil(0.99*float64(n)))-1)]
		h.Slow = n - sort.Search(n, func(i int) bool { return lat[i] > slow })
	}
	if w.payKnown {
		h.Payments, h.Unknown = w.payTotal-w.baseTotal, w.payUnknown-w.baseUnknown
		w.baseTotal, w.baseUnknown = w.payTotal, w.payUnknown
	}
	w.samples = w.samples[:0]
	return h
}

// answered records an answer that took took (f: its request, nil when
// it was not tracked).
func (w *healthWindow) answered(f *flight, took time.Duration, failed bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	x := sample{start: time.Now().Add(-took), took: took, failed: failed}
	if f != nil {
		delete(w.inflight, f)
		x.start, x.noLatency = f.start, f.counted
	}
	if (!x.noLatency || failed) && len(w.samples) < maxLatencies {
		w.samples = append(w.samples, x)
	}
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
// gate's proxied request): how long it took and whether it failed. A
// caller that can say when a request starts uses StartUpstream instead,
// so that requests still unanswered count too.
func (s *Service) ObserveUpstream(room string, took time.Duration, failed bool) {
	if s.cfg.Outflow == nil {
		return
	}
	s.window(room).answered(nil, took, failed)
}

// StartUpstream records that a request to the checkout behind room
// starts now, and returns the function to call with its outcome when its
// answer comes (failed: a 5xx, or none). Until then, once it is older
// than the controller's p99 bar, it counts as a slow answer of that age.
func (s *Service) StartUpstream(room string) (done func(failed bool)) {
	if s.cfg.Outflow == nil {
		return func(bool) {}
	}
	w := s.window(room)
	f := &flight{start: time.Now()}
	w.mu.Lock()
	if w.inflight == nil {
		w.inflight = map[*flight]struct{}{}
	}
	if len(w.inflight) < maxLatencies {
		w.inflight[f] = struct{}{}
	} else {
		f = nil // too many to track: counted when answered
	}
	w.mu.Unlock()
	start := time.Now()
	return func(failed bool) { w.answered(f, time.Since(start), failed) }
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
	h := s.window(room).take(time.Now(), s.cfg.Outflow.P99, c.cutAt)
	if cfg.MaxAdmissionsPerMinute <= 0 {
		return
	}
	rate, reason, changed := c.Step(h, cfg.MaxAdmissionsPerMinute)
	// A rate below the limit is written every step: the store lets a rate
	// lapse when no instance has renewed it for a while (OutflowStore).
	// The limit is written only when it is reached: every instance
	// steers with the share of the traffic it proxies and the last write
	// wins, so an instance that sees nothing wrong must not undo every
	// second the cut of one that does.
	if rate < cfg.MaxAdmissionsPerMinute || changed {
		if err := os.SetOutflow(ctx, room, rate, reason); err != nil {
			s.cfg.Logger.Warn("waitroom: setting the adaptive outflow failed", "room", room, "err", err)
			return
		}
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
		"reason", reason, "p99", h.P99, "requests", h.Requests, "failures", h.Failures, "pending", h.Pending, "payments", h.Payments, "unknown", h.Unknown)
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
