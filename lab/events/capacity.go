package events

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/stampede-lab/stampede"
	dispatchjs "github.com/stampede-lab/stampede/dispatch/natskeyed"
	"github.com/stampede-lab/stampede/lab"
	"github.com/stampede-lab/stampede/pay/natspub"
)

// The ledger layouts of a capacity run.
const (
	// LedgerShared gives every worker process the same SQLite ledger, as
	// the events lab does: one inbox, so exactly-once holds across
	// processes, but SQLite admits one writer at a time, which can bound
	// the workers' scaling.
	LedgerShared = "shared"
	// LedgerPerWorker gives each worker process its own SQLite ledger:
	// the consumer's own scaling, with the same handler and the same
	// transaction in each process. Each inbox deduplicates only its own
	// process's deliveries, which is enough without faults (a capacity run
	// has none); the ledgers are merged for the accounting.
	LedgerPerWorker = "per-worker"
)

// CapacityConfig configures the capacity sweep of the events lab: a backlog
// published before any worker starts, drained by 1, 2, 4… worker
// processes in turn.
type CapacityConfig struct {
	// Backlog is the number of events published before the workers start.
	Backlog int
	// Keys is the number of keys; key-000 is the hot one when HotShare > 0.
	Keys int
	// HotShare is the fraction of the backlog that belongs to key-000,
	// from 0 (every key alike) to below 1. A key's events run one at a
	// time, so HotShare × Backlog × Cost is a floor on the drain time.
	HotShare float64
	// Workers lists the worker process counts to run; 1 is the baseline
	// of the x_one_worker ratio.
	Workers []int
	// Ledgers lists the ledger layouts, each its own condition:
	// LedgerShared, LedgerPerWorker.
	Ledgers []string
	// Concurrency is each worker process's handlers at once.
	Concurrency int
	// Partitions is the stream's partition count. Worker i of n serves the
	// partitions p with p mod n = i (statically: pinning does not balance,
	// the first process to pull would keep every partition).
	Partitions int
	// MaxPending bounds each partition's unacknowledged messages in a
	// worker (the consumers' MaxAckPending); every one held is reported in
	// progress each AckWait/3 at most, traffic that grows with it.
	MaxPending int
	// Cost is one event's handling time.
	Cost time.Duration
	// AckWait is the consumers' ack deadline.
	AckWait time.Duration
	// NATS is a real server's URL; empty starts an embedded one per run.
	NATS string
	// Replicas is the stream's replica count.
	Replicas int
	// Repeat is how many times each condition runs.
	Repeat int
	// Seed makes the backlogs reproducible.
	Seed uint64
	// WorkerCmd returns the command of one worker process given
	// RunWorker's arguments, as Config.WorkerCmd.
	WorkerCmd func(args []string) *exec.Cmd
}

// DefaultCapacityConfig returns a backlog of 12,000 events over 1,000
// keys, none hot, drained by 1, 2 and 4 workers on a shared and on
// per-worker ledgers, 4 handlers per worker, 8 partitions of at most 128
// pending messages each, 5 ms per event, a 30 s ack deadline, 1 repeat.
func DefaultCapacityConfig() CapacityConfig {
	return CapacityConfig{Backlog: 12000, Keys: 1000, Workers: []int{1, 2, 4}, Ledgers: []string{LedgerShared, LedgerPerWorker},
		Concurrency: 4, Partitions: 8, MaxPending: 128, Cost: 5 * time.Millisecond, AckWait: 30 * time.Second,
		Replicas: 1, Repeat: 1, Seed: 11}
}

