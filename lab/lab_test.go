package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fakeExperiment is a deterministic Experiment. It records the order of
// its Run calls and answers with result, or with valid runs that have
// metric "x" = repeat when result is nil.
type fakeExperiment struct {
	name    string
	conds   []Condition
	repeats int
	columns []string
	result  func(ctx context.Context, c Condition, repeat int) (RunResult, error)
	// expect, when set, answers Expectations.
	expect func(r *Result) *Expectations

	calls   []string // "label/repeat", in call order
	renders int
}

func (f *fakeExperiment) Name() string            { return f.name }
func (f *fakeExperiment) Params() any             { return map[string]any{"seed": 42, "repeats": f.repeats} }
func (f *fakeExperiment) Conditions() []Condition { return f.conds }
func (f *fakeExperiment) Repeats() int            { return f.repeats }
func (f *fakeExperiment) Columns() []string       { return f.columns }

func (f *fakeExperiment) Run(ctx context.Context, c Condition, repeat int) (RunResult, error) {
	f.calls = append(f.calls, fmt.Sprintf("%s/%d", c.Label, repeat))
	if f.result != nil {
		return f.result(ctx, c, repeat)
	}
	return RunResult{Metrics: Metrics{"x": float64(repeat)}, Valid: true}, nil
}

func (f *fakeExperiment) Expectations(r *Result) *Expectations {
	if f.expect == nil {
		return nil
	}
	return f.expect(r)
}

func (f *fakeExperiment) Render(r *Result, dir string) (string, error) {
	f.renders++
	chart := LineChart{
		Title:  r.Experiment,
		Series: []Series{{Name: "x", X: []float64{1, 2, 3}, Y: []float64{1, 4, 9}}},
	}
	if err := chart.Save(filepath.Join(dir, r.Experiment+"-x.png")); err != nil {
		return "", err
	}
	return fmt.Sprintf("![x](%s-x.png)\n\nFAKE-RENDER-MARKER\n", r.Experiment), nil
}

// conditions returns one condition per label, with a single value
// "name" = label.
func conditions(labels ...string) []Condition {
	var conds []Condition
	for _, l := range labels {
		conds = append(conds, Condition{Label: l, Values: map[string]any{"name": l}, Keys: []string{"name"}})
	}
	return conds
}

// fakeClock returns a Now function that starts at a fixed time in a
// non-UTC zone and advances one second per call, so every run takes
// exactly one second.
func fakeClock() func() time.Time {
	t := time.Date(2025, 3, 1, 12, 0, 0, 0, time.FixedZone("CET", 3600))
	return func() time.Time {
		t = t.Add(time.Second)
		return t
	}
}

// testConfig returns a Config that writes into a fresh temporary directory
// and keeps progress and stdout in buffers.
func testConfig(t *testing.T) (Config, *bytes.Buffer, *bytes.Buffer) {
	t.Helper()
	var stdout, progress bytes.Buffer
	cfg := Config{
		Out:      filepath.Join(t.TempDir(), "report"), // does not exist yet
		Stdout:   &stdout,
		Progress: &progress,
		Now:      fakeClock(),
	}
	return cfg, &stdout, &progress
}

func run(t *testing.T, cfg Config, exps ...Experiment) ([]*Result, error) {
	t.Helper()
	r, err := NewRunner(cfg)
	if err != nil {
		t.Fatalf("NewRunner: %v", err)
	}
	return r.Run(context.Background(), exps...)
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestRunInterleavesConditions(t *testing.T) {
	cfg, _, _ := testConfig(t)
	exp := &fakeExperiment{name: "order", conds: conditions("A", "B", "C"), repeats: 2, columns: []string{"x"}}

	results, err := run(t, cfg, exp)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}

	want := []string{"A/0", "B/0", "C/0", "A/1", "B/1", "C/1"}
	if !slices.Equal(exp.calls, want) {
		t.Errorf("call order = %v, want %v", exp.calls, want)
	}
	runs := results[0].Runs
	if len(runs) != len(want) {
		t.Fatalf("got %d runs, want %d", len(runs), len(want))
	}
	for i, r := range runs {
		got := fmt.Sprintf("%s/%d", r.Condition["name"], r.Repeat)
		if got != want[i] {
			t.Errorf("run %d = %s, want %s", i, got, want[i])
		}
		if r.StartedAt.Location() != time.UTC {
			t.Errorf("run %d StartedAt %v is not UTC", i, r.StartedAt)
		}
		if r.DurationMS != 1000 {
			t.Errorf("run %d DurationMS = %v, want 1000 (fake clock)", i, r.DurationMS)
		}
	}
	if results[0].StartedAt.Location() != time.UTC || results[0].FinishedAt.Location() != time.UTC {
		t.Errorf("result times not UTC: %v, %v", results[0].StartedAt, results[0].FinishedAt)
	}
	if exp.renders != 1 {
		t.Errorf("Render called %d times, want 1", exp.renders)
	}
}

