package waitroom

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestOutflowControllerAIMD feeds the controller constructed intervals: a
// well checkout keeps the room's limit; a high p99, failures or UNKNOWN
// share halve the rate (or cut it by the share of bad samples when that
// is larger) down to the floor, never below; too few samples say nothing
// and hold the rate; enough fast answers since the cut bring it back at
// once to the rate before the cuts, never above the limit.
func TestOutflowControllerAIMD(t *testing.T) {
	oc := DefaultOutflowConfig()
	oc.UnknownLag = 0 // no UNKNOWN share is news of an earlier cut here
	c, err := NewOutflowController(oc)
	if err != nil {
		t.Fatal(err)
	}
	well := Health{Requests: 100, Fresh: 100, P99: 200 * time.Millisecond, Payments: 50}
	limit := 600
	now := time.Now()
	step := func(h Health, want int, wantWhy string) {
		t.Helper()
		now = now.Add(time.Second)
		h.At = now
		got, why, _ := c.Step(h, limit)
		if got != want || !strings.Contains(why, wantWhy) {
			t.Fatalf("Step(%+v) = %d %q, want %d and a reason with %q", h, got, why, want, wantWhy)
		}
	}
	step(well, 600, "limit")
	step(Health{Requests: 100, Slow: 2, P99: 3 * time.Second}, 300, "p99 3s over 1s")
	step(Health{Requests: 100, Failures: 10, P99: time.Millisecond}, 150, "failures 10%")
	step(Health{Requests: 2, Payments: 20, Unknown: 5}, 75, "UNKNOWN payments 25%")
	step(Health{Payments: 20, Unknown: 20}, 60, "UNKNOWN") // the floor: a tenth of 600
	step(Health{Payments: 20, Unknown: 20}, 60, "UNKNOWN")
	step(Health{Requests: 3, P99: 10 * time.Millisecond, Payments: 2, Unknown: 2}, 60, "too few") // too few samples: no evidence
	step(well, 600, "recovered: 100 upstream answers begun since the last cut and the latest slow one, all fast")
	step(well, 600, "at the room's limit")
	// A lower limit takes effect at once.
	limit = 100
	step(well, 100, "")
	if _, _, changed := c.Step(well, 100); changed {
		t.Error("a second step at the same rate reports a change")
	}
}

// TestOutflowCutByOverload: the cut follows the share of bad samples: a
// checkout where every answer is slow goes to the floor in one step, 80 %
// UNKNOWN payments leave a fifth of the rate, and a small excess still
// halves it.
func TestOutflowCutByOverload(t *testing.T) {
	for _, tc := range []struct {
		h    Health
		want int
	}{
		{Health{Requests: 10, Slow: 10, P99: 3 * time.Second}, 60},
		{Health{Payments: 10, Unknown: 8}, 120},
		{Health{Requests: 100, Failures: 20}, 300},                  // 20 %: the half is the larger cut
		{Health{Requests: 100, Slow: 2, P99: 2 * time.Second}, 300}, // 2 % slow: halved
	} {
		c, _ := NewOutflowController(DefaultOutflowConfig())
		if got, _, _ := c.Step(tc.h, 600); got != tc.want {
			t.Errorf("Step(%+v) from 600 = %d, want %d", tc.h, got, tc.want)
		}
	}
}

// TestOutflowRecoversOnEvidence: after cuts to the floor, intervals that
// say nothing hold the rate (no answer; a request begun since the cut
// still pending; fewer fresh answers than MinRequests, fast as they are);
// the first interval with enough fresh answers (begun after the latest
// slow one) and none pending brings it back at once to the rate before
// the first cut (here 400 of a limit of 600, a lower rate set before: not
// the limit), even with slow answers of requests begun before them.
func TestOutflowRecoversOnEvidence(t *testing.T) {
	c, _ := NewOutflowController(DefaultOutflowConfig())
	t0 := time.Now()
	c.Step(Health{At: t0}, 400) // the limit was 400
	steps := []struct {
		h    Health
		want int
		why  string
	}{
		{Health{Requests: 10, Slow: 10, P99: 5 * time.Second}, 40, "p99"},
		{Health{Requests: 10, Slow: 10, P99: 5 * time.Second}, 60, "p99"}, // the limit is 600 now: its floor
		{Health{}, 60, "too few"},
		{Health{Requests: 8, Fresh: 8, P99: 10 * time.Millisecond, Pending: 2}, 60, "2 upstream requests since the last cut still unanswered"},
		{Health{Requests: 4, Fresh: 4, P99: 10 * time.Millisecond}, 60, "too few"},
		{Health{Requests: 9, Fresh: 4, P99: 10 * time.Millisecond}, 60, "too few"}, // 5 begun before the latest slow one
		{Health{Requests: 9, Slow: 3, Fresh: 6, P99: 2 * time.Second}, 400, "recovered: 6 upstream answers begun since the last cut and the latest slow one, all fast (upstream p99 2s over 1s, from requests begun before)"},
		{Health{Requests: 5, Fresh: 5, P99: 10 * time.Millisecond}, 800, ""}, // no longer cut: grows as AIMD does
	}
	for i, st := range steps {
		st.h.At = t0.Add(time.Duration(i+1) * time.Second)
		limit := 600
		if i == 0 {
			limit = 400
		}
		if i == len(steps)-1 {
			limit = 800
		}
		got, why, _ := c.Step(st.h, limit)
		if got != st.want || !strings.Contains(why, st.why) {
			t.Fatalf("step %d: %d %q, want %d and a reason with %q", i, got, why, st.want, st.why)
		}
	}
}