// Validate reports every unusable field at once, each named in snake_case
// as the `stampede lab events --capacity` flag that sets it (WorkerCmd,
// which no flag sets, is "worker_cmd").
func (c CapacityConfig) Validate() error {
	var f stampede.Fields
	if c.Backlog < 1 {
		f.Add("backlog", "must be at least 1, got %d", c.Backlog)
	}
	if c.Keys < 1 {
		f.Add("keys", "must be at least 1, got %d", c.Keys)
	} else if c.Keys < 2 && c.HotShare > 0 {
		f.Add("keys", "need at least 2 with a hot key, got %d", c.Keys)
	}
	if !(c.HotShare >= 0 && c.HotShare < 1) {
		f.Add("hot_share", "must be at least 0 and below 1, got %g", c.HotShare)
	}
	if len(c.Workers) == 0 {
		f.Add("workers", "need at least one count")
	}
	if len(c.Ledgers) == 0 {
		f.Add("ledgers", "need at least one (shared, per-worker)")
	}
	if c.Concurrency < 1 {
		f.Add("concurrency", "must be at least 1, got %d", c.Concurrency)
	}
	if c.Partitions < 1 {
		f.Add("partitions", "must be at least 1, got %d", c.Partitions)
	}
	if c.MaxPending < 1 {
		f.Add("max_pending", "must be at least 1, got %d", c.MaxPending)
	}
	if c.Cost <= 0 {
		f.Add("cost", "must be positive, got %s", c.Cost)
	}
	if c.AckWait < time.Second {
		f.Add("ack_wait", "must be at least 1s, got %s", c.AckWait)
	}
	if c.Replicas < 1 || c.Replicas > 5 {
		f.Add("replicas", "must be 1 to 5, got %d", c.Replicas)
	}
	if c.Repeat < 1 {
		f.Add("repeat", "must be at least 1, got %d", c.Repeat)
	}
	if c.WorkerCmd == nil {
		f.Add("worker_cmd", "must not be nil")
	}
	// A count is checked against the partitions only when they are valid.
	for _, w := range c.Workers {
		if c.Partitions >= 1 && (w < 1 || w > c.Partitions) {
			f.Add("workers", "counts must be 1 to partitions (%d): a worker without a partition idles, got %d", c.Partitions, w)
			break
		}
	}
	for _, l := range c.Ledgers {
		if l != LedgerShared && l != LedgerPerWorker {
			f.Add("ledgers", "unknown ledger layout %q (shared, per-worker)", l)
			break
		}
	}
	return f.Err()
}

// Capacity is the events lab's capacity sweep as a lab.Experiment: closed
// loop, the time for 1, 2, 4… worker processes to drain one backlog.
type Capacity struct {
	cfg CapacityConfig

	mu  sync.Mutex
	one map[capacityRun]float64 // events/s of 1 worker, per ledger and repeat
}

// capacityRun names the runs that share a baseline.
type capacityRun struct {
	ledger string
	repeat int
}

// NewCapacity returns the capacity experiment for cfg.
func NewCapacity(cfg CapacityConfig) (*Capacity, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Capacity{cfg: cfg, one: map[capacityRun]float64{}}, nil
}

// Name implements lab.Experiment.
func (e *Capacity) Name() string { return "events-capacity" }

// Repeats implements lab.Experiment.
func (e *Capacity) Repeats() int { return e.cfg.Repeat }

// Params implements lab.Experiment.
func (e *Capacity) Params() any {
	c := e.cfg
	return map[string]any{"backlog": c.Backlog, "keys": c.Keys, "hot_share": c.HotShare, "workers": c.Workers, "ledgers": c.Ledgers,
		"concurrency": c.Concurrency, "partitions": c.Partitions, "max_pending": c.MaxPending, "cost_ms": float64(c.Cost) / 1e6,
		"ack_wait_ms": c.AckWait.Milliseconds(), "nats": c.NATS != "", "replicas": c.Replicas, "repeat": c.Repeat, "seed": c.Seed,
		"cores": runtime.NumCPU()}
}

// Conditions implements lab.Experiment: per ledger layout, every worker
// count in the order given (1 first, so that each repeat's baseline runs
// just before the counts it is compared with).
func (e *Capacity) Conditions() []lab.Condition {
	var out []lab.Condition
	for _, l := range e.cfg.Ledgers {
		for _, w := range e.cfg.Workers {
			out = append(out, lab.Condition{Label: fmt.Sprintf("ledger=%s workers=%d", l, w),
				Values: map[string]any{"ledger": l, "workers": w}, Keys: []string{"ledger", "workers"}})
		}
	}
	return out
}

// Columns implements lab.Experiment.
func (e *Capacity) Columns() []string {
	return []string{"events_per_s", "x_one_worker", "x_handler_bound", "startup_ms", "worker_cpu_us_per_event",
		"lab_cpu_us_per_event", "cores_used", "machine_busy_cores", "lost", "duplicate_effects", "violations", "overlaps", "redeliveries"}
}

