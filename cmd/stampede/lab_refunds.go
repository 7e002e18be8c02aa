package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/stampede-lab/stampede/lab"
	"github.com/stampede-lab/stampede/lab/refunds"
)

func newLabRefundsCmd(opts *labOptions) *cobra.Command {
	d := refunds.DefaultConfig()
	cmd := &cobra.Command{
		Use:   "refunds",
		Short: "Payments: an event cancelled, every payment refunded at once under faults; double refunds, over-refunds, parity",
		Long: fmt.Sprintf(`An event is cancelled: every one of its payments (each a basket of two
events, amount = 2 × share) has its share refunded at once through the
payment API (real HTTP, SQLite, reconciler running), released by one start
signal, while the institution simulator (real HTTP) hangs after processing
each refund, its status API goes down, and pay is killed and started again
on the same port and database. Each run gets a fresh institution and a
fresh payment service.

Conditions (--conditions):
  naive     a refund whose answer was lost is sent again at once under a
            new key (a lab-only wrapper of the connector); it must
            double-refund, which shows the checker can fail
  stampede  pay's discipline: one key per refund, a lost answer UNKNOWN
            until a status inquiry settles it, never sent again

Faults (--faults, default all; "" for none):
  hang         HANG_AFTER_PROCESSING: each refund is processed and its answer
               held for --hang, from the start signal until every merchant
               has its answer and at least --hang after pay's restart
  status-down  the status API answers 503 from the start signal until
               --status-down-for after the hang ends
  pay-kill     pay killed --kill-at after the start signal (listener,
               database handle, institution connections and reconciler
               closed at once) and started again --restart-after later

The checker counts from the institution's own ledger, not pay's:
double_refunds (money movements beyond one per payment), over_refunds
(payments refunded beyond their share), unrefunded; unsettled_refunds are
pay's refunds still PENDING or UNKNOWN after --settle-timeout;
parity_mismatches compare pay's SUCCEEDED refunds with the ledger per
payment, plus the payments' own parity; refund_p99_ms is the merchant's
wait from the first send to a 201/202 answer (its retries, same key, across
the kill included). Medians over --repeat runs go to --out (REPORT.md,
refunds.json).

The stampede condition must show 0 double refunds, 0 over-refunds, 0
unsettled, 0 unrefunded and clean parity: otherwise the command exits with
status 2. "naive: double_refunds > 0" is an expectation (with --strict, a
miss exits 2 as well). Default: %d payments, hang %s, timeout %s, about a
minute for both conditions. --seconds and --full do not apply.`, d.Payments, d.Hang, d.Timeout),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			exp, err := buildRefunds(cmd, opts)
			if err != nil {
				return err
			}
			return runExperiments(cmd, opts, exp)
		},
	}
	fl := cmd.Flags()
	fl.Int("payments", d.Payments, fmt.Sprintf("payments of the cancelled event, all refunded at once (1 to %d)", refunds.MaxPayments))
	fl.Duration("hang", d.Hang, "how long the institution holds each refund's answer (longer than --timeout)")
	fl.Duration("timeout", d.Timeout, "pay's timeout of one refund call")
	fl.StringSlice("faults", d.Faults, "faults to inject: "+strings.Join(refunds.Faults(), ",")+` ("" for none)`)
	fl.StringSlice("conditions", d.Conditions, "conditions to run: "+strings.Join(refunds.Conditions(), ","))
	fl.Duration("kill-at", d.KillAt, "when pay is killed, after the start signal (pay-kill)")
	fl.Duration("restart-after", d.RestartAfter, "how long pay stays down (pay-kill)")
	fl.Duration("status-down-for", d.StatusDownFor, "how long the status API stays down after the hang ends (status-down)")
	fl.Duration("not-found-window", d.NotFoundWindow, "the institution's declared not-found window")
	fl.Duration("reconcile-every", d.ReconcileEvery, "pay's reconciler pace and the base of its inquiry backoff (×2 per inconclusive inquiry, up to ×64)")
	fl.Duration("settle-timeout", d.SettleTimeout, "how long after the faults pay's refunds may take to settle")
	return cmd
}

// buildRefunds makes the refunds experiment from its defaults and every
// flag given explicitly. --full (there is no other profile) and --seconds
// (a run lasts as long as its faults) are errors.
func buildRefunds(cmd *cobra.Command, opts *labOptions) (lab.Experiment, error) {
	cfg := refunds.DefaultConfig()
	if err := opts.common(&cfg.Seed, &cfg.Repeat, nil); err != nil {
		return nil, err
	}
	if opts.full && cmd.Name() == "refunds" {
		return nil, fmt.Errorf("--full: the refunds lab has one profile (%d payments); set --payments, --hang, --timeout, --repeat instead", cfg.Payments)
	}
	if opts.seconds != 0 && cmd.Name() == "refunds" {
		return nil, fmt.Errorf("--seconds: the refunds lab has no run length (a run lasts as long as its faults and settling); use --payments, --hang, --timeout")
	}
	list := func(f *pflag.FlagSet, name string) ([]string, error) {
		xs, err := f.GetStringSlice(name)
		out := []string{}
		for _, x := range xs {
			if x = strings.TrimSpace(x); x != "" {
				out = append(out, strings.ToLower(x))
			}
		}
		return out, err
	}
	x := &explicitFlags{cmd: cmd}
	x.set("payments", func(f *pflag.FlagSet) (e error) { cfg.Payments, e = f.GetInt("payments"); return })
	x.set("hang", func(f *pflag.FlagSet) (e error) { cfg.Hang, e = f.GetDuration("hang"); return })
	x.set("timeout", func(f *pflag.FlagSet) (e error) { cfg.Timeout, e = f.GetDuration("timeout"); return })
	x.set("faults", func(f *pflag.FlagSet) (e error) { cfg.Faults, e = list(f, "faults"); return })
	x.set("conditions", func(f *pflag.FlagSet) (e error) { cfg.Conditions, e = list(f, "conditions"); return })
	x.set("kill-at", func(f *pflag.FlagSet) (e error) { cfg.KillAt, e = f.GetDuration("kill-at"); return })
	x.set("restart-after", func(f *pflag.FlagSet) (e error) { cfg.RestartAfter, e = f.GetDuration("restart-after"); return })
	x.set("status-down-for", func(f *pflag.FlagSet) (e error) { cfg.StatusDownFor, e = f.GetDuration("status-down-for"); return })
	x.set("not-found-window", func(f *pflag.FlagSet) (e error) { cfg.NotFoundWindow, e = f.GetDuration("not-found-window"); return })
	x.set("reconcile-every", func(f *pflag.FlagSet) (e error) { cfg.ReconcileEvery, e = f.GetDuration("reconcile-every"); return })
	x.set("settle-timeout", func(f *pflag.FlagSet) (e error) { cfg.SettleTimeout, e = f.GetDuration("settle-timeout"); return })
	if x.err != nil {
		return nil, x.err
	}
	return refunds.New(cfg)
}
