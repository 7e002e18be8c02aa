package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/stampede-lab/stampede/lab"
)

// labOptions are the flags every experiment shares.
type labOptions struct {
	out     string
	json    bool
	full    bool
	repeat  int
	seconds float64
	seed    uint64
	strict  bool
}

// experiment builds one experiment from the common options and the flags
// of the command being run (flags it does not know keep their defaults).
type experiment struct {
	name  string
	build func(cmd *cobra.Command, opts *labOptions) (lab.Experiment, error)
}

// experiments lists every experiment that exists, in the order `stampede lab`
// runs them.
func experiments() []experiment {
	return []experiment{
		{"ordering", buildOrdering},
		{"admission", buildAdmission},
		{"retry-stampede", buildRetryStampede},
	}
}

func newLabCmd() *cobra.Command {
	opts := &labOptions{}
	cmd := &cobra.Command{
		Use:   "lab [all|EXPERIMENT]",
		Short: "Run lab experiments and write a report",
		Long: `Run lab experiments: each puts a component under load and faults and measures
the invariant it promises. Without an experiment name, every experiment runs
in its quick profile (a few minutes in all) on embedded defaults.

Conditions run interleaved (A B C A B C), every run's values are kept, and the
report shows the median of the repeats. Output goes to --out: REPORT.md (tables
and charts), <experiment>.json and PNG charts. Progress goes to stderr.

A run is valid only if the system under test saw traffic and produced at least
one success (the admission lab also needs its observer to have read the room
without error and often enough). An invalid run or a broken invariant makes
the command exit with status 2 (other errors: 1), after the report is written.

Each experiment also checks claims (from the published write-ups and the
design) against its medians; a claim whose figure is missing does not hold.
Each claim states the parameters it holds for; one that the profile's
parameters cannot show (too short a run, a write-up's figure measured with
other parameters) is listed as skipped, with the reason, and counts
neither way.
They are listed under "expectations" in <experiment>.json and at the top of
REPORT.md. A claim that does not hold is reported ("VALID, 2 expectations do
not hold") but does not change the exit status, unless --strict is given:
then it exits with status 2 as well.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runAll(cmd, opts) },
	}
	f := cmd.PersistentFlags()
	f.StringVar(&opts.out, "out", "lab-report", "directory for REPORT.md, <experiment>.json and the charts")
	f.BoolVar(&opts.json, "json", false, "also print the summaries as JSON on stdout")
	f.BoolVar(&opts.full, "full", false, "the published write-ups' parameters (longer runs, 3 repeats) instead of the quick profile")
	f.IntVar(&opts.repeat, "repeat", 0, "repeats per condition (default: 1, or 3 with --full)")
	f.Float64Var(&opts.seconds, "seconds", 0, "seconds of load per run (default: the profile's)")
	f.Uint64Var(&opts.seed, "seed", 1, "seed of the random arrival streams")
	f.BoolVar(&opts.strict, "strict", false, "exit with status 2 when an expectation does not hold (missing figures included), not only on an invalid run or a broken invariant")

	cmd.AddCommand(&cobra.Command{
		Use:   "all",
		Short: "Run every experiment (the same as `stampede lab`)",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return runAll(cmd, opts) },
	})
	cmd.AddCommand(newLabOrderingCmd(opts))
	cmd.AddCommand(newLabAdmissionCmd(opts))
	cmd.AddCommand(newLabRetryStampedeCmd(opts))
	// Not in experiments(): 2,000 payments twice, with a kill and a
	// settle window, beyond lab all's quick profile.
	cmd.AddCommand(newLabRefundsCmd(opts))
	// Not in experiments(): its sweep takes several minutes of child
	// processes, beyond lab all's quick profile.
	cmd.AddCommand(newLabEventsCmd(opts))
	cmd.AddCommand(newLabEventsWorkerCmd())
	// Not in experiments() either: a whole sale of child processes.
	cmd.AddCommand(newLabSaleCmd(opts), newLabSaleRedisCmd(), newLabSaleNATSCmd(), newLabSaleProxyCmd())
	// Nor the soak: minutes to hours of a rolling sale.
	cmd.AddCommand(newLabSoakCmd(opts), newLabSoakLeakCmd())
	return cmd
}

func runAll(cmd *cobra.Command, opts *labOptions) error {
	var exps []lab.Experiment
	for _, e := range experiments() {
		exp, err := e.build(cmd, opts)
		if err != nil {
			return err
		}
		exps = append(exps, exp)
	}
	return runExperiments(cmd, opts, exps...)
}

func runExperiments(cmd *cobra.Command, opts *labOptions, exps ...lab.Experiment) error {
	cfg := lab.DefaultConfig()
	cfg.Out, cfg.JSON, cfg.Strict = opts.out, opts.json, opts.strict
	cfg.Stdout, cfg.Progress = cmd.OutOrStdout(), cmd.ErrOrStderr()
	runner, err := lab.NewRunner(cfg)
	if err != nil {
		return err
	}
	_, err = runner.Run(cmd.Context(), exps...)
	if err == nil {
		cmd.PrintErrf("report written to %s/REPORT.md\n", opts.out)
	}
	return err
}

// explicitFlags applies the flags given explicitly on a command to an
// experiment's configuration; flags left alone keep the profile's value,
// and flags the command does not have (under `stampede lab all`) are
// skipped. The first error is kept, prefixed with the flag's name.
type explicitFlags struct {
	cmd *cobra.Command
	err error
}

// set runs apply when the flag name was given.
func (x *explicitFlags) set(name string, apply func(f *pflag.FlagSet) error) {
	f := x.cmd.Flags()
	if x.err == nil && f.Lookup(name) != nil && f.Changed(name) {
		if err := apply(f); err != nil {
			x.err = fmt.Errorf("--%s: %w", name, err)
		}
	}
}

// common applies --full's profile choice, --seed, --repeat and --seconds.
// seconds is nil for an experiment without a run length.
func (o *labOptions) common(seed *uint64, repeat *int, seconds *time.Duration) error {
	*seed = o.seed
	if o.repeat != 0 {
		*repeat = o.repeat
	}
	if o.seconds != 0 && seconds != nil {
		d := time.Duration(o.seconds * float64(time.Second))
		if d <= 0 {
			return fmt.Errorf("--seconds: must be positive, got %v", o.seconds)
		}
		*seconds = d
	}
	return nil
}
