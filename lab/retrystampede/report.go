package retrystampede

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/stampede-lab/stampede/lab"
	"github.com/stampede-lab/stampede/retry"
)

// publishedFigure is one row of the published ParityPay write-up's table (3-run medians, 150
// payments, HANG_BEFORE_PROCESSING 8 s, timeout 3 s, 3 attempts, base
// 500 ms, peaks after the first second).
type publishedFigure struct {
	policy                   string
	requests, amplification  float64
	retries, peak100, peak1s float64
	p50MS                    float64
}

// publishedTable is the table of the published ParityPay write-up.
var publishedTable = []publishedFigure{
	{retry.None, 150, 1.00, 0, 0, 0, 3194},
	{retry.Exponential, 450, 3.00, 300, 141, 150, 10752},
	{retry.FullJitter, 450, 3.00, 300, 38, 150, 9932},
}

// publishedTimeout is the write-up's client timeout.
const publishedTimeout = 3 * time.Second

// median returns a summary's median metric for one scenario and policy.
func median(r *lab.Result, s Scenario, policy, metric string) (float64, bool) {
	return r.Median(metric, map[string]any{"scenario": string(s), "policy": policy})
}

// chartScenario is the scenario whose arrivals are drawn: hang-before if it
// ran, else the first.
func (e *Experiment) chartScenario() Scenario {
	if slices.Contains(e.cfg.Scenarios, HangBefore) {
		return HangBefore
	}
	return e.cfg.Scenarios[0]
}

// Render implements lab.Experiment: institution arrivals over time per
// fine and coarse window for each policy (one scenario, first repeat), the
// settlement table, and the write-up's figures beside ours. The Runner adds
// the expectations table (see Expectations).
func (e *Experiment) Render(r *lab.Result, dir string) (string, error) {
	c := e.cfg
	var b strings.Builder
	fmt.Fprintf(&b, "%d payments released by one start signal against an institution in each scenario's mode, hang %s, "+
		"approval timeout %s, %d attempts, base %s (×2, cap %s). ", c.Payments, c.Hang, c.Timeout, c.Attempts, c.Base, c.retryConfig(retry.Exponential).Cap)
	fmt.Fprintf(&b, "`peak_100ms` and `peak_1s` are the most institution arrivals in any window of 100 ms and of 1 s (sliding: a window may start anywhere), "+
		"counting only arrivals more than %s after the start signal: the first wave, which the clients make alike under every policy, is left out. "+
		"`peak_100ms_fixed` and `peak_1s_fixed` in the JSON count fixed windows aligned to the start signal, like the write-up's histogram; "+
		"a window boundary can cut a burst in two there. ", c.ExcludeFirst)
	if c.Hang != 8*time.Second || c.Timeout != publishedTimeout {
		fmt.Fprintf(&b, "The write-up ran an 8 s hang and a 3 s timeout; this run uses %s and %s. The peak windows stay 100 ms and 1 s whatever the timeout: "+
			"they read the retry schedule (base %s) on the write-up's scale. `first_wave_ms` in the JSON is how long the first wave took to reach the institution. ",
			c.Hang, c.Timeout, c.Base)
	}
	b.WriteString("`approvals` counts the institution's charges, `double_charges` the charges beyond one per external key; " +
		"`unknown` the payments answered 202 UNKNOWN; `resolved` the payments APPROVED, DECLINED or FAILED, or flagged for review, after the institution went back to NORMAL " +
		"(ledger kept) and the reconciler settled them by status inquiry; `parity_mismatches` compares our APPROVED payments with the ledger (double charges count).\n\n")

	sc := e.chartScenario()
	for _, w := range []struct {
		name, file string
		width      time.Duration
		series     func(RunDetail) []int
	}{
		{"fine", "retry-stampede-arrivals-100ms.png", FineWindow, func(d RunDetail) []int { return d.PerFine }},
		{"coarse", "retry-stampede-arrivals-1s.png", CoarseWindow, func(d RunDetail) []int { return d.PerCoarse }},
	} {
		chart := lab.LineChart{
			Title:  fmt.Sprintf("Institution arrivals per %s, %s (repeat 1)", w.width, sc),
			XLabel: "time since the start signal (s, window start)", YLabel: fmt.Sprintf("arrivals per %s", w.width),
			Lines: []lab.HLine{{Name: "payments", Y: float64(c.Payments)}},
		}
		for _, p := range c.Policies {
			d, ok := firstRun(r, sc, p)
			if !ok {
				continue
			}
			counts := w.series(d)
			s := lab.Series{Name: d.Policy}
			for k, n := range counts {
				s.X = append(s.X, float64(k)*w.width.Seconds())
				s.Y = append(s.Y, float64(n))
			}
			if len(s.X) > 0 {
				chart.Series = append(chart.Series, s)
			}
		}
		if len(chart.Series) == 0 {
			continue
		}
		if err := chart.Save(filepath.Join(dir, w.file)); err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "![institution arrivals per %s, %s](%s)\n\n", w.width, sc, w.file)
	}

	b.WriteString(e.settlement(r))
	b.WriteString(e.publishedComparison(r))
	return b.String(), nil
}