func TestRunCopiesConditionValues(t *testing.T) {
	cfg, _, _ := testConfig(t)
	exp := &fakeExperiment{name: "copy", conds: conditions("A"), repeats: 1}

	results, err := run(t, cfg, exp)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	exp.conds[0].Values["name"] = "changed"
	if got := results[0].Runs[0].Condition["name"]; got != "A" {
		t.Errorf("run condition changed with the experiment's map: %v", got)
	}
	if got := results[0].Summary[0].Condition["name"]; got != "A" {
		t.Errorf("summary condition changed with the experiment's map: %v", got)
	}
}

func TestRunMedians(t *testing.T) {
	// Per condition, the value of metric "m" for repeats 0, 1, 2, 3.
	// A value < 0 marks an invalid run.
	values := map[string][]float64{
		"odd":     {3, 1, 2},      // median 2
		"even":    {10, 1, 3, 2},  // median (2+3)/2 = 2.5
		"invalid": {1, -1, 4, -1}, // valid 1, 4 → 2.5; the invalid runs are excluded
	}
	exp := &fakeExperiment{
		name:    "median",
		conds:   conditions("odd", "even", "invalid"),
		repeats: 4,
		columns: []string{"m"},
		result: func(_ context.Context, c Condition, repeat int) (RunResult, error) {
			vs := values[c.Label]
			if repeat >= len(vs) {
				// "odd" has only three values: leave the fourth run out
				// of the median by making it invalid, too.
				return RunResult{Metrics: Metrics{"m": 1000}, Valid: false, Reason: "not needed"}, nil
			}
			v := vs[repeat]
			if v < 0 {
				return RunResult{Metrics: Metrics{"m": 1000}, Valid: false, Reason: "no successes"}, nil
			}
			return RunResult{Metrics: Metrics{"m": v}, Valid: true}, nil
		},
	}
	cfg, _, _ := testConfig(t)
	results, err := run(t, cfg, exp)
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("Run error = %v, want ErrInvalid (some runs are invalid)", err)
	}

	want := []struct {
		label     string
		median    float64
		validRuns int
	}{
		{"odd", 2, 3},
		{"even", 2.5, 4},
		{"invalid", 2.5, 2},
	}
	summary := results[0].Summary
	if len(summary) != len(want) {
		t.Fatalf("got %d summaries, want %d", len(summary), len(want))
	}
	for i, w := range want {
		s := summary[i]
		if s.Condition["name"] != w.label {
			t.Errorf("summary %d is for %v, want %s (condition order)", i, s.Condition["name"], w.label)
		}
		if s.Median["m"] != w.median {
			t.Errorf("%s: median m = %v, want %v", w.label, s.Median["m"], w.median)
		}
		if s.Median["name"] != w.label {
			t.Errorf("%s: Median lacks the condition value: %v", w.label, s.Median)
		}
		if s.ValidRuns != w.validRuns {
			t.Errorf("%s: ValidRuns = %d, want %d", w.label, s.ValidRuns, w.validRuns)
		}
	}
}

func TestMedian(t *testing.T) {
	tests := []struct {
		in   []float64
		want float64
	}{
		{[]float64{5}, 5},
		{[]float64{3, 1, 2}, 2},
		{[]float64{4, 1}, 2.5},
		{[]float64{10, 1, 3, 2}, 2.5},
	}
	for _, tt := range tests {
		in := slices.Clone(tt.in)
		if got := median(in); got != tt.want {
			t.Errorf("median(%v) = %v, want %v", tt.in, got, tt.want)
		}
		if !slices.Equal(in, tt.in) {
			t.Errorf("median modified its input: %v", in)
		}
	}
}

