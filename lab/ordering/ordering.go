// Package ordering is the lab experiment of the keyed dispatcher: the same
// open-loop arrival stream goes to 8 workers under each dispatch strategy
// while one hot key's load sweeps past one worker's worth, and the run
// counts per-key order violations and the latency of every other key (the
// victims).
//
// It reproduces the write-up in the published dispatcher write-up —
// shared, partition and steal — and adds keyed, which should keep partition's
// zero violations and shared's victim latency at once.
//
// Latency runs from each item's intended arrival time, not from the moment
// it was submitted, so a generator that falls behind cannot hide queueing
// (no coordinated omission).
package ordering

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/dispatch"
	"github.com/stampede-lab/stampede/lab"
)

// Config holds every parameter of the experiment.
type Config struct {
	// Workers is the dispatcher's worker count (and partition count).
	Workers int
	// Rate is the mean arrival rate in items per second (Poisson).
	Rate float64
	// Keys is the number of keys; key-000 is the hot one.
	Keys int
	// HotLoads are the hot key's offered loads, in workers: the hot key's
	// arrival rate times HotCost.
	HotLoads []float64
	// NormalCost and HotCost are the mean handler times of other keys and
	// of the hot key.
	NormalCost, HotCost time.Duration
	// Jitter spreads every handler time uniformly over ±Jitter of its mean,
	// so that two items of one key running at once can finish out of order.
	Jitter float64
	// StealAfter is the steal strategy's threshold.
	StealAfter time.Duration
	// Strategies are the strategies compared, in report order.
	Strategies []dispatch.Strategy
	// Duration is how long arrivals last in each run; the dispatcher then
	// drains, which can take longer.
	Duration time.Duration
	// Repeat is how many times each condition runs.
	Repeat int
	// Seed makes the arrival streams reproducible. Every strategy sees the
	// same stream for a given hot load and repeat.
	Seed uint64
	// HotArrivals is how the hot key's items arrive: HotPoisson (the
	// default: the hot key is part of the Poisson stream) or HotEven
	// (evenly spaced, the other keys still Poisson).
	HotArrivals string
	// RunAs plants a regression: the conditions of a strategy that is a
	// key of RunAs run with the dispatcher of its value (keyed run by
	// partition, say), under the condition's own name, so that one can
	// see the claims catch it. Empty in every profile; the parameters in
	// the report name it.
	RunAs map[dispatch.Strategy]dispatch.Strategy
}

// Hot key arrival patterns.
const (
	// HotPoisson makes the hot key's arrivals a Poisson process, like every
	// other key's: hot items sometimes bunch up.
	HotPoisson = "poisson"
	// HotEven spaces the hot key's arrivals evenly (random phase), so two
	// hot items are never closer than 1/(hot rate).
	HotEven = "even"
)

// DefaultConfig is the quick profile: the write-up's parameters with 4-second
// runs and one repeat, about a minute in all.
func DefaultConfig() Config {
	return Config{
		Workers:     8,
		Rate:        400,
		Keys:        200,
		HotLoads:    []float64{0.4, 1.0, 2.0},
		NormalCost:  5 * time.Millisecond,
		HotCost:     100 * time.Millisecond,
		Jitter:      0.5,
		StealAfter:  500 * time.Millisecond,
		Strategies:  dispatch.Strategies(),
		Duration:    4 * time.Second,
		Repeat:      1,
		Seed:        1,
		HotArrivals: HotPoisson,
	}
}

// FullConfig is the published dispatcher write-up's profile: 20-second runs, 3 repeats.
func FullConfig() Config {
	c := DefaultConfig()
	c.Duration, c.Repeat = 20*time.Second, 3
	return c
}