// TestOutflowQuietGrows: with no evidence either way for Quiet after the
// last cut, the rate grows as AIMD does (doubling), so that an instance
// that sees no traffic never keeps a room throttled; a slow answer among
// too few to judge still holds it.
func TestOutflowQuietGrows(t *testing.T) {
	c, _ := NewOutflowController(DefaultOutflowConfig())
	t0 := time.Now()
	c.Step(Health{Requests: 10, Slow: 10, P99: 5 * time.Second, At: t0}, 600) // 60
	var rates []int
	for i := 1; i <= 9; i++ {
		h := Health{At: t0.Add(time.Duration(i) * time.Second)}
		if i == 6 {
			h.Requests, h.Slow, h.P99 = 2, 1, 2*time.Second
		}
		r, _, _ := c.Step(h, 600)
		rates = append(rates, r)
	}
	if want := []int{60, 60, 60, 60, 120, 120, 240, 480, 600}; !equalInts(rates, want) {
		t.Errorf("rates with no answer after a cut: %v, want %v (held for Quiet, 5 s; held on a slow answer among 2; then doubled)", rates, want)
	}
}

// TestOutflowHoldsOnLaggingUnknown: pay's UNKNOWN share alone, while
// enough upstream answers are fast, holds the rate (neither cut nor
// raised) unless enough of them were begun after the latest slow one
// (then it recovers: the UNKNOWN payments are older); with too few
// answers to judge the upstream, it cuts.
func TestOutflowHoldsOnLaggingUnknown(t *testing.T) {
	c, _ := NewOutflowController(DefaultOutflowConfig())
	c.Step(Health{Requests: 10, Slow: 10, P99: 5 * time.Second}, 600) // 60
	got, why, _ := c.Step(Health{Requests: 10, Fresh: 4, P99: 10 * time.Millisecond, Payments: 10, Unknown: 6}, 600)
	if got != 60 || !strings.Contains(why, "holding") {
		t.Errorf("UNKNOWN 60%% with the upstream well: %d %q, want 60 held", got, why)
	}
	got, why, _ = c.Step(Health{Requests: 10, Fresh: 10, P99: 10 * time.Millisecond, Payments: 10, Unknown: 6}, 600)
	if got != 600 || !strings.Contains(why, "recovered") {
		t.Errorf("UNKNOWN 60%% with 10 fresh fast answers: %d %q, want 600 recovered", got, why)
	}
	if got, _, _ := c.Step(Health{Requests: 1, Payments: 10, Unknown: 8}, 600); got != 120 {
		t.Errorf("UNKNOWN 80%% with 1 upstream answer: %d, want a cut by the share, to 120", got)
	}
}

