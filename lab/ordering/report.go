package ordering

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"

	"github.com/stampede-lab/stampede/dispatch"
	"github.com/stampede-lab/stampede/lab"
)

// publishedFigure is one row of the published dispatcher write-up's table (3-run medians).
type publishedFigure struct {
	strategy   dispatch.Strategy
	load       float64
	violations float64
	stolen     float64
	victimP99  float64
}

// publishedTable is the table of the published dispatcher write-up.
var publishedTable = []publishedFigure{
	{dispatch.Shared, 0.4, 0, 0, 9.6},
	{dispatch.Partition, 0.4, 0, 0, 116.6},
	{dispatch.Steal, 0.4, 0, 0, 109.4},
	{dispatch.Shared, 1.0, 0, 0, 9.6},
	{dispatch.Partition, 1.0, 0, 0, 4430.4},
	{dispatch.Steal, 1.0, 26, 192, 439.9},
	{dispatch.Shared, 2.0, 56, 0, 10.0},
	{dispatch.Partition, 2.0, 0, 0, 22894.5},
	{dispatch.Steal, 2.0, 188, 1394, 506.9},
}

// median returns a summary's median metric for one strategy and load.
func median(r *lab.Result, s dispatch.Strategy, load float64, metric string) (float64, bool) {
	return r.Median(metric, map[string]any{"strategy": string(s), "hot_load": load})
}

// Render implements lab.Experiment: the victim p99 chart, one latency
// distribution chart per hot load, and the write-up's figures beside ours. The
// Runner adds the expectations table (see Expectations).
func (e *Experiment) Render(r *lab.Result, dir string) (string, error) {
	var b strings.Builder
	loads := e.cfg.HotLoads

	p99 := lab.LineChart{
		Title:  "Victim p99 latency against hot-key load",
		XLabel: "hot key load (workers)", YLabel: "victim p99 (ms, log)", LogY: true,
	}
	for _, s := range e.cfg.Strategies {
		ser := lab.Series{Name: string(s)}
		for _, load := range loads {
			if v, ok := median(r, s, load, "victim_p99_ms"); ok {
				ser.X, ser.Y = append(ser.X, load), append(ser.Y, v)
			}
		}
		if len(ser.X) > 0 {
			p99.Series = append(p99.Series, ser)
		}
	}
	if len(p99.Series) > 0 {
		if err := p99.Save(filepath.Join(dir, "ordering-victim-p99.png")); err != nil {
			return "", err
		}
		b.WriteString("![victim p99 against hot load](ordering-victim-p99.png)\n\n")
	}

	b.WriteString("Latency distributions per key class (median over repeats of each percentile, " +
		"on an axis that gives each extra nine the same room):\n\n")
	for _, load := range loads {
		chart := lab.LineChart{
			Title:  fmt.Sprintf("Latency by key class, hot load %g", load),
			XLabel: "percentile", YLabel: "latency (ms, log)", LogY: true,
			LegendBottomRight: true,
		}
		for _, p := range []float64{50, 90, 99, 99.9} {
			chart.XTicks = append(chart.XTicks, lab.Tick{Value: nines(p), Label: fmt.Sprintf("p%g", p)})
		}
		for _, s := range e.cfg.Strategies {
			for _, class := range []string{"victim", "hot"} {
				if ser, ok := distribution(r, s, load, class); ok {
					chart.Series = append(chart.Series, ser)
				}
			}
		}
		if len(chart.Series) == 0 {
			continue
		}
		name := fmt.Sprintf("ordering-latency-hot%g.png", load)
		if err := chart.Save(filepath.Join(dir, name)); err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "![latency by key class at hot load %g](%s)\n\n", load, name)
	}

	b.WriteString(e.publishedComparison(r))
	return b.String(), nil
}

// distribution is the median latency curve of one strategy, load and key
// class across repeats, with percentiles on a "nines" axis.
func distribution(r *lab.Result, s dispatch.Strategy, load float64, class string) (lab.Series, bool) {
	var curves [][]Quantile
	for _, run := range r.Runs {
		d, ok := run.Extra.(RunDetail)
		if !ok || !run.Valid || run.Condition["strategy"] != string(s) || run.Condition["hot_load"] != load {
			continue
		}
		curves = append(curves, d.Latency[class])
	}
	if len(curves) == 0 {
		return lab.Series{}, false
	}
	ser := lab.Series{Name: fmt.Sprintf("%s %s", s, class)}
	for i, p := range percentiles {
		if p >= 100 {
			continue // the maximum has no place on a nines axis
		}
		var vals []float64
		for _, c := range curves {
			if i < len(c) {
				vals = append(vals, c[i].MS)
			}
		}
		slices.Sort(vals)
		ser.X = append(ser.X, nines(p))
		ser.Y = append(ser.Y, vals[len(vals)/2])
	}
	return ser, true
}

// nines places a percentile on a log axis of its tail: p90 at 1, p99 at 2,
// p99.9 at 3.
func nines(p float64) float64 { return -math.Log10(1 - p/100) }