// Validate reports every unusable field at once, each named in snake_case
// as the `stampede lab ordering` flag that sets it (HotLoads is
// "hot_loads", Duration "seconds").
func (c Config) Validate() error {
	var f stampede.Fields
	if c.Workers < 1 {
		f.Add("workers", "must be at least 1, got %d", c.Workers)
	}
	rateOK := c.Rate > 0 && !math.IsInf(c.Rate, 0)
	if !rateOK {
		f.Add("rate", "must be a positive number of items per second, got %v", c.Rate)
	}
	if c.Keys < 2 {
		f.Add("keys", "need at least 2 (one hot, one victim), got %d", c.Keys)
	}
	if len(c.HotLoads) == 0 {
		f.Add("hot_loads", "need at least one")
	}
	if c.NormalCost <= 0 {
		f.Add("normal_cost", "must be positive, got %s", c.NormalCost)
	}
	if c.HotCost <= 0 {
		f.Add("hot_cost", "must be positive, got %s", c.HotCost)
	}
	if c.Jitter < 0 || c.Jitter >= 1 {
		f.Add("jitter", "must be in [0, 1), got %v", c.Jitter)
	}
	if c.StealAfter <= 0 {
		f.Add("steal_after", "must be positive, got %s", c.StealAfter)
	}
	if len(c.Strategies) == 0 {
		f.Add("strategies", "need at least one")
	}
	if c.Duration <= 0 {
		f.Add("seconds", "must be positive, got %s", c.Duration)
	}
	if c.Repeat < 1 {
		f.Add("repeat", "must be at least 1, got %d", c.Repeat)
	}
	if c.HotArrivals != HotPoisson && c.HotArrivals != HotEven {
		f.Add("hot_arrivals", "want %q or %q, got %q", HotPoisson, HotEven, c.HotArrivals)
	}
	// A load's share of the arrivals needs a valid rate and hot cost.
	for _, load := range c.HotLoads {
		if !rateOK || c.HotCost <= 0 {
			break
		}
		if share := c.hotShare(load); !(share > 0) || share > 1 {
			f.Add("hot_loads", "%v workers needs %.0f hot items/s, more than the %.0f/s arrival rate (or not positive)",
				load, load/c.HotCost.Seconds(), c.Rate)
			break
		}
	}
	for _, s := range c.Strategies {
		if _, err := dispatch.ParseStrategy(string(s)); err != nil {
			f.Check("strategies", err)
			break
		}
	}
	for from, to := range c.RunAs {
		_, err1 := dispatch.ParseStrategy(string(from))
		_, err2 := dispatch.ParseStrategy(string(to))
		if err := cmp.Or(err1, err2); err != nil {
			f.Check("run_as", err)
			break
		}
	}
	return f.Err()
}

// hotShare is the fraction of arrivals that belong to the hot key at a
// given hot load.
func (c Config) hotShare(load float64) float64 {
	return load / (c.Rate * c.HotCost.Seconds())
}

// Experiment is the ordering experiment; it implements lab.Experiment.
type Experiment struct {
	cfg Config
}

var _ lab.Experiment = (*Experiment)(nil)

// New returns the experiment for cfg.
func New(cfg Config) (*Experiment, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Experiment{cfg: cfg}, nil
}

// Name implements lab.Experiment.
func (e *Experiment) Name() string { return "ordering" }

// Repeats implements lab.Experiment.
func (e *Experiment) Repeats() int { return e.cfg.Repeat }

// Params implements lab.Experiment.
func (e *Experiment) Params() any {
	c := e.cfg
	p := map[string]any{
		"workers":        c.Workers,
		"rate_per_s":     c.Rate,
		"keys":           c.Keys,
		"hot_loads":      c.HotLoads,
		"normal_cost_ms": ms(c.NormalCost),
		"hot_cost_ms":    ms(c.HotCost),
		"jitter":         c.Jitter,
		"steal_after_ms": ms(c.StealAfter),
		"strategies":     c.Strategies,
		"seconds":        c.Duration.Seconds(),
		"repeat":         c.Repeat,
		"seed":           c.Seed,
		"arrivals":       "poisson, open loop",
		"hot_arrivals":   c.HotArrivals,
		"latency_from":   "intended arrival time",
	}
	if len(c.RunAs) > 0 {
		planted := map[string]string{}
		for from, to := range c.RunAs {
			planted[string(from)] = string(to)
		}
		p["planted_regression_run_as"] = planted
	}
	return p
}

// Profile implements lab.Profiled: "quick" for DefaultConfig, "full" for
// FullConfig, whatever the seed, and "custom" once a flag changed either.
// A planted regression (RunAs) keeps the profile it was planted in.
func (e *Experiment) Profile() string {
	c := e.cfg
	c.Seed, c.RunAs = 1, nil
	for _, p := range []struct {
		name string
		cfg  Config
	}{{"quick", DefaultConfig()}, {"full", FullConfig()}} {
		if reflect.DeepEqual(c, p.cfg) {
			return p.name
		}
	}
	return "custom"
}

