package lab

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// reportSection is everything REPORT.md says about one experiment.
type reportSection struct {
	result       *Result
	keys         []string      // condition keys, the first table columns
	columns      []string      // metric columns, from Experiment.Columns
	markdown     string        // from Experiment.Render
	expectations *Expectations // from Experiment.Expectations; may be nil
}

// writeResultFile writes res as indented JSON to <dir>/<experiment>.json.
func writeResultFile(dir string, res *Result) error {
	data, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return fmt.Errorf("lab: %s: encode result: %w", res.Experiment, err)
	}
	path := filepath.Join(dir, res.Experiment+".json")
	if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("lab: %s: %w", res.Experiment, err)
	}
	return nil
}

// writeReport writes REPORT.md: a title, the generation time, the summary
// of every experiment and one section per experiment.
func writeReport(path string, generated time.Time, sections []reportSection) error {
	var b strings.Builder
	b.WriteString("# Stampede lab report\n\n")
	fmt.Fprintf(&b, "Generated %s UTC.\n\n", generated.UTC().Format(time.DateTime))
	var summary strings.Builder
	writeSummary(&summary, sections)
	b.WriteString(strings.TrimRight(summary.String(), "\n") + "\n")
	for _, s := range sections {
		b.WriteString("\n")
		writeSection(&b, s)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("lab: write report: %w", err)
	}
	return nil
}

// writeSummary writes the summary that opens REPORT.md: one row per
// experiment with its verdict, its valid runs and its expectations held;
// then, per experiment, the expectations that do not hold and (folded) those
// that do.
func writeSummary(b *strings.Builder, sections []reportSection) {
	b.WriteString("## Summary\n\n")
	results := make([]*Result, len(sections))
	for i, s := range sections {
		results[i] = s.result
	}
	b.WriteString(Headline(results) + "\n\n")
	b.WriteString("An experiment is valid when every one of its runs saw traffic and succeeded and no invariant broke; " +
		"an invalid run or a broken invariant makes it invalid. " +
		"An expectation is a claim checked against the medians; one whose figure is missing does not hold. " +
		"`--strict` makes an expectation that does not hold fail the command (exit status 2).\n\n")
	b.WriteString("Each claim states the parameters it holds for; a claim that the profile's parameters cannot show " +
		"(too short a run, a write-up's figure measured with other parameters) is skipped, with the reason, and counts neither way.\n\n")
	b.WriteString("| experiment | profile | verdict | valid runs | expectations held | skipped |\n|---|---|---|---|---|---|\n")
	for _, s := range sections {
		res := s.result
		held := len(res.Expectations) - len(res.Failed())
		profile := res.Profile
		if profile == "" {
			profile = "—"
		}
		fmt.Fprintf(b, "| %s | %s | %s | %d of %d | %d of %d | %d |\n", tableCell(res.Experiment), tableCell(profile), tableCell(res.Verdict()),
			validRuns(res), len(res.Runs), held, len(res.Expectations), len(res.Skipped))
	}
	b.WriteString("\n")
	for _, s := range sections {
		res := s.result
		if len(res.Expectations) == 0 && len(res.Skipped) == 0 {
			continue
		}
		at := ""
		if res.Profile != "" {
			at = fmt.Sprintf(" (checked at the %s profile)", res.Profile)
		}
		if len(res.Expectations) == 0 {
			fmt.Fprintf(b, "**%s**%s: no claim checked.\n\n", res.Experiment, at)
			writeSkipped(b, res)
			continue
		}
		failed := res.Failed()
		fmt.Fprintf(b, "**%s**%s: ", res.Experiment, at)
		if len(failed) == 0 {
			fmt.Fprintf(b, "all %d expectations hold.\n\n", len(res.Expectations))
		} else {
			fmt.Fprintf(b, "%d of %d %s not hold:\n\n", len(failed), len(res.Expectations), plural(len(failed), "does", "do"))
			for _, e := range failed {
				fmt.Fprintf(b, "- %s — measured %s\n", e.Claim, e.Figure)
			}
			b.WriteString("\n")
		}
		if held := len(res.Expectations) - len(failed); held > 0 {
			fmt.Fprintf(b, "<details><summary>%d %s</summary>\n\n", held, plural(held, "holds", "hold"))
			for _, e := range res.Expectations {
				if e.Holds {
					fmt.Fprintf(b, "- %s — measured %s\n", e.Claim, e.Figure)
				}
			}
			b.WriteString("\n</details>\n\n")
		}
		writeSkipped(b, res)
	}
}

