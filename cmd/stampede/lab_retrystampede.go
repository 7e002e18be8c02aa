package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/stampede-lab/stampede/lab"
	"github.com/stampede-lab/stampede/lab/retrystampede"
)

func newLabRetryStampedeCmd(opts *labOptions) *cobra.Command {
	d := retrystampede.DefaultConfig()
	f := retrystampede.FullConfig()
	cmd := &cobra.Command{
		Use:   "retry-stampede",
		Short: "Payments: retry policies against a hanging institution, double charges, reconciliation",
		Long: fmt.Sprintf(`A stampede of payments, released together by one start signal, goes through
the payment API (real HTTP, SQLite) to an institution simulator (real HTTP)
that hangs, so every approval times out at the same moment and every retry
leaves at the same moment. Each run gets a fresh institution and a fresh
payment service.

Scenarios: hang-before (HANG_BEFORE_PROCESSING, nothing charged),
hang-after-idempotent and hang-after-nonidempotent (HANG_AFTER_PROCESSING:
charged, answer held; without idempotency every retry charges again).
Policies: none, exponential, full-jitter, equal-jitter, decorrelated-jitter,
budget (--budget-policy wrapped in a retry budget shared by the run's
payments).

Each run reports the institution's requests, amplification, peaks per 100 ms
and per 1 s after the first wave (sliding windows; fixed ones in the JSON),
client p50, charges, double charges and UNKNOWN answers; then puts the
institution back to NORMAL (ledger kept), reconciles every UNKNOWN payment by
status inquiry and checks parity with the institution's ledger.

The quick profile halves the published ParityPay write-up's hang and timeout (%s, %s) and runs
%s × %s once (about a minute); --full runs the write-up's %s hang and %s timeout,
every scenario × %s, 3 repeats (about ten minutes). Policy none must never
double-charge nor disagree with the ledger, and every payment must end
settled or flagged for review: otherwise the command exits with status 2.
--seconds does not apply: a run lasts as long as its retry schedule.`,
			d.Hang, d.Timeout, scenarioList(d.Scenarios), strings.Join(d.Policies, ","),
			f.Hang, f.Timeout, strings.Join(f.Policies, ",")),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			exp, err := buildRetryStampede(cmd, opts)
			if err != nil {
				return err
			}
			return runExperiments(cmd, opts, exp)
		},
	}
	fl := cmd.Flags()
	fl.Int("payments", d.Payments, "payments released together by the start signal")
	fl.Duration("hang", d.Hang, "how long the institution holds a request (default with --full: "+f.Hang.String()+")")
	fl.Duration("timeout", d.Timeout, "the payment service's approval timeout per attempt (default with --full: "+f.Timeout.String()+")")
	fl.Int("attempts", d.Attempts, "attempts per payment under a retry policy, the first included")
	fl.Duration("base", d.Base, "the retry schedule's base wait (×2 per retry, 10s cap)")
	fl.String("budget-policy", d.BudgetPolicy, "the policy the budget policy wraps")
	fl.StringSlice("policies", d.Policies, "retry policies to compare (default with --full: "+strings.Join(f.Policies, ",")+")")
	fl.StringSlice("scenarios", scenarioNames(d.Scenarios), "institution scenarios (default with --full: "+scenarioList(f.Scenarios)+")")
	fl.Duration("exclude-first", d.ExcludeFirst, "peaks count only arrivals later than this after the start signal (shorter than --timeout)")
	fl.Duration("not-found-window", d.NotFoundWindow, "the institution's declared not-found window, waited before reconciling")
	fl.Duration("reconcile-timeout", d.ReconcileTimeout, "how long reconciliation may take before unsettled payments break the run")
	return cmd
}

func scenarioNames(s []retrystampede.Scenario) []string {
	out := make([]string, len(s))
	for i, sc := range s {
		out[i] = string(sc)
	}
	return out
}

func scenarioList(s []retrystampede.Scenario) string { return strings.Join(scenarioNames(s), ",") }

// buildRetryStampede makes the retry-stampede experiment from the profile
// (quick or --full) and every flag given explicitly. --seconds has no
// meaning here: given to this command it is an error; given to `stampede
// lab` for every experiment, it is ignored.
func buildRetryStampede(cmd *cobra.Command, opts *labOptions) (lab.Experiment, error) {
	cfg := retrystampede.DefaultConfig()
	if opts.full {
		cfg = retrystampede.FullConfig()
	}
	if err := opts.common(&cfg.Seed, &cfg.Repeat, nil); err != nil {
		return nil, err
	}
	if opts.seconds != 0 && cmd.Name() == "retry-stampede" {
		return nil, fmt.Errorf("--seconds: retry-stampede has no run length (a run lasts as long as its retry schedule); use --payments, --hang, --timeout, --attempts, --base")
	}
	x := &explicitFlags{cmd: cmd}
	x.set("payments", func(f *pflag.FlagSet) (e error) { cfg.Payments, e = f.GetInt("payments"); return })
	x.set("hang", func(f *pflag.FlagSet) (e error) { cfg.Hang, e = f.GetDuration("hang"); return })
	x.set("timeout", func(f *pflag.FlagSet) (e error) { cfg.Timeout, e = f.GetDuration("timeout"); return })
	x.set("attempts", func(f *pflag.FlagSet) (e error) { cfg.Attempts, e = f.GetInt("attempts"); return })
	x.set("base", func(f *pflag.FlagSet) (e error) { cfg.Base, e = f.GetDuration("base"); return })
	x.set("budget-policy", func(f *pflag.FlagSet) (e error) { cfg.BudgetPolicy, e = f.GetString("budget-policy"); return })
	x.set("exclude-first", func(f *pflag.FlagSet) (e error) { cfg.ExcludeFirst, e = f.GetDuration("exclude-first"); return })
	x.set("not-found-window", func(f *pflag.FlagSet) (e error) { cfg.NotFoundWindow, e = f.GetDuration("not-found-window"); return })
	x.set("reconcile-timeout", func(f *pflag.FlagSet) (e error) { cfg.ReconcileTimeout, e = f.GetDuration("reconcile-timeout"); return })
	x.set("policies", func(f *pflag.FlagSet) error {
		names, e := f.GetStringSlice("policies")
		if e != nil {
			return e
		}
		cfg.Policies, e = retrystampede.ParsePolicies(names)
		return e
	})
	x.set("scenarios", func(f *pflag.FlagSet) error {
		names, e := f.GetStringSlice("scenarios")
		if e != nil {
			return e
		}
		cfg.Scenarios, e = retrystampede.ParseScenarios(names)
		return e
	})
	if x.err != nil {
		return nil, x.err
	}
	if p, e := retrystampede.ParsePolicy(cfg.BudgetPolicy); e == nil {
		cfg.BudgetPolicy = p
	}
	return retrystampede.New(cfg)
}
