package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// retryStampedeParams builds the experiment from args (flags of the
// retry-stampede command) and returns its parameters as JSON would show
// them.
func retryStampedeParams(t *testing.T, opts *labOptions, args ...string) (map[string]any, error) {
	t.Helper()
	cmd := newLabRetryStampedeCmd(opts)
	if err := cmd.ParseFlags(args); err != nil {
		return nil, err
	}
	exp, err := buildRetryStampede(cmd, opts)
	if err != nil {
		return nil, err
	}
	data, err := json.Marshal(exp.Params())
	if err != nil {
		t.Fatal(err)
	}
	var p map[string]any
	if err := json.Unmarshal(data, &p); err != nil {
		t.Fatal(err)
	}
	if len(exp.Conditions()) == 0 {
		t.Error("no conditions")
	}
	return p, nil
}

func TestLabRetryStampedeFlags(t *testing.T) {
	p, err := retryStampedeParams(t, &labOptions{seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if p["payments"] != 150.0 || p["hang_ms"] != 4000.0 || p["timeout_ms"] != 1500.0 || p["repeat"] != 1.0 {
		t.Errorf("quick profile params: %v", p)
	}
	p, err = retryStampedeParams(t, &labOptions{seed: 1, full: true})
	if err != nil {
		t.Fatal(err)
	}
	if p["hang_ms"] != 8000.0 || p["timeout_ms"] != 3000.0 || p["repeat"] != 3.0 || len(p["scenarios"].([]any)) != 3 || len(p["policies"].([]any)) != 5 {
		t.Errorf("full profile params: %v", p)
	}
	p, err = retryStampedeParams(t, &labOptions{seed: 7, full: true, repeat: 2}, "--payments", "40", "--hang", "2s", "--timeout", "500ms",
		"--attempts", "4", "--base", "100ms", "--policies", "none,Full_Jitter,budget", "--scenarios", "hang-after-idempotent",
		"--budget-policy", "full-jitter", "--exclude-first", "250ms", "--not-found-window", "200ms", "--reconcile-timeout", "3s")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"payments": 40.0, "hang_ms": 2000.0, "timeout_ms": 500.0, "attempts": 4.0, "base_ms": 100.0,
		"peaks_after_ms": 250.0, "not_found_window_ms": 200.0, "reconcile_timeout_ms": 3000.0, "repeat": 2.0, "seed": 7.0}
	for k, v := range want {
		if p[k] != v {
			t.Errorf("%s = %v, want %v", k, p[k], v)
		}
	}
	if got := p["policies"].([]any); len(got) != 3 || got[1] != "full-jitter" {
		t.Errorf("policies = %v", got)
	}
	if !strings.HasPrefix(p["budget"].(string), "full-jitter") {
		t.Errorf("budget = %v", p["budget"])
	}
}

func TestLabRetryStampedeRejectsBadFlags(t *testing.T) {
	cases := map[string][]string{
		"payments":          {"--payments", "0"},
		"hang":              {"--hang", "0s"},
		"timeout":           {"--timeout", "0s"},
		"attempts":          {"--attempts", "0"},
		"base":              {"--base", "-1s"},
		"budget-policy":     {"--budget-policy", "none"},
		"policies":          {"--policies", "none,linear"},
		"scenarios":         {"--scenarios", "hang-during"},
		"exclude-first":     {"--exclude-first", "2s"},
		"not-found-window":  {"--not-found-window", "0s"},
		"reconcile-timeout": {"--reconcile-timeout", "0s"},
	}
	for flag, args := range cases {
		_, err := retryStampedeParams(t, &labOptions{seed: 1}, args...)
		if err == nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("%v: error %v, want one naming %s", args, err, flag)
		}
	}
	// --seconds means nothing here: refused by this command...
	if _, err := retryStampedeParams(t, &labOptions{seed: 1, seconds: 5}); err == nil || !strings.Contains(err.Error(), "--seconds") {
		t.Errorf("--seconds 5: error %v, want one naming --seconds", err)
	}
	// ...and ignored when `stampede lab --seconds 5` builds every experiment.
	all := &cobra.Command{Use: "lab"}
	if _, err := buildRetryStampede(all, &labOptions{seed: 1, seconds: 5}); err != nil {
		t.Errorf("built from `lab --seconds 5`: %v", err)
	}
}

// TestLabRetryStampedeRuns runs a tiny stampede through the command and
// checks the files it writes.
func TestLabRetryStampedeRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a real stampede for a few seconds")
	}
	out := t.TempDir()
	opts := &labOptions{out: out, seed: 1}
	cmd := newLabRetryStampedeCmd(opts)
	var stdout, stderr bytes.Buffer
	cmd.SetOut(&stdout)
	cmd.SetErr(&stderr)
	cmd.SetArgs([]string{"--payments", "10", "--hang", "300ms", "--timeout", "100ms", "--base", "20ms",
		"--exclude-first", "90ms", "--not-found-window", "100ms", "--policies", "none,exponential", "--scenarios", "hang-before"})
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		t.Fatalf("lab retry-stampede: %v\n%s", err, stderr.String())
	}
	data, err := os.ReadFile(filepath.Join(out, "retry-stampede.json"))
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Valid   bool `json:"valid"`
		Summary []struct {
			Median map[string]any `json:"median"`
		} `json:"summary"`
	}
	if err := json.Unmarshal(data, &res); err != nil {
		t.Fatal(err)
	}
	if !res.Valid || len(res.Summary) != 2 {
		t.Fatalf("valid %v, %d summaries", res.Valid, len(res.Summary))
	}
	for i, want := range []float64{1, 3} {
		m := res.Summary[i].Median
		amp, _ := m["amplification"].(float64)
		// Exactly want× only when every first attempt reached the
		// institution within the 100 ms timeout (the lab's own claims say
		// the same); on a loaded machine a first attempt can time out in
		// the client before it arrives, and never more than want×.
		exact := m["first_attempts_in_time"] == 10.0
		if m["resolved"] != 10.0 || amp > want || (exact && amp != want) {
			t.Errorf("%v: amplification %v (want %v; first attempts in time %v), resolved %v", m["policy"], amp, want, m["first_attempts_in_time"], m["resolved"])
		}
		if !exact {
			t.Logf("%v: %v of 10 first attempts reached the institution in time; amplification %v ≤ %v", m["policy"], m["first_attempts_in_time"], amp, want)
		}
	}
	if !strings.Contains(stderr.String(), "report written") {
		t.Errorf("stderr: %s", stderr.String())
	}
}
