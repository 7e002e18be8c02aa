package ordering

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stampede-lab/stampede/dispatch"
	"github.com/stampede-lab/stampede/lab"
)

// medians is a constructed summary: per strategy and hot load, the
// medians an ordering run would report.
type medians map[dispatch.Strategy]map[float64]map[string]float64

// result turns constructed medians into a lab.Result. A condition without
// metrics has no valid run.
func (m medians) result() *lab.Result {
	res := &lab.Result{}
	for s, byLoad := range m {
		for load, metrics := range byLoad {
			med := map[string]any{"strategy": string(s), "hot_load": load}
			for k, v := range metrics {
				med[k] = v
			}
			valid := 1
			if len(metrics) == 0 {
				valid = 0
			}
			res.Summary = append(res.Summary, lab.Summary{
				Condition: map[string]any{"strategy": string(s), "hot_load": load}, Median: med, ValidRuns: valid})
		}
	}
	return res
}

// clone copies m deeply.
func (m medians) clone() medians {
	out := medians{}
	for s, byLoad := range m {
		out[s] = map[float64]map[string]float64{}
		for load, metrics := range byLoad {
			out[s][load] = maps.Clone(metrics)
		}
	}
	return out
}

// healthy returns medians under which every claim of cfg holds: about what
// the lab measured on a 2-core machine.
func healthy(cfg Config) medians {
	part := map[float64]float64{0.4: 160, 1: 1500, 2: 4050}
	if cfg.Duration >= 20*time.Second {
		part = map[float64]float64{0.4: 140, 1: 5400, 2: 21000}
	}
	m := medians{}
	for _, s := range cfg.Strategies {
		m[s] = map[float64]map[string]float64{}
	}
	for _, load := range cfg.HotLoads {
		with := func(extra map[string]float64) map[string]float64 {
			out := map[string]float64{"lag_p99_ms": 10, "sleep_overshoot_p99_ms": 6, "stretch": 1.1}
			maps.Copy(out, extra)
			return out
		}
		m[dispatch.Shared][load] = with(map[string]float64{"violations": 12, "victim_p99_ms": 12,
			"replay_victim_p99_ms": 11, "victim_p99_bound_ms": 17, "ideal_victim_p99_ms": 7.4, "ideal_hot_violations": 8})
		p := part[load]
		m[dispatch.Partition][load] = with(map[string]float64{"violations": 0, "victim_p99_ms": p,
			"replay_victim_p99_ms": p, "victim_p99_bound_ms": p + 6, "ideal_victim_p99_ms": p * 0.95})
		if load < 1 {
			m[dispatch.Steal][load] = with(map[string]float64{"violations": 0, "stolen": 0, "victim_p99_ms": p,
				"replay_victim_p99_ms": p, "victim_p99_bound_ms": p + 6, "ideal_victim_p99_ms": p * 0.95})
		} else {
			m[dispatch.Steal][load] = with(map[string]float64{"violations": 30, "stolen": 200, "victim_p99_ms": 500})
		}
		m[dispatch.Keyed][load] = with(map[string]float64{"violations": 0, "victim_p99_ms": 11,
			"replay_victim_p99_ms": 10, "victim_p99_bound_ms": 16, "ideal_victim_p99_ms": 7.5})
	}
	return m
}

// breakage changes some medians so that exactly the claims whose text
// contains one of fails stop holding.
type breakage struct {
	name  string
	set   func(m medians)
	fails []string
}

// checkEveryClaimCanFail feeds Expectations the healthy medians (every
// claim holds) and then each breakage (exactly its claims fail), and
// checks that every claim failed under at least one breakage.
func checkEveryClaimCanFail(t *testing.T, cfg Config, good medians, breakages []breakage) {
	t.Helper()
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	base := e.Expectations(good.result()).List()
	if len(base) == 0 {
		t.Fatal("no claims")
	}
	for _, x := range base {
		if !x.Holds {
			t.Errorf("healthy medians: %q does not hold: %s", x.Claim, x.Figure)
		}
	}
	failedOnce := map[string]bool{}
	for _, b := range breakages {
		m := good.clone()
		b.set(m)
		for _, x := range e.Expectations(m.result()).List() {
			want := slices.ContainsFunc(b.fails, func(f string) bool { return strings.Contains(x.Claim, f) })
			if x.Holds == want {
				t.Errorf("%s: %q holds %v (%s), want %v", b.name, x.Claim, x.Holds, x.Figure, !want)
			}
			if !x.Holds {
				failedOnce[x.Claim] = true
			}
		}
	}
	for _, x := range base {
		if !failedOnce[x.Claim] {
			t.Errorf("no breakage makes %q fail: a claim that cannot fail", x.Claim)
		}
	}
}