// Conditions implements lab.Experiment: hot load major, strategy minor, so
// the strategies at one load run back to back on the same stream.
func (e *Experiment) Conditions() []lab.Condition {
	var conds []lab.Condition
	for _, load := range e.cfg.HotLoads {
		for _, s := range e.cfg.Strategies {
			conds = append(conds, lab.Condition{
				Label:  fmt.Sprintf("%s hot_load=%g", s, load),
				Values: map[string]any{"strategy": string(s), "hot_load": load},
				Keys:   []string{"strategy", "hot_load"},
			})
		}
	}
	return conds
}

// Columns implements lab.Experiment.
func (e *Experiment) Columns() []string {
	return []string{"violations", "hot_violations", "other_violations", "overlaps", "stolen",
		"victim_p50_ms", "victim_p95_ms", "victim_p99_ms", "hot_p99_ms", "items", "drain_ms"}
}

// RunDetail is the per-run data kept in the JSON beside the metrics.
type RunDetail struct {
	// Seed is the arrival stream's seed.
	Seed uint64 `json:"seed"`
	// Arrivals is the number of scheduled items.
	Arrivals int `json:"arrivals"`
	// LagP99MS is how late the generator submitted items (p99); latency
	// is measured from the intended time either way.
	LagP99MS float64 `json:"generator_lag_p99_ms"`
	// Victim and Hot are latency quantiles per key class.
	Victim, Hot []Quantile `json:"-"`
	// Latency holds Victim and Hot for the JSON.
	Latency map[string][]Quantile `json:"latency_ms"`
}

// Quantile is one point of a latency distribution.
type Quantile struct {
	Percentile float64 `json:"p"`
	MS         float64 `json:"ms"`
}

// percentiles are the points kept of each latency distribution.
var percentiles = []float64{10, 25, 50, 75, 90, 95, 99, 99.5, 99.9, 100}

// item is what flows through the dispatcher.
type item struct {
	seq      uint64
	idx      int // in the plan
	intended time.Time
	cost     time.Duration
}

// arrival is one scheduled item.
type arrival struct {
	at   time.Duration // offset from the start of the run
	key  int           // 0 is the hot key
	cost time.Duration
}

// schedule draws the open-loop arrival stream for one hot load and repeat:
// the other keys as a Poisson process at the rate left over by the hot key,
// merged with the hot key's arrivals (Poisson or evenly spaced). Two Poisson
// processes merged are one Poisson process at the total rate.
func (e *Experiment) schedule(load float64, seed uint64) []arrival {
	c := e.cfg
	rng := rand.New(rand.NewPCG(seed, math.Float64bits(load)))
	hotRate := c.Rate * c.hotShare(load)
	jittered := func(mean time.Duration) time.Duration {
		return time.Duration(float64(mean) * (1 + c.Jitter*(2*rng.Float64()-1)))
	}
	exp := func(rate float64) time.Duration {
		return time.Duration(rng.ExpFloat64() / rate * float64(time.Second))
	}

	var out []arrival
	if otherRate := c.Rate - hotRate; otherRate > 0 {
		for t := exp(otherRate); t < c.Duration; t += exp(otherRate) {
			out = append(out, arrival{at: t, key: 1 + rng.IntN(c.Keys-1), cost: jittered(c.NormalCost)})
		}
	}
	gap := func() time.Duration { return exp(hotRate) }
	t := gap()
	if c.HotArrivals == HotEven {
		even := time.Duration(float64(time.Second) / hotRate)
		gap = func() time.Duration { return even }
		t = time.Duration(rng.Float64() * float64(even)) // random phase
	}
	for ; t < c.Duration; t += gap() {
		out = append(out, arrival{at: t, key: 0, cost: jittered(c.HotCost)})
	}
	slices.SortFunc(out, func(a, b arrival) int { return cmp.Compare(a.at, b.at) })
	return out
}

