package retrystampede

import (
	"context"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/stampede-lab/stampede/lab"
	"github.com/stampede-lab/stampede/retry"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// net/http closes idle connections asynchronously after
		// CloseIdleConnections and Shutdown.
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	)
}

func TestValidateNamesTheFlag(t *testing.T) {
	cases := []struct {
		mutate func(*Config)
		flag   string
	}{
		{func(c *Config) { c.Payments = 0 }, "payments"},
		{func(c *Config) { c.Payments = MaxPayments + 1 }, "payments"},
		{func(c *Config) { c.Hang = 0 }, "hang"},
		{func(c *Config) { c.Hang = time.Hour }, "hang"},
		{func(c *Config) { c.Timeout = 0 }, "timeout"},
		{func(c *Config) { c.Attempts = 0 }, "attempts"},
		{func(c *Config) { c.Attempts = 11 }, "attempts"},
		{func(c *Config) { c.Base = 0 }, "base"},
		{func(c *Config) { c.BudgetPolicy = retry.None }, "budget-policy"},
		{func(c *Config) { c.BudgetPolicy = Budget }, "budget-policy"},
		{func(c *Config) { c.BudgetPolicy = "linear" }, "budget-policy"},
		{func(c *Config) { c.Scenarios = nil }, "scenarios"},
		{func(c *Config) { c.Scenarios = []Scenario{"hang-forever"} }, "scenarios"},
		{func(c *Config) { c.Policies = nil }, "policies"},
		{func(c *Config) { c.Policies = []string{"linear"} }, "policies"},
		{func(c *Config) { c.Policies = []string{"Full_Jitter"} }, "policies"}, // not canonical: use ParsePolicies
		{func(c *Config) { c.ExcludeFirst = c.Timeout }, "exclude-first"},
		{func(c *Config) { c.ExcludeFirst = -time.Second }, "exclude-first"},
		{func(c *Config) { c.NotFoundWindow = 0 }, "not-found-window"},
		{func(c *Config) { c.ReconcileTimeout = 0 }, "reconcile-timeout"},
		{func(c *Config) { c.Repeat = 0 }, "repeat"},
	}
	for _, tc := range cases {
		c := DefaultConfig()
		tc.mutate(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.flag+":") {
			t.Errorf("Validate() = %v, want an error naming %s", err, tc.flag)
		}
		if _, nerr := New(c); nerr == nil {
			t.Errorf("New accepted a config whose Validate fails (%s)", tc.flag)
		}
	}
	for _, c := range []Config{DefaultConfig(), FullConfig()} {
		if err := c.Validate(); err != nil {
			t.Errorf("Validate() = %v", err)
		}
	}
}

func TestProfiles(t *testing.T) {
	q, f := DefaultConfig(), FullConfig()
	if f.Payments != 150 || f.Hang != 8*time.Second || f.Timeout != 3*time.Second || f.Attempts != 3 ||
		f.Base != 500*time.Millisecond || f.ExcludeFirst != time.Second || f.Repeat != 3 ||
		len(f.Scenarios) != 3 || len(f.Policies) != 5 {
		t.Errorf("FullConfig is not the write-up's: %+v", f)
	}
	// The quick profile halves the hang and the timeout and keeps the rest
	// of the write-up's shape.
	if q.Hang*2 != f.Hang || q.Timeout*2 != f.Timeout || q.Base != f.Base || q.Attempts != f.Attempts ||
		q.ExcludeFirst != f.ExcludeFirst || q.Payments != f.Payments || q.Repeat != 1 {
		t.Errorf("DefaultConfig is not the halved write-up profile: %+v", q)
	}
	e, err := New(f)
	if err != nil {
		t.Fatal(err)
	}
	conds := e.Conditions()
	if len(conds) != 15 || conds[0].Values["scenario"] != string(HangBefore) || conds[0].Values["policy"] != retry.None ||
		conds[1].Values["policy"] != retry.Exponential || conds[5].Values["scenario"] != string(HangAfterIdempotent) {
		t.Errorf("conditions are not scenario major, policy minor: %v", conds)
	}
}