// TestOutflowCutsOncePerCause: within UnknownLag (here 3 s) of a cut, a high
// UNKNOWN share is news of what was cut for: with enough fast upstream
// answers since the cut the rate recovers through it, with too few it
// holds; later the same share, with too few answers to judge the
// upstream, cuts. A slow answer among too few to judge holds the rate.
// Within UnknownLag of the start of the latest request seen slow, the
// share is news of that request's hang too, and cuts nothing.
func TestOutflowCutsOncePerCause(t *testing.T) {
	oc := DefaultOutflowConfig()
	oc.UnknownLag = 3 * time.Second
	c, _ := NewOutflowController(oc)
	t0 := time.Now()
	unknown := func(answers int) Health {
		return Health{Requests: answers, Fresh: answers, P99: 20 * time.Millisecond, Payments: 10, Unknown: 8}
	}
	steps := []struct {
		h    Health
		at   time.Duration
		want int
		why  string
	}{
		{Health{Requests: 6, Slow: 6, P99: 2 * time.Second}, 0, 60, "p99"},
		{unknown(2), time.Second, 60, "holding: too few upstream answers since the last cut to judge (UNKNOWN payments 80% over 5%, from before the last cut)"},
		{unknown(5), 2900 * time.Millisecond, 600, "recovered: 5 upstream answers begun since the last cut and the latest slow one, all fast (UNKNOWN"},
		{unknown(2), 3500 * time.Millisecond, 120, "UNKNOWN payments 80%"}, // 3.5 s after the cut: news of now
		{Health{Requests: 2, Slow: 1, P99: 2 * time.Second}, 4 * time.Second, 120, "holding: a slow upstream answer"},
		{Health{Requests: 5, Fresh: 5, P99: 20 * time.Millisecond}, 5 * time.Second, 600, "recovered"},
		// 5.5 s after the last cut, but within 3 s of a request seen slow
		// (begun at 7 s): the payments of the requests that hung.
		{Health{Requests: 2, Fresh: 2, Payments: 10, Unknown: 8, LastBad: t0.Add(7 * time.Second)}, 9 * time.Second, 600, "at the room's limit"},
		{Health{Requests: 2, Fresh: 2, Payments: 10, Unknown: 8, LastBad: t0.Add(7 * time.Second)}, 10500 * time.Millisecond, 120, "UNKNOWN payments 80%"},
	}
	for i, st := range steps {
		st.h.At = t0.Add(st.at)
		got, why, _ := c.Step(st.h, 600)
		if got != st.want || !strings.Contains(why, st.why) {
			t.Fatalf("step %d at %s: %d %q, want %d and a reason with %q", i, st.at, got, why, st.want, st.why)
		}
	}
}

// TestHealthWindowCountsUnanswered: a request unanswered for longer than
// the bar is a slow sample of its age in the interval it crosses the bar,
// once; its answer later adds no second sample; a fast answer is a
// sample of its own; samples of requests begun before the last cut are
// left out. Answers begun after the latest slow or failed request are
// fresh, counted across intervals until a later one is bad; such a
// request unanswered past a quarter of the bar is pending.
func TestHealthWindowCountsUnanswered(t *testing.T) {
	w := &healthWindow{inflight: map[*flight]struct{}{}}
	now := time.Now()
	hung := &flight{start: now.Add(-1500 * time.Millisecond)}
	young := &flight{start: now.Add(-100 * time.Millisecond)}
	w.inflight[hung], w.inflight[young] = struct{}{}, struct{}{}
	w.answered(nil, 20*time.Millisecond, false)
	h := w.take(now, time.Second, time.Time{})
	if h.Requests != 2 || h.Slow != 1 || h.P99 != 1500*time.Millisecond || h.Fresh != 1 || h.Pending != 0 || !h.LastBad.Equal(hung.start) {
		t.Fatalf("first interval: %+v, want 2 samples, 1 slow, p99 1.5s (the unanswered request's age), 1 fresh (the fast answer), none pending (the young request is 100 ms old), the hung one the latest bad", h)
	}
	w.answered(hung, 3*time.Second, false)
	w.answered(young, 30*time.Millisecond, false)
	h = w.take(now.Add(time.Second), time.Second, time.Time{})
	if h.Requests != 1 || h.Slow != 0 || h.Fresh != 2 {
		t.Errorf("second interval: %+v, want 1 sample (the young request's answer), none slow (the hung one was counted), 2 fresh (the fast answers of both intervals)", h)
	}
	late := &flight{start: now.Add(1700 * time.Millisecond)}
	w.inflight[late] = struct{}{}
	if h = w.take(now.Add(2*time.Second), time.Second, time.Time{}); h.Pending != 1 || h.Fresh != 2 {
		t.Errorf("a request begun after the hung one, 300 ms unanswered: %+v, want it pending", h)
	}
	delete(w.inflight, late)
	old := &flight{start: now.Add(-3 * time.Second)}
	w.inflight[old] = struct{}{}
	w.answered(nil, 10*time.Millisecond, true)
	h = w.take(now.Add(2*time.Second), time.Second, now.Add(-time.Second))
	if h.Requests != 1 || h.Slow != 0 || h.Failures != 1 || h.Fresh != 0 {
		t.Errorf("third interval, the last cut at the first: %+v, want only the failed answer begun since (1 sample, 1 failure, none slow, not fresh: the latest bad one)", h)
	}
}

// TestOutflowConfigValidate names every bad field at once.
func TestOutflowConfigValidate(t *testing.T) {
	err := OutflowConfig{}.Validate()
	for _, f := range []string{"outflow_p99", "outflow_max_failures", "outflow_max_unknown", "outflow_min_samples", "outflow_decrease", "outflow_increase", "outflow_recover", "outflow_floor"} {
		if err == nil || !strings.Contains(err.Error(), f) {
			t.Errorf("Validate of the zero config = %v, want it to name %s", err, f)
		}
	}
	if err := DefaultOutflowConfig().Validate(); err != nil {
		t.Errorf("the default config: %v", err)
	}
}

// outflowStore is a Store that records the adaptive rates set.
type outflowStore struct {
	Store
	set []int
}