// TestEveryClaimCanFail feeds constructed medians to the quick profile's
// claims and to the full profile's (the write-up's figures among them):
// each claim holds on healthy medians and fails, alone or with the claims
// that read the same figure, when its figure goes wrong.
func TestEveryClaimCanFail(t *testing.T) {
	set := func(s dispatch.Strategy, load float64, kv ...any) func(medians) {
		return func(m medians) {
			for i := 0; i < len(kv); i += 2 {
				m[s][load][kv[i].(string)] = kv[i+1].(float64)
			}
		}
	}
	each := func(s dispatch.Strategy, metric string, v func(old float64) float64) func(medians) {
		return func(m medians) {
			for l := range m[s] {
				m[s][l][metric] = v(m[s][l][metric])
			}
		}
	}
	common := []breakage{
		{"keyed breaks order", each(dispatch.Keyed, "violations", func(float64) float64 { return 1 }),
			[]string{"keyed at hot load 0.4: 0 violations", "keyed at hot load 1: 0 violations", "keyed at hot load 2: 0 violations"}},
		{"partition breaks order", each(dispatch.Partition, "violations", func(float64) float64 { return 1 }),
			[]string{"partition at hot load 0.4: 0 violations", "partition at hot load 1: 0 violations", "partition at hot load 2: 0 violations"}},
		{"keyed run by partition", each(dispatch.Keyed, "victim_p99_ms", func(float64) float64 { return 3000 }),
			[]string{"keyed at hot load 0.4: victim p99 at most the", "keyed at hot load 1: victim p99 at most the",
				"keyed at hot load 2: victim p99 at most the", "design: keyed"}},
		{"partition slower than its replay", each(dispatch.Partition, "victim_p99_ms", func(v float64) float64 { return v + 50 }),
			[]string{"partition at hot load 0.4: victim p99 at most", "partition at hot load 1: victim p99 at most", "partition at hot load 2: victim p99 at most",
				"write-up: partition at hot load 0.4"}},
		{"shared slower than its replay", each(dispatch.Shared, "victim_p99_ms", func(float64) float64 { return 18 }),
			[]string{"shared at hot load 0.4: victim p99 at most", "shared at hot load 1: victim p99 at most", "shared at hot load 2: victim p99 at most"}},
		{"shared keeps order", each(dispatch.Shared, "violations", func(float64) float64 { return 0 }),
			[]string{"breaks per-key order where the ideal machine", "write-up: shared: violations grow"}},
		{"steal slower than its replay at 0.4", set(dispatch.Steal, 0.4, "victim_p99_ms", 200.0),
			[]string{"steal at hot load 0.4: victim p99 at most", "write-up: steal at hot load 0.4"}},
		{"steal moves nothing", set(dispatch.Steal, 2, "stolen", 0.0), []string{"steal at hot load 2, 4s runs: moves", "steal at hot load 2, 20s runs: moves"}},
		{"steal keeps order", set(dispatch.Steal, 2, "violations", 0.0), []string{"steal at hot load 2, 4s runs: the moved", "steal at hot load 2, 20s runs: the moved"}},
		{"steal victims slow", set(dispatch.Steal, 2, "victim_p99_ms", 1200.0),
			[]string{"steal at hot load 2, 4s runs: victim p99", "steal at hot load 2, 20s runs: victim p99", "write-up: steal at hot load 2"}},
		{"partition victims do not wait", func(m medians) {
			m[dispatch.Partition][0.4]["victim_p99_ms"] = 20
			m[dispatch.Partition][1]["victim_p99_ms"] = 20
		}, []string{"partition at hot load 0.4: victims wait", "partition at hot load 1: victims wait",
			"write-up: partition at hot load 1", "partition at hot load 1, 20s runs: victim p99 diverges"}},
		{"partition does not diverge", func(m medians) {
			p := m[dispatch.Partition][2]
			p["ideal_victim_p99_ms"], p["victim_p99_ms"] = 1000, 1000
		}, []string{"partition at hot load 2, 4s runs: victim p99 diverges", "partition at hot load 2, 20s runs: victim p99 diverges",
			"write-up: partition at hot load 2"}},
		{"no partition run valid", func(m medians) {
			for l := range m[dispatch.Partition] {
				m[dispatch.Partition][l] = map[string]float64{}
			}
		}, []string{"partition at hot load", "write-up: partition"}},
	}

	t.Run("quick", func(t *testing.T) {
		cfg := DefaultConfig()
		checkEveryClaimCanFail(t, cfg, healthy(cfg), common)
	})
	t.Run("full", func(t *testing.T) {
		cfg := FullConfig()
		cfg.HotArrivals = HotEven
		breakages := append(slices.Clone(common),
			breakage{"steal at 1 moves nothing", set(dispatch.Steal, 1, "stolen", 0.0, "violations", 0.0, "victim_p99_ms", 1200.0),
				[]string{"steal at hot load 1, 20s runs"}},
			breakage{"shared at 25 ms on a noisy machine", func(m medians) {
				for _, l := range []float64{0.4, 1, 2} {
					m[dispatch.Shared][l]["victim_p99_ms"], m[dispatch.Shared][l]["victim_p99_bound_ms"] = 25, 30
				}
			}, []string{"write-up: shared at hot load"}},
			breakage{"keyed more than twice shared", func(m medians) {
				for _, l := range []float64{0.4, 1, 2} {
					m[dispatch.Shared][l]["victim_p99_ms"] = 5
				}
			}, []string{"design: keyed"}},
		)
		checkEveryClaimCanFail(t, cfg, healthy(cfg), breakages)
	})
	t.Run("skipped claims say why", func(t *testing.T) {
		cfg := DefaultConfig()
		e, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		var skipped []string
		for _, sk := range e.Expectations(healthy(cfg).result()).Skipped() {
			skipped = append(skipped, sk.Claim)
			if sk.Reason == "" {
				t.Errorf("%q skipped without a reason", sk.Claim)
			}
		}
		for _, want := range []string{
			"partition at hot load 1, 4s runs: victim p99 diverges",
			"steal at hot load 1, 4s runs: moves items",
			"write-up: partition at hot load 2: victim p99 diverges to > 10 s",
			"write-up: shared at hot load 2: victim p99 near 10 ms",
		} {
			if !slices.ContainsFunc(skipped, func(c string) bool { return strings.HasPrefix(c, want) }) {
				t.Errorf("the quick profile does not skip %q; skipped %q", want, skipped)
			}
		}
		// A steal run that stole has no model: its replay bound is skipped.
		stole := healthy(cfg)
		stole[dispatch.Steal][0.4]["stolen"] = 5
		x := e.Expectations(stole.result())
		if !slices.ContainsFunc(x.Skipped(), func(sk lab.Skipped) bool {
			return strings.HasPrefix(sk.Claim, "steal at hot load 0.4: victim p99 at most the strategy's replay")
		}) {
			t.Errorf("a steal run that stole keeps its replay bound: skipped %+v", x.Skipped())
		}
		md, err := e.Render(healthy(cfg).result(), t.TempDir())
		if err != nil || !strings.Contains(md, "Beside the published dispatcher write-up") {
			t.Errorf("Render: %v\n%s", err, md)
		}
	})
}