// firstRun returns the detail of the first repeat of one condition.
func firstRun(r *lab.Result, s Scenario, policy string) (RunDetail, bool) {
	for _, run := range r.Runs {
		d, ok := run.Extra.(RunDetail)
		if ok && run.Repeat == 0 && run.Condition["scenario"] == string(s) && run.Condition["policy"] == policy {
			return d, true
		}
	}
	return RunDetail{}, false
}

// settlement is the table of final statuses after reconciliation.
func (e *Experiment) settlement(r *lab.Result) string {
	var b strings.Builder
	b.WriteString("### After reconciliation (medians)\n\n| scenario | policy | approved | declined | failed | flagged | unresolved | parity mismatches | answers 201/202 |\n|---|---|---|---|---|---|---|---|---|\n")
	n := 0
	for _, s := range e.cfg.Scenarios {
		for _, p := range e.cfg.Policies {
			get := func(m string) string {
				v, ok := median(r, s, p, m)
				if !ok {
					return "n/a"
				}
				return fmt.Sprintf("%g", v)
			}
			if _, ok := median(r, s, p, "resolved"); !ok {
				continue
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", s, p, get("final_approved"), get("final_declined"),
				get("final_failed"), get("flagged"), get("unresolved"), get("parity_mismatches"), get("answered"))
			n++
		}
	}
	if n == 0 {
		return ""
	}
	b.WriteString("\nHANG_BEFORE charges nothing: the reconciler reads \"not found\" after the not-found window and fails the payment. " +
		"HANG_AFTER charged at once: the inquiry finds the charge and approves the payment. A retry against a non-idempotent institution " +
		"charges again, which no status inquiry can undo: those show as parity mismatches (double charged).\n\n")
	return b.String()
}

