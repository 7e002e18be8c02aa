// Package events is the JetStream events lab: a Poisson stream of keyed
// events with one hot key, as in the ordering lab, published to one
// partitioned JetStream stream and consumed by N worker processes (real
// child processes running the keyed consumer of dispatch/natskeyed, see
// RunWorker), under faults: a worker killed with SIGKILL, a worker stopped
// with SIGSTOP past the ack deadline, a restart of the embedded
// nats-server.
//
// Every handler records its effect in a shared SQLite ledger in one
// transaction with an inbox row (the fulfilment pattern), so a redelivered
// event is recorded as an attempt but not applied twice, and behind a
// fence (apply): a write from a worker that lost its partition (a stale
// ownership epoch) or taking a key's sequence backwards is refused. After the run the
// ledger says what was lost (published, never applied), duplicated
// (applied twice despite the inbox), out of order or overlapping per key
// (dispatch.Ledger replaying the effects' start and done times), how long
// victims (events of keys other than the hot one) waited, and how many
// deliveries were redeliveries.
package events

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/dispatch"
	dispatchjs "github.com/stampede-lab/stampede/dispatch/natskeyed"
	"github.com/stampede-lab/stampede/lab"
	"github.com/stampede-lab/stampede/pay/natspub"
	_ "github.com/stampede-lab/stampede/pay/sqlite" // registers the "sqlite" driver
)

// The faults a run can inject.
const (
	FaultNone        = "none"
	FaultKill        = "kill"
	FaultPause       = "pause"
	FaultNATSRestart = "nats-restart"
	// FaultNodeKill kills one node of a NATS cluster (Config.NodeKill);
	// the stream needs Replicas 3 to keep its quorum.
	FaultNodeKill = "node-kill"
)

// Config configures the events lab.
type Config struct {
	// Rate is the arrival rate, events per second.
	Rate float64
	// Keys is the number of keys; key-000 is the hot one.
	Keys int
	// HotLoads are the hot key's offered loads in workers (hot rate ×
	// HotCost): above 1 the hot key alone needs more than one handler.
	HotLoads []float64
	// Seconds is how long arrivals last.
	Seconds float64
	// Repeat is how many times each condition runs.
	Repeat int
	// Workers lists the worker process counts to run.
	Workers []int
	// Faults lists the faults, each its own condition: none, kill, pause,
	// nats-restart, node-kill, or several joined with + (kill+pause+
	// nats-restart), which hit one run at evenly spaced points of the
	// arrivals (a single fault at the half, three at 25, 50 and 75 %).
	Faults []string
	// Concurrency is each worker process's handlers at once.
	Concurrency int
	// Partitions is the stream's partition count.
	Partitions int
	// Cost is one event's handling time (the other keys').
	Cost time.Duration
	// HotCost is the hot key's handling time (0: Cost).
	HotCost time.Duration
	// Jitter spreads every handling time uniformly over ±Jitter of its
	// mean, in [0, 1).
	Jitter float64
	// OwnerTimeout is the consumers' liveness timeout (see
	// dispatch/natskeyed Config.OwnerTimeout): a partition whose owner
	// was not heard of for this long is unpinned and taken over.
	OwnerTimeout time.Duration
	// Lease is the consumers' partition lease on a server without
	// pinning (see dispatch/natskeyed Config.Lease): a worker takes over
	// the partitions of one that has not renewed its lease for this
	// long. 0 (the default): static partitions, as before leases.
	Lease time.Duration
	// AckWait is the consumers' ack deadline; the pause fault stops a
	// worker for 1.5 × AckWait.
	AckWait time.Duration
	// NATS is a real server's URL; empty starts an embedded one per run
	// (the only one the nats-restart fault can restart).
	NATS string
	// Replicas is the stream's replica count (3 on a 3-node cluster).
	Replicas int
	// NodeKill kills one node of the NATS cluster, for the node-kill
	// fault.
	NodeKill func() error
	// Seed makes the arrival streams reproducible.
	Seed uint64
	// Poison, when positive, adds a condition per worker count and fault
	// in which this share of the other keys' events (not the hot key's)
	// fail on every delivery until the run heals them: the workers park
	// each such event with its key after MaxAttempts deliveries, the other
	// keys go on, and once the arrivals are over and every event is either
	// applied or parked, the run heals the handlers and redrives every
	// parked key.
	Poison float64
	// MaxAttempts is the workers' deliveries of a failing event before it
	// is parked (dispatch/natskeyed Config.MaxAttempts).
	MaxAttempts int
	// WorkerCmd returns the command of one worker process given
	// RunWorker's arguments (cmd/stampede: the same binary's hidden
	// `lab events-worker`).
	WorkerCmd func(args []string) *exec.Cmd
}

// DefaultConfig returns the write-up's stream: 400 events/s over 200 keys,
// the hot key at load 2.0 with 100 ms handlers (20 events/s, twice what
// one handler does), 5 ms for the other keys, no jitter; 10 s, 1 repeat,
// 1, 2 and 4 workers, every fault, 4 handlers per worker, 8 partitions, a
// 500 ms ack deadline and a 300 ms owner timeout.
func DefaultConfig() Config {
	return Config{Rate: 400, Keys: 200, HotLoads: []float64{2.0}, Seconds: 10, Repeat: 1, Workers: []int{1, 2, 4},
		Faults: []string{FaultNone, FaultKill, FaultPause, FaultNATSRestart}, Concurrency: 4, Partitions: 8,
		Cost: 5 * time.Millisecond, HotCost: 100 * time.Millisecond, AckWait: 500 * time.Millisecond,
		OwnerTimeout: 300 * time.Millisecond, Replicas: 1, MaxAttempts: 3, Seed: 11}
}

