package sale

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/stampede-lab/stampede/fulfilment/sqlstore"
	"github.com/stampede-lab/stampede/lab"
)

// openFulfilment opens the fulfilment store for reading the tickets.
func openFulfilment(ctx context.Context, d *dbs) (*sqlstore.Store, error) {
	cfg := sqlstore.DefaultConfig()
	if d.pg {
		cfg.PostgresURL, cfg.SQLitePath = d.fulURL, ""
	} else {
		cfg.SQLitePath = d.sqliteFul
	}
	return sqlstore.Open(ctx, cfg)
}

// Expectations implements lab.Experiment: the invariants as claims, with
// their medians, and the figures of the sale.
func (e *Experiment) Expectations(r *lab.Result) *lab.Expectations {
	x := &lab.Expectations{}
	for _, c := range e.Conditions() {
		prefix := ""
		if e.cfg.CompareAdaptive {
			prefix = fmt.Sprint(c.Values["outflow"]) + ": "
		}
		e.invariants(x, r, map[string]any{"inventory": c.Values["inventory"], "outflow": c.Values["outflow"]}, prefix)
	}
	if e.cfg.CompareAdaptive {
		e.adaptiveClaims(x, r)
	}
	return x
}

// invariants adds the sale's invariants as claims about the condition
// match, each claim prefixed, and its figures.
func (e *Experiment) invariants(x *lab.Expectations, r *lab.Result, match map[string]any, prefix string) {
	zero := func(claim, metric string) {
		v, ok := r.Median(metric, match)
		if !ok {
			x.Missing(prefix+claim, metric)
			return
		}
		x.Check(prefix+claim, fmt.Sprintf("%s = %g", metric, v), v == 0)
	}
	if e.cfg.UnsafeInventory {
		// The checker must catch the oversell of an unsafe checkout.
		v, ok := r.Median("oversold", match)
		if !ok {
			x.Missing(prefix+"the unsafe checkout oversells and the report catches it", "oversold")
		} else {
			x.Check(prefix+"the unsafe checkout oversells and the report catches it", fmt.Sprintf("oversold = %g", v), v > 0)
		}
	} else {
		zero("no seat sold twice or beyond the seats", "oversold")
	}
	for _, z := range invariantMetrics[1:] {
		zero(z.claim, z.metric)
	}
	if t, ok := r.Median("tickets", match); ok {
		s, _ := r.Median("seats_sold", match)
		x.Check(prefix+"seats sold = tickets", fmt.Sprintf("seats_sold = %g, tickets = %g", s, t), s == t)
	} else {
		x.Missing(prefix+"seats sold = tickets", "tickets")
	}
	for _, k := range []string{"unknown_payments", "abandoned_holds", "buyers_failed", "join_to_ticket_p50_ms", "join_to_ticket_p95_ms", "join_to_ticket_p99_ms", "max_active", "max_checkout_buyers", "bot_joins", "bot_joins_limited"} {
		if v, ok := r.Median(k, match); ok {
			x.Report(prefix+k, fmt.Sprintf("%g", v))
		}
	}
}

// invariantMetrics are the sale's invariants, each a metric that must be
// 0 (oversold first: an unsafe checkout must break it instead).
var invariantMetrics = []struct{ claim, metric string }{
	{"no seat sold twice or beyond the seats", "oversold"},
	{"every buyer accounted for", "unaccounted_buyers"},
	{"0 double charges", "double_charges"},
	{"no buyer charged without a ticket", "charged_without_ticket"},
	{"parity between institution, payments, orders and tickets", "parity_mismatches"},
	{"room never over capacity at the checkout's view", "over_capacity_samples"},
	{"0 event order violations", "order_violations"},
	{"the admission log verifies (chain, queue order, capacity)", "fairness_failures"},
}