// writeSkipped lists the claims res skipped, each with its reason.
func writeSkipped(b *strings.Builder, res *Result) {
	if len(res.Skipped) == 0 {
		return
	}
	at := ""
	if res.Profile != "" {
		at = " at the " + res.Profile + " profile"
	}
	fmt.Fprintf(b, "%d %s not checked%s:\n\n", len(res.Skipped), plural(len(res.Skipped), "claim", "claims"), at)
	for _, sk := range res.Skipped {
		fmt.Fprintf(b, "- %s — skipped: %s\n", sk.Claim, sk.Reason)
	}
	b.WriteString("\n")
}

// Headline is the sentence that opens a report on results, computed from
// the same verdicts as the summary table below it (Result.Valid and
// Result.Failed), so that it can never call a report valid whose table
// holds an invalid experiment. It reads, for example,
//
//	**INVALID**: 1 of 3 experiments invalid: admission-failover (0 of 2 runs valid, 2 problems).
//	**VALID**: all 3 experiments valid (14 runs), every expectation holds.
//	**VALID, 2 expectations do not hold**: all 3 experiments valid (14 runs); ordering: 2 of 5 expectations do not hold.
func Headline(results []*Result) string {
	if len(results) == 0 {
		return "**INVALID**: no experiment ran."
	}
	var invalid, failed []string
	runs, expectations, failedN := 0, 0, 0
	for _, res := range results {
		runs += len(res.Runs)
		expectations += len(res.Expectations)
		if !res.Valid {
			invalid = append(invalid, fmt.Sprintf("%s (%d of %d runs valid, %d %s)", res.Experiment,
				validRuns(res), len(res.Runs), len(res.Problems), plural(len(res.Problems), "problem", "problems")))
		}
		if n := len(res.Failed()); n > 0 {
			failedN += n
			failed = append(failed, fmt.Sprintf("%s: %d of %d %s not hold", res.Experiment, n, len(res.Expectations), plural(n, "does", "do")))
		}
	}
	experiments := fmt.Sprintf("%d %s", len(results), plural(len(results), "experiment", "experiments"))
	var head string
	switch {
	case len(invalid) > 0:
		head = fmt.Sprintf("**INVALID**: %d of %s invalid: %s", len(invalid), experiments, strings.Join(invalid, ", "))
	case len(results) == 1:
		head = fmt.Sprintf("**%s**: the experiment is valid (%d %s)", verdictWord(failedN), runs, plural(runs, "run", "runs"))
	default:
		head = fmt.Sprintf("**%s**: all %s valid (%d runs)", verdictWord(failedN), experiments, runs)
	}
	switch {
	case failedN > 0:
		head += "; " + strings.Join(failed, "; ")
	case len(invalid) == 0 && expectations > 0:
		head += ", every expectation holds"
	}
	return head + "."
}

// verdictWord is the headline's verdict for valid experiments with failed
// expectations that do not hold.
func verdictWord(failed int) string {
	if failed == 0 {
		return "VALID"
	}
	return fmt.Sprintf("VALID, %d %s", failed, plural(failed, "expectation does not hold", "expectations do not hold"))
}

// validRuns counts the valid runs of res.
func validRuns(res *Result) int {
	n := 0
	for _, run := range res.Runs {
		if run.Valid {
			n++
		}
	}
	return n
}