// Expectations implements lab.Experiment. Every claim states the
// parameters it holds for, and is derived from them and from what the
// run measured:
//
//   - invariants at any parameters: no policy sends more than its
//     attempts per payment; none double-charges nothing and keeps parity;
//     an idempotent institution absorbs retries; every payment settles;
//   - exact request counts (1.00×, attempts×), only where every payment's
//     first attempt reached the institution before the timeout, and the
//     peaks after the first wave, only where every first attempt arrived
//     within the first-wave window (on a loaded machine the payment
//     service may not manage either: the claim is then skipped, saying
//     how many arrived);
//   - exponential's retry wave keeps the first wave's shape, so its
//     busiest 100 ms holds at least 80 % of what the first wave's measured
//     width allows; full-jitter's peak lies where its schedule alone puts
//     it (a model of 2,000 stampedes), when the first wave arrived within
//     one 100 ms window, as the model assumes;
//   - the budget's amplification at most what its tokens pay for:
//     1 + (MaxTokens − Reserve + TokenRatio × payments) / payments.
//
// The published write-up's figures that its own parameters alone produce
// (full-jitter at a quarter of exponential's peak) are checked only with
// the write-up's parameters (`--full`). A claim whose figure is missing
// does not hold.
func (e *Experiment) Expectations(r *lab.Result) *lab.Expectations {
	c := e.cfg
	n, att := float64(c.Payments), float64(c.Attempts)
	var x lab.Expectations
	has := func(s Scenario, policies ...string) bool {
		if !slices.Contains(c.Scenarios, s) {
			return false
		}
		for _, p := range policies {
			if !slices.Contains(c.Policies, p) {
				return false
			}
		}
		return true
	}
	// need looks a median up and records what is missing.
	need := func(missing *[]string, s Scenario, policy, metric string) float64 {
		v, ok := median(r, s, policy, metric)
		if !ok {
			*missing = append(*missing, fmt.Sprintf("%s of %s (%s)", metric, policy, s))
		}
		return v
	}
	// wave reports whether every payment's first attempt reached the
	// institution within the first-wave window, and if not, why.
	wave := func(s Scenario, policy string) (bool, string) {
		fw, ok1 := median(r, s, policy, "first_wave")
		w, ok2 := median(r, s, policy, "first_wave_ms")
		if !ok1 || !ok2 || fw >= n {
			return true, "" // a missing figure makes the claim missing, not skipped
		}
		return false, fmt.Sprintf("only %.0f of %d first attempts of %s (%s) reached the institution within %s (over %.0f ms): "+
			"the machine held the rest back, so the retries' arrivals cannot be told from the first wave's", fw, c.Payments, policy, s, c.ExcludeFirst, w)
	}
	// counted reports whether every payment's first attempt reached the
	// institution before the timeout (before which no retry can leave),
	// and if not, why: only then can the run count what each payment sent.
	counted := func(s Scenario, policy string) (bool, string) {
		in, ok := median(r, s, policy, "first_attempts_in_time")
		if !ok || in >= n {
			return true, ""
		}
		return false, fmt.Sprintf("only %.0f of %d first attempts of %s (%s) reached the institution within the %s timeout: "+
			"the machine held the rest back, so this run cannot count every payment's requests", in, c.Payments, policy, s, c.Timeout)
	}
	check := x.Judge
	hb := HangBefore
	for _, s := range c.Scenarios {
		for _, p := range c.Policies {
			limit := att
			if p == retry.None {
				limit = 1
			}
			var miss []string
			v := need(&miss, s, p, "institution_requests")
			check(fmt.Sprintf("%s (%s): at most %.0f request(s) per payment, ≤ %.0f", p, s, limit, limit*n), miss,
				func() (string, bool) { return fmt.Sprintf("%.0f", v), v <= limit*n })
		}
	}
	if has(hb, retry.None) {
		claims := []string{"none: exactly 1.00× (write-up: 150 requests for 150 payments)",
			fmt.Sprintf("none: no arrival after the first %s, peaks 0 (write-up: 0 and 0)", c.ExcludeFirst)}
		if ok, why := counted(hb, retry.None); !ok {
			x.Skip(claims[0], why)
		} else {
			var miss []string
			v := need(&miss, hb, retry.None, "amplification")
			check(claims[0], miss, func() (string, bool) { return fmt.Sprintf("%.2f×", v), v == 1 })
		}
		if ok, why := wave(hb, retry.None); !ok {
			x.Skip(claims[1], why)
		} else {
			var miss []string
			p := need(&miss, hb, retry.None, "peak_1s")
			w := need(&miss, hb, retry.None, "first_wave_ms")
			check(claims[1], miss, func() (string, bool) { return fmt.Sprintf("peak_1s %.0f; first wave over %.0f ms", p, w), p == 0 })
		}
	}
	for _, p := range []string{retry.Exponential, retry.FullJitter, retry.DecorrelatedJitter} {
		if !has(hb, p) {
			continue
		}
		claim := fmt.Sprintf("%s: exactly %.2f×, retry_requests = %d × payments = %.0f (write-up: 3.00×, 300)", p, att, c.Attempts-1, (att-1)*n)
		if ok, why := counted(hb, p); !ok {
			x.Skip(claim, why)
			continue
		}
		var miss []string
		amp := need(&miss, hb, p, "amplification")
		rr := need(&miss, hb, p, "retry_requests")
		check(claim, miss, func() (string, bool) { return fmt.Sprintf("%.2f×, %.0f", amp, rr), amp == att && rr == (att-1)*n })
	}
	if has(hb, retry.Exponential) {
		claim := "exponential: every retry leaves a timeout plus the same wait after its first attempt, so the busiest 100 ms holds " +
			"at least 80 % of the payments the first wave's measured width puts in 100 ms (write-up: 141 of 150)"
		if ok, why := wave(hb, retry.Exponential); !ok {
			x.Skip(claim, why)
		} else {
			var miss []string
			exp100 := need(&miss, hb, retry.Exponential, "peak_100ms")
			w := need(&miss, hb, retry.Exponential, "first_wave_ms")
			check(claim, miss, func() (string, bool) {
				want := 0.8 * n * math.Min(1, ms(FineWindow)/math.Max(w, 1))
				holds := exp100 >= math.Ceil(want)
				sign := map[bool]string{true: "≥", false: "<"}[holds]
				return fmt.Sprintf("%.0f %s %.0f (first wave over %.0f ms)", exp100, sign, math.Ceil(want), w), holds
			})
		}
	}
	if has(hb, retry.FullJitter) {
		model := e.fullJitterModel(SlidingPeak)
		claim := fmt.Sprintf("full-jitter: peak_100ms what its schedule alone gives, within the 5–95 %% range of %d model stampedes (no network time; median %d)",
			model.Trials, model.P50)
		w, wok := median(r, hb, retry.FullJitter, "first_wave_ms")
		ok, why := wave(hb, retry.FullJitter)
		switch {
		case !ok:
			x.Skip(claim, why)
		case wok && w > ms(FineWindow):
			x.Skip(claim, fmt.Sprintf("the first wave took %.0f ms to reach the institution, more than one %s window: the model, "+
				"whose payments leave at one instant, does not describe this run (a loaded machine spreads the wave)", w, FineWindow))
		default:
			var miss []string
			fj100 := need(&miss, hb, retry.FullJitter, "peak_100ms")
			check(claim, miss, func() (string, bool) {
				return fmt.Sprintf("%.0f in [%d, %d]", fj100, model.P05, model.P95), float64(model.P05) <= fj100 && fj100 <= float64(model.P95)
			})
		}
	}
	// The quarter is the write-up's reading of its own run; the model says
	// how often the schedule alone gives it, and --full checks it.
	if has(hb, retry.Exponential, retry.FullJitter) {
		diff := c.writeUpDifference()
		for _, q := range []struct {
			metric, reading, modelNote string
			peak                       PeakFunc
		}{
			{"peak_100ms", "write-up: full-jitter: peak_100ms a quarter of exponential's or less (write-up: 38 vs 141, 0.27×)", "the schedule alone", SlidingPeak},
			{"peak_100ms_fixed", "write-up: full-jitter, read as the write-up read it (fixed 100 ms windows from the start signal): peak_100ms_fixed a quarter of exponential's or less", "the schedule alone, its waves lined up with the windows,", FixedPeak},
		} {
			if diff != "" {
				m := e.fullJitterModel(q.peak)
				x.Skip(q.reading, fmt.Sprintf("the write-up's reading of its own parameters; this run has %s (the schedule alone stays at or under a quarter of %d in %.0f %% of model stampedes); `--full` checks it",
					diff, c.Payments, 100*m.AtMost(n/4)))
				continue
			}
			var miss []string
			exp := need(&miss, hb, retry.Exponential, q.metric)
			fj := need(&miss, hb, retry.FullJitter, q.metric)
			check(q.reading, miss, func() (string, bool) {
				quarter := 0.25 * exp
				m := e.fullJitterModel(q.peak)
				return fmt.Sprintf("%.0f vs %.0f (%.2f×); %s stays at or under %.1f in %.0f %% of model stampedes",
					fj, exp, fj/math.Max(exp, 1), q.modelNote, quarter, 100*m.AtMost(quarter)), fj <= quarter
			})
		}
		claim := "peak_1s the same for exponential and full-jitter, within 5 % of payments, their retries landing within one second (write-up: 150 and 150)"
		okE, whyE := wave(hb, retry.Exponential)
		okF, whyF := wave(hb, retry.FullJitter)
		wE, _ := median(r, hb, retry.Exponential, "first_wave_ms")
		wF, _ := median(r, hb, retry.FullJitter, "first_wave_ms")
		switch {
		case !okE || !okF:
			x.Skip(claim, cmp.Or(whyE, whyF))
		case c.Base+time.Duration(max(wE, wF)*float64(time.Millisecond)) > CoarseWindow:
			x.Skip(claim, fmt.Sprintf("full-jitter's first retries spread over the base (%s) plus the first wave's width (%.0f ms), more than %s: "+
				"the window cannot hold them all", c.Base, max(wE, wF), CoarseWindow))
		default:
			var miss []string
			exp1s := need(&miss, hb, retry.Exponential, "peak_1s")
			fj1s := need(&miss, hb, retry.FullJitter, "peak_1s")
			check(claim, miss, func() (string, bool) {
				return fmt.Sprintf("%.0f and %.0f", exp1s, fj1s), math.Abs(exp1s-fj1s) <= 0.05*n && math.Abs(exp1s-n) <= 0.05*n
			})
		}
	}
	bc := retry.DefaultBudgetConfig()
	budgetMax := 1 + (math.Floor(bc.MaxTokens-bc.Reserve)+bc.TokenRatio*n)/n
	for _, s := range c.Scenarios {
		if !has(s, Budget) {
			continue
		}
		var miss []string
		v := need(&miss, s, Budget, "amplification")
		check(fmt.Sprintf("budget (%s): at most what its tokens pay for, 1 + (max_tokens %g − reserve %g + token_ratio %g × %d payments) / %d = %.2f×",
			s, bc.MaxTokens, bc.Reserve, bc.TokenRatio, c.Payments, c.Payments, budgetMax), miss,
			func() (string, bool) { return fmt.Sprintf("%.2f×", v), v <= budgetMax })
	}
	for _, s := range c.Scenarios {
		if !has(s, retry.None) {
			continue
		}
		var miss []string
		v := need(&miss, s, retry.None, "double_charges")
		check(fmt.Sprintf("none (%s): 0 double charges", s), miss,
			func() (string, bool) { return fmt.Sprintf("%.0f", v), v == 0 })
	}
	for _, p := range c.Policies {
		if p == retry.None {
			continue
		}
		if has(HangAfterNonIdempotent, p) {
			var miss []string
			v := need(&miss, HangAfterNonIdempotent, p, "double_charges")
			rr := need(&miss, HangAfterNonIdempotent, p, "retry_requests")
			check(fmt.Sprintf("%s (%s): retries double-charge a non-idempotent institution, > 0 once a retry reached it", p, HangAfterNonIdempotent), miss,
				func() (string, bool) { return fmt.Sprintf("%.0f (retry requests %.0f)", v, rr), v > 0 || rr <= 0 })
		}
		if has(HangAfterIdempotent, p) {
			var miss []string
			v := need(&miss, HangAfterIdempotent, p, "double_charges")
			check(fmt.Sprintf("%s (%s): an idempotent institution absorbs the retries, 0 double charges", p, HangAfterIdempotent), miss,
				func() (string, bool) { return fmt.Sprintf("%.0f", v), v == 0 })
		}
	}
	var unsettled, settleMissing []string
	for _, s := range c.Scenarios {
		for _, p := range c.Policies {
			res := need(&settleMissing, s, p, "resolved")
			un := need(&settleMissing, s, p, "unresolved")
			if un > 0 || res != n {
				unsettled = append(unsettled, fmt.Sprintf("%s %s: %.0f of %.0f", p, s, res, n))
			}
		}
	}
	check(fmt.Sprintf("after reconciliation (within %s) every payment settled (APPROVED, DECLINED, FAILED) or flagged", c.ReconcileTimeout), settleMissing,
		func() (string, bool) {
			if len(unsettled) > 0 {
				return strings.Join(unsettled, "; "), false
			}
			return fmt.Sprintf("all %d of %d in every condition", c.Payments, c.Payments), true
		})
	for _, s := range c.Scenarios {
		if !has(s, retry.None) {
			continue
		}
		var miss []string
		v := need(&miss, s, retry.None, "parity_mismatches")
		check(fmt.Sprintf("none (%s): parity with the institution's ledger, 0 mismatches", s), miss,
			func() (string, bool) { return fmt.Sprintf("%.0f", v), v == 0 })
	}
	return &x
}