func TestParse(t *testing.T) {
	if p, err := ParsePolicies([]string{"none", " Full_Jitter", "BUDGET", "decorrelated-jitter"}); err != nil ||
		strings.Join(p, ",") != "none,full-jitter,budget,decorrelated-jitter" {
		t.Errorf("ParsePolicies = %v, %v", p, err)
	}
	for _, bad := range [][]string{{"none", "none"}, {"linear"}, {"budget", "Budget"}} {
		if _, err := ParsePolicies(bad); err == nil {
			t.Errorf("ParsePolicies(%q) succeeded", bad)
		}
	}
	if s, err := ParseScenarios([]string{"hang-before", " HANG-AFTER-NONIDEMPOTENT"}); err != nil || len(s) != 2 || s[1] != HangAfterNonIdempotent {
		t.Errorf("ParseScenarios = %v, %v", s, err)
	}
	for _, bad := range [][]string{{"hang-before", "hang-before"}, {"hang-during"}} {
		if _, err := ParseScenarios(bad); err == nil {
			t.Errorf("ParseScenarios(%q) succeeded", bad)
		}
	}
	if b := HangAfterNonIdempotent.Behavior(2 * time.Second); b.Mode != "HANG_AFTER_PROCESSING" || b.Idempotent || b.HangMS != 2000 || b.StatusAPI != "UP" {
		t.Errorf("hang-after-nonidempotent behaviour = %+v", b)
	}
	if b := HangBefore.Behavior(8 * time.Second); b.Mode != "HANG_BEFORE_PROCESSING" || !b.Idempotent || b.HangMS != 8000 {
		t.Errorf("hang-before behaviour = %+v", b)
	}
}

// msOffsets turns milliseconds into offsets from the start signal.
func msOffsets(ms ...float64) []time.Duration {
	out := make([]time.Duration, len(ms))
	for i, m := range ms {
		out[i] = time.Duration(m * float64(time.Millisecond))
	}
	return out
}

func TestPeaks(t *testing.T) {
	const w100, w1s = 100 * time.Millisecond, time.Second
	// A first wave of 5 at the start, a burst of 4 straddling the 3.5 s
	// boundary, 3 spread over a second later on.
	offs := msOffsets(0, 1, 2, 3, 999, // first wave: excluded (≤ 1 s)
		1000,                   // exactly 1 s: excluded too (more than 1 s counts)
		3480, 3490, 3510, 3520, // 2 in [3.4, 3.5), 2 in [3.5, 3.6)
		7050, 7450, 7950, // one per 100 ms window, all in [7, 8)
	)
	if got := FixedPeak(offs, w100, w1s); got != 2 {
		t.Errorf("FixedPeak(100ms) = %d, want 2 (the boundary at 3.5 s splits the burst)", got)
	}
	if got := SlidingPeak(offs, w100, w1s); got != 4 {
		t.Errorf("SlidingPeak(100ms) = %d, want 4", got)
	}
	if got := FixedPeak(offs, w1s, w1s); got != 4 {
		t.Errorf("FixedPeak(1s) = %d, want 4", got)
	}
	if got := FixedPeak(offs, w1s, 0); got != 4 {
		t.Errorf("FixedPeak(1s, after 0) = %d, want 4 (1, 2, 3, 999 ms; 0 is not after 0)", got)
	}
	if got := FixedPeak(offs, w100, -time.Nanosecond); got != 4 {
		t.Errorf("FixedPeak(100ms, nothing excluded) = %d, want 4 (0, 1, 2, 3 ms)", got)
	}
	if got := FixedPeak(offs[:6], w100, w1s); got != 0 {
		t.Errorf("FixedPeak of the first wave alone = %d, want 0 (write-up: none has 0 and 0)", got)
	}
	if got := SlidingPeak(nil, w100, w1s); got != 0 {
		t.Errorf("SlidingPeak(nil) = %d", got)
	}
	// A window is half-open: arrivals exactly w apart are never together.
	if got := SlidingPeak(msOffsets(1100, 1200, 1300), w100, w1s); got != 1 {
		t.Errorf("SlidingPeak of arrivals 100 ms apart = %d, want 1", got)
	}

	h := Histogram(offs, w1s)
	want := []int{5, 1, 0, 4, 0, 0, 0, 3}
	if len(h) != len(want) {
		t.Fatalf("Histogram(1s) = %v, want %v", h, want)
	}
	for i := range want {
		if h[i] != want[i] {
			t.Fatalf("Histogram(1s) = %v, want %v", h, want)
		}
	}
	if h := Histogram(msOffsets(0, 50, 100), w100); len(h) != 2 || h[0] != 2 || h[1] != 1 {
		t.Errorf("Histogram(100ms) = %v, want [2 1]", h)
	}
}

