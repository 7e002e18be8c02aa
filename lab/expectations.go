package lab

import (
	"fmt"
	"math"
	"strings"
)

// Median returns the median of metric over the valid runs of the condition
// whose values equal every entry of match (for example
// {"strategy": "keyed", "hot_load": 1.0}). It reports false when no such
// condition has a valid run, or the metric is absent, not a number, NaN or
// infinite: a figure that cannot be read is missing, never zero.
func (r *Result) Median(metric string, match map[string]any) (float64, bool) {
	for _, s := range r.Summary {
		if s.ValidRuns == 0 || !matches(s.Condition, match) {
			continue
		}
		v, ok := s.Median[metric].(float64)
		if !ok || math.IsNaN(v) || math.IsInf(v, 0) {
			return 0, false
		}
		return v, true
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

// Expectation is one claim (from a published write-up or the design)
// checked against what an experiment measured. It is written into the
// experiment's JSON under "expectations".
type Expectation struct {
	// Claim is what was expected, for example "keyed at hot load 2: 0
	// violations".
	Claim string `json:"claim"`
	// Figure is what was measured, or "missing: ..." when a figure the
	// claim needs was not measured.
	Figure string `json:"figure"`
	// Holds reports whether the figure bears the claim out. A claim whose
	// figure is missing does not hold.
	Holds bool `json:"holds"`
}

// Expectations is an experiment's table of claims checked against measured
// figures, plus figures shown without a claim. The zero value is empty and
// ready to use.
type Expectations struct {
	rows []expectationRow
}

// Skipped is a claim an experiment did not check, because the parameters
// it ran with cannot show it (too short a run, a write-up's figure measured
// with other parameters): it is neither held nor failed, and the report
// says why.
type Skipped struct {
	// Claim is the claim that was not checked.
	Claim string `json:"claim"`
	// Reason says why the run's parameters cannot show it, and which
	// parameters (for example `--full`) would.
	Reason string `json:"reason"`
}

// expectationRow is one row of the table; claim is false for a figure
// reported without a claim, skip is set for a claim not checked.
type expectationRow struct {
	Expectation
	claim bool
	skip  string
}

// Check adds a claim, what was measured, and whether the claim held.
func (x *Expectations) Check(claim, figure string, holds bool) {
	x.rows = append(x.rows, expectationRow{Expectation: Expectation{Claim: claim, Figure: figure, Holds: holds}, claim: true})
}

// Missing adds a claim that could not be checked because a figure it needs
// is missing (no valid run of its condition, or the metric is absent or not
// a number). Such a claim does not hold. what names the missing figures,
// for example "victim_p99_ms of keyed at hot load 2".
func (x *Expectations) Missing(claim string, what ...string) {
	figure := "missing"
	if len(what) > 0 {
		figure = "missing: " + strings.Join(what, ", ")
	}
	x.Check(claim, figure, false)
}

// Judge adds claim: as Missing when any figure it needs is missing,
// otherwise with the figure and verdict that judge returns (judge runs
// only when nothing is missing).
func (x *Expectations) Judge(claim string, missing []string, judge func() (figure string, holds bool)) {
	if len(missing) > 0 {
		x.Missing(claim, missing...)
		return
	}
	figure, holds := judge()
	x.Check(claim, figure, holds)
}

// Skip adds a claim that this run's parameters cannot show, and why. It
// neither holds nor fails: it is listed under "skipped" in the JSON and in
// REPORT.md, never counted among the expectations.
func (x *Expectations) Skip(claim, reason string) {
	x.rows = append(x.rows, expectationRow{Expectation: Expectation{Claim: claim}, skip: reason})
}

// Report adds a figure that is shown without a claim about it. It is not
// an expectation: it appears in REPORT.md only.
func (x *Expectations) Report(what, figure string) {
	x.rows = append(x.rows, expectationRow{Expectation: Expectation{Claim: what, Figure: figure}})
}

// List returns the claims, in the order they were added, without the
// figures added by Report. It never returns nil.
func (x *Expectations) List() []Expectation {
	out := []Expectation{}
	if x == nil {
		return out
	}
	for _, row := range x.rows {
		if row.claim {
			out = append(out, row.Expectation)
		}
	}
	return out
}

// Skipped returns the claims added with Skip, in order. It never returns
// nil.
func (x *Expectations) Skipped() []Skipped {
	out := []Skipped{}
	if x == nil {
		return out
	}
	for _, row := range x.rows {
		if row.skip != "" {
			out = append(out, Skipped{Claim: row.Claim, Reason: row.skip})
		}
	}
	return out
}

// Markdown renders the table under a level-3 heading title, or "" when
// nothing was added.
func (x *Expectations) Markdown(title string) string {
	if x == nil || len(x.rows) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "### %s\n\n| expectation | measured | verdict |\n|---|---|---|\n", title)
	for _, row := range x.rows {
		verdict, figure := "—", row.Figure
		switch {
		case row.skip != "":
			verdict, figure = "skipped", "not checked: "+row.skip
		case row.claim && row.Holds:
			verdict = "holds"
		case row.claim:
			verdict = "**does not hold**"
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", tableCell(row.Claim), tableCell(figure), verdict)
	}
	b.WriteString("\n")
	return b.String()
}

// Failed returns the expectations of r that do not hold, in order.
func (r *Result) Failed() []Expectation {
	var out []Expectation
	for _, e := range r.Expectations {
		if !e.Holds {
			out = append(out, e)
		}
	}
	return out
}

// Verdict is the one-line verdict on r: "VALID", "VALID, 2 expectations do
// not hold", or "INVALID (3 problems)" (with the failed expectations
// counted as well, when there are any).
func (r *Result) Verdict() string {
	failed := len(r.Failed())
	var v string
	if r.Valid {
		v = "VALID"
	} else {
		v = fmt.Sprintf("INVALID (%d %s)", len(r.Problems), plural(len(r.Problems), "problem", "problems"))
	}
	if failed > 0 {
		v += fmt.Sprintf(", %d %s", failed, plural(failed, "expectation does not hold", "expectations do not hold"))
	}
	return v
}

// plural returns one when n is 1 and many otherwise.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
