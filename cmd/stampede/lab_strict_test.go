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

// TestLabStrictExitsOnAFailedExpectation runs a tiny retry stampede whose
// flags make one expectation impossible: the budget policy claims at most
// 1.20× against the institution, but its budget pays for 10 retries, and
// with 10 payments that hang past their timeout every token is spent: 20
// requests for 10 payments, 2.00× (fewer only if retries never reach the
// institution, and 1.20× would need 8 of the 10 lost). Every run is valid.
// Without --strict the command succeeds and says how many expectations
// failed; with --strict it fails with lab.ErrExpectation, which main maps
// to exit status 2.
func TestLabStrictExitsOnAFailedExpectation(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a real stampede twice, a few seconds each")
	}
	flags := []string{"--seed", "1", "--payments", "10", "--hang", "300ms", "--timeout", "100ms", "--base", "20ms",
		"--exclude-first", "90ms", "--not-found-window", "100ms", "--policies", "budget", "--scenarios", "hang-before"}
	const claim = "budget (hang-before): at most 1.20×"

	for _, strict := range []bool{false, true} {
		out := t.TempDir()
		args := append([]string{"lab", "retry-stampede", "--out", out}, flags...)
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
		}
		data, err := os.ReadFile(filepath.Join(out, "retry-stampede.json"))
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
			if x.Claim != claim {
				continue
			}
			found = true
			var amp float64
			if _, err := fmt.Sscanf(x.Figure, "%f×", &amp); err != nil || x.Holds || amp <= 1.2 {
				t.Errorf("%s: %q: figure %q, holds %v; want more than 1.20×, not holding", name, claim, x.Figure, x.Holds)
			}
		}
		if !res.Valid || !found {
			t.Fatalf("%s: valid %v, expectations %+v; want valid with %q", name, res.Valid, res.Expectations, claim)
		}
		verdict := fmt.Sprintf("VALID, %d expectation", failed)
		if !strings.Contains(stderr, "lab retry-stampede: "+verdict) {
			t.Errorf("%s: stderr lacks %q:\n%s", name, verdict, stderr)
		}
		if strict && !strings.Contains(runErr.Error(), fmt.Sprintf("retry-stampede: %d of %d", failed, len(res.Expectations))) {
			t.Errorf("%s: error %q does not say how many expectations failed", name, runErr)
		}
		report, err := os.ReadFile(filepath.Join(out, "REPORT.md"))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(report), "| retry-stampede | "+verdict) || !strings.Contains(string(report), "- "+claim+" — measured ") {
			t.Errorf("%s: REPORT.md's summary lacks the verdict or the failed claim:\n%s", name, report)
		}
	}
}