// Run implements lab.Experiment: one strategy, one hot load, one stream.
func (e *Experiment) Run(ctx context.Context, cond lab.Condition, repeat int) (lab.RunResult, error) {
	c := e.cfg
	strategy := dispatch.Strategy(cond.Values["strategy"].(string))
	load := cond.Values["hot_load"].(float64)
	seed := c.Seed + uint64(repeat)
	plan := e.schedule(load, seed)
	keys := make([]string, c.Keys)
	for i := range keys {
		keys[i] = keyName(i)
	}
	hot := keys[0]

	ledger := dispatch.NewLedger()
	rec := newRecorder()
	dcfg := dispatch.DefaultConfig()
	dcfg.Strategy, dcfg.Workers, dcfg.StealAfter = strategy, c.Workers, c.StealAfter
	dcfg.QueueSize = len(plan) + 1 // open loop: the generator never waits for room
	if as, ok := c.RunAs[strategy]; ok {
		dcfg.Strategy = as // a planted regression: the condition keeps its name
	}
	// slept[i] is how long item i's handler slept: each handler writes
	// its own item's entry, read once Close has waited for every handler.
	slept := make([]time.Duration, len(plan))
	took := make([]time.Duration, len(plan))      // handler entry to exit
	submitted := make([]time.Duration, len(plan)) // since start
	var start time.Time                           // set before the first Submit
	d, err := dispatch.New(dcfg, func(key string, it item) {
		entry := time.Now()
		ledger.Start(key, it.seq)
		t0 := time.Now()
		time.Sleep(it.cost)
		slept[it.idx] = time.Since(t0)
		over := slept[it.idx] - it.cost
		ledger.Done(key, it.seq)
		rec.record(key == hot, time.Since(it.intended), it.cost, over)
		took[it.idx] = time.Since(entry)
	})
	if err != nil {
		return lab.RunResult{}, err
	}

	lag := hdrhistogram.New(1, int64(time.Hour/time.Microsecond), 3)
	start = time.Now()
	var runErr error
	for i, a := range plan {
		intended := start.Add(a.at)
		if wait := time.Until(intended); wait > 0 {
			select {
			case <-time.After(wait):
			case <-ctx.Done():
			}
		}
		if err := ctx.Err(); err != nil {
			runErr = err
			break
		}
		submitted[i] = time.Since(start)
		_ = lag.RecordValue(max(1, (submitted[i] - a.at).Microseconds()))
		key := keys[a.key]
		if err := d.Submit(ctx, key, item{seq: ledger.Submit(key), idx: i, intended: intended, cost: a.cost}); err != nil {
			runErr = err
			break
		}
	}
	lastArrival := time.Now()
	d.Close()
	drain := time.Since(lastArrival)
	if runErr != nil {
		return lab.RunResult{}, runErr
	}

	rep := ledger.Report()
	hotRep := ledger.Key(hot)
	st := d.Stats()
	victim, hotLat, overshoot, stretch := rec.snapshot()
	lagP99, overP99 := quantileMS(lag, 99), quantileMS(overshoot, 99)
	m := lab.Metrics{
		"violations":       float64(rep.Violations),
		"hot_violations":   float64(hotRep.Violations),
		"other_violations": float64(rep.Violations - hotRep.Violations),
		"overlaps":         float64(rep.Overlaps),
		"stolen":           float64(st.Stolen),
		"victim_p50_ms":    quantileMS(victim, 50),
		"victim_p95_ms":    quantileMS(victim, 95),
		"victim_p99_ms":    quantileMS(victim, 99),
		"hot_p99_ms":       quantileMS(hotLat, 99),
		"items":            float64(rep.Completed),
		"hot_items":        float64(hotRep.Completed),
		"lost":             float64(rep.Outstanding()),
		"duplicates":       float64(rep.Duplicates),
		"drain_ms":         ms(drain),
		// The machine's scheduling noise, measured in this run: how late
		// the generator submitted items, and how much longer than asked
		// a handler's sleep took; stretch is the handlers' time asleep
		// over the time they asked for.
		"lag_p99_ms":             lagP99,
		"sleep_overshoot_p99_ms": overP99,
		"stretch":                stretch,
	}
	// The ideal machine on this run's stream: every handler takes its
	// item's cost. And the replay: every item arrives when the generator
	// really submitted it, and its handler takes what it really took
	// (entry to exit); only the dispatcher's own time (a worker waking for
	// an item, for one) is left out, and the sleep overshoot's p99 stands
	// for it. Steal has a model only while it does not steal.
	if id, ok := e.simulate(plan, strategy, keys); ok && (strategy != dispatch.Steal || st.Stolen == 0) {
		replay := slices.Clone(plan)
		for i := range replay {
			replay[i].at = max(submitted[i], replay[i].at)
			replay[i].cost = max(took[i], replay[i].cost)
		}
		if done, ok := e.complete(replay, strategy, keys); ok {
			re := summarizeIdeal(plan, replay, done)
			m["replay_victim_p99_ms"] = ms(re.victimP99)
			m["victim_p99_bound_ms"] = ms(re.victimP99) + overP99
		}
		m["ideal_victim_p99_ms"] = ms(id.victimP99)
		m["ideal_hot_violations"] = float64(id.hotViolations)
	}
	detail := RunDetail{
		Seed: seed, Arrivals: len(plan), LagP99MS: lagP99,
		Victim: quantiles(victim), Hot: quantiles(hotLat),
	}
	detail.Latency = map[string][]Quantile{"victim": detail.Victim, "hot": detail.Hot}
	res := lab.RunResult{Metrics: m, Extra: detail, Valid: true}
	switch {
	case rep.Completed == 0:
		res.Valid, res.Reason = false, "no item completed"
	case victim.TotalCount() == 0:
		res.Valid, res.Reason = false, "no victim (non-hot) item completed"
	case rep.Vacuous():
		res.Valid, res.Reason = false, "order check vacuous: no key had two items"
	}
	if lost := rep.Outstanding(); lost > 0 {
		res.Broken = append(res.Broken, fmt.Sprintf("%s lost %d items", strategy, lost))
	}
	if rep.Duplicates > 0 {
		res.Broken = append(res.Broken, fmt.Sprintf("%s ran %d items twice", strategy, rep.Duplicates))
	}
	if strategy == dispatch.Keyed || strategy == dispatch.Partition {
		if rep.Violations > 0 || rep.Overlaps > 0 {
			res.Broken = append(res.Broken, fmt.Sprintf("%s broke per-key order: %d violations, %d overlaps",
				strategy, rep.Violations, rep.Overlaps))
		}
	}
	return res, nil
}