func (s *outflowStore) SetOutflow(_ context.Context, _ string, n int, _ string) error {
	s.set = append(s.set, n)
	return nil
}

func (s *outflowStore) Outflow(context.Context, string) (int, string, error) { return 0, "", nil }

// TestServiceSteersOutflow: the signals a gate and pay's metrics report
// reach the controller through the service's window, and the rate goes to
// the store every step (a change also to OnOutflow). UnknownLag 0: the
// UNKNOWN share is never taken for news of an earlier cut here.
func TestServiceSteersOutflow(t *testing.T) {
	st := &outflowStore{}
	cfg := DefaultServiceConfig()
	oc := DefaultOutflowConfig()
	oc.UnknownLag = 0
	cfg.Outflow, cfg.Logger = &oc, slog.New(slog.NewTextHandler(io.Discard, nil))
	var hooked []int
	cfg.OnOutflow = func(_ string, n int, _ string) { hooked = append(hooked, n) }
	svc, err := NewService(st, cfg)
	if err != nil {
		t.Fatal(err)
	}
	room := RoomConfig{MaxAdmissionsPerMinute: 600}
	svc.ObservePayments("r", 100, 0) // the base
	for range 29 {
		svc.ObserveUpstream("r", 20*time.Millisecond, false)
	}
	svc.ObserveUpstream("r", 2*time.Second, false) // the p99 of 30: 1 slow in 30, halved
	svc.steerOutflow(context.Background(), "r", room)
	svc.ObservePayments("r", 120, 8) // 8 of 20 new payments UNKNOWN, no upstream answer: halved
	svc.steerOutflow(context.Background(), "r", room)
	svc.ObservePayments("r", 5, 0) // pay restarted: counting starts again; nothing to judge by: held
	svc.steerOutflow(context.Background(), "r", room)
	time.Sleep(30 * time.Millisecond) // answers begun after the last cut
	for range 5 {
		svc.ObserveUpstream("r", 20*time.Millisecond, false)
	}
	svc.steerOutflow(context.Background(), "r", room) // 5 fast answers: back to the limit, written once
	svc.steerOutflow(context.Background(), "r", room)
	if want := []int{300, 150, 150, 600}; !equalInts(st.set, want) {
		t.Errorf("rates set %v, want %v (below the limit every step, the limit once)", st.set, want)
	}
	if want := []int{300, 150, 600}; !equalInts(hooked, want) {
		t.Errorf("rates hooked %v, want %v (each change)", hooked, want)
	}
	svc.steerOutflow(context.Background(), "r", RoomConfig{}) // no limit: left alone
	if len(st.set) != 4 {
		t.Errorf("a room without a limit got a rate: %v", st.set)
	}
}

// TestServiceCountsUnansweredUpstream: requests a gate started through
// StartUpstream and that are still unanswered after the p99 bar make the
// next step cut the rate, before any of them is answered; their answers
// later do not count them twice (five fast answers since the cut, counted
// across intervals, bring the rate back); a request begun since the cut
// and unanswered past a quarter of the bar is pending and holds the rate.
func TestServiceCountsUnansweredUpstream(t *testing.T) {
	st := &outflowStore{}
	cfg := DefaultServiceConfig()
	oc := DefaultOutflowConfig()
	oc.P99 = 40 * time.Millisecond
	cfg.Outflow, cfg.Logger = &oc, slog.New(slog.NewTextHandler(io.Discard, nil))
	svc, err := NewService(st, cfg)
	if err != nil {
		t.Fatal(err)
	}
	room := RoomConfig{MaxAdmissionsPerMinute: 600}
	var dones []func(bool)
	for range 5 {
		dones = append(dones, svc.StartUpstream("r"))
	}
	time.Sleep(100 * time.Millisecond)
	svc.steerOutflow(context.Background(), "r", room) // 5 of 5 hanging: the floor
	for _, done := range dones {
		done(false)
	}
	for range 3 {
		svc.StartUpstream("r")(false) // fast answers
	}
	svc.steerOutflow(context.Background(), "r", room) // 3 fast answers since the cut: too few
	pending := svc.StartUpstream("r")
	time.Sleep(15 * time.Millisecond) // older than a quarter of the 40 ms bar
	for range 2 {
		svc.StartUpstream("r")(false)
	}
	svc.steerOutflow(context.Background(), "r", room) // 5 fast answers, but one pending
	pending(false)
	svc.steerOutflow(context.Background(), "r", room) // its answer: 6 fast, none pending
	if want := []int{60, 60, 60, 600}; !equalInts(st.set, want) {
		t.Errorf("rates set %v, want %v: the hanging requests cut at once, too few fast answers held, then a pending one held, then the fast answers since the cut (over three intervals) brought the limit back", st.set, want)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