// writeUpDifference names the parameters in which c differs from the
// published write-up's (payments, hang, timeout, attempts, base, peaks
// after the first second), or "" when there is none.
func (c Config) writeUpDifference() string {
	w := FullConfig()
	var d []string
	add := func(differs bool, format string, args ...any) {
		if differs {
			d = append(d, fmt.Sprintf(format, args...))
		}
	}
	add(c.Payments != w.Payments, "%d payments (the write-up: %d)", c.Payments, w.Payments)
	add(c.Hang != w.Hang, "a %s hang (%s)", c.Hang, w.Hang)
	add(c.Timeout != w.Timeout, "a %s timeout (%s)", c.Timeout, w.Timeout)
	add(c.Attempts != w.Attempts, "%d attempts (%d)", c.Attempts, w.Attempts)
	add(c.Base != w.Base, "base %s (%s)", c.Base, w.Base)
	add(c.ExcludeFirst != w.ExcludeFirst, "peaks after %s (%s)", c.ExcludeFirst, w.ExcludeFirst)
	return strings.Join(d, ", ")
}

// Profile implements lab.Profiled: "quick" for DefaultConfig, "full" for
// FullConfig, whatever the seed, and "custom" once a flag changed either.
func (e *Experiment) Profile() string {
	c := e.cfg
	c.Seed = 1
	for _, p := range []struct {
		name string
		cfg  Config
	}{{"quick", DefaultConfig()}, {"full", FullConfig()}} {
		if reflect.DeepEqual(c, p.cfg) {
			return p.name
		}
	}
	return "custom"
}

