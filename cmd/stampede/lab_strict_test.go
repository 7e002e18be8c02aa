package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stampede-lab/stampede/lab"
)

func TestExitCode(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{nil, 0},
		{errors.New("--payments: must be positive"), 1},
		{fmt.Errorf("%w: ordering", lab.ErrInvalid), 2},
		{fmt.Errorf("%w (--strict): ordering: 1 of 20", lab.ErrExpectation), 2},
		{errors.Join(errors.New("write REPORT.md"), fmt.Errorf("%w: x", lab.ErrExpectation)), 2},
		{fmt.Errorf("%w: 3 mismatches", errParity), 2},
	} {
		if got := exitCode(tc.err); got != tc.want {
			t.Errorf("exitCode(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}

// TestLabStrictExitsOnAFailedExpectation plants a regression: the keyed
// strategy's conditions run with partition's dispatcher (hidden flag
// --run-as), in short runs at hot load 2. Every run is valid, and keyed's
// victim p99 must stay within keyed's replay of the run plus the noise;
// partition's victims wait behind the hot key, far beyond it. Without
// --strict the command succeeds and says how many expectations failed;
// with --strict it fails with lab.ErrExpectation, which main maps to exit
// status 2.
func TestLabStrictExitsOnAFailedExpectation(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the ordering lab twice, a few seconds each")
	}
	flags := []string{"--seed", "1", "--seconds", "1", "--hot-loads", "2", "--strategies", "shared,keyed", "--run-as", "keyed=partition"}
	const claim = "keyed at hot load 2: victim p99 at most the strategy's replay of the run"

	for _, strict := range []bool{false, true} {
		out := t.TempDir()
		args := append([]string{"lab", "ordering", "--out", out}, flags...)
		if strict {
			args = append(args, "--strict")
		}
		_, stderr, runErr := execute(t, args...)
		name := fmt.Sprintf("strict=%v", strict)

		if strict {
			if !errors.Is(runErr, lab.ErrExpectation) || errors.Is(runErr, lab.ErrInvalid) || exitCode(runErr) != 2 {
				t.Fatalf("%s: error %v (exit status %d), want only lab.ErrExpectation, exit status 2\n%s", name, runErr, exitCode(runErr), stderr)
			}
		} else if runErr != nil {
			t.Fatalf("%s: %v; a failed expectation without --strict is no error\n%s", name, runErr, stderr)
		}

		var res struct {
			Valid        bool              `json:"valid"`
			Expectations []lab.Expectation `json:"expectations"`
			Params       map[string]any    `json:"params"`
		}
		data, err := os.ReadFile(filepath.Join(out, "ordering.json"))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(data, &res); err != nil {
			t.Fatal(err)
		}
		failed, found := 0, false
		for _, x := range res.Expectations {
			if !x.Holds {
				failed++
			}
			if !strings.HasPrefix(x.Claim, claim) {
				continue
			}
			found = true
			if x.Holds {
				t.Errorf("%s: %q holds (%s) with partition planted in keyed's place", name, x.Claim, x.Figure)
			}
		}
		if !res.Valid || !found || res.Params["planted_regression_run_as"] == nil {
			t.Fatalf("%s: valid %v, params %v, expectations %+v; want valid, the plant named, and %q", name, res.Valid, res.Params, res.Expectations, claim)
		}
		verdict := fmt.Sprintf("VALID, %d expectation", failed)
		if !strings.Contains(stderr, "lab ordering: "+verdict) {
			t.Errorf("%s: stderr lacks %q:\n%s", name, verdict, stderr)
		}
		if strict && !strings.Contains(runErr.Error(), fmt.Sprintf("ordering: %d of %d", failed, len(res.Expectations))) {
			t.Errorf("%s: error %q does not say how many expectations failed", name, runErr)
		}
		report, err := os.ReadFile(filepath.Join(out, "REPORT.md"))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(report), "| ordering | custom | "+verdict) || !strings.Contains(string(report), "- "+claim) {
			t.Errorf("%s: REPORT.md's summary lacks the verdict or the failed claim:\n%s", name, report)
		}
	}
}
