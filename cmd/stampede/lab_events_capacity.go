package main

import (
	"errors"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/stampede-lab/stampede/lab"
	"github.com/stampede-lab/stampede/lab/events"
)

// addEventsCapacityFlags adds the flags of `lab events --capacity` that the
// events lab does not have.
func addEventsCapacityFlags(f *pflag.FlagSet) {
	d := events.DefaultCapacityConfig()
	f.Bool("capacity", false, "run the capacity sweep instead: a --backlog published up front, drained by each --workers count in turn (closed loop)")
	f.Int("backlog", d.Backlog, "--capacity: events published before the workers start")
	f.Float64("hot-share", d.HotShare, "--capacity: fraction of the backlog on key-000 (0: every key alike)")
	f.StringSlice("ledgers", d.Ledgers, "--capacity: ledger layouts, each its own condition: shared (one SQLite file), per-worker")
	f.Int("max-pending", d.MaxPending, "--capacity: unacknowledged messages per partition and worker")
}

// buildEventsCapacity makes the capacity sweep from its defaults (1,000
// keys, a 30 s ack deadline) and every flag given explicitly; the events
// lab's --keys, --workers, --concurrency, --partitions, --cost, --ack-wait,
// --nats and --replicas apply to it too.
func buildEventsCapacity(cmd *cobra.Command, opts *labOptions) (lab.Experiment, error) {
	cfg := events.DefaultCapacityConfig()
	if err := opts.common(&cfg.Seed, &cfg.Repeat, nil); err != nil {
		return nil, err
	}
	x := &explicitFlags{cmd: cmd}
	x.set("backlog", func(f *pflag.FlagSet) (e error) { cfg.Backlog, e = f.GetInt("backlog"); return })
	x.set("hot-share", func(f *pflag.FlagSet) (e error) { cfg.HotShare, e = f.GetFloat64("hot-share"); return })
	x.set("ledgers", func(f *pflag.FlagSet) (e error) { cfg.Ledgers, e = f.GetStringSlice("ledgers"); return })
	x.set("max-pending", func(f *pflag.FlagSet) (e error) { cfg.MaxPending, e = f.GetInt("max-pending"); return })
	x.set("keys", func(f *pflag.FlagSet) (e error) { cfg.Keys, e = f.GetInt("keys"); return })
	x.set("workers", func(f *pflag.FlagSet) (e error) { cfg.Workers, e = f.GetIntSlice("workers"); return })
	x.set("concurrency", func(f *pflag.FlagSet) (e error) { cfg.Concurrency, e = f.GetInt("concurrency"); return })
	x.set("partitions", func(f *pflag.FlagSet) (e error) { cfg.Partitions, e = f.GetInt("partitions"); return })
	x.set("cost", func(f *pflag.FlagSet) (e error) { cfg.Cost, e = f.GetDuration("cost"); return })
	x.set("ack-wait", func(f *pflag.FlagSet) (e error) { cfg.AckWait, e = f.GetDuration("ack-wait"); return })
	x.set("nats", func(f *pflag.FlagSet) (e error) { cfg.NATS, e = f.GetString("nats"); return })
	x.set("replicas", func(f *pflag.FlagSet) (e error) { cfg.Replicas, e = f.GetInt("replicas"); return })
	if x.err != nil {
		return nil, x.err
	}
	if opts.seconds != 0 {
		return nil, errors.New("--seconds: does not apply to --capacity (a run lasts until the backlog is drained)")
	}
	cfg.WorkerCmd = eventsWorkerCmd
	exp, err := events.NewCapacity(cfg)
	if err != nil {
		return nil, flagErrors("", err)
	}
	return exp, nil
}
