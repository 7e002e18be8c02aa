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
// with 10 payments that hang past their timeout every token is spent:
// 20 requests for 10 payments, 2.00×. Every run is valid. Without
// --strict the command succeeds and says which expectation failed; with
// --strict it fails with lab.ErrExpectation, which main maps to exit
// status 2.
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
		_, stderr, err := execute(t, args...)
		name := fmt.Sprintf("strict=%v", strict)

		if strict {
			if !errors.Is(err, lab.ErrExpectation) || errors.Is(err, lab.ErrInvalid) || exitCode(err) != 2 {
				t.Fatalf("%s: error %v (exit status %d), want only lab.ErrExpectation, exit status 2\n%s", name, err, exitCode(err), stderr)
			}
			if !strings.Contains(err.Error(), "retry-stampede: 1 of 2") {
				t.Errorf("%s: error %q does not say how many expectations failed", name, err)
			}
		} else if err != nil {
			t.Fatalf("%s: %v; a failed expectation without --strict is no error\n%s", name, err, stderr)
		}
		if !strings.Contains(stderr, "lab retry-stampede: VALID, 1 expectation does not hold") {
			t.Errorf("%s: stderr lacks the verdict with the failed expectation:\n%s", name, stderr)
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
		found := false
		for _, x := range res.Expectations {
			if x.Claim == claim {
				found = true
				if x.Holds || x.Figure != "2.00×" {
					t.Errorf("%s: %q: figure %q, holds %v; want 2.00×, false", name, claim, x.Figure, x.Holds)
				}
			} else if !x.Holds {
				t.Errorf("%s: unexpected failure: %+v", name, x)
			}
		}
		if !res.Valid || !found {
			t.Errorf("%s: valid %v, expectations %+v; want valid with %q", name, res.Valid, res.Expectations, claim)
		}
		report, err := os.ReadFile(filepath.Join(out, "REPORT.md"))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(report), "| retry-stampede | VALID, 1 expectation does not hold | 1 of 1 | 1 of 2 |") {
			t.Errorf("%s: REPORT.md's summary lacks the verdict:\n%s", name, report)
		}
	}
}