// adaptiveClaims checks the adaptive outflow's claim against the static
// one (medians of the same sale): fewer checkout timeouts (payments the
// institution left UNKNOWN), fewer abandoned holds (holds released
// unsold) when the institution hangs before processing (the payments
// into the hang fail and release their holds), no more when it hangs
// after (its UNKNOWN payments settle approved and keep their holds), and
// a join-to-ticket p99 no worse.
func (e *Experiment) adaptiveClaims(x *lab.Expectations, r *lab.Result) {
	static := map[string]any{"outflow": outflowLabel(e.cfg.Outflow, false)}
	adaptive := map[string]any{"outflow": outflowLabel(e.cfg.Outflow, true)}
	compare := func(claim, metric, unit string, holds func(a, s float64) bool) {
		var missing []string
		s, okS := r.Median(metric, static)
		if !okS {
			missing = append(missing, metric+" of "+static["outflow"].(string))
		}
		a, okA := r.Median(metric, adaptive)
		if !okA {
			missing = append(missing, metric+" of "+adaptive["outflow"].(string))
		}
		x.Judge(claim, missing, func() (string, bool) {
			return fmt.Sprintf("adaptive %g%s, static %g%s", a, unit, s, unit), holds(a, s)
		})
	}
	compare("adaptive outflow: fewer checkout timeouts (payments left UNKNOWN) than static", "unknown_payments", "", func(a, s float64) bool { return a < s })
	if e.cfg.HangBefore {
		compare("adaptive outflow: fewer abandoned holds (released unsold) than static", "abandoned_holds", "", func(a, s float64) bool { return a < s })
	} else {
		compare("adaptive outflow: no more abandoned holds (released unsold) than static", "abandoned_holds", "", func(a, s float64) bool { return a <= s })
	}
	compare("adaptive outflow: join→ticket p99 not worse than static", "join_to_ticket_p99_ms", " ms", func(a, s float64) bool { return a <= s })
}