func TestRunInvalidAndBroken(t *testing.T) {
	exp := &fakeExperiment{
		name:    "bad",
		conds:   conditions("A", "B"),
		repeats: 2,
		columns: []string{"x"},
		result: func(_ context.Context, c Condition, repeat int) (RunResult, error) {
			switch {
			case c.Label == "A" && repeat == 1:
				return RunResult{Metrics: Metrics{"x": 0}, Valid: false, Reason: "no successes"}, nil
			case c.Label == "B" && repeat == 0:
				return RunResult{Metrics: Metrics{"x": 1}, Valid: true, Broken: []string{"3 order violations"}}, nil
			}
			return RunResult{Metrics: Metrics{"x": 1}, Valid: true}, nil
		},
	}
	cfg, _, _ := testConfig(t)
	results, err := run(t, cfg, exp)
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("Run error = %v, want ErrInvalid", err)
	}

	res := results[0]
	if res.Valid {
		t.Error("Result.Valid = true, want false")
	}
	wantProblems := []string{
		"run 2/4 (B, repeat 1/2) broke an invariant: 3 order violations",
		"run 3/4 (A, repeat 2/2) invalid: no successes",
	}
	if !slices.Equal(res.Problems, wantProblems) {
		t.Errorf("Problems = %q\nwant %q", res.Problems, wantProblems)
	}

	// The files are written even though the experiment is invalid.
	for _, name := range []string{"bad.json", "bad-x.png", "REPORT.md"} {
		if _, err := os.Stat(filepath.Join(cfg.Out, name)); err != nil {
			t.Errorf("%s not written: %v", name, err)
		}
	}
	report := readFile(t, filepath.Join(cfg.Out, "REPORT.md"))
	for _, want := range append([]string{"**INVALID**"}, wantProblems...) {
		if !strings.Contains(report, want) {
			t.Errorf("REPORT.md lacks %q:\n%s", want, report)
		}
	}
}

func TestRunErrorMakesRunInvalid(t *testing.T) {
	exp := &fakeExperiment{
		name:    "fails",
		conds:   conditions("A"),
		repeats: 1,
		result: func(context.Context, Condition, int) (RunResult, error) {
			return RunResult{}, errors.New("port already in use")
		},
	}
	cfg, _, _ := testConfig(t)
	results, err := run(t, cfg, exp)
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("Run error = %v, want ErrInvalid", err)
	}
	r := results[0].Runs[0]
	if r.Valid || !strings.Contains(r.Reason, "port already in use") {
		t.Errorf("run = valid %v, reason %q; want invalid with the error as reason", r.Valid, r.Reason)
	}
	if r.Metrics == nil {
		t.Error("Metrics is nil; want an empty map so the JSON shows {}")
	}
}

func TestRunNonFiniteMetricMakesRunInvalid(t *testing.T) {
	exp := &fakeExperiment{
		name:    "nan",
		conds:   conditions("A"),
		repeats: 1,
		result: func(context.Context, Condition, int) (RunResult, error) {
			return RunResult{Metrics: Metrics{"ratio": math.NaN(), "ok": 1}, Valid: true}, nil
		},
	}
	cfg, _, _ := testConfig(t)
	results, err := run(t, cfg, exp)
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("Run error = %v, want ErrInvalid", err)
	}
	if strings.Contains(err.Error(), "encode") {
		t.Errorf("JSON encoding failed: %v", err)
	}
	r := results[0].Runs[0]
	if r.Valid || !strings.Contains(r.Reason, `"ratio"`) {
		t.Errorf("run = valid %v, reason %q; want invalid naming the metric", r.Valid, r.Reason)
	}
	if _, ok := r.Metrics["ratio"]; ok {
		t.Error("NaN metric kept; it cannot be written as JSON")
	}
	if _, err := os.Stat(filepath.Join(cfg.Out, "nan.json")); err != nil {
		t.Errorf("nan.json not written: %v", err)
	}
}

func TestRunWithoutRunsIsInvalid(t *testing.T) {
	exp := &fakeExperiment{name: "empty", conds: conditions("A"), repeats: 0}
	cfg, _, _ := testConfig(t)
	results, err := run(t, cfg, exp)
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("Run error = %v, want ErrInvalid", err)
	}
	if results[0].Valid || len(results[0].Problems) == 0 {
		t.Errorf("Valid = %v, Problems = %q; want invalid with a problem", results[0].Valid, results[0].Problems)
	}
}

func TestRunStopsWhenCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first := &fakeExperiment{name: "first", conds: conditions("A"), repeats: 1}
	second := &fakeExperiment{
		name:    "second",
		conds:   conditions("A", "B", "C"),
		repeats: 2,
		result: func(ctx context.Context, c Condition, repeat int) (RunResult, error) {
			if c.Label == "B" {
				cancel()
				return RunResult{}, ctx.Err()
			}
			return RunResult{Metrics: Metrics{"x": 1}, Valid: true}, nil
		},
	}
	cfg, _, _ := testConfig(t)
	r, err := NewRunner(cfg)
	if err != nil {
		t.Fatal(err)
	}

	results, err := r.Run(ctx, first, second)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run error = %v, want context.Canceled", err)
	}
	if len(results) != 1 || results[0].Experiment != "first" {
		t.Errorf("results = %v, want only the finished experiment", results)
	}
	if want := []string{"A/0", "B/0"}; !slices.Equal(second.calls, want) {
		t.Errorf("calls = %v, want %v (stop at once)", second.calls, want)
	}
	if _, err := os.Stat(filepath.Join(cfg.Out, "second.json")); !os.IsNotExist(err) {
		t.Errorf("second.json written for a stopped experiment (stat error %v)", err)
	}
}

func TestRunRejectsBadExperimentLists(t *testing.T) {
	tests := []struct {
		name string
		exps []Experiment
		want string
	}{
		{"none", nil, "no experiments"},
		{"empty name", []Experiment{&fakeExperiment{}}, "Name"},
		{"path in name", []Experiment{&fakeExperiment{name: "../x"}}, "Name"},
		{"duplicate", []Experiment{&fakeExperiment{name: "a"}, &fakeExperiment{name: "a"}}, "used twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, _, _ := testConfig(t)
			_, err := run(t, cfg, tt.exps...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Run error = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// tableExperiment has two condition keys, two metric columns and numbers
// that exercise the table formatting.
func tableExperiment() *fakeExperiment {
	conds := []Condition{
		{Label: "keyed hot_load=2.0", Values: map[string]any{"strategy": "keyed", "hot_load": 2.0}, Keys: []string{"strategy", "hot_load"}},
		{Label: "random hot_load=0.5", Values: map[string]any{"strategy": "random", "hot_load": 0.5}, Keys: []string{"strategy", "hot_load"}},
	}
	return &fakeExperiment{
		name:    "table",
		conds:   conds,
		repeats: 1,
		columns: []string{"p99_ms", "violations"},
		result: func(_ context.Context, c Condition, _ int) (RunResult, error) {
			if c.Values["strategy"] == "keyed" {
				return RunResult{Metrics: Metrics{"p99_ms": 4.25, "violations": 0}, Valid: true}, nil
			}
			return RunResult{Metrics: Metrics{"p99_ms": 12345.678, "violations": 3}, Valid: true}, nil
		},
	}
}

func TestResultJSONFile(t *testing.T) {
	cfg, _, _ := testConfig(t)
	if _, err := run(t, cfg, tableExperiment()); err != nil {
		t.Fatalf("Run: %v", err)
	}

	var got map[string]any
	if err := json.Unmarshal([]byte(readFile(t, filepath.Join(cfg.Out, "table.json"))), &got); err != nil {
		t.Fatalf("table.json: %v", err)
	}
	for _, field := range []string{"experiment", "params", "started_at", "finished_at", "runs", "summary", "valid"} {
		if _, ok := got[field]; !ok {
			t.Errorf("table.json lacks %q", field)
		}
	}
	if got["experiment"] != "table" || got["valid"] != true {
		t.Errorf("experiment = %v, valid = %v", got["experiment"], got["valid"])
	}
	if !strings.HasSuffix(got["started_at"].(string), "Z") {
		t.Errorf("started_at %v is not UTC", got["started_at"])
	}
	if got["params"].(map[string]any)["seed"] != 42.0 {
		t.Errorf("params = %v", got["params"])
	}
	if n := len(got["runs"].([]any)); n != 2 {
		t.Errorf("%d runs in JSON, want 2", n)
	}
	median := got["summary"].([]any)[0].(map[string]any)["median"].(map[string]any)
	want := map[string]any{"strategy": "keyed", "hot_load": 2.0, "p99_ms": 4.25, "violations": 0.0}
	for k, v := range want {
		if median[k] != v {
			t.Errorf("summary[0].median[%q] = %v, want %v", k, median[k], v)
		}
	}
}

func TestReport(t *testing.T) {
	cfg, _, _ := testConfig(t)
	if _, err := run(t, cfg, tableExperiment(), &fakeExperiment{name: "second", conds: conditions("A"), repeats: 1}); err != nil {
		t.Fatalf("Run: %v", err)
	}

	report := readFile(t, filepath.Join(cfg.Out, "REPORT.md"))
	for _, want := range []string{
		"# Stampede lab report",
		"Generated 2025-",
		" UTC.",
		"## table",
		"**VALID**: 2 of 2 runs valid",
		"```json\n{\n  \"repeats\": 1,\n  \"seed\": 42\n}\n```",
		"| strategy | hot_load | p99_ms | violations |\n| --- | --- | --- | --- |\n",
		"| keyed | 2 | 4.25 | 0 |",
		"| random | 0.5 | 12345.68 | 3 |",
		"![x](table-x.png)",
		"FAKE-RENDER-MARKER",
		"## second",
	} {
		if !strings.Contains(report, want) {
			t.Errorf("REPORT.md lacks %q:\n%s", want, report)
		}
	}
	if strings.Index(report, "## table") > strings.Index(report, "## second") {
		t.Error("experiments are not in run order")
	}
}

func TestJSONSummariesOnStdout(t *testing.T) {
	cfg, stdout, _ := testConfig(t)
	cfg.JSON = true
	if _, err := run(t, cfg, tableExperiment()); err != nil {
		t.Fatalf("Run: %v", err)
	}

	var got []map[string]any
	if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
		t.Fatalf("stdout is not a JSON array: %v\n%s", err, stdout)
	}
	if len(got) != 1 {
		t.Fatalf("got %d entries, want 1", len(got))
	}
	for _, field := range []string{"experiment", "summary", "valid"} {
		if _, ok := got[0][field]; !ok {
			t.Errorf("entry lacks %q: %v", field, got[0])
		}
	}
}

func TestNoStdoutWithoutJSON(t *testing.T) {
	cfg, stdout, _ := testConfig(t)
	if _, err := run(t, cfg, tableExperiment()); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if stdout.Len() != 0 {
		t.Errorf("stdout = %q, want nothing", stdout)
	}
}

func TestProgressLines(t *testing.T) {
	cfg, _, progress := testConfig(t)
	exp := &fakeExperiment{name: "ordering", conds: conditions("A", "B", "C"), repeats: 2}
	if _, err := run(t, cfg, exp); err != nil {
		t.Fatalf("Run: %v", err)
	}
	out := progress.String()
	for _, want := range []string{
		"lab ordering: run 3/6 C repeat 1/2 ...\n",
		"lab ordering: run 3/6 C repeat 1/2 done in 1.0s (valid)\n",
		"lab ordering: VALID\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("progress lacks %q:\n%s", want, out)
		}
	}
}

func TestProgressBar(t *testing.T) {
	cfg, _, progress := testConfig(t)
	cfg.Terminal = true
	exp := &fakeExperiment{name: "ordering", conds: conditions("A", "B"), repeats: 2}
	if _, err := run(t, cfg, exp); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if !strings.Contains(progress.String(), "4/4") {
		t.Errorf("progress bar output lacks the final count 4/4:\n%q", progress)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Errorf("DefaultConfig().Validate() = %v", err)
	}
	tests := []struct {
		field  string
		change func(*Config)
	}{
		{"Out", func(c *Config) { c.Out = "" }},
		{"Stdout", func(c *Config) { c.Stdout = nil }},
		{"Progress", func(c *Config) { c.Progress = nil }},
		{"Now", func(c *Config) { c.Now = nil }},
	}
	for _, tt := range tests {
		cfg := DefaultConfig()
		tt.change(&cfg)
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), "lab: "+tt.field+":") {
			t.Errorf("%s: Validate() = %v, want an error naming the field", tt.field, err)
		}
		if _, err := NewRunner(cfg); err == nil {
			t.Errorf("%s: NewRunner accepted an invalid config", tt.field)
		}
	}
}

