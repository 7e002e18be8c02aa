package lab

import (
	"math"
	"slices"
	"testing"
)

func TestResultMedian(t *testing.T) {
	r := &Result{Summary: []Summary{
		{Condition: map[string]any{"mode": "a", "tick_ms": 200.0}, Median: map[string]any{"x": 1.5, "s": "text"}, ValidRuns: 0},
		{Condition: map[string]any{"mode": "a", "tick_ms": 200.0}, Median: map[string]any{"x": 2.5, "s": "text"}, ValidRuns: 2},
		{Condition: map[string]any{"mode": "b", "tick_ms": 200.0}, Median: map[string]any{"x": 7.0}, ValidRuns: 1},
	}}
	for _, tc := range []struct {
		metric string
		match  map[string]any
		want   float64
		ok     bool
	}{
		{"x", map[string]any{"mode": "a", "tick_ms": 200.0}, 2.5, true}, // the condition without valid runs is skipped
		{"x", map[string]any{"mode": "b"}, 7.0, true},
		{"x", map[string]any{"mode": "a", "tick_ms": 2000.0}, 0, false},
		{"x", map[string]any{"mode": "c"}, 0, false},
		{"s", map[string]any{"mode": "a"}, 0, false}, // not a number
		{"missing", map[string]any{"mode": "b"}, 0, false},
	} {
		got, ok := r.Median(tc.metric, tc.match)
		if got != tc.want || ok != tc.ok {
			t.Errorf("Median(%q, %v) = %v, %v; want %v, %v", tc.metric, tc.match, got, ok, tc.want, tc.ok)
		}
	}
}

func TestExpectationsMarkdown(t *testing.T) {
	var x Expectations
	if got := x.Markdown("Expectations"); got != "" {
		t.Errorf("empty table = %q, want \"\"", got)
	}
	x.Check("a claim", "1", true)
	x.Check("another", "2", false)
	x.Report("a figure", "3")
	x.Missing("a | pipe", "m")
	want := "### Expectations\n\n| expectation | measured | verdict |\n|---|---|---|\n" +
		"| a claim | 1 | holds |\n| another | 2 | **does not hold** |\n| a figure | 3 | — |\n" +
		"| a \\| pipe | missing: m | **does not hold** |\n\n"
	if got := x.Markdown("Expectations"); got != want {
		t.Errorf("Markdown =\n%s\nwant\n%s", got, want)
	}
}

func TestResultMedianMissingWhenNotFinite(t *testing.T) {
	r := &Result{Summary: []Summary{{Condition: map[string]any{"mode": "a"}, ValidRuns: 1,
		Median: map[string]any{"nan": math.NaN(), "inf": math.Inf(1), "ok": 1.0}}}}
	for _, metric := range []string{"nan", "inf", "absent"} {
		if v, ok := r.Median(metric, nil); ok {
			t.Errorf("Median(%q) = %v, true; want missing", metric, v)
		}
	}
	if v, ok := r.Median("ok", nil); !ok || v != 1 {
		t.Errorf("Median(ok) = %v, %v", v, ok)
	}
}

func TestExpectationsMissingDoesNotHold(t *testing.T) {
	var x Expectations
	x.Check("held", "1", true)
	x.Missing("needs a figure", "victim_p99_ms of keyed at hot load 2", "violations of keyed at hot load 2")
	x.Missing("needs nothing named")
	x.Report("shown only", "7")
	want := []Expectation{
		{Claim: "held", Figure: "1", Holds: true},
		{Claim: "needs a figure", Figure: "missing: victim_p99_ms of keyed at hot load 2, violations of keyed at hot load 2", Holds: false},
		{Claim: "needs nothing named", Figure: "missing", Holds: false},
	}
	if got := x.List(); !slices.Equal(got, want) {
		t.Errorf("List() =\n%+v\nwant\n%+v", got, want)
	}
	var none *Expectations
	if got := none.List(); got == nil || len(got) != 0 {
		t.Errorf("nil List() = %#v, want an empty, non-nil slice", got)
	}
	if none.Markdown("x") != "" {
		t.Error("nil Markdown is not empty")
	}
}

func TestVerdict(t *testing.T) {
	for _, tc := range []struct {
		res  Result
		want string
	}{
		{Result{Valid: true}, "VALID"},
		{Result{Valid: true, Expectations: []Expectation{{Holds: true}, {Holds: false}}}, "VALID, 1 expectation does not hold"},
		{Result{Valid: true, Expectations: []Expectation{{Holds: false}, {Holds: false}}}, "VALID, 2 expectations do not hold"},
		{Result{Valid: false, Problems: []string{"a"}}, "INVALID (1 problem)"},
		{Result{Valid: false, Problems: []string{"a", "b"}, Expectations: []Expectation{{}}}, "INVALID (2 problems), 1 expectation does not hold"},
	} {
		if got := tc.res.Verdict(); got != tc.want {
			t.Errorf("Verdict() = %q, want %q", got, tc.want)
		}
	}
}