// hotCost is the hot key's mean handling time.
func (c Config) hotCost() time.Duration {
	if c.HotCost > 0 {
		return c.HotCost
	}
	return c.Cost
}

// faultsOf splits a condition's fault into the faults it injects (none for
// FaultNone).
func faultsOf(f string) []string {
	if f == FaultNone {
		return nil
	}
	return strings.Split(f, "+")
}

// Validate reports every unusable field at once, each named in snake_case
// as the `stampede lab events` flag that sets it (WorkerCmd, which no flag
// sets, is "worker_cmd").
func (c Config) Validate() error {
	var f stampede.Fields
	if !(c.Rate > 0) {
		f.Add("rate", "must be positive, got %g", c.Rate)
	}
	if c.Keys < 2 {
		f.Add("keys", "need at least 2 (one hot, one victim), got %d", c.Keys)
	}
	if len(c.HotLoads) == 0 {
		f.Add("hot_loads", "need at least one")
	}
	if !(c.Seconds > 0) {
		f.Add("seconds", "must be positive, got %g", c.Seconds)
	}
	if c.Repeat < 1 {
		f.Add("repeat", "must be at least 1, got %d", c.Repeat)
	}
	if len(c.Workers) == 0 {
		f.Add("workers", "need at least one count")
	}
	if len(c.Faults) == 0 {
		f.Add("faults", "need at least one (none for no fault)")
	}
	if c.Concurrency < 1 {
		f.Add("concurrency", "must be at least 1, got %d", c.Concurrency)
	}
	if c.Partitions < 1 {
		f.Add("partitions", "must be at least 1, got %d", c.Partitions)
	}
	if c.Cost <= 0 {
		f.Add("cost", "must be positive, got %s", c.Cost)
	}
	if c.AckWait < 100*time.Millisecond {
		f.Add("ack_wait", "must be at least 100ms, got %s", c.AckWait)
	}
	if c.HotCost < 0 {
		f.Add("hot_cost", "must not be negative, got %s", c.HotCost)
	}
	if c.Jitter < 0 || c.Jitter >= 1 {
		f.Add("jitter", "must be in [0, 1), got %g", c.Jitter)
	}
	if c.Lease < 0 || c.Lease > 0 && c.Lease < 300*time.Millisecond {
		f.Add("lease", "must be 0 (off) or at least 300ms, got %s", c.Lease)
	}
	if c.OwnerTimeout < 0 || c.OwnerTimeout > 0 && c.OwnerTimeout < 30*time.Millisecond {
		f.Add("owner_timeout", "must be 0 (off) or at least 30ms, got %s", c.OwnerTimeout)
	}
	if c.WorkerCmd == nil {
		f.Add("worker_cmd", "must not be nil")
	}
	if c.Poison < 0 || c.Poison >= 0.5 {
		f.Add("poison", "must be in [0, 0.5), got %g", c.Poison)
	}
	if c.MaxAttempts < 1 {
		f.Add("max_attempts", "must be at least 1, got %d", c.MaxAttempts)
	}
	if c.Replicas < 1 || c.Replicas > 5 {
		f.Add("replicas", "must be 1 to 5, got %d", c.Replicas)
	}
	for _, w := range c.Workers {
		if w < 1 {
			f.Add("workers", "counts must be at least 1, got %d", w)
			break
		}
	}
faults:
	for _, joined := range c.Faults {
		parts := strings.Split(joined, "+")
		for _, fault := range parts {
			if fault == FaultNone && len(parts) > 1 {
				f.Add("faults", "none cannot be joined with other faults (%q)", joined)
				break faults
			}
			if err := c.validFault(fault); err != nil {
				f.Check("", err)
				break faults
			}
		}
	}
	// A load's hot rate needs a valid rate and hot cost.
	if c.Rate > 0 && c.HotCost >= 0 && c.hotCost() > 0 {
		for _, l := range c.HotLoads {
			if hot := l / c.hotCost().Seconds(); !(l > 0) || hot >= c.Rate {
				f.Add("hot_loads", "%g workers needs %.0f hot events/s, not below the %.0f/s rate (or not positive)", l, hot, c.Rate)
				break
			}
		}
	}
	return f.Err()
}

// validFault checks one fault.
func (c Config) validFault(f string) error {
	switch f {
	case FaultNone, FaultKill, FaultPause:
	case FaultNATSRestart:
		if c.NATS != "" {
			return stampede.InvalidField("faults", "nats-restart needs the embedded server (no NATS URL)")
		}
	case FaultNodeKill:
		if c.NodeKill == nil {
			return stampede.InvalidField("faults", "node-kill needs NodeKill (a NATS cluster and the command that kills a node)")
		}
	default:
		return stampede.InvalidField("faults", "unknown fault %q (none, kill, pause, nats-restart, node-kill, or several joined with +)", f)
	}
	return nil
}

// Experiment is the events lab as a lab.Experiment.
type Experiment struct{ cfg Config }