func TestFormatNumber(t *testing.T) {
	tests := []struct {
		in   float64
		want string
	}{
		{0, "0"},
		{math.Copysign(0, -1), "0"},
		{3, "3"},
		{1234567, "1234567"},
		{-12, "-12"},
		{4.25, "4.25"},
		{0.5, "0.5"},
		{2.999, "3"},
		{12345.678, "12345.68"},
		{0.0042, "0.0042"},
	}
	for _, tt := range tests {
		if got := formatNumber(tt.in); got != tt.want {
			t.Errorf("formatNumber(%v) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// Progress output must not be required: io.Discard is a valid choice.
func TestDiscardProgress(t *testing.T) {
	cfg, _, _ := testConfig(t)
	cfg.Progress = io.Discard
	if _, err := run(t, cfg, &fakeExperiment{name: "quiet", conds: conditions("A"), repeats: 1}); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// claimsExperiment is tableExperiment with three claims on its medians: one
// that holds, one that does not, and one whose metric no run measured.
func claimsExperiment() *fakeExperiment {
	exp := tableExperiment()
	exp.expect = func(r *Result) *Expectations {
		var x Expectations
		match := map[string]any{"strategy": "keyed"}
		if v, ok := r.Median("violations", match); ok {
			x.Check("keyed: 0 violations", fmt.Sprint(v), v == 0)
		}
		if v, ok := r.Median("p99_ms", match); ok {
			x.Check("keyed: p99 under 1 ms", fmt.Sprint(v), v < 1)
		}
		if _, ok := r.Median("stolen", match); !ok {
			x.Missing("keyed: steals nothing", "stolen of keyed")
		}
		x.Report("a figure without a claim", "42")
		x.Skip("keyed: diverges in 20 s runs", "these runs last 4 s")
		return &x
	}
	return exp
}

func TestExpectationsInTheJSONFile(t *testing.T) {
	cfg, _, progress := testConfig(t)
	results, err := run(t, cfg, claimsExperiment())
	if err != nil {
		t.Fatalf("Run without Strict: %v; failed expectations must not be an error", err)
	}
	if !results[0].Valid {
		t.Fatalf("the runs are valid, Problems = %v", results[0].Problems)
	}

	var got struct {
		Valid        bool          `json:"valid"`
		Expectations []Expectation `json:"expectations"`
		Skipped      []Skipped     `json:"skipped"`
	}
	if err := json.Unmarshal([]byte(readFile(t, filepath.Join(cfg.Out, "table.json"))), &got); err != nil {
		t.Fatalf("table.json: %v", err)
	}
	want := []Expectation{
		{Claim: "keyed: 0 violations", Figure: "0", Holds: true},
		{Claim: "keyed: p99 under 1 ms", Figure: "4.25", Holds: false},
		{Claim: "keyed: steals nothing", Figure: "missing: stolen of keyed", Holds: false},
	}
	if !got.Valid || !slices.Equal(got.Expectations, want) {
		t.Errorf("table.json: valid %v, expectations\n%+v\nwant\n%+v", got.Valid, got.Expectations, want)
	}
	if wantSkip := []Skipped{{Claim: "keyed: diverges in 20 s runs", Reason: "these runs last 4 s"}}; !slices.Equal(got.Skipped, wantSkip) {
		t.Errorf("table.json: skipped %+v, want %+v (a skipped claim is no expectation)", got.Skipped, wantSkip)
	}
	if !strings.Contains(progress.String(), "lab table: VALID, 2 expectations do not hold\n") {
		t.Errorf("progress does not give the failed expectations with the verdict:\n%s", progress)
	}

	report := readFile(t, filepath.Join(cfg.Out, "REPORT.md"))
	summary := report[:strings.Index(report, "## table")]
	for _, want := range []string{
		"## Summary",
		"| table | — | VALID, 2 expectations do not hold | 2 of 2 | 1 of 3 | 1 |",
		"**table**: 2 of 3 do not hold:",
		"- keyed: p99 under 1 ms — measured 4.25",
		"- keyed: steals nothing — measured missing: stolen of keyed",
		"<details><summary>1 holds</summary>",
		"- keyed: 0 violations — measured 0",
		"1 claim not checked:",
		"- keyed: diverges in 20 s runs — skipped: these runs last 4 s",
	} {
		if !strings.Contains(summary, want) {
			t.Errorf("the summary of REPORT.md lacks %q:\n%s", want, summary)
		}
	}
	for _, want := range []string{
		"**VALID**: 2 of 2 runs valid, no invariant broken. **2 of 3 expectations do not hold**",
		"| keyed: p99 under 1 ms | 4.25 | **does not hold** |",
		"| keyed: steals nothing | missing: stolen of keyed | **does not hold** |",
		"| a figure without a claim | 42 | — |",
		"| keyed: diverges in 20 s runs | not checked: these runs last 4 s | skipped |",
	} {
		if !strings.Contains(report, want) {
			t.Errorf("REPORT.md lacks %q:\n%s", want, report)
		}
	}
	if strings.Contains(report, "**VALID**: 2 of 2 runs valid, no invariant broken.\n") {
		t.Error("REPORT.md says VALID without the failed expectations")
	}
}

func TestStrictFailsOnExpectations(t *testing.T) {
	cfg, _, _ := testConfig(t)
	cfg.Strict = true
	results, err := run(t, cfg, claimsExperiment(), &fakeExperiment{name: "fine", conds: conditions("A"), repeats: 1})
	if !errors.Is(err, ErrExpectation) {
		t.Fatalf("Run error = %v, want ErrExpectation", err)
	}
	if errors.Is(err, ErrInvalid) {
		t.Errorf("Run error = %v; the runs are valid, want no ErrInvalid", err)
	}
	if !strings.Contains(err.Error(), "table: 2 of 3") || strings.Contains(err.Error(), "fine") {
		t.Errorf("error %q should name the experiment whose expectations failed, and only it", err)
	}
	if len(results) != 2 || !results[0].Valid {
		t.Fatalf("results = %+v", results)
	}
	// The evidence is written before the error.
	for _, name := range []string{"table.json", "fine.json", "REPORT.md"} {
		if _, err := os.Stat(filepath.Join(cfg.Out, name)); err != nil {
			t.Errorf("%s not written: %v", name, err)
		}
	}

	// Strict with every expectation holding is no error.
	cfg, _, _ = testConfig(t)
	cfg.Strict = true
	held := tableExperiment()
	held.expect = func(*Result) *Expectations {
		var x Expectations
		x.Check("always", "1", true)
		return &x
	}
	if _, err := run(t, cfg, held); err != nil {
		t.Errorf("Strict with every expectation holding: %v", err)
	}
}

func TestNoExpectationsIsAnEmptyList(t *testing.T) {
	cfg, stdout, _ := testConfig(t)
	cfg.JSON = true
	if _, err := run(t, cfg, tableExperiment()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(readFile(t, filepath.Join(cfg.Out, "table.json")), `"expectations": []`) {
		t.Error(`table.json lacks "expectations": []`)
	}
	if !strings.Contains(stdout.String(), `"expectations": []`) {
		t.Errorf("the JSON summaries lack the expectations:\n%s", stdout)
	}
}

// TestReportHeadlineOverInvalidRuns feeds invalid runs, alone (as one
// experiment's command does) and next to a valid experiment (as `lab all`
// does), and checks that the report's headline says INVALID and names
// the invalid experiment, and that no prose line of the summary calls the
// report VALID.
func TestReportHeadlineOverInvalidRuns(t *testing.T) {
	invalid := func() *fakeExperiment {
		return &fakeExperiment{
			name: "admission-failover", conds: conditions("ack_replicas=1", "ack_replicas=0"), repeats: 1,
			result: func(context.Context, Condition, int) (RunResult, error) {
				return RunResult{}, errors.New("failover: restart 7013: exit status 127")
			},
		}
	}
	valid := func() *fakeExperiment {
		return &fakeExperiment{name: "ordering", conds: conditions("A"), repeats: 2}
	}
	for _, tt := range []struct {
		name string
		exps []Experiment
		want string
	}{
		{"one experiment", []Experiment{invalid()},
			"**INVALID**: 1 of 1 experiment invalid: admission-failover (0 of 2 runs valid, 2 problems)."},
		{"lab all", []Experiment{valid(), invalid()},
			"**INVALID**: 1 of 2 experiments invalid: admission-failover (0 of 2 runs valid, 2 problems)."},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg, _, _ := testConfig(t)
			if _, err := run(t, cfg, tt.exps...); !errors.Is(err, ErrInvalid) {
				t.Fatalf("Run error = %v, want ErrInvalid", err)
			}
			report := readFile(t, filepath.Join(cfg.Out, "REPORT.md"))
			_, summary, ok := strings.Cut(report, "## Summary\n\n")
			if !ok {
				t.Fatalf("REPORT.md has no summary:\n%s", report)
			}
			summary, _, _ = strings.Cut(summary, "\n## ")
			if first, _, _ := strings.Cut(summary, "\n"); first != tt.want {
				t.Errorf("headline = %q\nwant      %q", first, tt.want)
			}
			for line := range strings.Lines(summary) {
				if strings.HasPrefix(line, "|") {
					continue // the table: one verdict per experiment
				}
				if i := strings.Index(line, "VALID"); i >= 0 && (i < 2 || line[i-2:i] != "IN") {
					t.Errorf("a summary line calls an invalid report VALID: %q\n%s", line, report)
				}
			}
			if !strings.Contains(summary, "| admission-failover | — | INVALID (2 problems) | 0 of 2 |") {
				t.Errorf("the table lacks the invalid row:\n%s", summary)
			}
		})
	}
}

// TestReportHeadlineWhenValid checks the other verdicts of the headline:
// valid with every expectation holding, and valid with expectations that
// do not hold.
func TestReportHeadlineWhenValid(t *testing.T) {
	res := func(name string, holds ...bool) *Result {
		r := &Result{Experiment: name, Valid: true, Runs: []Run{{Valid: true}, {Valid: true}}}
		for i, h := range holds {
			r.Expectations = append(r.Expectations, Expectation{Claim: fmt.Sprint(i), Holds: h})
		}
		return r
	}
	for _, tt := range []struct {
		results []*Result
		want    string
	}{
		{[]*Result{res("a", true)}, "**VALID**: the experiment is valid (2 runs), every expectation holds."},
		{[]*Result{res("a"), res("b")}, "**VALID**: all 2 experiments valid (4 runs)."},
		{[]*Result{res("a", true, false, false), res("b", true)},
			"**VALID, 2 expectations do not hold**: all 2 experiments valid (4 runs); a: 2 of 3 do not hold."},
		{nil, "**INVALID**: no experiment ran."},
	} {
		if got := Headline(tt.results); got != tt.want {
			t.Errorf("Headline = %q\nwant       %q", got, tt.want)
		}
	}
}

// preparingExperiment is a fakeExperiment that is a Preparer.
type preparingExperiment struct {
	*fakeExperiment
	err      error
	prepared int
}

func (p *preparingExperiment) Prepare(_ context.Context, progress io.Writer) error {
	p.prepared++
	fmt.Fprintln(progress, "waiting for the cluster")
	return p.err
}

// TestPrepareBeforeTheFirstRun checks that every Preparer is asked before
// any experiment runs, and that a failed Prepare stops the Runner with its
// reason before anything runs or is written.
func TestPrepareBeforeTheFirstRun(t *testing.T) {
	first := &fakeExperiment{name: "first", conds: conditions("A"), repeats: 1}
	second := &preparingExperiment{fakeExperiment: &fakeExperiment{name: "second", conds: conditions("A"), repeats: 1},
		err: errors.New("the slot has no replica")}
	cfg, _, progress := testConfig(t)
	_, err := run(t, cfg, first, second)
	if err == nil || !strings.Contains(err.Error(), "lab: second: before the first run: the slot has no replica") {
		t.Fatalf("Run error = %v, want the Prepare error", err)
	}
	if len(first.calls) != 0 || len(second.calls) != 0 {
		t.Errorf("runs happened after a failed Prepare: %v %v", first.calls, second.calls)
	}
	if _, err := os.Stat(cfg.Out); !os.IsNotExist(err) {
		t.Errorf("the output directory was created after a failed Prepare: %v", err)
	}
	if !strings.Contains(progress.String(), "waiting for the cluster") {
		t.Errorf("Prepare's progress line is missing: %q", progress.String())
	}

	second.err = nil
	cfg, _, _ = testConfig(t)
	if _, err := run(t, cfg, first, second); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if second.prepared != 2 || len(second.calls) != 1 {
		t.Errorf("prepared %d times, ran %v; want Prepare once per Run, then the run", second.prepared, second.calls)
	}
}
