package soak

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stampede-lab/stampede/internal/freeport"
	"github.com/stampede-lab/stampede/lab"
	"github.com/stampede-lab/stampede/lab/sale"
)

// Experiment is the soak lab.
type Experiment struct {
	cfg Config
	// the last run's series and verdicts, for Render
	mu       sync.Mutex
	series   []Series
	verdicts []Verdict
	warmup   float64
	logMu    sync.Mutex
}

// New returns the experiment for cfg.
func New(cfg Config) (*Experiment, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Experiment{cfg: cfg}, nil
}

// Name implements lab.Experiment.
func (e *Experiment) Name() string { return "soak" }

// Params implements lab.Experiment.
func (e *Experiment) Params() any {
	c := e.cfg
	return map[string]any{
		"minutes": c.Duration.Minutes(), "warmup_s": c.warmup().Seconds(), "sample_s": c.Sample.Seconds(), "min_window_s": c.MinWindow.Seconds(),
		"rate": c.Rate, "refund_share": c.RefundShare, "refund_after_s": c.RefundAfter.Seconds(),
		"queue_abandon": c.QueueAbandon, "checkout_abandon": c.CheckoutAbandon,
		"capacity": c.Capacity, "lease_s": c.Lease.Seconds(), "retention_s": c.Retention.Seconds(), "seats": c.seats(),
		"tolerances": c.Tolerances, "planted_leak_bytes_per_s": c.LeakRate,
		"redis": redact(c.Redis), "postgres": redact(c.Postgres), "nats": redact(c.NATS), "seed": c.Seed,
	}
}

// redact names a real service without its credentials, or "embedded".
func redact(u string) string {
	if u == "" {
		return "embedded"
	}
	if at := strings.LastIndexByte(u, '@'); at >= 0 {
		if s := strings.Index(u, "://"); s >= 0 && s < at {
			return u[:s+3] + "…" + u[at:]
		}
	}
	return u
}

// services names the run's services for the condition.
func (e *Experiment) services() string {
	if e.cfg.Redis == "" && e.cfg.Postgres == "" && e.cfg.NATS == "" {
		return "embedded"
	}
	return "real"
}

// Conditions implements lab.Experiment: one, the configured soak.
func (e *Experiment) Conditions() []lab.Condition {
	return []lab.Condition{{Label: fmt.Sprintf("services=%s minutes=%g", e.services(), e.cfg.Duration.Minutes()),
		Values: map[string]any{"services": e.services(), "minutes": e.cfg.Duration.Minutes()}, Keys: []string{"services", "minutes"}}}
}

// Repeats implements lab.Experiment: one soak.
func (e *Experiment) Repeats() int { return 1 }

// Columns implements lab.Experiment.
func (e *Experiment) Columns() []string {
	return []string{"buyers", "tickets", "refunds_requested", "oversold", "double_charges", "double_refunds", "parity_mismatches",
		"refund_parity_mismatches", "parts_exited", "judged_series", "growing_series", "join_to_admission_p99_ms", "payment_p99_ms"}
}

// logf calls Config.Log, one call at a time.
func (e *Experiment) logf(format string, args ...any) {
	if e.cfg.Log != nil {
		e.logMu.Lock()
		defer e.logMu.Unlock()
		e.cfg.Log(format, args...)
	}
}

// trip is one buyer's trip, as the soak keeps it.
type trip struct {
	sale.Trip
	refund bool
}

