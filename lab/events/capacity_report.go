package events

import (
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"github.com/stampede-lab/stampede/lab"
)

// The scaling targets: events/s of n workers over one worker's.
var capacityTargets = map[int]float64{2: 1.7, 4: 3}

// Expectations implements lab.Expectations: on each ledger layout,
// nothing lost, no effect applied twice, no order violation or overlap;
// with per-worker ledgers (the consumer's own scaling) 2 workers drain at
// least 1.7× and 4 workers at least 3× as fast as one, the issue's
// targets. On the shared ledger the same ratios are reported, not claimed:
// one SQLite file admits one writer at a time, a bound of the lab's effect
// store rather than of the consumer. The CPU per event and the cores in
// use are reported for every condition.
func (e *Capacity) Expectations(r *lab.Result) *lab.Expectations {
	var x lab.Expectations
	for _, l := range e.cfg.Ledgers {
		for _, w := range e.cfg.Workers {
			match := map[string]any{"ledger": l, "workers": w}
			name := fmt.Sprintf("%s ledger, %d workers", l, w)
			for _, m := range []string{"lost", "duplicate_effects", "violations", "overlaps"} {
				v, ok := r.Median(m, match)
				var miss []string
				if !ok {
					miss = []string{m + " of " + name}
				}
				x.Judge(fmt.Sprintf("%s: %s 0", name, m), miss, func() (string, bool) { return fmt.Sprintf("%.0f", v), v == 0 })
			}
		}
		hasOne := slices.Contains(e.cfg.Workers, 1)
		for _, w := range e.cfg.Workers {
			target, ok := capacityTargets[w]
			if !ok || !hasOne {
				continue
			}
			claim := fmt.Sprintf("%s ledger: %d workers drain ≥ %g× as fast as 1", l, w, target)
			v, ok := r.Median("x_one_worker", map[string]any{"ledger": l, "workers": w})
			if l == LedgerShared {
				if ok {
					x.Report(claim+" (reported, not claimed: one SQLite writer at a time)", fmt.Sprintf("%.2f×", v))
				}
				continue
			}
			var miss []string
			if !ok {
				miss = []string{fmt.Sprintf("x_one_worker of %d workers, %s ledger", w, l)}
			}
			x.Judge(claim, miss, func() (string, bool) { return fmt.Sprintf("%.2f×", v), v >= target })
		}
		for _, w := range e.cfg.Workers {
			match := map[string]any{"ledger": l, "workers": w}
			wc, ok1 := r.Median("worker_cpu_us_per_event", match)
			lc, ok2 := r.Median("lab_cpu_us_per_event", match)
			used, ok3 := r.Median("cores_used", match)
			busy, ok4 := r.Median("machine_busy_cores", match)
			if !ok1 || !ok3 {
				continue
			}
			fig := fmt.Sprintf("workers %.0f µs/event", wc)
			if ok2 {
				fig += fmt.Sprintf(", lab process (nats-server) %.0f µs/event", lc)
			}
			fig += fmt.Sprintf("; %.2f cores used", used)
			if ok4 {
				fig += fmt.Sprintf(", machine %.2f of %d busy", busy, runtime.NumCPU())
			}
			x.Report(fmt.Sprintf("%s ledger, %d workers: CPU", l, w), fig)
		}
	}
	return &x
}

// Render implements lab.Experiment: events/s against worker processes per
// ledger layout, beside the handlers' bound and one worker's rate times n,
// saved as events-scaling.png.
func (e *Capacity) Render(r *lab.Result, dir string) (string, error) {
	c := e.cfg
	var b strings.Builder
	workers := slices.Clone(c.Workers)
	slices.Sort(workers)
	chart := lab.LineChart{Title: fmt.Sprintf("Draining %d events, %s handler, %d per worker", c.Backlog, c.Cost, c.Concurrency),
		XLabel: "worker processes", YLabel: "events/s"}
	for _, w := range workers {
		chart.XTicks = append(chart.XTicks, lab.Tick{Value: float64(w), Label: fmt.Sprint(w)})
	}
	for _, l := range c.Ledgers {
		s := lab.Series{Name: l + " ledger"}
		for _, w := range workers {
			if v, ok := r.Median("events_per_s", map[string]any{"ledger": l, "workers": w}); ok {
				s.X, s.Y = append(s.X, float64(w)), append(s.Y, v)
			}
		}
		if len(s.X) > 0 {
			chart.Series = append(chart.Series, s)
		}
	}
	if len(chart.Series) == 0 {
		return "No valid run: no chart.\n", nil
	}
	if one, ok := r.Median("events_per_s", map[string]any{"ledger": c.Ledgers[len(c.Ledgers)-1], "workers": 1}); ok {
		s := lab.Series{Name: fmt.Sprintf("n × 1 worker (%s)", c.Ledgers[len(c.Ledgers)-1])}
		for _, w := range workers {
			s.X, s.Y = append(s.X, float64(w)), append(s.Y, one*float64(w))
		}
		chart.Series = append(chart.Series, s)
	}
	bound := lab.Series{Name: "handler bound (n × concurrency ÷ cost)"}
	for _, w := range workers {
		bound.X, bound.Y = append(bound.X, float64(w)), append(bound.Y, float64(w*c.Concurrency)/c.Cost.Seconds())
	}
	chart.Series = append(chart.Series, bound)
	if err := chart.Save(filepath.Join(dir, "events-scaling.png")); err != nil {
		return "", err
	}
	b.WriteString("![events/s against worker processes](events-scaling.png)\n\n")
	fmt.Fprintf(&b, "A backlog of %d events over %d keys (%g of them on key-000) is published before any worker starts; then 1, 2, 4… worker processes drain it, "+
		"worker i serving the partitions p with p mod n = i. events_per_s is the applied events over the time from the first handler's start to the last commit; "+
		"startup_ms is the time from starting the first process to the first handler. x_one_worker is events_per_s over the 1-worker run of the same ledger and repeat "+
		"(the median of those paired ratios); x_handler_bound is events_per_s over n × concurrency ÷ cost, what sleeping handlers alone would allow. "+
		"worker_cpu_us_per_event is the worker processes' CPU time (user + system, from their rusage) per applied event; lab_cpu_us_per_event the lab process's "+
		"(the embedded nats-server, the publisher is not in the window); cores_used both over the drain's wall time; machine_busy_cores every process of the "+
		"machine over the same window (/proc/stat), out of %d. The shared ledger is one SQLite file every worker writes; per-worker ledgers are merged after the run "+
		"for the accounting.\n", c.Backlog, c.Keys, c.HotShare, runtime.NumCPU())
	return b.String(), nil
}