// writeSection writes one experiment's part of REPORT.md.
func writeSection(b *strings.Builder, s reportSection) {
	res := s.result
	fmt.Fprintf(b, "## %s\n\n", res.Experiment)

	valid := validRuns(res)
	failed := len(res.Failed())
	expect := ""
	if failed > 0 {
		expect = fmt.Sprintf(" **%d of %d expectations do not hold** (see the table below).", failed, len(res.Expectations))
	} else if len(res.Expectations) > 0 {
		expect = fmt.Sprintf(" All %d expectations hold.", len(res.Expectations))
	}
	if res.Valid {
		fmt.Fprintf(b, "**VALID**: %d of %d runs valid, no invariant broken.%s\n\n", valid, len(res.Runs), expect)
	} else {
		fmt.Fprintf(b, "**INVALID**: %d of %d runs valid.%s Problems:\n\n", valid, len(res.Runs), expect)
		for _, p := range res.Problems {
			fmt.Fprintf(b, "- %s\n", p)
		}
		b.WriteString("\n")
	}

	b.WriteString("Parameters:\n\n```json\n")
	params, err := json.MarshalIndent(res.Params, "", "  ")
	if err != nil {
		params = []byte(fmt.Sprintf("(could not be encoded: %v)", err))
	}
	b.Write(params)
	b.WriteString("\n```\n\n")

	fmt.Fprintf(b, "Medians over the valid runs; %s.json holds every run.\n\n", res.Experiment)
	b.WriteString(summaryTable(s.keys, s.columns, res.Summary))

	if md := strings.TrimSpace(s.markdown); md != "" {
		b.WriteString("\n")
		b.WriteString(md)
		b.WriteString("\n")
	}
	if md := s.expectations.Markdown("Expectations checked against the medians"); md != "" {
		b.WriteString("\n")
		b.WriteString(md)
	}
}

// summaryTable returns the Markdown table of the summaries: one column per
// condition key, then one per metric column. A metric without a median
// (no valid run) shows as "n/a".
func summaryTable(keys, columns []string, summary []Summary) string {
	header := append(append([]string{}, keys...), columns...)
	var b strings.Builder
	b.WriteString("| " + strings.Join(header, " | ") + " |\n")
	b.WriteString("|" + strings.Repeat(" --- |", len(header)) + "\n")
	for _, s := range summary {
		cells := make([]string, len(header))
		for i, name := range header {
			v, ok := s.Median[name]
			if !ok {
				cells[i] = "n/a"
				continue
			}
			cells[i] = tableCell(formatValue(v))
		}
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
	return b.String()
}

// formatValue formats a table value; numbers go through formatNumber.
func formatValue(v any) string {
	switch x := v.(type) {
	case nil:
		return "n/a"
	case float64:
		return formatNumber(x)
	case float32:
		return formatNumber(float64(x))
	case int:
		return strconv.Itoa(x)
	case int64:
		return strconv.FormatInt(x, 10)
	case string:
		return x
	default:
		return fmt.Sprint(x)
	}
}

// formatNumber formats x compactly: whole numbers without decimals
// ("1200"), others with up to two decimals ("4.25", "0.5"). A non-zero
// number that would round to "0" keeps two significant digits ("0.0042")
// instead, so that a small non-zero value, such as a rare violation rate,
// never reads as zero.
func formatNumber(x float64) string {
	if x == 0 {
		return "0" // also turns -0 into 0
	}
	if x == math.Trunc(x) && math.Abs(x) < 1e15 {
		return strconv.FormatFloat(x, 'f', 0, 64)
	}
	if math.Abs(x) < 0.005 {
		return strconv.FormatFloat(x, 'g', 2, 64)
	}
	s := strconv.FormatFloat(x, 'f', 2, 64)
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}

// tableCell keeps s from breaking the Markdown table.
func tableCell(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	return strings.ReplaceAll(s, "\n", " ")
}

// summaryOutput is one element of the JSON printed when Config.JSON is set.
type summaryOutput struct {
	Experiment   string        `json:"experiment"`
	Summary      []Summary     `json:"summary"`
	Valid        bool          `json:"valid"`
	Expectations []Expectation `json:"expectations"`
	Skipped      []Skipped     `json:"skipped"`
	Profile      string        `json:"profile,omitempty"`
}

// writeSummaries prints the summaries of results to w as one indented JSON
// array.
func writeSummaries(w io.Writer, results []*Result) error {
	out := make([]summaryOutput, 0, len(results))
	for _, res := range results {
		out = append(out, summaryOutput{Experiment: res.Experiment, Summary: res.Summary, Valid: res.Valid, Expectations: res.Expectations,
			Skipped: res.Skipped, Profile: res.Profile})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		return fmt.Errorf("lab: print JSON summaries: %w", err)
	}
	return nil
}
