package lab

import "testing"

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
	want := "### Expectations\n\n| expectation | measured | verdict |\n|---|---|---|\n" +
		"| a claim | 1 | holds |\n| another | 2 | **does not hold** |\n| a figure | 3 | — |\n\n"
	if got := x.Markdown("Expectations"); got != want {
		t.Errorf("Markdown =\n%s\nwant\n%s", got, want)
	}
}