// Expectations implements lab.Experiment: the shape the issue expects,
// checked against our medians. Each claim says what was expected, what we
// measured and whether it held; none of them tunes anything. A claim about
// a configured strategy and load whose median is missing does not hold.
func (e *Experiment) Expectations(r *lab.Result) *lab.Expectations {
	var x lab.Expectations
	has := func(s dispatch.Strategy) bool { return slices.Contains(e.cfg.Strategies, s) }
	// need looks a median up and records what is missing.
	need := func(missing *[]string, s dispatch.Strategy, load float64, metric string) float64 {
		v, ok := median(r, s, load, metric)
		if !ok {
			*missing = append(*missing, fmt.Sprintf("%s of %s at hot load %g", metric, s, load))
		}
		return v
	}
	check := x.Judge
	loads := e.cfg.HotLoads
	for _, load := range loads {
		if load > 0.5 {
			continue
		}
		for _, s := range e.cfg.Strategies {
			var miss []string
			v := need(&miss, s, load, "victim_p99_ms")
			check(fmt.Sprintf("%s at hot load %g: victim p99 under ~150 ms", s, load), miss,
				func() (string, bool) { return fmt.Sprintf("%.1f ms", v), v < 150 })
		}
	}
	if has(dispatch.Partition) {
		for _, load := range loads {
			var miss []string
			v := need(&miss, dispatch.Partition, load, "violations")
			check(fmt.Sprintf("partition at hot load %g: 0 violations", load), miss,
				func() (string, bool) { return fmt.Sprintf("%.0f", v), v == 0 })
			if load >= 1 {
				want, limit := "seconds", 1000.0
				if load >= 2 {
					want, limit = "> 10 s (with 20 s runs)", 10000
				}
				var miss []string
				v := need(&miss, dispatch.Partition, load, "victim_p99_ms")
				check(fmt.Sprintf("partition at hot load %g: victim p99 diverges to %s", load, want), miss,
					func() (string, bool) { return fmt.Sprintf("%.0f ms", v), v >= limit })
			}
		}
	}
	if has(dispatch.Steal) {
		for _, load := range loads {
			if load < 1 {
				continue
			}
			var miss []string
			v := need(&miss, dispatch.Steal, load, "stolen")
			check(fmt.Sprintf("steal at hot load %g: moves items", load), miss,
				func() (string, bool) { return fmt.Sprintf("%.0f stolen", v), v > 0 })
			if load >= 2 {
				var miss []string
				v := need(&miss, dispatch.Steal, load, "victim_p99_ms")
				check(fmt.Sprintf("steal at hot load %g: victim p99 below 1 s", load), miss,
					func() (string, bool) { return fmt.Sprintf("%.0f ms", v), v < 1000 })
				miss = nil
				w := need(&miss, dispatch.Steal, load, "violations")
				check(fmt.Sprintf("steal at hot load %g: violates order", load), miss,
					func() (string, bool) { return fmt.Sprintf("%.0f violations", w), w > 0 })
			}
		}
	}
	if has(dispatch.Shared) {
		var seqMissing []string
		var seq []string
		prev := -1.0
		grows := true
		for _, load := range loads {
			var miss []string
			p := need(&miss, dispatch.Shared, load, "victim_p99_ms")
			check(fmt.Sprintf("shared at hot load %g: victim p99 near 10 ms", load), miss,
				func() (string, bool) { return fmt.Sprintf("%.1f ms", p), p < 20 })
			v := need(&seqMissing, dispatch.Shared, load, "violations")
			seq = append(seq, fmt.Sprintf("%.0f", v))
			if v < prev {
				grows = false
			}
			prev = v
		}
		check("shared: violations grow with hot load (write-up: 0, 0, 56)", seqMissing,
			func() (string, bool) { return strings.Join(seq, ", "), grows && prev > 0 })
	}
	if has(dispatch.Keyed) {
		for _, load := range loads {
			var miss []string
			v := need(&miss, dispatch.Keyed, load, "violations")
			check(fmt.Sprintf("keyed at hot load %g: 0 violations", load), miss,
				func() (string, bool) { return fmt.Sprintf("%.0f", v), v == 0 })
			if !has(dispatch.Shared) {
				continue
			}
			miss = nil
			k := need(&miss, dispatch.Keyed, load, "victim_p99_ms")
			sh := need(&miss, dispatch.Shared, load, "victim_p99_ms")
			check(fmt.Sprintf("keyed at hot load %g: victim p99 at most 2× shared's", load), miss,
				func() (string, bool) {
					return fmt.Sprintf("%.1f ms vs %.1f ms (%.2f×)", k, sh, k/sh), k <= 2*sh
				})
		}
	}
	return &x
}

// publishedComparison puts the write-up's figures beside ours.
func (e *Experiment) publishedComparison(r *lab.Result) string {
	var b strings.Builder
	b.WriteString("### Beside the published dispatcher write-up (its 3-run medians, 20 s runs)\n\n")
	b.WriteString("| strategy | hot load | violations (write-up → ours) | stolen (write-up → ours) | victim p99 ms (write-up → ours) |\n|---|---|---|---|---|\n")
	n := 0
	for _, f := range publishedTable {
		v, ok := median(r, f.strategy, f.load, "violations")
		if !ok {
			continue
		}
		st, _ := median(r, f.strategy, f.load, "stolen")
		p, _ := median(r, f.strategy, f.load, "victim_p99_ms")
		fmt.Fprintf(&b, "| %s | %g | %g → %.0f | %g → %.0f | %.1f → %.1f |\n", f.strategy, f.load, f.violations, v, f.stolen, st, f.victimP99, p)
		n++
	}
	if n == 0 {
		return ""
	}
	fmt.Fprintf(&b, "\nThis run: %s of arrivals per condition, %d repeat(s). Partition's and keyed's hot backlog grows for as long as arrivals last, "+
		"so their divergent figures scale with the run length; compare them with the write-up at 20 s (`--full`).\n\n",
		e.cfg.Duration, e.cfg.Repeat)
	return b.String()
}