// New returns the experiment for cfg.
func New(cfg Config) (*Experiment, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Experiment{cfg: cfg}, nil
}

// Name implements lab.Experiment.
func (e *Experiment) Name() string { return "events" }

// Repeats implements lab.Experiment.
func (e *Experiment) Repeats() int { return e.cfg.Repeat }

// Params implements lab.Experiment.
func (e *Experiment) Params() any {
	c := e.cfg
	return map[string]any{"rate": c.Rate, "keys": c.Keys, "hot_loads": c.HotLoads, "seconds": c.Seconds, "repeat": c.Repeat,
		"workers": c.Workers, "faults": c.Faults, "concurrency": c.Concurrency, "partitions": c.Partitions,
		"cost_ms": float64(c.Cost) / 1e6, "hot_cost_ms": float64(c.hotCost()) / 1e6, "jitter": c.Jitter,
		"owner_timeout_ms": c.OwnerTimeout.Milliseconds(), "lease_ms": c.Lease.Milliseconds(), "ack_wait_ms": c.AckWait.Milliseconds(), "nats": c.NATS != "", "replicas": c.Replicas, "seed": c.Seed,
		"poison": c.Poison, "max_attempts": c.MaxAttempts}
}

// Conditions implements lab.Experiment: per hot load, the in-process keyed
// dispatcher (the victim-latency baseline, workers 0), then every worker
// count under every fault, without poison and, with Poison, with it.
func (e *Experiment) Conditions() []lab.Condition {
	var out []lab.Condition
	keys := []string{"workers", "fault", "hot_load", "poison"}
	poisons := []float64{0}
	if e.cfg.Poison > 0 {
		poisons = append(poisons, e.cfg.Poison)
	}
	for _, load := range e.cfg.HotLoads {
		out = append(out, lab.Condition{Label: fmt.Sprintf("in-process hot_load=%g", load),
			Values: map[string]any{"workers": 0, "fault": FaultNone, "hot_load": load, "poison": 0.0}, Keys: keys})
		for _, w := range e.cfg.Workers {
			for _, f := range e.cfg.Faults {
				for _, p := range poisons {
					label := fmt.Sprintf("workers=%d fault=%s hot_load=%g", w, f, load)
					if p > 0 {
						label += fmt.Sprintf(" poison=%g", p)
					}
					out = append(out, lab.Condition{Label: label,
						Values: map[string]any{"workers": w, "fault": f, "hot_load": load, "poison": p}, Keys: keys})
				}
			}
		}
	}
	return out
}

// Columns implements lab.Experiment.
func (e *Experiment) Columns() []string {
	return []string{"lost", "duplicate_effects", "violations", "overlaps", "redeliveries", "fenced", "victim_p99_ms",
		"victim_p99_calm_ms", "neighbour_p99_ms", "other_p99_ms", "recovery_ms", "events_per_s", "events",
		"poisoned", "parked_events", "parked_keys", "redriven", "parked_unprocessed"}
}

// arrival is one scheduled event.
type arrival struct {
	at     time.Duration
	key    int  // 0 is the hot key
	poison bool // fails until the run heals the handlers
}

// schedule draws the arrivals: the other keys as a Poisson process at the
// rate the hot key leaves, merged with the hot key's Poisson arrivals.
func (e *Experiment) schedule(load float64, seed uint64) []arrival {
	c := e.cfg
	rng := rand.New(rand.NewPCG(seed, math.Float64bits(load)))
	hot := load / c.hotCost().Seconds()
	dur := time.Duration(c.Seconds * float64(time.Second))
	exp := func(rate float64) time.Duration { return time.Duration(rng.ExpFloat64() / rate * float64(time.Second)) }
	var out []arrival
	for t := exp(c.Rate - hot); t < dur; t += exp(c.Rate - hot) {
		out = append(out, arrival{at: t, key: 1 + rng.IntN(c.Keys-1)})
	}
	for t := exp(hot); t < dur; t += exp(hot) {
		out = append(out, arrival{at: t, key: 0})
	}
	slices.SortFunc(out, func(a, b arrival) int { return cmp.Compare(a.at, b.at) })
	return out
}

// poisonPlan marks a share of the other keys' arrivals of plan as poison,
// with its own random stream (the arrivals stay those of the condition
// without poison).
func poisonPlan(plan []arrival, share float64, seed uint64) []arrival {
	if share <= 0 {
		return plan
	}
	out := slices.Clone(plan)
	rng := rand.New(rand.NewPCG(seed, 13))
	for i := range out {
		out[i].poison = out[i].key != 0 && rng.Float64() < share
	}
	return out
}

// poisonedKeys lists the keys with at least one poison arrival: their
// later events wait for a redrive by design, so they are no victims.
func poisonedKeys(plan []arrival) map[string]bool {
	out := map[string]bool{}
	for _, a := range plan {
		if a.poison {
			out[keyName(a.key)] = true
		}
	}
	return out
}

func keyName(k int) string { return fmt.Sprintf("key-%03d", k) }

// costs draws the handling time of every arrival of plan: HotCost for the
// hot key, Cost for the others, each spread by Jitter.
func (e *Experiment) costs(plan []arrival, seed uint64) []time.Duration {
	c := e.cfg
	rng := rand.New(rand.NewPCG(seed, 7))
	out := make([]time.Duration, len(plan))
	for i, a := range plan {
		mean := c.Cost
		if a.key == 0 {
			mean = c.hotCost()
		}
		out[i] = time.Duration(float64(mean) * (1 + c.Jitter*(2*rng.Float64()-1)))
	}
	return out
}