// comparison is the table of the static and adaptive outflows: the
// medians and, in brackets, each run's figure.
func (e *Experiment) comparison(r *lab.Result) string {
	var b strings.Builder
	hang := "after processing"
	if e.cfg.HangBefore {
		hang = "before processing"
	}
	fmt.Fprintf(&b, "Outflow static at %d/min against adaptive below it, the same sale (seed %d); institution hangs (%s) over %s, status API down over %s, declines over %s of %s (hang %d ms). Medians of the valid runs, each run in brackets (run order).\n\n",
		e.cfg.Outflow, e.cfg.Seed, hang, FormatWindow(e.cfg.InstitutionHang), FormatWindow(e.cfg.StatusDown), FormatWindow(e.cfg.Decline), e.cfg.Timeline, e.cfg.HangMS)
	b.WriteString("| outflow | checkout timeouts (UNKNOWN) | holds released unsold | buyers failed | join→ticket p50 | join→ticket p99 | tickets | invariants (sum over runs) |\n|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, adaptive := range []bool{false, true} {
		label, cell := e.comparisonCells(r, adaptive)
		broken := 0.0
		for _, run := range validRuns(r, label) {
			for _, z := range invariantMetrics {
				broken += run.Metrics[z.metric]
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s s | %s s | %s | %g |\n", label, cell("unknown_payments", 1, "%g"), cell("abandoned_holds", 1, "%g"),
			cell("buyers_failed", 1, "%g"), cell("join_to_ticket_p50_ms", 1000, "%.1f"), cell("join_to_ticket_p99_ms", 1000, "%.1f"), cell("tickets", 1, "%g"), broken)
	}
	b.WriteString("\nWhat the p99 is made of: the p99 ticket's wait in the queue (join to admission) and at the checkout (admission to ticket), and how far the room had gone through the same crowd 5 s after the institution's hang (admissions the adaptive outflow withheld and had not made up show as fewer).\n\n")
	b.WriteString("| outflow | p99 ticket: queue | p99 ticket: checkout | admitted 5 s after the hang |\n|---|---:|---:|---:|\n")
	for _, adaptive := range []bool{false, true} {
		label, cell := e.comparisonCells(r, adaptive)
		fmt.Fprintf(&b, "| %s | %s s | %s s | %s |\n", label, cell("p99_ticket_queue_ms", 1000, "%.1f"), cell("p99_ticket_checkout_ms", 1000, "%.1f"), cell("admitted_5s_after_hang", 1, "%g"))
	}
	b.WriteString("\n")
	return b.String()
}

// validRuns are the valid runs of the outflow labelled label.
func validRuns(r *lab.Result, label string) []lab.Run {
	var runs []lab.Run
	for _, run := range r.Runs {
		if run.Condition["outflow"] == label && run.Valid {
			runs = append(runs, run)
		}
	}
	return runs
}

// comparisonCells returns the label of the static or adaptive outflow and
// a function formatting one metric's cell for it: the median of the valid
// runs divided by scale and, in brackets, each run's figure.
func (e *Experiment) comparisonCells(r *lab.Result, adaptive bool) (string, func(metric string, scale float64, format string) string) {
	label := outflowLabel(e.cfg.Outflow, adaptive)
	runs := validRuns(r, label)
	return label, func(metric string, scale float64, format string) string {
		m, ok := r.Median(metric, map[string]any{"outflow": label})
		if !ok {
			return "missing"
		}
		var each []string
		for _, run := range runs {
			each = append(each, fmt.Sprintf(format, run.Metrics[metric]/scale))
		}
		return fmt.Sprintf(format, m/scale) + " (" + strings.Join(each, ", ") + ")"
	}
}

// Render implements lab.Experiment: the charts of the first valid run
// (every run's series go to sale-series-<repeat>.json) and the verdict.
func (e *Experiment) Render(r *lab.Result, dir string) (string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	var b strings.Builder
	b.WriteString("### The sale\n\n")
	fmt.Fprintf(&b, "%d buyers (%.0f %% within %s), %d seats, a room of %d, 3 gates, pay with --require-admission, 3 workers; faults: %s; institution hangs over %v, status API down over %v, declines over %v of the first %s; inventory rule %s.\n\n",
		e.cfg.Buyers, 100*e.cfg.SurgeShare, e.cfg.Surge, e.cfg.Seats, e.cfg.Capacity, strings.Join(e.cfg.Faults, ", "),
		e.cfg.InstitutionHang, e.cfg.StatusDown, e.cfg.Decline, e.cfg.Timeline, map[bool]string{true: "OFF (--unsafe-inventory)", false: "on"}[e.cfg.UnsafeInventory])
	if e.cfg.CompareAdaptive {
		b.WriteString(e.comparison(r))
	}
	fmt.Fprintf(&b, "Verdict: **%s**.", r.Verdict())
	if len(r.Problems) > 0 {
		b.WriteString(" Broken or invalid: " + strings.Join(r.Problems, "; ") + ".")
	}
	b.WriteString("\n\n")
	if len(r.Runs) > 0 {
		run := r.Runs[0]
		if ex, ok := run.Extra.(map[string]any); ok {
			if counts, ok := ex["buyers"].(map[string]int); ok {
				b.WriteString("| outcome | buyers |\n|---|---:|\n")
				total := 0
				for _, k := range Outcomes {
					fmt.Fprintf(&b, "| %s | %d |\n", k, counts[k])
					total += counts[k]
				}
				fmt.Fprintf(&b, "| **sum** | **%d** of %d |\n\n", total, e.cfg.Buyers)
			}
		}
	}
	keys := make([]string, 0, len(e.series))
	for k := range e.series {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		data, _ := json.Marshal(e.series[k])
		if err := os.WriteFile(filepath.Join(dir, "sale-series-"+strings.TrimPrefix(k, "run-")+".json"), data, 0o644); err != nil {
			return "", err
		}
	}
	if len(keys) == 0 {
		return b.String(), nil
	}
	s := e.series[keys[0]]
	if len(s.Points) == 0 {
		return b.String(), nil
	}
	prefix := "sale"
	if e.cfg.UnsafeInventory {
		prefix = "sale-unsafe"
	}
	names, err := drawCharts(dir, prefix, s, e.cfg)
	if err != nil {
		return "", err
	}
	b.WriteString("Faults are numbered bars in the strip above each chart (how long each lasted), dotted lines across its panels (when each began), and named below it.\n\n")
	for _, n := range names {
		fmt.Fprintf(&b, "![%s](%s)\n", n.title, n.file)
	}
	b.WriteString("\n| fault | from (s) | to (s) |\n|---|---:|---:|\n")
	for _, m := range s.Marks {
		fmt.Fprintf(&b, "| %s | %.1f | %.1f |\n", m.Fault, m.From, m.To)
	}
	return b.String(), nil
}

// chartFile is a chart drawn into a file.
type chartFile struct{ title, file string }

// drawCharts draws the six charts of one run's series into dir, named
// <prefix>-<chart>.png, and returns their titles and file names.
func drawCharts(dir, prefix string, s runSeries, cfg Config) ([]chartFile, error) {
	var spans []lab.Span
	for _, m := range s.Marks {
		spans = append(spans, lab.Span{Name: m.Fault, From: m.From, To: m.To})
	}
	series := func(name string, f func(Point) float64) lab.Series {
		var xs, ys []float64
		for _, p := range s.Points {
			xs = append(xs, p.T)
			ys = append(ys, f(p))
		}
		return lab.Series{Name: name, X: xs, Y: ys}
	}
	payments := func(status string) lab.Series {
		return series(status, func(p Point) float64 { return p.Payments[status] })
	}
	charts := []struct {
		file  string
		chart lab.TimeChart
	}{
		{"queue", lab.TimeChart{Title: "Queue and room", Panels: []lab.Panel{
			{YLabel: "users waiting", FromZero: true, Series: []lab.Series{
				series("waiting", func(p Point) float64 { return p.Waiting }),
			}},
			{YLabel: "users", FromZero: true, Series: []lab.Series{
				series("active (room)", func(p Point) float64 { return p.Active }),
				series("holding at the checkout", func(p Point) float64 { return max(0, p.CheckoutHeld) }),
			}, Lines: []lab.HLine{{Name: "capacity", Y: float64(cfg.Capacity)}}},
		}}},
		{"admitted", lab.TimeChart{Title: "Admitted (total)", Panels: []lab.Panel{
			{YLabel: "users", FromZero: true, Series: []lab.Series{
				series("admitted", func(p Point) float64 { return p.AdmittedTotal }),
			}},
		}}},
		{"admission-rate", lab.TimeChart{Title: "Admission rate", Panels: []lab.Panel{
			{YLabel: "admissions/s", FromZero: true, Series: []lab.Series{
				series("admissions/s", func(p Point) float64 { return p.AdmissionRate }),
			}},
		}}},
		{"payments", lab.TimeChart{Title: "Payments by status", Panels: []lab.Panel{
			{YLabel: "payments", FromZero: true, Series: []lab.Series{payments("APPROVED"), payments("DECLINED")}},
			{YLabel: "payments", FromZero: true, Series: []lab.Series{payments("PENDING"), payments("UNKNOWN"), payments("FAILED")}},
		}}},
		{"lag", lab.TimeChart{Title: "Outbox and consumer lag", Panels: []lab.Panel{
			{YLabel: "events", FromZero: true, Series: []lab.Series{
				series("outbox (unpublished)", func(p Point) float64 { return p.Outbox }),
			}},
			{YLabel: "events", FromZero: true, Series: []lab.Series{
				series("consumer lag (pending + held)", func(p Point) float64 { return p.ConsumerLag }),
			}},
		}}},
		{"seats", lab.TimeChart{Title: "Seats left and sold", Panels: []lab.Panel{
			{YLabel: "seats", FromZero: true, Series: []lab.Series{
				series("seats left", func(p Point) float64 { return p.SeatsLeft }),
				series("sold", func(p Point) float64 { return p.Sold }),
			}, Lines: []lab.HLine{{Name: "seats", Y: float64(cfg.Seats)}}},
		}}},
	}
	var out []chartFile
	for _, c := range charts {
		c.chart.XLabel = "seconds since the sale opened"
		c.chart.Spans = spans
		name := prefix + "-" + c.file + ".png"
		if err := c.chart.Save(filepath.Join(dir, name)); err != nil {
			return nil, err
		}
		out = append(out, chartFile{c.chart.Title, name})
	}
	return out, nil
}
