package retrystampede

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/stampede-lab/stampede/lab"
	"github.com/stampede-lab/stampede/retry"
)

// cond names one condition of a constructed summary.
type cond struct {
	s Scenario
	p string
}

// medians is a constructed summary: per condition, its medians.
type medians map[cond]map[string]float64

// result turns m into a lab.Result; a condition without metrics has no
// valid run.
func (m medians) result() *lab.Result {
	res := &lab.Result{}
	for c, metrics := range m {
		med := map[string]any{"scenario": string(c.s), "policy": c.p}
		for k, v := range metrics {
			med[k] = v
		}
		valid := 1
		if len(metrics) == 0 {
			valid = 0
		}
		res.Summary = append(res.Summary, lab.Summary{
			Condition: map[string]any{"scenario": string(c.s), "policy": c.p}, Median: med, ValidRuns: valid})
	}
	return res
}

// healthy returns medians under which every claim of e holds: a stampede
// on an idle machine.
func healthy(e *Experiment) medians {
	c := e.cfg
	n, att := float64(c.Payments), float64(c.Attempts)
	// Within the model's range, and under a quarter of exponential's.
	fj := float64(e.fullJitterModel(SlidingPeak).P05)
	fjFixed := min(float64(e.fullJitterModel(FixedPeak).P50), 0.25*n)
	m := medians{}
	for _, s := range c.Scenarios {
		for _, p := range c.Policies {
			v := map[string]float64{"first_wave": n, "first_wave_ms": 60, "first_attempts_in_time": n,
				"resolved": n, "unresolved": 0, "double_charges": 0, "parity_mismatches": 0}
			switch p {
			case retry.None:
				maps.Copy(v, map[string]float64{"institution_requests": n, "amplification": 1, "retry_requests": 0, "peak_1s": 0, "peak_100ms": 0})
			case Budget:
				maps.Copy(v, map[string]float64{"institution_requests": n + 10, "amplification": (n + 10) / n, "retry_requests": 10, "peak_1s": 10, "peak_100ms": 10})
			default:
				maps.Copy(v, map[string]float64{"institution_requests": att * n, "amplification": att, "retry_requests": (att - 1) * n,
					"peak_1s": n, "peak_100ms": n, "peak_100ms_fixed": n})
				if p != retry.Exponential {
					v["peak_100ms"], v["peak_100ms_fixed"] = fj, fjFixed
				}
			}
			if s == HangAfterNonIdempotent {
				v["double_charges"] = v["retry_requests"]
			}
			m[cond{s, p}] = v
		}
	}
	return m
}

