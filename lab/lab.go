// Package lab runs experiments that put a Stampede component under load and
// faults and measure the invariant it promises.
//
// An Experiment declares its conditions (for example every strategy × hot
// load pair); the Runner executes them interleaved (A B C A B C, never
// A A A B B B) for the requested number of repeats, so that slow drift of a
// shared, noisy machine spreads over every condition instead of biasing one.
// The Runner keeps every run's values, computes the median of each metric per
// condition, decides validity, and writes <experiment>.json, PNG charts and a
// combined REPORT.md into the output directory.
//
// A run is valid only if the system under test saw traffic and produced at
// least one success; a run that reports a broken invariant makes the whole
// experiment fail. Either way the command exits non-zero: a table of zeros is
// never a result.
//
// After the last run, each experiment checks its claims (from a published
// write-up or the design) against the medians: every Expectation is
// kept in the JSON with its figure and whether it holds, and a claim whose
// figure is missing does not hold. An experiment whose expectations fail is
// still VALID, and says so ("VALID, 2 expectations do not hold"); with
// Config.Strict, such a failure makes Runner.Run return ErrExpectation.
package lab

import (
	"context"
	"io"
	"time"
)

// Condition is one point of an experiment's parameter space, such as
// strategy=keyed, hot_load=2.0.
type Condition struct {
	// Label is a short human-readable name used in progress lines,
	// for example "keyed hot_load=2.0".
	Label string
	// Values holds the condition's parameters under their snake_case JSON
	// names, in the order given by Keys.
	Values map[string]any
	// Keys lists the names in Values in table order.
	Keys []string
}

// Metrics are the numbers one run produced, keyed by snake_case JSON name.
type Metrics map[string]float64

// RunResult is what an experiment reports for one run of one condition.
type RunResult struct {
	// Metrics are the run's measured values.
	Metrics Metrics
	// Valid reports whether the system under test saw traffic and produced
	// at least one success. Invalid runs are kept in the JSON but excluded
	// from medians, and they make the experiment invalid.
	Valid bool
	// Reason explains an invalid run.
	Reason string
	// Broken lists invariants this run broke (for example "keyed: 3 order
	// violations"). Any entry makes the experiment fail.
	Broken []string
	// Extra is experiment-specific per-run data kept verbatim in the JSON
	// (for example latency quantiles or the random seed).
	Extra any
}

// Experiment is one lab experiment.
type Experiment interface {
	// Name is the experiment's name as used on the command line and in file
	// names, for example "ordering".
	Name() string
	// Params returns the experiment's parameters for the JSON file; it must
	// marshal with encoding/json.
	Params() any
	// Conditions lists the conditions of one repeat, in run order.
	Conditions() []Condition
	// Repeats is how many times every condition runs.
	Repeats() int
	// Columns lists the metric names shown in the summary table, in order.
	Columns() []string
	// Run executes one run of condition c. repeat counts from 0.
	Run(ctx context.Context, c Condition, repeat int) (RunResult, error)
	// Expectations checks the experiment's claims against r, whose runs
	// and medians are complete (r.Expectations is not set yet). A claim
	// whose condition was configured but whose figure is missing (no valid
	// run, or the metric is absent) must be added with Missing, so that it
	// does not hold; claims about conditions that were not configured are
	// left out. It may return nil when the experiment makes no claim.
	Expectations(r *Result) *Expectations
	// Render writes the experiment's charts (PNG) into dir and returns the
	// Markdown that follows the summary table in REPORT.md: the charts, and
	// what the numbers mean. r.Expectations is set; the Runner writes the
	// expectations table after this Markdown.
	Render(r *Result, dir string) (string, error)
}

// Profiled is implemented by an experiment that can name the parameter set
// it runs, such as "quick" or "full". The Runner records it in the Result,
// and REPORT.md says which claims were checked at which profile.
type Profiled interface {
	// Profile names the experiment's parameter set: "quick", "full" or
	// "custom".
	Profile() string
}

// Preparer is an Experiment that needs something outside the process,
// such as a Redis Cluster with a replica per master on this machine. The
// Runner calls Prepare on every experiment that has it before the first run
// of any: Prepare waits (bounded, writing a progress line to progress now
// and then) for what it needs, and returns an error that says what is
// missing and why it is needed when it does not come. An error stops
// Runner.Run before anything runs or is written.
type Preparer interface {
	Prepare(ctx context.Context, progress io.Writer) error
}

// Run is one executed run as stored in the JSON file.
type Run struct {
	Condition  map[string]any `json:"condition"`
	Repeat     int            `json:"repeat"`
	StartedAt  time.Time      `json:"started_at"`
	DurationMS float64        `json:"duration_ms"`
	Valid      bool           `json:"valid"`
	Reason     string         `json:"reason,omitempty"`
	Broken     []string       `json:"broken,omitempty"`
	Metrics    Metrics        `json:"metrics"`
	Extra      any            `json:"extra,omitempty"`
}

// Summary is the median of every metric of one condition over its valid
// runs. Median carries the condition's values as well, so that each entry
// reads on its own (for example "strategy", "hot_load", "violations").
type Summary struct {
	Condition map[string]any `json:"condition"`
	Median    map[string]any `json:"median"`
	// ValidRuns counts the runs that went into the median.
	ValidRuns int `json:"valid_runs"`
}

// Result is everything one experiment produced; it is written as
// <experiment>.json.
type Result struct {
	Experiment string    `json:"experiment"`
	Params     any       `json:"params"`
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`
	// Valid reports that every run was valid and no invariant broke. It
	// says nothing about Expectations.
	Valid bool `json:"valid"`
	// Problems explains why Valid is false: invalid runs, broken invariants,
	// run errors.
	Problems []string `json:"problems,omitempty"`
	// Expectations are the experiment's claims checked against the medians;
	// never nil, so that the JSON shows [] when there are none.
	Expectations []Expectation `json:"expectations"`
	// Skipped are the claims the experiment did not check because its
	// parameters cannot show them, each with the reason; never nil.
	Skipped []Skipped `json:"skipped"`
	// Profile names the parameter set the experiment ran ("quick",
	// "full", or "custom" when flags changed one), when the experiment
	// says (see Profiled); the claims it checked are those of this profile.
	Profile string    `json:"profile,omitempty"`
	Runs    []Run     `json:"runs"`
	Summary []Summary `json:"summary"`
}