// effect is one applied event as the ledger holds it.
type effect struct {
	key             string
	seq             uint64
	start, done, at int64 // unix ns: handler start, commit, publish
}

// Run implements lab.Experiment.
func (e *Experiment) Run(ctx context.Context, cond lab.Condition, repeat int) (lab.RunResult, error) {
	load := cond.Values["hot_load"].(float64)
	plan := e.schedule(load, e.cfg.Seed+uint64(repeat))
	if p, _ := cond.Values["poison"].(float64); p > 0 {
		plan = poisonPlan(plan, p, e.cfg.Seed+uint64(repeat))
	}
	if cond.Values["workers"].(int) == 0 {
		return e.runInProcess(ctx, plan), nil
	}
	return e.runJetStream(ctx, plan, cond.Values["workers"].(int), cond.Values["fault"].(string))
}

// runInProcess runs the plan through an in-process keyed dispatcher with
// the handlers of one worker process: the victim-latency baseline.
func (e *Experiment) runInProcess(ctx context.Context, plan []arrival) lab.RunResult {
	type item struct {
		key string
		seq uint64
		i   int
		at  time.Time
	}
	led := dispatch.NewLedger()
	var victims []float64
	var vs []effect
	done := make(chan effect, len(plan))
	cfg := dispatch.DefaultConfig()
	cfg.Strategy, cfg.Workers, cfg.QueueSize = dispatch.Keyed, e.cfg.Concurrency, len(plan)+1
	costs := e.costs(plan, 0)
	d, err := dispatch.New(cfg, func(key string, it item) {
		led.Start(key, it.seq)
		time.Sleep(costs[it.i])
		led.Done(key, it.seq)
		done <- effect{key: key, at: it.at.UnixNano(), done: time.Now().UnixNano()}
	})
	if err != nil {
		return lab.RunResult{Reason: err.Error()}
	}
	start := time.Now()
	for i, a := range plan {
		time.Sleep(time.Until(start.Add(a.at)))
		k := keyName(a.key)
		_ = d.Submit(ctx, k, item{key: k, seq: led.Submit(k), i: i, at: time.Now()})
	}
	for range plan {
		if f := <-done; f.key != keyName(0) {
			victims = append(victims, float64(f.done-f.at)/1e6)
			vs = append(vs, f)
		}
	}
	lat := e.victimLatencies(vs, nil)
	elapsed := time.Since(start)
	d.Close()
	rep := led.Report()
	return lab.RunResult{Valid: len(plan) > 0, Metrics: lab.Metrics{
		"lost": float64(rep.Outstanding()), "duplicate_effects": float64(rep.Duplicates), "violations": float64(rep.Violations),
		"overlaps": float64(rep.Overlaps), "redeliveries": 0, "fenced": 0, "victim_p99_ms": quantile(victims, 0.99),
		"victim_p99_calm_ms": lat.calm, "neighbour_p99_ms": lat.neighbour, "other_p99_ms": lat.other, "recovery_ms": 0,
		"events_per_s": float64(len(plan)) / elapsed.Seconds(), "events": float64(len(plan))}}
}

// quantile returns the q quantile of xs (sorted in place), 0 when empty.
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	return xs[min(len(xs)-1, int(math.Ceil(q*float64(len(xs))))-1)]
}

