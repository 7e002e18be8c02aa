package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/stampede-lab/stampede/lab"
	"github.com/stampede-lab/stampede/lab/admission"
	"github.com/stampede-lab/stampede/waitroom/redisstore"
)

func newLabAdmissionCmd(opts *labOptions) *cobra.Command {
	d := admission.DefaultConfig()
	cmd := &cobra.Command{
		Use:   "admission",
		Short: "Waiting room: the cap under N instances, per admission mode",
		Long: `Several waiting-room instances (each its own HTTP server and Redis pool) share
one Redis. Users join and poll through the HTTP API, hold their slot and
release it, or abandon it to the lease. An observer counts the room directly
on Redis every millisecond.

Modes: naive (count, pop, add: races), leader (SET NX election per tick, then
naive), optimistic (pop one, add, count, undo when over), atomic (one Lua
script: reclaim, count, admit). Conditions: every tick × immediate on/off ×
mode.

The atomic mode must never be seen over capacity and must keep FIFO, and
every joined user must be accounted for: otherwise the command exits with
status 2. A run is invalid (status 2 as well) when the observer failed to
read the room, or took fewer samples than --observe-min-samples or than one
per admit interval on average: it has not watched closely enough to vouch
for the cap. Without --redis, every run gets a fresh embedded Redis-protocol
server.

With --failover it runs the failover experiment instead, on a Redis Cluster
whose masters have a replica each (--redis redis-cluster://...): buyers join,
are admitted and hold their admission at a checkout while the master of the
room's slot is killed after its replica was cut off, so that the promoted
replica has certainly missed writes. Conditions: --ack-replicas values (1
answers joins and admissions only once a replica has them; 0 is plain
asynchronous replication). With 1, the checkout must never hold more buyers
than the capacity and no user may be lost. Each run lasts --seconds
(default 16).

The failover experiment signals the nodes' processes (SIGSTOP, SIGKILL), so
the cluster must run on this machine. It starts the killed node again
itself, with the executable and settings (CONFIG GET) the node ran with, on
its directory, where the node finds its cluster configuration and rejoins as
a replica; --restart-cmd replaces that with a command of yours. Before the
first run it checks all this and says what is missing; before every run it
waits (at most --ready-timeout, with a progress line) until every node
serves its slots with a replica whose link is up.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			build := buildAdmission
			if failover, _ := cmd.Flags().GetBool("failover"); failover {
				build = buildFailover
			}
			exp, err := build(cmd, opts)
			if err != nil {
				return err
			}
			return runExperiments(cmd, opts, exp)
		},
	}
	f := cmd.Flags()
	f.Int("instances", d.Instances, "service instances sharing one Redis")
	f.Int("capacity", d.Capacity, "room capacity")
	f.Int("users", d.Users, "users arriving in each run")
	f.String("arrival", d.Arrival, `arrival pattern: "burst" (all at once) or "rate" (Poisson at --rate)`)
	f.Float64("rate", d.Rate, "arrivals per second with --arrival rate")
	f.Duration("hold", d.Hold, "mean time an admitted user keeps the slot (±50%)")
	f.Float64("abandon", d.Abandon, "fraction of admitted users who never release (the lease reclaims the slot)")
	f.Duration("lease", d.Lease, "lease of an admission")
	f.DurationSlice("ticks", d.Ticks, "admit intervals to compare")
	f.StringSlice("modes", []string{"naive", "leader", "optimistic", "atomic"}, "admission modes to compare")
	f.StringSlice("immediate", []string{"off", "on"}, "immediate admission after releases and expiries: off, on, or both")
	f.String("redis", "", "Redis URL (default: $STAMPEDE_REDIS_URL, else a fresh embedded server per run)")
	f.Int("prequeue", d.Prequeue, "users who join before the room opens (--opens-after into the run); the opening shuffles them; reports spearman_rho and fifo_inversions_after_open")
	f.Duration("opens-after", d.OpensAfter, "when the room opens, from the start of a run, with --prequeue")
	f.Float64("abandon-fraction", d.AbandonFraction, "fraction of users who stop polling right after joining (closed the tab)")
	f.Duration("abandon-after", d.AbandonAfter, "the room's abandon_after_seconds: a waiting user silent this long loses their place (0 off)")
	f.Duration("arrival-window", d.ArrivalWindow, "the room's arrival_seconds: an admitted user who does not arrive within it is released (0 off)")
	fd := admission.DefaultFailoverConfig()
	f.Bool("failover", false, "run the failover experiment (needs --redis redis-cluster://... with a replica per master)")
	f.IntSlice("ack-replicas", []int{1, 0}, "with --failover: the store's AckReplicas values to compare")
	f.String("restart-cmd", "", "with --failover: a shell command that starts the killed node again ({port} is its port; default: the experiment starts it with the executable and settings it ran with)")
	f.Duration("ready-timeout", admission.DefaultReadyTimeout, "with --failover: how long to wait before each run for every master's replica to be in sync")
	f.Float64("join-rate", fd.JoinRate, "with --failover: joins per second")
	f.Int("shards", 0, "with --failover: the room's queue_shards (its waiting line over that many hash slots)")
	f.Int("observe-min-samples", d.ObserveMinSamples, "fewest samples of the room a run's observer must take (and one per admit interval on average); fewer make the run invalid")
	return cmd
}

// buildAdmission makes the admission experiment from the profile (quick or
// --full) and every flag given explicitly.
func buildAdmission(cmd *cobra.Command, opts *labOptions) (lab.Experiment, error) {
	cfg := admission.DefaultConfig()
	if opts.full {
		cfg = admission.FullConfig()
	}
	if err := opts.common(&cfg.Seed, &cfg.Repeat, &cfg.Duration); err != nil {
		return nil, err
	}
	cfg.RedisURL = os.Getenv("STAMPEDE_REDIS_URL")
	x := &explicitFlags{cmd: cmd}
	x.set("instances", func(f *pflag.FlagSet) (e error) { cfg.Instances, e = f.GetInt("instances"); return })
	x.set("capacity", func(f *pflag.FlagSet) (e error) { cfg.Capacity, e = f.GetInt("capacity"); return })
	x.set("users", func(f *pflag.FlagSet) (e error) { cfg.Users, e = f.GetInt("users"); return })
	x.set("arrival", func(f *pflag.FlagSet) (e error) { cfg.Arrival, e = f.GetString("arrival"); return })
	x.set("rate", func(f *pflag.FlagSet) (e error) { cfg.Rate, e = f.GetFloat64("rate"); return })
	x.set("hold", func(f *pflag.FlagSet) (e error) { cfg.Hold, e = f.GetDuration("hold"); return })
	x.set("abandon", func(f *pflag.FlagSet) (e error) { cfg.Abandon, e = f.GetFloat64("abandon"); return })
	x.set("lease", func(f *pflag.FlagSet) (e error) { cfg.Lease, e = f.GetDuration("lease"); return })
	x.set("ticks", func(f *pflag.FlagSet) (e error) { cfg.Ticks, e = f.GetDurationSlice("ticks"); return })
	x.set("redis", func(f *pflag.FlagSet) (e error) { cfg.RedisURL, e = f.GetString("redis"); return })
	x.set("prequeue", func(f *pflag.FlagSet) (e error) { cfg.Prequeue, e = f.GetInt("prequeue"); return })
	x.set("opens-after", func(f *pflag.FlagSet) (e error) { cfg.OpensAfter, e = f.GetDuration("opens-after"); return })
	x.set("abandon-fraction", func(f *pflag.FlagSet) (e error) { cfg.AbandonFraction, e = f.GetFloat64("abandon-fraction"); return })
	x.set("abandon-after", func(f *pflag.FlagSet) (e error) { cfg.AbandonAfter, e = f.GetDuration("abandon-after"); return })
	x.set("arrival-window", func(f *pflag.FlagSet) (e error) { cfg.ArrivalWindow, e = f.GetDuration("arrival-window"); return })
	x.set("observe-min-samples", func(f *pflag.FlagSet) (e error) {
		cfg.ObserveMinSamples, e = f.GetInt("observe-min-samples")
		return
	})
	x.set("modes", func(f *pflag.FlagSet) error {
		names, e := f.GetStringSlice("modes")
		if e != nil {
			return e
		}
		cfg.Modes, e = admission.ParseModes(names)
		return e
	})
	x.set("immediate", func(f *pflag.FlagSet) error {
		names, e := f.GetStringSlice("immediate")
		if e != nil {
			return e
		}
		cfg.Immediate, e = admission.ParseOnOff(names)
		return e
	})
	if x.err != nil {
		return nil, x.err
	}
	exp, err := admission.New(cfg)
	if err != nil {
		return nil, flagErrors("", err)
	}
	return exp, nil
}

// buildFailover makes the failover experiment (--failover) from its
// defaults and the flags given explicitly.
func buildFailover(cmd *cobra.Command, opts *labOptions) (lab.Experiment, error) {
	cfg := admission.DefaultFailoverConfig()
	repeat := 3
	if err := opts.common(new(uint64), &repeat, &cfg.Duration); err != nil {
		return nil, err
	}
	f := cmd.Flags()
	url, _ := f.GetString("redis")
	if url == "" {
		return nil, fmt.Errorf("--failover needs --redis redis-cluster://host:port,...: a Redis Cluster on this machine whose every master has a replica")
	}
	copts, err := redisstore.ParseClusterURL(url)
	if err != nil {
		return nil, fmt.Errorf("--redis: %w", err)
	}
	cfg.Cluster = copts
	cfg.Restart, _ = f.GetString("restart-cmd")
	acks, _ := f.GetIntSlice("ack-replicas")
	x := &explicitFlags{cmd: cmd}
	x.set("capacity", func(f *pflag.FlagSet) (e error) { cfg.Capacity, e = f.GetInt("capacity"); return })
	x.set("users", func(f *pflag.FlagSet) (e error) { cfg.Users, e = f.GetInt("users"); return })
	x.set("hold", func(f *pflag.FlagSet) (e error) { cfg.Hold, e = f.GetDuration("hold"); return })
	x.set("join-rate", func(f *pflag.FlagSet) (e error) { cfg.JoinRate, e = f.GetFloat64("join-rate"); return })
	x.set("shards", func(f *pflag.FlagSet) (e error) { cfg.QueueShards, e = f.GetInt("shards"); return })
	x.set("ready-timeout", func(f *pflag.FlagSet) (e error) { cfg.ReadyTimeout, e = f.GetDuration("ready-timeout"); return })
	if x.err != nil {
		return nil, x.err
	}
	return admission.NewFailover(cfg, acks, repeat)
}
