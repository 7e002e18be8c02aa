package main

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	dispatchjs "github.com/stampede-lab/stampede/dispatch/natskeyed"
	"github.com/stampede-lab/stampede/lab"
	"github.com/stampede-lab/stampede/lab/events"
)

// labEventsWorkerCmd is the hidden subcommand a worker process of the
// events lab runs; workerArgs prefixes its arguments.
var labEventsWorkerCmd = []string{"lab", "events-worker"}

func newLabEventsCmd(opts *labOptions) *cobra.Command {
	d := events.DefaultConfig()
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Keyed JetStream workers as processes, under kill -9, SIGSTOP and a nats-server restart",
		Long: `A Poisson stream of keyed events with one hot key (as the ordering lab) is
published to one partitioned JetStream stream (an embedded nats-server that
persists to a directory, or --nats) and consumed by --workers real worker
processes of this binary (the keyed consumer of dispatch/natskeyed). Each
handler records its effect in a shared SQLite ledger in one transaction with
an inbox row. A kill hits worker 0 (SIGKILL, then a restart), a pause
worker 1 (SIGSTOP for 1.5 × --ack-wait, then SIGCONT), nats-restart the
embedded server (stopped and started on the same directory and port),
node-kill one node of a NATS cluster given as --nats (--node-kill-cmd; use
--replicas 3), halfway through the arrivals; faults joined with + hit one
run at evenly spaced points (kill+pause+nats-restart: 25, 50 and 75 %).
Workers spread the pinned partitions (each prefers its share) and unpin a
partition whose owner was silent for --owner-timeout.

Each handler's effect is fenced: a write carrying a stale ownership epoch
(a worker that lost its partition while stopped) or taking a key's sequence
backwards is refused and handed back. Per run: lost events, effects applied
twice, per-key order violations and overlaps (dispatch.Ledger over the
effects' times), redeliveries, fenced writes, victim p99 overall and outside
the fault windows (against the in-process keyed dispatcher, workers 0), the
p99 of the hot key's partition neighbours and of the other partitions, the
longest recovery, and events/s. A lost event or a double effect breaks an
invariant (exit status 2).

--capacity runs the capacity sweep instead: a --backlog published up front,
drained by each --workers count in turn, on a shared and on per-worker
ledgers (--ledgers); events/s, the ratio to one worker, CPU per event.

Not part of 'stampede lab' / 'lab all': the default sweep (3 worker counts
× 4 faults, 10 s each, plus drains) takes several minutes.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			build := buildEvents
			if capacity, _ := cmd.Flags().GetBool("capacity"); capacity {
				build = buildEventsCapacity
			}
			exp, err := build(cmd, opts)
			if err != nil {
				return err
			}
			return runExperiments(cmd, opts, exp)
		},
	}
	f := cmd.Flags()
	f.Float64("rate", d.Rate, "mean arrival rate, events per second (Poisson, open loop)")
	f.Int("keys", d.Keys, "number of keys; key-000 is the hot one")
	f.Float64Slice("hot-loads", d.HotLoads, "hot key loads, in handlers (hot rate × --cost)")
	f.IntSlice("workers", d.Workers, "worker process counts to compare")
	f.StringSlice("faults", d.Faults, "faults, each its own condition: none, kill, pause, nats-restart, node-kill; join with + to hit one run with several (kill+pause+nats-restart: at 25, 50 and 75 % of the arrivals)")
	f.Int("concurrency", d.Concurrency, "handlers per worker process")
	f.Int("partitions", d.Partitions, "partitions of the stream")
	f.Duration("cost", d.Cost, "handling time of one event of the other keys")
	f.Duration("hot-cost", d.HotCost, "handling time of one event of the hot key")
	f.Float64("jitter", d.Jitter, "handling times spread uniformly over ±jitter of their mean")
	f.Duration("ack-wait", d.AckWait, "the consumers' ack deadline")
	f.Duration("owner-timeout", d.OwnerTimeout, "unpin a partition whose owner was not heard of for this long (0: off, wait for the pin's TTL)")
	f.Duration("lease", d.Lease, "nats-server before 2.11: hold partitions by leases of this length, so a live worker takes a dead one's over (0: static partitions)")
	f.String("nats", "", "a real NATS server's URL, or a cluster's comma-separated URLs (empty: an embedded nats-server per run)")
	f.Float64("poison", d.Poison, "share of the other keys' events that fail until healed (0: off); each poison event is parked with its key, and the run redrives every parked key at its end; adds a poisoned condition per worker count and fault")
	f.Int("max-attempts", d.MaxAttempts, "the workers' deliveries of a failing event before it is parked")
	f.Int("replicas", d.Replicas, "the stream's replicas (3 on a 3-node cluster)")
	f.String("node-kill-cmd", "", "shell command that kills one NATS cluster node, for --faults node-kill (e.g. '.ci/nats-cluster kill 4231')")
	addEventsCapacityFlags(f)
	return cmd
}

// buildEvents makes the events experiment from the defaults and every flag
// given explicitly.
func buildEvents(cmd *cobra.Command, opts *labOptions) (lab.Experiment, error) {
	cfg := events.DefaultConfig()
	secs := time.Duration(cfg.Seconds * float64(time.Second))
	if err := opts.common(&cfg.Seed, &cfg.Repeat, &secs); err != nil {
		return nil, err
	}
	cfg.Seconds = secs.Seconds()
	x := &explicitFlags{cmd: cmd}
	x.set("rate", func(f *pflag.FlagSet) (e error) { cfg.Rate, e = f.GetFloat64("rate"); return })
	x.set("keys", func(f *pflag.FlagSet) (e error) { cfg.Keys, e = f.GetInt("keys"); return })
	x.set("hot-loads", func(f *pflag.FlagSet) (e error) { cfg.HotLoads, e = f.GetFloat64Slice("hot-loads"); return })
	x.set("workers", func(f *pflag.FlagSet) (e error) { cfg.Workers, e = f.GetIntSlice("workers"); return })
	x.set("faults", func(f *pflag.FlagSet) (e error) { cfg.Faults, e = f.GetStringSlice("faults"); return })
	x.set("concurrency", func(f *pflag.FlagSet) (e error) { cfg.Concurrency, e = f.GetInt("concurrency"); return })
	x.set("partitions", func(f *pflag.FlagSet) (e error) { cfg.Partitions, e = f.GetInt("partitions"); return })
	x.set("cost", func(f *pflag.FlagSet) (e error) { cfg.Cost, e = f.GetDuration("cost"); return })
	x.set("ack-wait", func(f *pflag.FlagSet) (e error) { cfg.AckWait, e = f.GetDuration("ack-wait"); return })
	x.set("hot-cost", func(f *pflag.FlagSet) (e error) { cfg.HotCost, e = f.GetDuration("hot-cost"); return })
	x.set("jitter", func(f *pflag.FlagSet) (e error) { cfg.Jitter, e = f.GetFloat64("jitter"); return })
	x.set("owner-timeout", func(f *pflag.FlagSet) (e error) { cfg.OwnerTimeout, e = f.GetDuration("owner-timeout"); return })
	x.set("lease", func(f *pflag.FlagSet) (e error) { cfg.Lease, e = f.GetDuration("lease"); return })
	x.set("nats", func(f *pflag.FlagSet) (e error) { cfg.NATS, e = f.GetString("nats"); return })
	x.set("poison", func(f *pflag.FlagSet) (e error) { cfg.Poison, e = f.GetFloat64("poison"); return })
	x.set("max-attempts", func(f *pflag.FlagSet) (e error) { cfg.MaxAttempts, e = f.GetInt("max-attempts"); return })
	x.set("replicas", func(f *pflag.FlagSet) (e error) { cfg.Replicas, e = f.GetInt("replicas"); return })
	x.set("node-kill-cmd", func(f *pflag.FlagSet) error {
		line, e := f.GetString("node-kill-cmd")
		cfg.NodeKill = func() error {
			c := exec.Command("sh", "-c", line)
			c.Stdout, c.Stderr = os.Stderr, os.Stderr
			return c.Run()
		}
		return e
	})
	if x.err != nil {
		return nil, x.err
	}
	cfg.WorkerCmd = eventsWorkerCmd
	exp, err := events.New(cfg)
	if err != nil {
		return nil, flagErrors("", err)
	}
	return exp, nil
}

// eventsWorkerCmd runs this binary's hidden events-worker with args; its
// warnings and errors go to our stderr.
var eventsWorkerCmd = func(args []string) *exec.Cmd {
	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	c := exec.Command(exe, append(append([]string{}, labEventsWorkerCmd...), append([]string{"--log-level", "warn"}, args...)...)...)
	c.Stderr = os.Stderr
	return c
}

// newLabEventsWorkerCmd is the hidden worker mode of the events lab.
func newLabEventsWorkerCmd() *cobra.Command {
	cfg := events.WorkerConfig{Consumer: dispatchjs.DefaultConfig(), Cost: events.DefaultConfig().Cost}
	var serve, prefer string
	cmd := &cobra.Command{
		Use:    "events-worker",
		Short:  "A worker process of the events lab (internal)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c := &cfg.Consumer
			c.Durable, c.Logger = events.WorkerDurable, loggerOf(cmd).With("worker", cfg.Name)
			c.PinnedTTL, c.PullExpiry = 4*time.Second, 2*time.Second
			if c.InProgressEvery > c.AckWait/2 {
				c.InProgressEvery = c.AckWait / 3
			}
			if c.MaxNakDelay > c.AckWait {
				c.NakDelay, c.MaxNakDelay = 100*time.Millisecond, c.AckWait
			}
			c.DrainTimeout = 5 * time.Second
			for _, s := range strings.Split(prefer, ",") {
				if s == "" {
					continue
				}
				p, err := strconv.Atoi(s)
				if err != nil {
					return err
				}
				c.Prefer = append(c.Prefer, p)
			}
			c.PullBatch = min(c.PullBatch, c.MaxPending)
			if serve != "" {
				c.Prefer = nil
				c.Pinned = false
				for _, s := range strings.Split(serve, ",") {
					p, err := strconv.Atoi(s)
					if err != nil {
						return err
					}
					c.Serve = append(c.Serve, p)
				}
			}
			return events.RunWorker(cmd.Context(), cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.NATS, "nats", "", "NATS URL")
	f.StringVar(&cfg.Ledger, "ledger", "", "the shared SQLite ledger")
	f.StringVar(&cfg.Name, "name", "0", "the worker's name in the ledger")
	f.StringVar(&cfg.Consumer.Stream, "stream", cfg.Consumer.Stream, "stream")
	f.StringVar(&cfg.Consumer.Subject, "subject", cfg.Consumer.Subject, "subject prefix")
	f.IntVar(&cfg.Consumer.Partitions, "partitions", cfg.Consumer.Partitions, "partitions")
	f.IntVar(&cfg.Consumer.Workers, "concurrency", cfg.Consumer.Workers, "handlers at once")
	f.IntVar(&cfg.Consumer.MaxPending, "max-pending", cfg.Consumer.MaxPending, "unacknowledged messages per partition")
	f.DurationVar(&cfg.Consumer.AckWait, "ack-wait", cfg.Consumer.AckWait, "ack deadline")
	f.IntVar(&cfg.Consumer.MaxAttempts, "max-attempts", cfg.Consumer.MaxAttempts, "deliveries of a failing event before it is parked")
	f.DurationVar(&cfg.Cost, "cost", cfg.Cost, "handling time of one event")
	f.DurationVar(&cfg.HotCost, "hot-cost", 0, "handling time of one event of the hot key (0: --cost)")
	f.Float64Var(&cfg.Jitter, "jitter", 0, "handling times spread uniformly over ±jitter of their mean")
	f.DurationVar(&cfg.Consumer.OwnerTimeout, "owner-timeout", 0, "unpin a partition whose owner was not heard of for this long (0: off)")
	f.DurationVar(&cfg.Consumer.Lease, "lease", 0, "unpinned: hold partitions by leases of this length; --serve is then this worker's own share (0: static partitions)")
	f.StringVar(&prefer, "prefer", "", "partitions to pin first (the others after the pull expiry)")
	f.StringVar(&serve, "serve", "", "partitions to serve statically (servers without pinning)")
	return cmd
}