// runJetStream runs the plan through JetStream and n worker processes,
// injecting fault halfway through the arrivals.
func (e *Experiment) runJetStream(ctx context.Context, plan []arrival, n int, fault string) (lab.RunResult, error) {
	c := e.cfg
	dir, err := tempDir()
	if err != nil {
		return lab.RunResult{}, err
	}
	defer removeAll(dir)
	url := c.NATS
	var emb *natspub.Embedded
	var ecfg natspub.EmbeddedConfig
	if url == "" {
		ecfg = natspub.DefaultEmbeddedConfig(filepath.Join(dir, "nats"))
		if ecfg.Port, err = freePort(); err != nil {
			return lab.RunResult{}, err
		}
		if emb, err = natspub.StartEmbeddedConfig(ecfg); err != nil {
			return lab.RunResult{}, err
		}
		defer func() { emb.Close() }()
		url = emb.URL()
	}
	ls, err := openStream(ctx, url, "EVENTS", "ev", c.Partitions, c.Replicas)
	if err != nil {
		return lab.RunResult{}, err
	}
	defer ls.close(ctx)
	nc, js, stream, subject, transform := ls.nc, ls.js, ls.name, ls.subject, ls.transform
	// The parking bucket and stream are created now, while every node is
	// up, with the stream's replicas: created after a node kill, a new
	// replicated stream can wait for the dead node (nats-server 2.9), and
	// a single-replica one on the dead node would be gone. A loaded
	// machine can time a creation out: ask again, for up to 30 s.
	var pk *dispatchjs.Parking
	for setup := time.Now().Add(30 * time.Second); ; {
		if pk, err = dispatchjs.OpenParking(ctx, js, workerConsumer(stream)); err == nil {
			break
		}
		if ctx.Err() != nil || time.Now().After(setup) {
			return lab.RunResult{}, err
		}
		time.Sleep(200 * time.Millisecond)
	}

	ledgerPath := filepath.Join(dir, "ledger.db")
	if err := createLedger(ledgerPath); err != nil {
		return lab.RunResult{}, err
	}
	pinned := dispatchjs.PinningSupported(nc.ConnectedServerVersion())
	procs := make([]*exec.Cmd, n)
	startWorker := func(i int) error {
		args := []string{"--nats", url, "--ledger", ledgerPath, "--stream", stream, "--subject", subject,
			"--partitions", strconv.Itoa(c.Partitions), "--concurrency", strconv.Itoa(c.Concurrency),
			"--ack-wait", c.AckWait.String(), "--cost", c.Cost.String(), "--hot-cost", c.hotCost().String(),
			"--jitter", strconv.FormatFloat(c.Jitter, 'g', -1, 64), "--owner-timeout", c.OwnerTimeout.String(), "--lease", c.Lease.String(), "--name", strconv.Itoa(i),
			"--max-attempts", strconv.Itoa(c.maxAttempts())}
		if pinned && n > 1 {
			// Spread the partitions: each worker pins its share first.
			var prefer []string
			for p := range c.Partitions {
				if p%n == i%n {
					prefer = append(prefer, strconv.Itoa(p))
				}
			}
			if len(prefer) > 0 {
				args = append(args, "--prefer", joinComma(prefer))
			}
		}
		if !pinned {
			var serve []string
			for p := range c.Partitions {
				if p%n == i {
					serve = append(serve, strconv.Itoa(p))
				}
			}
			if len(serve) == 0 {
				serve = []string{strconv.Itoa(i % c.Partitions)} // more workers than partitions: a spare reading one
			}
			args = append(args, "--serve", joinComma(serve))
		}
		cmd := c.WorkerCmd(args)
		if err := cmd.Start(); err != nil {
			return err
		}
		procs[i] = cmd
		return nil
	}
	for i := range n {
		if err := startWorker(i); err != nil {
			return lab.RunResult{}, err
		}
	}
	defer func() {
		for _, p := range procs {
			if p != nil && p.Process != nil {
				_ = p.Process.Signal(syscall.SIGCONT)
				_ = p.Process.Signal(syscall.SIGTERM)
				_, _ = p.Process.Wait()
			}
		}
	}()

	// Publish once every partition has a consumer with a pull waiting, so
	// that the workers' start-up is not counted as victim latency.
	e.awaitPullers(ctx, js, stream)

	// Publish on schedule; a failed publish is retried with the same
	// message id (deduplicated by the stream), as the payment relay does.
	// The faults hit at evenly spaced points of the arrivals.
	seqs := map[string]uint64{}
	start := time.Now()
	faults := faultsOf(fault)
	var injected []injection
	var faultErr error
	for i, a := range plan {
		if k := len(injected); k < len(faults) && i == len(plan)*(k+1)/(len(faults)+1) {
			at := time.Since(start)
			if err := e.inject(faults[k], procs, startWorker, &emb, ecfg); err != nil && faultErr == nil {
				faultErr = err
			}
			injected = append(injected, injection{fault: faults[k], at: start.Add(at)})
		}
		time.Sleep(time.Until(start.Add(a.at)))
		k := keyName(a.key)
		seq := seqs[k]
		seqs[k]++
		subj := subject + "." + k
		if !transform {
			subj = dispatchjs.PartitionedSubject(subject, k, c.Partitions)
		}
		body := []byte(fmt.Sprintf(`{"key":%q,"seq":%d,"at":%d,"poison":%t}`, k, seq, time.Now().UnixNano(), a.poison))
		for attempt := 0; ; attempt++ {
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := js.Publish(pctx, subj, body, natsjs.WithMsgID(fmt.Sprintf("%s-%d", k, seq)))
			cancel()
			if err == nil {
				break
			}
			if ctx.Err() != nil || attempt > 100 {
				return lab.RunResult{}, fmt.Errorf("events: publish %s-%d: %w", k, seq, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if faultErr != nil {
		return lab.RunResult{}, faultErr
	}
	// Wait until every event is applied, or for a generous bound: what is
	// missing then is lost.
	db, err := sql.Open("sqlite", "file:"+ledgerPath+"?_pragma=busy_timeout(5000)")
	if err != nil {
		return lab.RunResult{}, err
	}
	defer db.Close()
	deadline := time.Now().Add(4*c.AckWait + 30*time.Second + e.hotTail(plan))
	// Every event applied or parked (the parked ones wait for the redrive).
	var applied int
	var parked []dispatchjs.ParkedKey
	parkedEvents := 0
	for {
		if err := db.QueryRowContext(ctx, `SELECT COUNT(DISTINCT id) FROM effects`).Scan(&applied); err != nil {
			return lab.RunResult{}, err
		}
		// A call to the server can time out on a starved machine: keep
		// the last answer and ask again.
		if l, err := pk.List(ctx); err == nil {
			parked = l
		} else if ctx.Err() != nil {
			return lab.RunResult{}, err
		}
		parkedEvents = 0
		for _, k := range parked {
			parkedEvents += int(k.Events)
		}
		if applied+parkedEvents >= len(plan) || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Heal the handlers, redrive every parked key, and wait for them.
	redriveAt := time.Now()
	if len(parked) > 0 {
		if _, err := db.ExecContext(ctx, `INSERT INTO healed (at) VALUES (?)`, redriveAt.UnixNano()); err != nil {
			return lab.RunResult{}, err
		}
		// A redrive that fails (a call to a starved server timing out)
		// leaves its key parked: ask again, as an operator would, a few
		// rounds within a minute.
		wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		for round := 0; round < 5 && wctx.Err() == nil; round++ {
			keys, err := pk.RedriveAll(wctx)
			if err != nil {
				time.Sleep(500 * time.Millisecond)
				continue
			}
			if left, _ := pk.Wait(wctx, keys); len(left) == 0 {
				break
			}
		}
		cancel()
		deadline = time.Now().Add(10 * time.Second)
		for applied < len(plan) && time.Now().Before(deadline) {
			if err := db.QueryRowContext(ctx, `SELECT COUNT(DISTINCT id) FROM effects`).Scan(&applied); err != nil {
				return lab.RunResult{}, err
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	res, err := e.accountFaults(ctx, db, plan, seqs, start, injected)
	if err != nil {
		return res, err
	}
	var redriven int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM effects WHERE start_ns >= ?`, redriveAt.UnixNano()).Scan(&redriven); err != nil {
		return lab.RunResult{}, err
	}
	poisoned := 0
	for _, a := range plan {
		if a.poison {
			poisoned++
		}
	}
	res.Metrics["poisoned"], res.Metrics["parked_events"], res.Metrics["parked_keys"] = float64(poisoned), float64(parkedEvents), float64(len(parked))
	res.Metrics["redriven"] = float64(redriven)
	res.Metrics["parked_unprocessed"] = float64(max(0, parkedEvents-redriven))
	if parkedEvents > redriven {
		res.Broken = append(res.Broken, fmt.Sprintf("%d parked events not processed after the redrive", parkedEvents-redriven))
	}
	if poisoned > 0 && parkedEvents < poisoned {
		res.Broken = append(res.Broken, fmt.Sprintf("%d poison events but only %d parked", poisoned, parkedEvents))
	}
	return res, nil
}

// workerConsumer is the consumer configuration the lab's workers share,
// as far as their parking goes (stream and durable).
func workerConsumer(stream string) dispatchjs.Config {
	cfg := dispatchjs.DefaultConfig()
	cfg.Stream, cfg.Durable = stream, WorkerDurable
	return cfg
}

// WorkerDurable is the durable consumer prefix of the lab's workers.
const WorkerDurable = "lab"

// hotTail is how long the hot key's backlog can last past the arrivals:
// its events times its handling time, less what the arrivals' duration
// covers.
func (e *Experiment) hotTail(plan []arrival) time.Duration {
	hot := 0
	for _, a := range plan {
		if a.key == 0 {
			hot++
		}
	}
	return max(0, time.Duration(hot)*e.cfg.hotCost()-time.Duration(e.cfg.Seconds*float64(time.Second))/2)
}

// awaitPullers waits, for at most 15 s, until every consumer of stream
// exists and has a pull request waiting.
func (e *Experiment) awaitPullers(ctx context.Context, js natsjs.JetStream, stream string) {
	limit := time.Now().Add(15 * time.Second)
	for time.Now().Before(limit) && ctx.Err() == nil {
		st, err := js.Stream(ctx, stream)
		if err == nil {
			ready := 0
			lister := st.ListConsumers(ctx)
			for info := range lister.Info() {
				if info.NumWaiting > 0 {
					ready++
				}
			}
			if ready >= e.cfg.Partitions {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// injection is one fault injected into a run, and when.
type injection struct {
	fault string
	at    time.Time
}

// inject applies fault: kill hits worker 0, pause worker 1 (worker 0
// with one worker), so that a kill followed by a pause hits two owners;
// nats-restart and node-kill hit the server.
func (e *Experiment) inject(fault string, procs []*exec.Cmd, startWorker func(int) error, emb **natspub.Embedded, ecfg natspub.EmbeddedConfig) error {
	switch fault {
	case FaultKill:
		_ = procs[0].Process.Kill()
		_, _ = procs[0].Process.Wait()
		return startWorker(0)
	case FaultPause:
		p := procs[1%len(procs)].Process
		if err := p.Signal(syscall.SIGSTOP); err != nil {
			return err
		}
		time.AfterFunc(e.cfg.AckWait*3/2, func() { _ = p.Signal(syscall.SIGCONT) })
		return nil
	case FaultNodeKill:
		return e.cfg.NodeKill()
	case FaultNATSRestart:
		if *emb == nil {
			return errors.New("events: nats-restart needs the embedded server")
		}
		(*emb).Close()
		s, err := natspub.StartEmbeddedConfig(ecfg)
		if err != nil {
			return fmt.Errorf("events: restart the embedded nats-server: %w", err)
		}
		*emb = s
	}
	return nil
}

// account reads the ledger into the run's metrics, for a run without
// faults.
func (e *Experiment) account(ctx context.Context, db *sql.DB, plan []arrival, seqs map[string]uint64, start time.Time) (lab.RunResult, error) {
	return e.accountFaults(ctx, db, plan, seqs, start, nil)
}

// accountFaults reads the ledger into the run's metrics; faults are the
// injections of the run, which set the fault windows of
// victim_p99_calm_ms.
func (e *Experiment) accountFaults(ctx context.Context, db *sql.DB, plan []arrival, seqs map[string]uint64, start time.Time, faults []injection) (lab.RunResult, error) {
	rows, err := db.QueryContext(ctx, `SELECT key, seq, start_ns, done_ns, at_ns FROM effects`)
	if err != nil {
		return lab.RunResult{}, err
	}
	var effs []effect
	ids := map[string]int{}
	for rows.Next() {
		var f effect
		if err := rows.Scan(&f.key, &f.seq, &f.start, &f.done, &f.at); err != nil {
			rows.Close()
			return lab.RunResult{}, err
		}
		effs = append(effs, f)
		ids[fmt.Sprintf("%s-%d", f.key, f.seq)]++
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return lab.RunResult{}, err
	}
	var redeliveries, fenced int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM attempts WHERE delivery > 1`).Scan(&redeliveries); err != nil {
		return lab.RunResult{}, err
	}
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM attempts WHERE fenced = 1`).Scan(&fenced); err != nil {
		return lab.RunResult{}, err
	}
	dups := 0
	for _, n := range ids {
		dups += n - 1
	}
	// Replay starts and completions in time order into a Ledger.
	led := dispatch.NewLedger()
	keys := make([]string, 0, len(seqs))
	for k := range seqs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		for range seqs[k] {
			led.Submit(k)
		}
	}
	type point struct {
		t     int64
		done  bool
		key   string
		seq   uint64
		order int
	}
	var pts []point
	var victims []float64
	var vs []effect
	last := start.UnixNano()
	poisoned := poisonedKeys(plan)
	for i, f := range effs {
		pts = append(pts, point{f.start, false, f.key, f.seq, 2 * i}, point{f.done, true, f.key, f.seq, 2*i + 1})
		if f.key != keyName(0) && !poisoned[f.key] {
			victims = append(victims, float64(f.done-f.at)/1e6)
			vs = append(vs, f)
		}
		last = max(last, f.done)
	}
	lat := e.victimLatencies(vs, faults)
	slices.SortFunc(pts, func(a, b point) int {
		if c := cmp.Compare(a.t, b.t); c != 0 {
			return c
		}
		// At one instant, completions before starts: touching is not
		// overlapping.
		if a.done != b.done {
			if a.done {
				return -1
			}
			return 1
		}
		return cmp.Compare(a.order, b.order)
	})
	for _, p := range pts {
		if p.done {
			led.Done(p.key, p.seq)
		} else {
			led.Start(p.key, p.seq)
		}
	}
	rep := led.Report()
	lost := len(plan) - len(ids)
	res := lab.RunResult{Valid: len(ids) > 0, Metrics: lab.Metrics{
		"lost": float64(lost), "duplicate_effects": float64(dups), "violations": float64(rep.Violations),
		"overlaps": float64(rep.Overlaps), "redeliveries": float64(redeliveries), "fenced": float64(fenced),
		"victim_p99_ms": quantile(victims, 0.99), "victim_p99_calm_ms": lat.calm, "neighbour_p99_ms": lat.neighbour,
		"other_p99_ms": lat.other, "recovery_ms": lat.recovery,
		"events_per_s": float64(len(ids)) / time.Duration(last-start.UnixNano()).Seconds(), "events": float64(len(plan))}}
	// Where the victims' time goes: waiting to start (delivery, the
	// consumer's queue and barrier) and in the handler (its work and the
	// ledger's transaction).
	var wait, run []float64
	for _, f := range vs {
		wait = append(wait, float64(f.start-f.at)/1e6)
		run = append(run, float64(f.done-f.start)/1e6)
	}
	res.Metrics["victim_wait_p99_ms"], res.Metrics["victim_handler_p99_ms"] = quantile(wait, 0.99), quantile(run, 0.99)
	for f, ms := range lat.byFault {
		res.Metrics["recovery_"+strings.ReplaceAll(f, "-", "_")+"_ms"] = ms
	}
	if len(faults) > 0 {
		// The share of victims a fault stalled past the threshold: above
		// 1 %, the overall p99 is one of them, whatever the calm latency.
		res.Metrics["stalled_share"] = float64(lat.stalled) / float64(max(1, lat.victims))
		res.Metrics["stall_threshold_ms"] = lat.threshold
	}
	if lost > 0 {
		res.Broken = append(res.Broken, fmt.Sprintf("%d events lost", lost))
	}
	if dups > 0 {
		res.Broken = append(res.Broken, fmt.Sprintf("%d effects applied twice", dups))
	}
	if !res.Valid {
		res.Reason = "no event applied"
	}
	return res, nil
}

// maxRecovery caps a fault's window: a slow victim later than this after
// every fault counts as calm.
const maxRecovery = 5 * time.Second

// latencies are the victim figures of a run besides the overall p99.
type latencies struct {
	calm, neighbour, other, recovery float64 // ms
	// byFault is each fault's window in ms (the longest if it hit twice).
	byFault map[string]float64
	// stalled counts the victims slower than the threshold that met a
	// window, of victims in all; threshold is that latency in ms.
	stalled, victims int
	threshold        float64
}

// victimLatencies splits the victims (applied effects of keys other than
// the hot one) of a run.
//
// A fault's window runs from its injection to the commit of the last
// victim committed after it and before the next fault whose latency
// exceeds three times the p99 of the victims published
// before the first fault (at least 3 × Cost); it is capped at
// maxRecovery. recovery is the longest window. calm is the p99 of the
// victims whose publish-to-commit interval meets no window: the latency a
// fault leaves behind once it is over. neighbour and other split the calm
// victims by whether their key shares the hot key's partition.
func (e *Experiment) victimLatencies(vs []effect, faults []injection) latencies {
	ms := func(f effect) float64 { return float64(f.done-f.at) / 1e6 }
	threshold := 3 * float64(e.cfg.Cost) / 1e6
	if len(faults) > 0 {
		var before []float64
		for _, f := range vs {
			if f.done < faults[0].at.UnixNano() {
				before = append(before, ms(f))
			}
		}
		threshold = max(threshold, 3*quantile(before, 0.99))
	}
	type window struct{ from, to int64 }
	var wins []window
	var recovery time.Duration
	byFault := map[string]float64{}
	for i, inj := range faults {
		from := inj.at.UnixNano()
		next := int64(math.MaxInt64)
		if i+1 < len(faults) {
			next = faults[i+1].at.UnixNano()
		}
		to := from
		for _, f := range vs {
			if f.done >= from && f.done < next && ms(f) > threshold {
				to = max(to, f.done)
			}
		}
		to = min(to, from+int64(maxRecovery))
		recovery = max(recovery, time.Duration(to-from))
		byFault[inj.fault] = max(byFault[inj.fault], float64(to-from)/1e6)
		wins = append(wins, window{from, to})
	}
	hotPart := dispatchjs.PartitionOf(keyName(0), e.cfg.Partitions)
	var calm, neighbour, other []float64
	stalled := 0
	for _, f := range vs {
		hit := false
		for _, w := range wins {
			if f.at <= w.to && f.done >= w.from {
				hit = true
				break
			}
		}
		if hit {
			if ms(f) > threshold {
				stalled++
			}
			continue
		}
		calm = append(calm, ms(f))
		if dispatchjs.PartitionOf(f.key, e.cfg.Partitions) == hotPart {
			neighbour = append(neighbour, ms(f))
		} else {
			other = append(other, ms(f))
		}
	}
	return latencies{calm: quantile(calm, 0.99), neighbour: quantile(neighbour, 0.99), other: quantile(other, 0.99),
		recovery: float64(recovery) / 1e6, byFault: byFault, stalled: stalled, victims: len(vs), threshold: threshold}
}

// labStream is a run's connection to NATS and its fresh stream.
type labStream struct {
	nc            *nats.Conn
	js            natsjs.JetStream
	name, subject string
	// transform is set when the server partitions the subjects itself
	// (a subject transform); otherwise the publisher names the partition.
	transform bool
}

// openStream connects to url and creates a file-backed stream named
// prefix_<nanoseconds> on subjects sub_<nanoseconds>.>, partitioned in
// partitions by a subject transform where the server has them, with
// replicas copies and two minutes of deduplication. close deletes the
// stream and closes the connection.
func openStream(ctx context.Context, url, prefix, sub string, partitions, replicas int, opts ...natsjs.JetStreamOpt) (*labStream, error) {
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		return nil, err
	}
	js, err := natsjs.New(nc, opts...)
	if err != nil {
		nc.Close()
		return nil, err
	}
	stamp := strconv.FormatInt(time.Now().UnixNano(), 10)
	ls := &labStream{nc: nc, js: js, name: prefix + "_" + stamp, subject: sub + "_" + stamp,
		transform: dispatchjs.TransformSupported(nc.ConnectedServerVersion())}
	sc := natsjs.StreamConfig{Name: ls.name, Subjects: []string{ls.subject + ".>"}}
	if ls.transform {
		sc = dispatchjs.StreamConfig(ls.name, ls.subject, partitions)
	}
	sc.Storage, sc.Duplicates, sc.Replicas = natsjs.FileStorage, 2*time.Minute, replicas
	if _, err := js.CreateOrUpdateStream(ctx, sc); err != nil {
		nc.Close()
		return nil, err
	}
	return ls, nil
}

// close deletes the stream, the workers' parking, epoch and lease buckets, and
// closes the connection.
func (ls *labStream) close(ctx context.Context) {
	ctx = context.WithoutCancel(ctx)
	_ = ls.js.DeleteStream(ctx, ls.name)
	_ = ls.js.DeleteKeyValue(ctx, workerConsumer(ls.name).ParkBucketName())
	_ = ls.js.DeleteStream(ctx, workerConsumer(ls.name).ParkStreamName())
	_ = ls.js.DeleteKeyValue(ctx, workerConsumer(ls.name).EpochBucketName())
	_ = ls.js.DeleteKeyValue(ctx, workerConsumer(ls.name).LeaseBucketName())
	ls.nc.Close()
}

// maxAttempts is what the workers are given as their MaxAttempts: without
// poison, 0 (nothing is parked, a failing event is retried for ever, as in
// the conditions this experiment always measured), since the server's
// delivery count also counts the redeliveries of a node kill or a
// hand-over, and a parked event that no redrive follows would count as
// lost; with poison, MaxAttempts, and the run redrives every parked key.
func (c Config) maxAttempts() int {
	if c.Poison == 0 {
		return 0
	}
	return c.MaxAttempts
}