// backlog draws the events: HotShare of them on key-000, the others
// uniformly over the other keys (over every key when HotShare is 0), in
// random order.
func (e *Capacity) backlog(seed uint64) []arrival {
	c := e.cfg
	rng := rand.New(rand.NewPCG(seed, math.Float64bits(c.HotShare)))
	hot := int(math.Round(c.HotShare * float64(c.Backlog)))
	out := make([]arrival, c.Backlog)
	for i := range out {
		switch {
		case i < hot:
			out[i].key = 0
		case hot > 0:
			out[i].key = 1 + rng.IntN(c.Keys-1)
		default:
			out[i].key = rng.IntN(c.Keys)
		}
	}
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// Run implements lab.Experiment: publish the backlog, start the workers,
// wait until every event is applied, stop them, account.
func (e *Capacity) Run(ctx context.Context, cond lab.Condition, repeat int) (lab.RunResult, error) {
	c := e.cfg
	ledger, n := cond.Values["ledger"].(string), cond.Values["workers"].(int)
	plan := e.backlog(c.Seed + uint64(repeat))

	dir, err := tempDir()
	if err != nil {
		return lab.RunResult{}, err
	}
	defer removeAll(dir)
	url := c.NATS
	if url == "" {
		emb, err := natspub.StartEmbedded(filepath.Join(dir, "nats"))
		if err != nil {
			return lab.RunResult{}, err
		}
		defer emb.Close()
		url = emb.URL()
	}
	ls, err := openStream(ctx, url, "CAPACITY", "cap", c.Partitions, c.Replicas, natsjs.WithPublishAsyncMaxPending(1024))
	if err != nil {
		return lab.RunResult{}, err
	}
	defer ls.close(ctx)
	js, stream, subject, transform := ls.js, ls.name, ls.subject, ls.transform
	seqs, err := e.publish(ctx, js, stream, subject, transform, plan)
	if err != nil {
		return lab.RunResult{}, err
	}

	paths := []string{filepath.Join(dir, "ledger.db")}
	if ledger == LedgerPerWorker {
		paths = paths[:0]
		for i := range n {
			paths = append(paths, filepath.Join(dir, fmt.Sprintf("ledger-%d.db", i)))
		}
	}
	dbs := make([]*sql.DB, len(paths))
	for i, p := range paths {
		if err := createLedger(p); err != nil {
			return lab.RunResult{}, err
		}
		if dbs[i], err = sql.Open("sqlite", "file:"+p+"?_pragma=busy_timeout(5000)"); err != nil {
			return lab.RunResult{}, err
		}
		defer dbs[i].Close()
	}

	// The drain: from starting the first worker to the last commit.
	procs := make([]*exec.Cmd, 0, n)
	defer func() { // on an early return: stop what runs
		for _, p := range procs {
			if p.ProcessState == nil {
				_ = p.Process.Kill()
				_ = p.Wait()
			}
		}
	}()
	self0, machine0 := selfCPU(), readMachineCPU()
	t0 := time.Now()
	for i := range n {
		var serve []string
		for p := range c.Partitions {
			if p%n == i {
				serve = append(serve, strconv.Itoa(p))
			}
		}
		cmd := c.WorkerCmd([]string{"--nats", url, "--ledger", paths[min(i, len(paths)-1)], "--stream", stream, "--subject", subject,
			"--partitions", strconv.Itoa(c.Partitions), "--concurrency", strconv.Itoa(c.Concurrency),
			"--max-pending", strconv.Itoa(c.MaxPending), "--ack-wait", c.AckWait.String(), "--cost", c.Cost.String(),
			"--name", strconv.Itoa(i), "--serve", joinComma(serve)})
		if err := cmd.Start(); err != nil {
			return lab.RunResult{}, err
		}
		procs = append(procs, cmd)
	}
	// Wait until every event is applied, or for the time one handler
	// would take alone plus 30 s: what is missing then is lost.
	deadline := t0.Add(time.Duration(len(plan))*c.Cost + 30*time.Second)
	for {
		applied := 0
		for _, db := range dbs {
			var k int
			// inbox is a rowid table that only grows: its largest rowid is
			// its row count, read without a scan (this process's CPU is
			// measured).
			if err := db.QueryRowContext(ctx, `SELECT COALESCE(MAX(rowid), 0) FROM inbox`).Scan(&k); err != nil {
				return lab.RunResult{}, err
			}
			applied += k
		}
		if applied >= len(plan) || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return lab.RunResult{}, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	wall := time.Since(t0)
	self1, machine1 := selfCPU(), readMachineCPU()
	var workerUser, workerSys time.Duration
	for _, p := range procs {
		_ = p.Process.Signal(syscall.SIGTERM)
		_ = p.Wait() // a worker's exit status says nothing the ledger does not
		workerUser, workerSys = workerUser+p.ProcessState.UserTime(), workerSys+p.ProcessState.SystemTime()
	}
	workerCPU := workerUser + workerSys

	db := dbs[0]
	if ledger == LedgerPerWorker {
		if db, err = mergeLedgers(ctx, filepath.Join(dir, "merged.db"), paths); err != nil {
			return lab.RunResult{}, err
		}
		defer db.Close()
	}
	res, err := e.account(ctx, db, plan, seqs, t0)
	if err != nil {
		return lab.RunResult{}, err
	}
	delete(res.Metrics, "victim_p99_ms") // the backlog's events all wait: no victim latency here
	delete(res.Metrics, "events_per_s")
	var first, last sql.NullInt64
	if err := db.QueryRowContext(ctx, `SELECT MIN(start_ns), MAX(done_ns) FROM effects`).Scan(&first, &last); err != nil {
		return lab.RunResult{}, err
	}
	if !first.Valid || !res.Valid {
		return lab.RunResult{Valid: false, Reason: "no event applied", Metrics: res.Metrics}, nil
	}
	applied := float64(len(plan)) - res.Metrics["lost"]
	m := res.Metrics
	m["events_per_s"] = applied / time.Duration(last.Int64-first.Int64).Seconds()
	m["startup_ms"] = float64(first.Int64-t0.UnixNano()) / 1e6
	m["x_handler_bound"] = m["events_per_s"] / (float64(n*c.Concurrency) / c.Cost.Seconds())
	m["worker_cpu_us_per_event"] = float64(workerCPU.Microseconds()) / applied
	m["cores_used"] = (workerCPU + self1 - self0).Seconds() / wall.Seconds()
	if c.NATS == "" {
		m["lab_cpu_us_per_event"] = float64((self1 - self0).Microseconds()) / applied
	}
	if busy, ok := machine1.busyCores(machine0); ok {
		m["machine_busy_cores"] = busy
	}
	res.Extra = map[string]any{"wall_ms": wall.Milliseconds(), "worker_user_ms": workerUser.Milliseconds(),
		"worker_system_ms": workerSys.Milliseconds(), "lab_cpu_ms": (self1 - self0).Milliseconds()}
	e.mu.Lock()
	if n == 1 {
		e.one[capacityRun{ledger, repeat}] = m["events_per_s"]
	} else if base, ok := e.one[capacityRun{ledger, repeat}]; ok {
		m["x_one_worker"] = m["events_per_s"] / base
	}
	e.mu.Unlock()
	return res, nil
}

// account reads a ledger as the events lab does (lost, duplicate effects,
// order violations, overlaps, redeliveries).
func (e *Capacity) account(ctx context.Context, db *sql.DB, plan []arrival, seqs map[string]uint64, start time.Time) (lab.RunResult, error) {
	return (&Experiment{cfg: Config{Partitions: max(e.cfg.Partitions, 1), Cost: e.cfg.Cost}}).account(ctx, db, plan, seqs, start)
}

// publish puts plan on the stream before any worker runs: asynchronously,
// each event with its message id, a failed publish retried with the same
// id (the stream deduplicates). It returns each key's event count.
func (e *Capacity) publish(ctx context.Context, js natsjs.JetStream, stream, subject string, transform bool, plan []arrival) (map[string]uint64, error) {
	type sent struct {
		subj, id string
		body     []byte
		fut      natsjs.PubAckFuture
	}
	// Publications go out in windows of publishWindow, each acknowledged
	// before the next: the async publisher stalls (an error) when too many
	// wait for their acknowledgement on a busy server.
	const publishWindow = 256
	settle := func() error {
		select {
		case <-js.PublishAsyncComplete():
			return nil
		case <-time.After(time.Minute):
			return errors.New("events: the backlog's publications were not acknowledged in a minute")
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	seqs := map[string]uint64{}
	out := make([]sent, 0, len(plan))
	for i, a := range plan {
		if i%publishWindow == 0 {
			if err := settle(); err != nil {
				return nil, err
			}
		}
		k := keyName(a.key)
		seq := seqs[k]
		seqs[k]++
		s := sent{subj: subject + "." + k, id: fmt.Sprintf("%s-%d", k, seq)}
		if !transform {
			s.subj = dispatchjs.PartitionedSubject(subject, k, e.cfg.Partitions)
		}
		s.body = []byte(fmt.Sprintf(`{"key":%q,"seq":%d,"at":%d}`, k, seq, time.Now().UnixNano()))
		fut, err := js.PublishAsync(s.subj, s.body, natsjs.WithMsgID(s.id))
		if err != nil {
			return nil, fmt.Errorf("events: publish %s: %w", s.id, err)
		}
		s.fut = fut
		out = append(out, s)
	}
	if err := settle(); err != nil {
		return nil, err
	}
	for _, s := range out {
		select {
		case <-s.fut.Ok():
			continue
		case <-s.fut.Err():
		}
		for attempt := 0; ; attempt++ {
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := js.Publish(pctx, s.subj, s.body, natsjs.WithMsgID(s.id))
			cancel()
			if err == nil {
				break
			}
			if ctx.Err() != nil || attempt > 100 {
				return nil, fmt.Errorf("events: publish %s: %w", s.id, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	info, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, err
	}
	if got := info.CachedInfo().State.Msgs; got != uint64(len(plan)) {
		return nil, fmt.Errorf("events: the stream holds %d messages after publishing a backlog of %d", got, len(plan))
	}
	return seqs, nil
}

// mergeLedgers copies the effects and attempts of every per-worker ledger
// into one new ledger at path, for the accounting (an event applied in two
// processes shows as a duplicate effect there).
func mergeLedgers(ctx context.Context, path string, parts []string) (*sql.DB, error) {
	if err := createLedger(path); err != nil {
		return nil, err
	}
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1) // ATTACH is per connection
	for _, p := range parts {
		for _, q := range []string{`ATTACH DATABASE ? AS part`, `INSERT INTO effects SELECT * FROM part.effects`,
			`INSERT INTO attempts SELECT * FROM part.attempts`, `INSERT OR IGNORE INTO inbox SELECT * FROM part.inbox`, `DETACH DATABASE part`} {
			var args []any
			if q == `ATTACH DATABASE ? AS part` {
				args = []any{p}
			}
			if _, err := db.ExecContext(ctx, q, args...); err != nil {
				db.Close()
				return nil, fmt.Errorf("events: merge ledger %s: %w", p, err)
			}
		}
	}
	return db, nil
}

// selfCPU is this process's CPU time so far (user + system, every thread):
// the embedded nats-server runs here.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// machineCPU is one reading of the machine's CPU time counters
// (/proc/stat, every process of the machine, in clock ticks).
type machineCPU struct {
	busy, total uint64
	ok          bool
}

// readMachineCPU reads /proc/stat's first line; ok is false where there is
// none (not Linux).
func readMachineCPU() machineCPU {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return machineCPU{}
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	fields := strings.Fields(line)
	if len(fields) < 5 || fields[0] != "cpu" {
		return machineCPU{}
	}
	var m machineCPU
	for i, f := range fields[1:] {
		v, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return machineCPU{}
		}
		if i >= 8 { // guest and guest_nice are already in user and nice
			break
		}
		m.total += v
		if i != 3 && i != 4 { // idle, iowait
			m.busy += v
		}
	}
	m.ok = m.total > 0
	return m
}

// busyCores is how many of the machine's cores were busy on average from
// before to m, whoever used them.
func (m machineCPU) busyCores(before machineCPU) (float64, bool) {
	if !m.ok || !before.ok || m.total <= before.total {
		return 0, false
	}
	return float64(m.busy-before.busy) / float64(m.total-before.total) * float64(runtime.NumCPU()), true
}
