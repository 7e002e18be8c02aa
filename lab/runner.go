package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"golang.org/x/term"
)

// ErrInvalid is returned (wrapped) by Runner.Run when at least one
// experiment is invalid: a run was invalid, a run broke an invariant, or
// the experiment had no runs at all. The report files are written before
// it is returned, so a command can exit non-zero and still leave the
// evidence behind. Test for it with errors.Is.
var ErrInvalid = errors.New("lab: invalid experiment")

// ErrExpectation is returned (wrapped) by Runner.Run when Config.Strict is
// set and at least one expectation of a valid or invalid experiment does
// not hold, a missing figure included. Like ErrInvalid, it comes after the
// report files are written. Test for it with errors.Is.
var ErrExpectation = errors.New("lab: expectations do not hold")

// Config controls where a Runner writes its output and how it reports
// progress. Start from DefaultConfig and change what you need.
type Config struct {
	// Out is the output directory for <experiment>.json, the charts and
	// REPORT.md. It is created if missing.
	Out string
	// JSON, if true, prints the summaries of all experiments to Stdout as
	// one JSON array after the report is written.
	JSON bool
	// Stdout receives the JSON summaries when JSON is true.
	Stdout io.Writer
	// Progress receives progress output. Use io.Discard for none.
	Progress io.Writer
	// Terminal selects a progress bar (true) or plain progress lines
	// (false, for logs and CI).
	Terminal bool
	// Now returns the current time. Tests replace it with a fake clock.
	Now func() time.Time
	// Strict makes an expectation that does not hold an error: Run
	// returns ErrExpectation. Without it, failed expectations are reported
	// ("VALID, 2 expectations do not hold") but Run succeeds.
	Strict bool
}

// DefaultConfig returns the configuration used by the command line: output
// in "lab-report", progress on standard error (as a bar when standard error
// is a terminal), JSON summaries off, not strict.
func DefaultConfig() Config {
	return Config{
		Out:      "lab-report",
		Stdout:   os.Stdout,
		Progress: os.Stderr,
		Terminal: term.IsTerminal(int(os.Stderr.Fd())),
		Now:      time.Now,
	}
}

// Validate reports every field of c that cannot be used. Each error names
// its field, for example "lab: Out: must not be empty".
func (c Config) Validate() error {
	var errs []error
	if strings.TrimSpace(c.Out) == "" {
		errs = append(errs, errors.New("lab: Out: must not be empty"))
	}
	if c.Stdout == nil {
		errs = append(errs, errors.New("lab: Stdout: must not be nil"))
	}
	if c.Progress == nil {
		errs = append(errs, errors.New("lab: Progress: must not be nil (use io.Discard for no progress)"))
	}
	if c.Now == nil {
		errs = append(errs, errors.New("lab: Now: must not be nil (use time.Now)"))
	}
	return errors.Join(errs...)
}

// Runner runs experiments and writes their results. Create it with
// NewRunner. A Runner keeps no state between calls to Run, but two Run
// calls must not share an output directory at the same time.
type Runner struct {
	cfg Config
}

// NewRunner returns a Runner for cfg, or the error from cfg.Validate.
func NewRunner(cfg Config) (*Runner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Runner{cfg: cfg}, nil
}

