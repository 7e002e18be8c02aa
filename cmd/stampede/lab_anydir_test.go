package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stampede-lab/stampede/lab"
)

// TestLabFromAnotherDirectory runs every lab subcommand with tiny
// parameters from a fresh temporary directory, outside the repository, with
// a relative --out: each must run (or, for those that need more than the
// test can give, fail before the first run saying what it needs) without
// any file of the repository, and write its report where --out says. A
// tiny run may come out invalid on a loaded machine; it must still have run.
func TestLabFromAnotherDirectory(t *testing.T) {
	if testing.Short() {
		t.Skip("runs every experiment briefly")
	}
	clearServiceEnv(t)
	useTestSelf(t)
	useTestWorkers(t)
	exe, err := filepath.Abs(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	os.Args[0] = exe // the children are this test binary, found by its path
	t.Chdir(t.TempDir())

	runs := []struct {
		name string
		args []string
	}{
		{"ordering", []string{"ordering", "--seconds", "0.3", "--rate", "200", "--hot-loads", "1",
			"--normal-cost", "1ms", "--hot-cost", "10ms", "--strategies", "keyed"}},
		{"admission", []string{"admission", "--users", "40", "--capacity", "10", "--modes", "atomic",
			"--immediate", "on", "--ticks", "500ms", "--hold", "100ms", "--seconds", "1", "--observe-min-samples", "1"}},
		{"retry-stampede", []string{"retry-stampede", "--payments", "10", "--hang", "300ms", "--timeout", "100ms",
			"--base", "20ms", "--exclude-first", "90ms", "--not-found-window", "100ms", "--policies", "none", "--scenarios", "hang-before"}},
		{"events", []string{"events", "--seconds", "1", "--rate", "100", "--workers", "1", "--faults", "none", "--hot-loads", "1"}},
		{"sale", []string{"sale", "--quick", "--buyers", "40", "--seats", "10", "--capacity", "5", "--faults", "",
			"--bots", "0", "--surge", "1s", "--tail", "1s", "--timeline", "4s"}},
	}
	for _, r := range runs {
		out := "report-" + r.name
		args := append([]string{"lab"}, append(r.args, "--out", out)...)
		// A tiny run on a loaded machine may be invalid (exit status 2,
		// report written): what this test asks is that it ran from here.
		if _, errOut, err := execute(t, args...); err != nil && !errors.Is(err, lab.ErrInvalid) {
			t.Errorf("lab %s from %s: %v\n%s", r.name, mustGetwd(t), err, errOut)
			continue
		}
		if _, err := os.Stat(filepath.Join(out, "REPORT.md")); err != nil {
			t.Errorf("lab %s: no REPORT.md under the relative --out: %v", r.name, err)
		}
	}

	// lab all builds every experiment from the same flags: here up to
	// their validation.
	if _, _, err := execute(t, "lab", "all", "--seconds", "-1", "--out", "report-all"); err == nil ||
		!strings.Contains(err.Error(), "--seconds: must be positive") {
		t.Errorf("lab all --seconds -1: error %v, want one naming --seconds", err)
	}

	// The failover experiment on a cluster that is not there: it says,
	// before the first run, what it needs, and writes nothing.
	_, _, err = execute(t, "lab", "admission", "--failover", "--redis", "redis-cluster://"+freeAddr(t),
		"--ready-timeout", "500ms", "--out", "report-failover")
	if err == nil || !strings.Contains(err.Error(), "before the first run") ||
		!strings.Contains(err.Error(), "needs a Redis Cluster whose every master has a replica in sync") {
		t.Errorf("lab admission --failover without a cluster: error %v, want one saying what it needs", err)
	}
	if _, err := os.Stat("report-failover"); !os.IsNotExist(err) {
		t.Errorf("the failover experiment wrote its output directory without running: %v", err)
	}
}

func mustGetwd(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return wd
}