// modelTrials is how many stampedes fullJitterModel draws.
const modelTrials = 2000

// fullJitterModel draws the full-jitter peaks of this configuration's
// schedule alone, from a fixed seed, so the same configuration always
// reports the same model.
func (e *Experiment) fullJitterModel(peak PeakFunc) PeakModel {
	key := reflect.ValueOf(peak).Pointer()
	e.mu.Lock()
	defer e.mu.Unlock()
	if m, ok := e.models[key]; ok {
		return m
	}
	m := e.drawFullJitterModel(peak)
	if e.models == nil {
		e.models = map[uintptr]PeakModel{}
	}
	e.models[key] = m
	return m
}

// drawFullJitterModel draws what fullJitterModel returns.
func (e *Experiment) drawFullJitterModel(peak PeakFunc) PeakModel {
	c := e.cfg
	p, err := retry.New(c.retryConfig(retry.FullJitter), rand.New(rand.NewPCG(1, 2)))
	if err != nil { // the configuration was validated before the run
		return PeakModel{}
	}
	return ModelPeaks(p, c.Payments, modelTrials, c.Timeout, FineWindow, c.ExcludeFirst, peak)
}

// schedule is the time the retry schedule alone takes when every attempt
// times out: the timeouts plus the waits (their mean for full-jitter); 0
// when it is not fixed.
func schedule(policy string, attempts int, timeout, base time.Duration) time.Duration {
	waits := time.Duration(0)
	for n := 1; n < attempts; n++ {
		waits += base << (n - 1)
	}
	switch policy {
	case retry.None:
		return timeout
	case retry.Exponential:
		return time.Duration(attempts)*timeout + waits
	case retry.FullJitter:
		return time.Duration(attempts)*timeout + waits/2
	}
	return 0
}

