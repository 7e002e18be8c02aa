package refunds

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stampede-lab/stampede/lab"
)

// smallConfig is the stampede at a size and pace for CI: every fault,
// both conditions, a few seconds a run.
func smallConfig() Config {
	c := DefaultConfig()
	c.Payments = 20
	c.Hang, c.Timeout = 800*time.Millisecond, 300*time.Millisecond
	c.KillAt, c.RestartAfter = 900*time.Millisecond, 200*time.Millisecond
	c.StatusDownFor, c.NotFoundWindow = 500*time.Millisecond, 200*time.Millisecond
	c.ReconcileEvery, c.SettleTimeout = 20*time.Millisecond, 20*time.Second
	return c
}

// TestStampedeHoldsAndNaiveIsCaught runs both conditions through the lab
// runner under every fault: the discipline refunds every payment's share
// exactly once by the institution's own ledger, settles everything and
// keeps parity; the naive retry double-refunds and over-refunds, and the
// checker says so (so it can fail).
func TestStampedeHoldsAndNaiveIsCaught(t *testing.T) {
	e, err := New(smallConfig())
	if err != nil {
		t.Fatal(err)
	}
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
	r := results[0]
	get := func(cond string) lab.Metrics {
		for _, run := range r.Runs {
			if run.Condition["retry"] == cond {
				if !run.Valid {
					t.Errorf("%s: invalid run: %s", cond, run.Reason)
				}
				if cond == Stampede && len(run.Broken) > 0 {
					t.Errorf("stampede: broken: %v (%+v)", run.Broken, run.Extra)
				}
				return run.Metrics
			}
		}
		t.Fatalf("no %s run", cond)
		return nil
	}
	s, n := get(Stampede), get(Naive)
	for _, m := range []string{"double_refunds", "over_refunds", "unsettled_refunds", "parity_mismatches", "unrefunded"} {
		if s[m] != 0 {
			t.Errorf("stampede: %s = %v, want 0", m, s[m])
		}
	}
	if s["answers_2xx"] != 20 || s["resent"] != 0 || s["pay_succeeded"] != 20 {
		t.Errorf("stampede: %v 2xx answers, %v re-sent, %v SUCCEEDED; want 20, 0, 20", s["answers_2xx"], s["resent"], s["pay_succeeded"])
	}
	if n["double_refunds"] == 0 || n["over_refunds"] == 0 || n["parity_mismatches"] == 0 {
		t.Errorf("naive: double_refunds %v, over_refunds %v, parity_mismatches %v; want each > 0 (the checker must catch the re-sends)",
			n["double_refunds"], n["over_refunds"], n["parity_mismatches"])
	}
	if n["double_refunds"] > n["resent"] {
		t.Errorf("naive: %v double refunds from %v re-sends", n["double_refunds"], n["resent"])
	}
	if failed := r.Failed(); len(failed) > 0 {
		t.Errorf("expectations that do not hold: %+v", failed)
	}
	report, err := os.ReadFile(filepath.Join(cfg.Out, "REPORT.md"))
	if err != nil || !strings.Contains(string(report), "double_refunds") {
		t.Errorf("REPORT.md: %v, %.200s", err, report)
	}
	if _, err := os.Stat(filepath.Join(cfg.Out, "refunds.json")); err != nil {
		t.Error(err)
	}
}

// TestValidateNamesEveryBadField: every unusable field is named at once,
// by its flag.
func TestValidateNamesEveryBadField(t *testing.T) {
	c := DefaultConfig()
	c.Payments, c.Hang, c.Timeout, c.Repeat = 0, 0, -time.Second, 0
	c.Faults, c.Conditions = []string{"hang", "flood", "hang"}, []string{"gentle"}
	c.SettleTimeout, c.NotFoundWindow, c.StatusDownFor = 0, 0, 0
	err := c.Validate()
	if err == nil {
		t.Fatal("Validate accepted a bad config")
	}
	for _, want := range []string{"payments:", "hang:", "timeout:", "faults: unknown fault \"flood\"", "faults: a fault is listed twice",
		"conditions: unknown condition \"gentle\"", "settle-timeout:", "not-found-window:", "status-down-for:", "repeat:"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v; want it to name %q", err, want)
		}
	}
	c = DefaultConfig()
	c.Hang = c.Timeout
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "hang: must be longer than --timeout") {
		t.Errorf("a hang no longer than the timeout: %v", err)
	}
	c.Faults = nil // without the hang, its length does not matter
	if err := c.Validate(); err != nil {
		t.Errorf("no faults: %v", err)
	}
	if e, _ := New(DefaultConfig()); e.Profile() != "quick" {
		t.Errorf("profile of the defaults: %s", e.Profile())
	}
}
