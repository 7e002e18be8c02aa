package lab

import (
	"fmt"
	"strings"
)

// Median returns the median of metric over the valid runs of the condition
// whose values equal every entry of match (for example
// {"strategy": "keyed", "hot_load": 1.0}). It reports false when no such
// condition has a valid run or the metric is not a number.
func (r *Result) Median(metric string, match map[string]any) (float64, bool) {
	for _, s := range r.Summary {
		if s.ValidRuns == 0 || !matches(s.Condition, match) {
			continue
		}
		v, ok := s.Median[metric].(float64)
		return v, ok
	}
	return 0, false
}

// matches reports whether cond has every value of match.
func matches(cond, match map[string]any) bool {
	for k, v := range match {
		if cond[k] != v {
			return false
		}
	}
	return true
}

// Expectations is a report's table of claims (from an issue or a seed
// write-up) checked against measured figures. The zero value is empty and
// ready to use.
type Expectations struct {
	rows [][3]string
}

// Check adds a claim, what was measured, and whether the claim held.
func (x *Expectations) Check(expect, measured string, held bool) {
	verdict := "holds"
	if !held {
		verdict = "**does not hold**"
	}
	x.rows = append(x.rows, [3]string{expect, measured, verdict})
}

// Report adds a figure that is shown without a claim about it.
func (x *Expectations) Report(what, measured string) {
	x.rows = append(x.rows, [3]string{what, measured, "—"})
}

// Markdown renders the table under a level-3 heading title, or "" when
// nothing was added.
func (x *Expectations) Markdown(title string) string {
	if len(x.rows) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "### %s\n\n| expectation | measured | verdict |\n|---|---|---|\n", title)
	for _, row := range x.rows {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", row[0], row[1], row[2])
	}
	b.WriteString("\n")
	return b.String()
}