// publishedComparison puts the write-up's figures beside ours (hang-before).
func (e *Experiment) publishedComparison(r *lab.Result) string {
	c := e.cfg
	var b strings.Builder
	b.WriteString("### Beside the published ParityPay write-up (its 3-run medians; HANG_BEFORE_PROCESSING 8 s, timeout 3 s, 3 attempts, base 500 ms)\n\n")
	b.WriteString("| policy | institution requests (write-up → ours) | amplification | retry requests | peak_100ms (ours: sliding / fixed) | peak_1s (ours: sliding / fixed) | client p50 ms | schedule ms (timeouts + waits) |\n|---|---|---|---|---|---|---|---|\n")
	rows := 0
	for _, f := range publishedTable {
		get := func(m string) float64 { v, _ := median(r, HangBefore, f.policy, m); return v }
		if _, ok := median(r, HangBefore, f.policy, "institution_requests"); !ok {
			continue
		}
		fmt.Fprintf(&b, "| %s | %.0f → %.0f | %.2f× → %.2f× | %.0f → %.0f | %.0f → %.0f / %.0f | %.0f → %.0f / %.0f | %.0f → %.0f | %.0f → %.0f |\n", f.policy,
			f.requests, get("institution_requests"), f.amplification, get("amplification"), f.retries, get("retry_requests"),
			f.peak100, get("peak_100ms"), get("peak_100ms_fixed"), f.peak1s, get("peak_1s"), get("peak_1s_fixed"),
			f.p50MS, get("client_p50_ms"),
			ms(schedule(f.policy, 3, publishedTimeout, 500*time.Millisecond)), ms(schedule(f.policy, c.Attempts, c.Timeout, c.Base)))
		rows++
	}
	if rows == 0 {
		return ""
	}
	fmt.Fprintf(&b, "\nThis run: %d payments, hang %s, timeout %s, %d attempts, base %s, %d repeat(s). ", c.Payments, c.Hang, c.Timeout, c.Attempts, c.Base, c.Repeat)
	b.WriteString("The client p50 is the schedule plus the service's own time; compare that excess, not the p50, when the timeout differs from the write-up's. " +
		"The write-up counted its peaks in fixed 100 ms windows after the first second; its per-run exponential peaks were 141 / 150 / 121, " +
		"which a window boundary cutting the burst explains, hence the sliding windows here.\n\n")
	return b.String()
}