// TestModelPeaks checks the schedule model on the write-up's parameters (150
// payments, timeout 3 s, 3 attempts, base 500 ms, peaks after 1 s).
func TestModelPeaks(t *testing.T) {
	const payments, trials = 150, 500
	c := DefaultConfig()
	newPolicy := func(name string, seed uint64) retry.Policy {
		p, err := retry.New(c.retryConfig(name), rand.New(rand.NewPCG(seed, seed)))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	model := func(name string, seed uint64) PeakModel {
		return ModelPeaks(newPolicy(name, seed), payments, trials, 3*time.Second, FineWindow, time.Second, SlidingPeak)
	}

	// No retries: nothing arrives after the first second.
	if m := model(retry.None, 1); m.P95 != 0 {
		t.Errorf("none: P95 = %d, want 0", m.P95)
	}
	// Exponential has no randomness: each retry wave lands as one burst
	// of every payment.
	if m := model(retry.Exponential, 1); m.P05 != payments || m.P95 != payments {
		t.Errorf("exponential: P05..P95 = %d..%d, want %d", m.P05, m.P95, payments)
	}
	// Full jitter spreads the first retry wave uniformly over 500 ms, so a
	// 100 ms window holds a fifth of it on average (30) and the largest
	// window a few standard deviations (√(150·0.2·0.8) ≈ 4.9) more.
	fj := model(retry.FullJitter, 1)
	if fj.P50 < 30 || fj.P50 > 50 || fj.P05 > fj.P50 || fj.P50 > fj.P95 {
		t.Errorf("full-jitter: P05/P50/P95 = %d/%d/%d, want an ordered spread with the median in [30, 50]", fj.P05, fj.P50, fj.P95)
	}
	if again := model(retry.FullJitter, 1); again.P50 != fj.P50 || again.P05 != fj.P05 || again.P95 != fj.P95 {
		t.Errorf("the same seed drew %d/%d/%d, then %d/%d/%d", fj.P05, fj.P50, fj.P95, again.P05, again.P50, again.P95)
	}
	if got := fj.AtMost(float64(fj.P95)); got < 0.95 {
		t.Errorf("AtMost(P95) = %.3f, want ≥ 0.95", got)
	}
	if got := fj.AtMost(float64(fj.P05) - 1); got > 0.05 {
		t.Errorf("AtMost(P05-1) = %.3f, want ≤ 0.05", got)
	}
	if got := fj.AtMost(payments); got != 1 {
		t.Errorf("AtMost(payments) = %.3f, want 1", got)
	}
	// Fixed windows can only cut a burst, never join two: their peak is
	// never above the sliding one of the same draws.
	fixed := ModelPeaks(newPolicy(retry.FullJitter, 1), payments, trials, 3*time.Second, FineWindow, time.Second, FixedPeak)
	if fixed.P05 > fj.P05 || fixed.P50 > fj.P50 || fixed.P95 > fj.P95 {
		t.Errorf("full-jitter fixed P05/P50/P95 = %d/%d/%d, above the sliding %d/%d/%d", fixed.P05, fixed.P50, fixed.P95, fj.P05, fj.P50, fj.P95)
	}
	if got := (PeakModel{}).AtMost(10); got != 0 {
		t.Errorf("empty model: AtMost = %.3f, want 0", got)
	}
}

// shortConfig is a stampede small and fast enough for a unit test.
// shortTimeout is the short runs' approval timeout.
const shortTimeout = 200 * time.Millisecond

func shortConfig() Config {
	c := DefaultConfig()
	// A 200 ms approval timeout: with 100 ms, a machine loaded by other
	// test binaries could queue the 20 payments' SQLite writes past the
	// timeout, so that no request was sent and the run was INVALID ("the
	// institution saw no approval request", once in CI).
	c.Payments, c.Hang, c.Timeout, c.Base = 20, 300*time.Millisecond, shortTimeout, 20*time.Millisecond
	c.ExcludeFirst = 90 * time.Millisecond
	c.NotFoundWindow, c.ReconcileTimeout = 100*time.Millisecond, 5*time.Second
	c.Scenarios, c.Policies = []Scenario{HangBefore}, []string{retry.None, retry.Exponential}
	return c
}

// runLab runs e through the lab runner into a temporary directory.
func runLab(t *testing.T, e *Experiment) (*lab.Result, string) {
	t.Helper()
	cfg := lab.DefaultConfig()
	cfg.Out, cfg.Progress, cfg.Stdout = t.TempDir(), io.Discard, io.Discard
	runner, err := lab.NewRunner(cfg)
	if err != nil {
		t.Fatal(err)
	}
	results, err := runner.Run(context.Background(), e)
	if err != nil {
		t.Errorf("lab run: %v", err)
	}
	if len(results) != 1 {
		t.Fatalf("%d results", len(results))
	}
	return results[0], cfg.Out
}

func metrics(t *testing.T, r *lab.Result, s Scenario, policy string) lab.Metrics {
	t.Helper()
	for _, run := range r.Runs {
		if run.Condition["scenario"] == string(s) && run.Condition["policy"] == policy {
			if !run.Valid {
				t.Errorf("%s %s: invalid: %s", policy, s, run.Reason)
			}
			if len(run.Broken) > 0 {
				t.Errorf("%s %s: broken: %v", policy, s, run.Broken)
			}
			return run.Metrics
		}
	}
	t.Fatalf("no run of %s %s", policy, s)
	return nil
}

// TestShortStampede runs a real stampede of 20 payments (institution and
// payment API on real listeners) with none and exponential, and checks the
// amplification, the UNKNOWN answers, the reconciliation and the report.
func TestShortStampede(t *testing.T) {
	e, err := New(shortConfig())
	if err != nil {
		t.Fatal(err)
	}
	res, dir := runLab(t, e)
	if !res.Valid {
		t.Fatalf("experiment invalid: %v", res.Problems)
	}

	none := metrics(t, res, HangBefore, retry.None)
	exp := metrics(t, res, HangBefore, retry.Exponential)
	// 20 and 60 requests when every attempt reaches the institution; on a
	// loaded machine an attempt can time out (shortTimeout) before it arrives,
	// so the counts are bounds, and the figures must agree with them.
	for name, m := range map[string]lab.Metrics{"none": none, "exponential": exp} {
		if m["amplification"] != m["institution_requests"]/20 || m["retry_requests"] != m["institution_requests"]-20 {
			t.Errorf("%s: amplification %v, retries %v do not follow from %v requests for 20 payments", name, m["amplification"], m["retry_requests"], m["institution_requests"])
		}
	}
	if none["institution_requests"] > 20 || none["institution_requests"] < 1 {
		t.Errorf("none: %v requests; want at most one per payment (20)", none["institution_requests"])
	}
	if exp["institution_requests"] > 60 || exp["institution_requests"] <= 20 {
		t.Errorf("exponential: %v requests; want retries, at most 3 attempts per payment (60)", exp["institution_requests"])
	}
	for name, m := range map[string]lab.Metrics{"none": none, "exponential": exp} {
		// HANG_BEFORE: every payment that reached the institution times
		// out (202 UNKNOWN; on a loaded machine an attempt can time out
		// before it is sent, and that payment is FAILED at once), nothing
		// is charged, and the reconciler fails every one after the window.
		if m["unknown"] < 1 || m["unknown"] > 20 || m["approvals"] != 0 || m["double_charges"] != 0 || m["resolved"] != 20 ||
			m["final_failed"] != 20 || m["parity_mismatches"] != 0 || m["unresolved"] != 0 {
			t.Errorf("%s: %v", name, m)
		}
		if m["client_p50_ms"] < ms(shortTimeout) {
			t.Errorf("%s: client p50 %v ms, below the %s timeout", name, m["client_p50_ms"], shortTimeout)
		}
	}
	// The exponential retries come in synchronised waves. (Whether none's
	// first wave fits in the excluded 90 ms depends on the machine: the
	// payments' SQLite writes queue, more so under the race detector.)
	if exp["peak_1s"] < 40 || exp["peak_100ms"] < 10 {
		t.Errorf("exponential: peaks %v per 100 ms, %v per 1 s; want both retry waves (40) within 1 s", exp["peak_100ms"], exp["peak_1s"])
	}
	if exp["client_p50_ms"] < 3*ms(shortTimeout)+20+40 {
		t.Errorf("exponential: client p50 %v ms, less than 3 timeouts and two waits", exp["client_p50_ms"])
	}

	for _, name := range []string{"REPORT.md", "retry-stampede.json", "retry-stampede-arrivals-100ms.png", "retry-stampede-arrivals-1s.png"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("%s not written: %v", name, err)
		}
	}
	report, err := os.ReadFile(filepath.Join(dir, "REPORT.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## retry-stampede", "Expectations checked against the medians", "none (hang-before): at most 1 request(s) per payment",
		"Beside the published ParityPay write-up", "After reconciliation"} {
		if !strings.Contains(string(report), want) {
			t.Errorf("REPORT.md lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("REPORT.md:\n%s", report)
	}
}

// TestShortDoubleCharge runs the non-idempotent hang-after scenario: the
// retries charge again and parity reports it; none charges once.
//
// On a loaded machine an attempt can time out (shortTimeout) before it even
// reaches the institution, so the test checks what holds whichever
// attempts arrive: every arrival charges; every charged payment ends
// APPROVED and every other one FAILED; the charges beyond one per payment
// are the double charges; the budget pays for at most its 10 tokens of
// retries. When every attempt arrives, that is exactly 60 charges, 40
// double, 20 mismatches for exponential and 30 requests for the budget.
func TestShortDoubleCharge(t *testing.T) {
	c := shortConfig()
	c.Scenarios = []Scenario{HangAfterNonIdempotent}
	c.Policies = []string{retry.None, retry.Exponential, Budget}
	e, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	res, _ := runLab(t, e)
	if !res.Valid {
		t.Fatalf("experiment invalid: %v", res.Problems)
	}
	for _, p := range c.Policies {
		m := metrics(t, res, HangAfterNonIdempotent, p)
		if m["approvals"] != m["institution_requests"] || m["resolved"] != 20 || m["final_approved"]+m["final_failed"] != 20 ||
			m["double_charges"] != m["approvals"]-m["final_approved"] || m["parity_mismatches"] > m["final_approved"] ||
			(m["parity_mismatches"] > 0) != (m["double_charges"] > 0) {
			t.Errorf("%s: charges and settlement do not add up: %v", p, m)
		}
	}
	none := metrics(t, res, HangAfterNonIdempotent, retry.None)
	exp := metrics(t, res, HangAfterNonIdempotent, retry.Exponential)
	budget := metrics(t, res, HangAfterNonIdempotent, Budget)
	if none["institution_requests"] > 20 || none["double_charges"] != 0 || none["parity_mismatches"] != 0 {
		t.Errorf("none: %v", none)
	}
	if exp["institution_requests"] > 60 || exp["double_charges"] == 0 {
		t.Errorf("exponential: %v; want retries that charge again", exp)
	}
	// The default budget holds 10 tokens: 10 retries for the run.
	if budget["retry_requests"] > 10 || budget["institution_requests"] > 30 || budget["double_charges"] > 10 {
		t.Errorf("budget: %v", budget)
	}
}

// TestQuickProfile runs the default quick profile once and prints the
// report: set STAMPEDE_LAB_QUICK=1 (about a minute), or =full for the
// write-up's profile (about ten minutes, needs -timeout 20m).
// STAMPEDE_LAB_QUICK_OUT=DIR keeps the report files.
func TestQuickProfile(t *testing.T) {
	profile := os.Getenv("STAMPEDE_LAB_QUICK")
	if profile == "" {
		t.Skip("set STAMPEDE_LAB_QUICK=1 to run the quick profile (=full: the write-up's)")
	}
	cfg := DefaultConfig()
	if profile == "full" {
		cfg = FullConfig()
	}
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	res, dir := runLab(t, e)
	report, _ := os.ReadFile(filepath.Join(dir, "REPORT.md"))
	t.Logf("quick profile: %s, valid %v, problems %v\n%s", time.Since(start).Round(time.Second), res.Valid, res.Problems, report)
	if out := os.Getenv("STAMPEDE_LAB_QUICK_OUT"); out != "" {
		_ = os.MkdirAll(out, 0o755)
		entries, _ := os.ReadDir(dir)
		for _, en := range entries {
			data, _ := os.ReadFile(filepath.Join(dir, en.Name()))
			_ = os.WriteFile(filepath.Join(out, en.Name()), data, 0o644)
		}
	}
}