// Run executes the experiments one after the other and returns their
// results in the same order.
//
// Within an experiment the conditions run interleaved: for every repeat,
// every condition once, in the order of Conditions (A B C A B C). A run
// whose Experiment.Run returns an error is kept as an invalid run with the
// error as its reason.
//
// After each experiment Run writes <Out>/<name>.json and calls the
// experiment's Render; after the last one it writes <Out>/REPORT.md and,
// if Config.JSON is set, prints the summaries to Config.Stdout.
//
// Before the first run of any experiment, Run calls Prepare on every
// experiment that is a Preparer; an error from one is returned at once,
// before anything runs or is written.
//
// Once an experiment's runs are done, Run asks it for its Expectations and
// keeps them in the Result (and so in the JSON) before writing anything.
//
// If an experiment is invalid, Run still writes everything and then returns
// an error wrapping ErrInvalid; with Config.Strict, an expectation that does
// not hold adds an error wrapping ErrExpectation. Errors writing files are
// returned as well (joined). If ctx is cancelled, Run stops at once and returns the results
// of the experiments that finished and an error wrapping ctx.Err(); the
// unfinished experiment and REPORT.md are not written.
func (r *Runner) Run(ctx context.Context, exps ...Experiment) ([]*Result, error) {
	if err := checkExperiments(exps); err != nil {
		return nil, err
	}
	for _, exp := range exps {
		if p, ok := exp.(Preparer); ok {
			if err := p.Prepare(ctx, r.cfg.Progress); err != nil {
				return nil, fmt.Errorf("lab: %s: before the first run: %w", exp.Name(), err)
			}
		}
	}
	if err := os.MkdirAll(r.cfg.Out, 0o755); err != nil {
		return nil, fmt.Errorf("lab: create output directory: %w", err)
	}
	prog := newProgress(r.cfg.Progress, r.cfg.Terminal)

	var (
		results  []*Result
		sections []reportSection
		errs     []error
	)
	for _, exp := range exps {
		conds := exp.Conditions()
		res, expectations, err := r.runExperiment(ctx, exp, conds, prog)
		if err != nil {
			return results, err
		}
		results = append(results, res)

		if err := writeResultFile(r.cfg.Out, res); err != nil {
			errs = append(errs, err)
		}
		markdown, err := exp.Render(res, r.cfg.Out)
		if err != nil {
			errs = append(errs, fmt.Errorf("lab: %s: render: %w", res.Experiment, err))
			markdown = fmt.Sprintf("_The charts could not be rendered: %v_\n", err)
		}
		sections = append(sections, reportSection{
			result:       res,
			keys:         tableKeys(conds),
			columns:      exp.Columns(),
			markdown:     markdown,
			expectations: expectations,
		})
	}

	reportPath := filepath.Join(r.cfg.Out, "REPORT.md")
	if err := writeReport(reportPath, r.cfg.Now().UTC(), sections); err != nil {
		errs = append(errs, err)
	}
	if r.cfg.JSON {
		if err := writeSummaries(r.cfg.Stdout, results); err != nil {
			errs = append(errs, err)
		}
	}

	var invalid, failed []string
	for _, res := range results {
		if !res.Valid {
			invalid = append(invalid, res.Experiment)
		}
		if n := len(res.Failed()); n > 0 {
			failed = append(failed, fmt.Sprintf("%s: %d of %d", res.Experiment, n, len(res.Expectations)))
		}
	}
	if len(invalid) > 0 {
		errs = append(errs, fmt.Errorf("%w: %s (see %s)", ErrInvalid, strings.Join(invalid, ", "), reportPath))
	}
	if r.cfg.Strict && len(failed) > 0 {
		errs = append(errs, fmt.Errorf("%w (--strict): %s (see %s)", ErrExpectation, strings.Join(failed, "; "), reportPath))
	}
	return results, errors.Join(errs...)
}