// recorder collects handler latencies per key class, and how much longer
// than asked the handlers' sleeps took.
type recorder struct {
	mu                     sync.Mutex
	victim, hot, overshoot *hdrhistogram.Histogram
	asked, slept           time.Duration
}

func newRecorder() *recorder {
	// Microseconds, up to an hour, three significant digits.
	h := func() *hdrhistogram.Histogram { return hdrhistogram.New(1, int64(time.Hour/time.Microsecond), 3) }
	return &recorder{victim: h(), hot: h(), overshoot: h()}
}

// record adds one item: its latency d, its cost and how much longer than
// its cost its handler's sleep took.
func (r *recorder) record(hot bool, d, cost, over time.Duration) {
	us := max(1, d.Microseconds())
	r.mu.Lock()
	defer r.mu.Unlock()
	if hot {
		_ = r.hot.RecordValue(us)
	} else {
		_ = r.victim.RecordValue(us)
	}
	_ = r.overshoot.RecordValue(max(1, over.Microseconds()))
	r.asked += cost
	r.slept += cost + max(over, 0)
}

// snapshot returns the latency histograms, the sleep overshoots, and the
// stretch: the handlers' time asleep over the time they asked for (1 on
// an ideal machine).
func (r *recorder) snapshot() (victim, hot, overshoot *hdrhistogram.Histogram, stretch float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	stretch = 1
	if r.asked > 0 {
		stretch = float64(r.slept) / float64(r.asked)
	}
	return r.victim, r.hot, r.overshoot, stretch
}

func quantileMS(h *hdrhistogram.Histogram, p float64) float64 {
	if h.TotalCount() == 0 {
		return 0
	}
	return float64(h.ValueAtQuantile(p)) / 1000
}

func quantiles(h *hdrhistogram.Histogram) []Quantile {
	out := make([]Quantile, 0, len(percentiles))
	for _, p := range percentiles {
		out = append(out, Quantile{Percentile: p, MS: quantileMS(h, p)})
	}
	return out
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// ParseStrategies turns names such as "shared", "keyed" into strategies,
// refusing unknown names and repeats.
func ParseStrategies(names []string) ([]dispatch.Strategy, error) {
	var out []dispatch.Strategy
	for _, f := range names {
		st, err := dispatch.ParseStrategy(strings.TrimSpace(f))
		if err != nil {
			return nil, err
		}
		if slices.Contains(out, st) {
			return nil, fmt.Errorf("%q listed twice", st)
		}
		out = append(out, st)
	}
	return out, nil
}