// TestEveryClaimCanFail feeds constructed medians to the quick profile's
// claims and to the full profile's: each claim holds on healthy medians,
// and fails when its figure goes wrong.
func TestEveryClaimCanFail(t *testing.T) {
	hb, hn := HangBefore, HangAfterNonIdempotent
	set := func(s Scenario, p string, kv ...any) func(medians) {
		return func(m medians) {
			for i := 0; i < len(kv); i += 2 {
				m[cond{s, p}][kv[i].(string)] = kv[i+1].(float64)
			}
		}
	}
	type breakage struct {
		name  string
		set   func(medians)
		fails []string
	}
	common := []breakage{
		{"none retries", set(hb, retry.None, "institution_requests", 151.0, "amplification", 151.0/150),
			[]string{"none (hang-before): at most 1 request", "none: exactly 1.00×"}},
		{"none retries after the first wave", set(hb, retry.None, "peak_1s", 3.0), []string{"none: no arrival after"}},
		{"exponential sends a fourth attempt", set(hb, retry.Exponential, "institution_requests", 451.0, "amplification", 451.0/150, "retry_requests", 301.0),
			[]string{"exponential (hang-before): at most 3", "exponential: exactly"}},
		{"exponential spread, read in fixed windows", set(hb, retry.Exponential, "peak_100ms_fixed", 100.0), []string{"write-up: full-jitter, read as"}},
		{"a retry lost", set(hb, retry.FullJitter, "amplification", 449.0/150, "retry_requests", 299.0), []string{"full-jitter: exactly"}},
		{"exponential spread", set(hb, retry.Exponential, "peak_100ms", 100.0), []string{"exponential: every retry leaves", "write-up: full-jitter: peak_100ms a quarter"}},
		{"full-jitter off its model", set(hb, retry.FullJitter, "peak_100ms", 5.0), []string{"full-jitter: peak_100ms what its schedule"}},
		{"full-jitter at 1 s", set(hb, retry.FullJitter, "peak_1s", 120.0), []string{"peak_1s the same"}},
		{"budget overspent", func(m medians) {
			for _, s := range []Scenario{hb, hn, HangAfterIdempotent} {
				if v, ok := m[cond{s, Budget}]; ok {
					v["amplification"] = 1.5
				}
			}
		}, []string{"budget (hang-before): at most what", "budget (hang-after-nonidempotent): at most what", "budget (hang-after-idempotent): at most what"}},
		{"none double-charges", set(hn, retry.None, "double_charges", 1.0), []string{"none (hang-after-nonidempotent): 0 double"}},
		{"retries charge once", set(hn, retry.Exponential, "double_charges", 0.0), []string{"exponential (hang-after-nonidempotent): retries double-charge"}},
		{"unsettled", set(hn, Budget, "unresolved", 1.0, "resolved", 149.0), []string{"after reconciliation"}},
		{"parity", set(hb, retry.None, "parity_mismatches", 1.0), []string{"none (hang-before): parity"}},
		{"no valid none run", func(m medians) { m[cond{hb, retry.None}] = map[string]float64{} },
			[]string{"none (hang-before)", "none: exactly", "none: no arrival", "after reconciliation"}},
	}
	run := func(t *testing.T, cfg Config, breakages []breakage) {
		e, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		good := healthy(e)
		base := e.Expectations(good.result()).List()
		for _, x := range base {
			if !x.Holds {
				t.Errorf("healthy medians: %q does not hold: %s", x.Claim, x.Figure)
			}
		}
		failedOnce := map[string]bool{}
		for _, b := range breakages {
			m := medians{}
			for k, v := range good {
				m[k] = maps.Clone(v)
			}
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
	// every adds, for each condition of cfg, the breakages of its own
	// claims: too many requests per payment, double charges, parity.
	every := func(cfg Config, bs []breakage) []breakage {
		out := slices.Clone(bs)
		for _, s := range cfg.Scenarios {
			for _, p := range cfg.Policies {
				limit, n := 3, "451"
				if p == retry.None {
					limit, n = 1, "151"
				}
				v := map[string]float64{"451": 451, "151": 151}[n]
				out = append(out, breakage{"too many requests " + string(s) + " " + p, set(s, p, "institution_requests", v),
					[]string{fmt.Sprintf("%s (%s): at most %d request", p, s, limit)}})
				switch {
				case p == retry.None:
					out = append(out,
						breakage{"none double-charges " + string(s), set(s, p, "double_charges", 1.0), []string{"none (" + string(s) + "): 0 double"}},
						breakage{"none parity " + string(s), set(s, p, "parity_mismatches", 1.0), []string{"none (" + string(s) + "): parity"}})
				case s == HangAfterNonIdempotent:
					out = append(out, breakage{"retries charge once " + p, set(s, p, "double_charges", 0.0), []string{p + " (hang-after-nonidempotent): retries"}})
				case s == HangAfterIdempotent:
					out = append(out, breakage{"idempotent charges twice " + p, set(s, p, "double_charges", 1.0), []string{p + " (hang-after-idempotent): an idempotent"}})
				}
			}
		}
		return out
	}
	t.Run("quick", func(t *testing.T) { run(t, DefaultConfig(), every(DefaultConfig(), common)) })
	t.Run("full", func(t *testing.T) {
		full := append(slices.Clone(common),
			breakage{"decorrelated loses a retry", set(hb, retry.DecorrelatedJitter, "amplification", 449.0/150, "retry_requests", 299.0),
				[]string{"decorrelated-jitter: exactly"}},
			breakage{"full-jitter above the quarter", set(hb, retry.FullJitter, "peak_100ms_fixed", 45.0), []string{"write-up: full-jitter, read as"}},
		)
		run(t, FullConfig(), every(FullConfig(), full))
	})
	t.Run("a loaded machine skips what it cannot count", func(t *testing.T) {
		e, err := New(DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		m := healthy(e)
		maps.Copy(m[cond{hb, retry.FullJitter}], map[string]float64{"first_wave": 19, "first_wave_ms": 612, "first_attempts_in_time": 120})
		x := e.Expectations(m.result())
		var skipped []string
		for _, sk := range x.Skipped() {
			skipped = append(skipped, sk.Claim+" — "+sk.Reason)
		}
		for _, want := range []string{"full-jitter: exactly 3.00×", "full-jitter: peak_100ms what its schedule", "peak_1s the same", "write-up: full-jitter: peak_100ms a quarter"} {
			if !slices.ContainsFunc(skipped, func(s string) bool { return strings.HasPrefix(s, want) }) {
				t.Errorf("%q not skipped; skipped:\n%s", want, strings.Join(skipped, "\n"))
			}
		}
		for _, cl := range x.List() {
			if !cl.Holds {
				t.Errorf("%q does not hold (%s)", cl.Claim, cl.Figure)
			}
		}
	})
}