// TestIdealModels checks the ideal machine on a small hand-made stream.
func TestIdealModels(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Workers, cfg.Keys = 2, 3
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{keyName(0), keyName(1), keyName(2)}
	ms := time.Millisecond
	// Hot items of 100 ms and 50 ms at 0 and 10 ms, then a victim of 5 ms
	// at 20 ms.
	plan := []arrival{{0, 0, 100 * ms}, {10 * ms, 0, 50 * ms}, {20 * ms, 1, 5 * ms}}
	for _, tc := range []struct {
		s          dispatch.Strategy
		victim     time.Duration
		violations int
	}{
		// Shared: both workers hold hot items until 60 ms, and the
		// second hot item finishes first.
		{dispatch.Shared, 45 * ms, 1},
		// Keyed: the hot key holds one worker; the victim takes the other.
		{dispatch.Keyed, 5 * ms, 0},
	} {
		got, ok := e.simulate(plan, tc.s, keys)
		if !ok || got.victimP99 != tc.victim || got.hotViolations != tc.violations {
			t.Errorf("%s: %+v (ok %v), want victim p99 %s, %d hot violations", tc.s, got, ok, tc.victim, tc.violations)
		}
	}
	// Partition: the victim waits behind the hot key only if it shares
	// its partition.
	got, _ := e.simulate(plan, dispatch.Partition, keys)
	want := 5 * ms
	if dispatch.PartitionOf(keys[1], 2) == dispatch.PartitionOf(keys[0], 2) {
		want = 150*ms + 5*ms - 20*ms
	}
	if got.victimP99 != want || got.hotViolations != 0 {
		t.Errorf("partition: %+v, want victim p99 %s, no violation", got, want)
	}
}