// Run implements lab.Experiment: one soak.
func (e *Experiment) Run(ctx context.Context, _ lab.Condition, repeat int) (lab.RunResult, error) {
	cfg := e.cfg
	dir := cfg.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "stampede-soak-")
		if err != nil {
			return lab.RunResult{}, err
		}
		dir = d
	}
	dir = filepath.Join(dir, fmt.Sprintf("run-%d", repeat))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return lab.RunResult{}, err
	}
	defer func() {
		if !cfg.Keep {
			os.RemoveAll(dir)
		}
	}()
	sc := sale.DefaultConfig()
	sc.Faults, sc.Bots = nil, 0
	sc.Seats, sc.Capacity, sc.Lease, sc.Retention = cfg.seats(), cfg.Capacity, cfg.Lease, cfg.Retention
	sc.Redis, sc.Postgres, sc.NATS = cfg.Redis, cfg.Postgres, cfg.NATS
	sc.Cmd, sc.Log, sc.Seed, sc.Keep = cfg.Cmd, e.logf, cfg.Seed, cfg.Keep
	e.logf("soak: starting the parts in %s", dir)
	rig, err := sale.StartRig(ctx, sc, dir)
	if err != nil {
		return lab.RunResult{Valid: false, Reason: err.Error()}, nil
	}
	defer rig.Close()
	if cfg.LeakRate > 0 {
		port, err := freeport.Restartable()
		if err != nil {
			return lab.RunResult{}, err
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		if err := rig.StartPart(ctx, "leak", "http://"+addr+"/healthz", "http://"+addr+"/metrics",
			"lab", "soak-leak", "--http", addr, "--rate", strconv.FormatInt(cfg.LeakRate, 10)); err != nil {
			return lab.RunResult{Valid: false, Reason: err.Error()}, nil
		}
		e.logf("soak: planted a leak of %d bytes and a goroutine a second (process leak)", cfg.LeakRate)
	}

	start := time.Now()
	smp, err := newSampler(rig, cfg.Tolerances, start, cfg.Redis != "")
	if err != nil {
		return lab.RunResult{Valid: false, Reason: err.Error()}, nil
	}
	defer smp.close()
	sctx, stopSampling := context.WithCancel(ctx)
	var bg sync.WaitGroup
	bg.Go(func() { smp.run(sctx, cfg.Sample) })

	// The buyers: Poisson arrivals at Rate for Duration; each plays the
	// sale's buyer, and some paid orders are refunded RefundAfter later.
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x50a6))
	bctx, endBuyers := context.WithTimeout(ctx, cfg.Duration+3*time.Minute)
	defer endBuyers()
	var (
		tripsMu  sync.Mutex
		trips    []trip
		refunded []string
		answers  = map[string]int{}
		buyers   sync.WaitGroup
		arrived  atomic.Int64
	)
	e.logf("soak: open for %s: %.1f buyers a second, %d seats, a room of %d", cfg.Duration, cfg.Rate, cfg.seats(), cfg.Capacity)
	end := start.Add(cfg.Duration)
	progress := time.NewTicker(time.Minute)
	defer progress.Stop()
	next := start
	for n := 0; ; n++ {
		next = next.Add(time.Duration(rng.ExpFloat64() / cfg.Rate * float64(time.Second)))
		if next.After(end) {
			break
		}
		var patience time.Duration
		if rng.Float64() < cfg.QueueAbandon {
			patience = time.Duration(1+rng.IntN(8)) * time.Second
		}
		leave := rng.Float64() < cfg.CheckoutAbandon
		refund := rng.Float64() < cfg.RefundShare
		wait := time.NewTimer(time.Until(next))
	pace:
		for {
			select {
			case <-ctx.Done():
				wait.Stop()
				break pace
			case <-progress.C:
				tripsMu.Lock()
				done, tickets := len(trips), 0
				for _, t := range trips {
					if t.End == "ticket" {
						tickets++
					}
				}
				nref := len(refunded)
				tripsMu.Unlock()
				la, _ := loadAverage()
				e.logf("soak: %s: %d buyers arrived, %d done, %d tickets, %d refunds asked; load %.1f", time.Since(start).Round(time.Second), arrived.Load(), done, tickets, nref, la)
			case <-wait.C:
				break pace
			}
		}
		if ctx.Err() != nil {
			break
		}
		arrived.Add(1)
		buyers.Go(func() {
			t := trip{Trip: rig.Buy(bctx, n, patience, leave), refund: refund}
			tripsMu.Lock()
			trips = append(trips, t)
			tripsMu.Unlock()
			if !refund || t.End != "ticket" || t.PaymentID == "" {
				return
			}
			if !sleep(bctx, cfg.RefundAfter) {
				return
			}
			tripsMu.Lock()
			refunded = append(refunded, t.PaymentID)
			tripsMu.Unlock()
			status := "error"
			for try := 0; try < 5; try++ {
				rctx, cancel := context.WithTimeout(bctx, 10*time.Second)
				st, err := rig.Refund(rctx, t.PaymentID, "soak-refund-"+t.PaymentID)
				cancel()
				if err == nil {
					status = st
					break
				}
				if !sleep(bctx, time.Second) {
					break
				}
			}
			tripsMu.Lock()
			answers[status]++
			tripsMu.Unlock()
		})
	}
	arrivalsEnd := time.Since(start).Seconds()
	stopSampling()
	bg.Wait()
	tripsMu.Lock()
	finished := len(trips)
	tripsMu.Unlock()
	e.logf("soak: arrivals over after %.0f s; waiting for %d buyers to finish", arrivalsEnd, arrived.Load()-int64(finished))
	buyers.Wait()
	drained := rig.Drain(ctx, 2*time.Minute)

	m := lab.Metrics{}
	extra := map[string]any{"dir": dir}
	broken, err := rig.Check(ctx, refunded, m, extra)
	if err != nil {
		return lab.RunResult{}, err
	}

	// Outcomes and latencies.
	counts := map[string]int{}
	var adm, paid []float64
	bucket := min(time.Minute, max(cfg.Sample, cfg.Duration/20)).Seconds()
	admBy, payBy := map[int][]float64{}, map[int][]float64{}
	for _, t := range trips {
		counts[t.End]++
		if !t.Joined.IsZero() && !t.Admitted.IsZero() {
			ms := float64(t.Admitted.Sub(t.Joined).Microseconds()) / 1000
			adm = append(adm, ms)
			i := int(t.Admitted.Sub(start).Seconds() / bucket)
			admBy[i] = append(admBy[i], ms)
		}
		if !t.Purchased.IsZero() && !t.Settled.IsZero() {
			ms := float64(t.Settled.Sub(t.Purchased).Microseconds()) / 1000
			paid = append(paid, ms)
			i := int(t.Settled.Sub(start).Seconds() / bucket)
			payBy[i] = append(payBy[i], ms)
		}
	}
	m["buyers"] = float64(len(trips))
	for _, k := range append(slices.Clone(sale.Outcomes), "order_pending") {
		m["buyers_"+k] = float64(counts[k])
	}
	m["refunds_requested"] = float64(len(refunded))
	extra["refund_answers"] = answers
	for _, q := range []struct {
		name string
		q    float64
	}{{"p50", 0.5}, {"p99", 0.99}} {
		if len(adm) > 0 {
			m["join_to_admission_"+q.name+"_ms"] = quantile(adm, q.q)
		}
		if len(paid) > 0 {
			m["payment_"+q.name+"_ms"] = quantile(paid, q.q)
		}
	}
	series := smp.all()
	series = append(series, perBucket("join to admission p99", admBy, bucket, arrivalsEnd, cfg.Tolerances[FamilyLatency]),
		perBucket("payment p99", payBy, bucket, arrivalsEnd, cfg.Tolerances[FamilyLatency]))

	// The slopes.
	warmup := cfg.warmup().Seconds()
	var verdicts []Verdict
	judged, growing := 0, 0
	for _, s := range series {
		v := Judge(s, warmup, cfg.MinWindow)
		verdicts = append(verdicts, v)
		if v.Judged {
			judged++
		}
		if v.Grows {
			growing++
			broken = append(broken, "leak: "+v.String())
		}
	}
	m["judged_series"] = float64(judged)
	m["growing_series"] = float64(growing)
	smp.mu.Lock()
	var exited []string
	for p := range smp.exited {
		exited = append(exited, p)
	}
	samples := 0
	if len(series) > 0 {
		samples = len(series[0].Points)
	}
	extra["sampler_errors"] = smp.errors
	smp.mu.Unlock()
	sort.Strings(exited)
	m["parts_exited"] = float64(len(exited))
	if len(exited) > 0 {
		broken = append(broken, fmt.Sprintf("parts exited during the soak: %v", exited))
	}
	m["samples"] = float64(samples)
	extra["verdicts"] = verdicts
	extra["arrivals_s"] = arrivalsEnd
	extra["warmup_s"] = warmup

	e.mu.Lock()
	e.series, e.verdicts, e.warmup = series, verdicts, warmup
	e.mu.Unlock()

	res := lab.RunResult{Metrics: m, Broken: broken, Extra: extra, Valid: true}
	switch {
	case counts["ticket"] == 0:
		res.Valid, res.Reason = false, "no buyer got a ticket"
	case samples < 3:
		res.Valid, res.Reason = false, fmt.Sprintf("the sampler took only %d samples", samples)
	}
	if !drained {
		res.Reason = joinReason(res.Reason, "the drain did not finish within 2m")
	}
	return res, nil
}

// perBucket is the p99 of each bucket of seconds as a series, each point
// at its bucket's end (the last, partial one left out).
func perBucket(name string, by map[int][]float64, bucket, until float64, tol Tolerance) Series {
	s := Series{Name: name, Family: FamilyLatency, Unit: "ms", Judged: true, Tolerance: tol}
	var keys []int
	for k := range by {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	for _, k := range keys {
		t := float64(k+1) * bucket
		if t > until+bucket/2 {
			continue
		}
		s.Points = append(s.Points, Sample{T: t, V: quantile(by[k], 0.99)})
	}
	return s
}

// quantile is the q-quantile of xs (nearest rank); xs is sorted in place.
func quantile(xs []float64, q float64) float64 {
	sort.Float64s(xs)
	return xs[min(len(xs)-1, max(0, int(math.Ceil(q*float64(len(xs))))-1))]
}

// joinReason joins two reasons.
func joinReason(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// sleep is lab.Sleep.
var sleep = lab.Sleep