// checkExperiments rejects experiment lists that cannot produce sensible
// files: none at all, names that are empty or not a plain file name, and
// duplicate names (whose files would overwrite each other).
func checkExperiments(exps []Experiment) error {
	if len(exps) == 0 {
		return errors.New("lab: no experiments to run")
	}
	seen := make(map[string]bool)
	for i, exp := range exps {
		name := exp.Name()
		if name == "" || name == "." || name == ".." || strings.ContainsAny(name, `/\`) {
			return fmt.Errorf("lab: experiment %d: Name %q: must be a plain file name", i, name)
		}
		if seen[name] {
			return fmt.Errorf("lab: experiment %d: Name %q: used twice", i, name)
		}
		seen[name] = true
	}
	return nil
}

// step says where a run is within its experiment; progress output and
// problem sentences use it.
type step struct {
	experiment string
	n, total   int // 1-based run number and number of runs
	label      string
	repeat     int // 0-based
	repeats    int
}

// String reads like "run 3/12 (keyed hot_load=2.0, repeat 1/2)".
func (s step) String() string {
	return fmt.Sprintf("run %d/%d (%s, repeat %d/%d)", s.n, s.total, s.label, s.repeat+1, s.repeats)
}

// runExperiment runs every repeat of every condition of exp and returns the
// result with its summary, validity, problems and expectations filled in,
// and the expectations table for REPORT.md.
func (r *Runner) runExperiment(ctx context.Context, exp Experiment, conds []Condition, prog progress) (*Result, *Expectations, error) {
	name := exp.Name()
	repeats := max(exp.Repeats(), 0)
	total := len(conds) * repeats

	res := &Result{
		Experiment: name,
		Params:     exp.Params(),
		StartedAt:  r.cfg.Now().UTC(),
		Runs:       make([]Run, 0, total),
	}
	byCondition := make([][]Run, len(conds))

	prog.experimentStarted(name, total)
	n := 0
	for repeat := range repeats {
		for i, c := range conds {
			n++
			s := step{experiment: name, n: n, total: total, label: conditionLabel(c), repeat: repeat, repeats: repeats}
			if err := ctx.Err(); err != nil {
				prog.experimentFinished(nil)
				return nil, nil, fmt.Errorf("lab: %s: stopped before %s: %w", name, s, err)
			}
			prog.runStarted(s)
			run := r.runOnce(ctx, exp, c, repeat)
			if err := ctx.Err(); err != nil {
				// The run was cut short; its numbers mean nothing.
				prog.experimentFinished(nil)
				return nil, nil, fmt.Errorf("lab: %s: stopped during %s: %w", name, s, err)
			}
			prog.runFinished(s, run)

			res.Runs = append(res.Runs, run)
			byCondition[i] = append(byCondition[i], run)
			res.Problems = append(res.Problems, runProblems(s, run)...)
		}
	}
	res.FinishedAt = r.cfg.Now().UTC()

	for i, c := range conds {
		res.Summary = append(res.Summary, summarize(c, byCondition[i]))
	}
	if total == 0 {
		res.Problems = append(res.Problems, fmt.Sprintf(
			"no runs: the experiment has %d conditions and %d repeats", len(conds), repeats))
	}
	res.Valid = len(res.Problems) == 0
	expectations := exp.Expectations(res)
	res.Expectations = expectations.List()
	res.Skipped = expectations.Skipped()
	if p, ok := exp.(Profiled); ok {
		res.Profile = p.Profile()
	}
	prog.experimentFinished(res)
	return res, expectations, nil
}

// runOnce calls exp.Run for one condition and repeat and turns its outcome
// into a Run. Maps and slices are copied so that the experiment cannot
// change the record afterwards.
func (r *Runner) runOnce(ctx context.Context, exp Experiment, c Condition, repeat int) Run {
	start := r.cfg.Now()
	out, err := exp.Run(ctx, c, repeat)
	elapsed := r.cfg.Now().Sub(start)

	run := Run{
		Condition:  copyValues(c.Values),
		Repeat:     repeat,
		StartedAt:  start.UTC(),
		DurationMS: float64(elapsed) / float64(time.Millisecond),
		Valid:      out.Valid,
		Reason:     out.Reason,
		Broken:     slices.Clone(out.Broken),
		Metrics:    make(Metrics, len(out.Metrics)),
		Extra:      out.Extra,
	}
	if err != nil {
		run.Valid = false
		run.Reason = joinReason(run.Reason, "run failed: "+err.Error())
	}
	// encoding/json cannot write NaN or ±Inf, and a median of them means
	// nothing: drop such metrics and mark the run invalid instead.
	for _, name := range sortedKeys(out.Metrics) {
		v := out.Metrics[name]
		if math.IsNaN(v) || math.IsInf(v, 0) {
			run.Valid = false
			run.Reason = joinReason(run.Reason, fmt.Sprintf("metric %q is %v", name, v))
			continue
		}
		run.Metrics[name] = v
	}
	return run
}

// runProblems returns the problem sentences for one run: one if it is
// invalid, and one per broken invariant.
func runProblems(s step, run Run) []string {
	var problems []string
	if !run.Valid {
		reason := run.Reason
		if reason == "" {
			reason = "no reason given"
		}
		problems = append(problems, fmt.Sprintf("%s invalid: %s", s, reason))
	}
	for _, b := range run.Broken {
		problems = append(problems, fmt.Sprintf("%s broke an invariant: %s", s, b))
	}
	return problems
}

// summarize computes the median of every metric over the valid runs of
// one condition. Median holds the condition's values too; a metric with
// the same name as a condition value does not overwrite it.
func summarize(c Condition, runs []Run) Summary {
	values := make(map[string][]float64)
	validRuns := 0
	for _, run := range runs {
		if !run.Valid {
			continue
		}
		validRuns++
		for name, v := range run.Metrics {
			values[name] = append(values[name], v)
		}
	}

	med := make(map[string]any, len(values)+len(c.Values))
	for name, vs := range values {
		med[name] = median(vs)
	}
	maps.Copy(med, c.Values)
	return Summary{
		Condition: copyValues(c.Values),
		Median:    med,
		ValidRuns: validRuns,
	}
}

// median returns the middle value of xs, or the mean of the two middle
// values when len(xs) is even. xs must not be empty; it is not modified.
func median(xs []float64) float64 {
	s := slices.Clone(xs)
	sort.Float64s(s)
	mid := len(s) / 2
	if len(s)%2 == 1 {
		return s[mid]
	}
	return (s[mid-1] + s[mid]) / 2
}

// conditionLabel returns c.Label, or "key=value ..." built from its values
// when the label is empty.
func conditionLabel(c Condition) string {
	if c.Label != "" {
		return c.Label
	}
	parts := make([]string, 0, len(c.Keys))
	for _, k := range c.Keys {
		parts = append(parts, fmt.Sprintf("%s=%v", k, c.Values[k]))
	}
	if len(parts) == 0 {
		return "(unnamed condition)"
	}
	return strings.Join(parts, " ")
}

// tableKeys returns the condition keys for the summary table: the Keys of
// the first condition, followed by keys that only later conditions have.
func tableKeys(conds []Condition) []string {
	var keys []string
	for _, c := range conds {
		for _, k := range c.Keys {
			if !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
	}
	return keys
}

// copyValues returns a shallow copy of m that is never nil, so that the
// JSON shows {} rather than null.
func copyValues(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	maps.Copy(out, m)
	return out
}

// joinReason appends more to reason, separated by "; ".
func joinReason(reason, more string) string {
	if reason == "" {
		return more
	}
	return reason + "; " + more
}

// sortedKeys returns the keys of m in sorted order.
func sortedKeys[V any](m map[string]V) []string {
	keys := slices.Collect(maps.Keys(m))
	slices.Sort(keys)
	return keys
}
