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
	inv := "safe"
	if e.cfg.UnsafeInventory {
		inv = "unsafe"
	}
	match := map[string]any{"inventory": inv}
	zero := func(claim, metric string) {
		v, ok := r.Median(metric, match)
		if !ok {
			x.Missing(claim, metric)
			return
		}
		x.Check(claim, fmt.Sprintf("%s = %g", metric, v), v == 0)
	}
	if e.cfg.UnsafeInventory {
		// The checker must catch the oversell of an unsafe checkout.
		v, ok := r.Median("oversold", match)
		if !ok {
			x.Missing("the unsafe checkout oversells and the report catches it", "oversold")
		} else {
			x.Check("the unsafe checkout oversells and the report catches it", fmt.Sprintf("oversold = %g", v), v > 0)
		}
	} else {
		zero("no seat sold twice or beyond the seats", "oversold")
	}
	zero("every buyer accounted for", "unaccounted_buyers")
	zero("0 double charges", "double_charges")
	zero("parity between institution, payments, orders and tickets", "parity_mismatches")
	zero("room never over capacity at the checkout's view", "over_capacity_samples")
	zero("0 event order violations", "order_violations")
	if t, ok := r.Median("tickets", match); ok {
		s, _ := r.Median("seats_sold", match)
		x.Check("seats sold = tickets", fmt.Sprintf("seats_sold = %g, tickets = %g", s, t), s == t)
	} else {
		x.Missing("seats sold = tickets", "tickets")
	}
	for _, k := range []string{"join_to_ticket_p50_ms", "join_to_ticket_p95_ms", "join_to_ticket_p99_ms", "max_active", "max_checkout_buyers", "bot_joins", "bot_joins_limited"} {
		if v, ok := r.Median(k, match); ok {
			x.Report(k, fmt.Sprintf("%g", v))
		}
	}
	return x
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
	keys := make([]int, 0, len(e.series))
	for k := range e.series {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		data, _ := json.Marshal(e.series[k])
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("sale-series-%d.json", k)), data, 0o644); err != nil {
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
	var marks []lab.VLine
	for _, m := range s.Marks {
		marks = append(marks, lab.VLine{Name: m.Fault, X: m.From})
	}
	col := func(f func(Point) float64) ([]float64, []float64) {
		var xs, ys []float64
		for _, p := range s.Points {
			xs = append(xs, p.T)
			ys = append(ys, f(p))
		}
		return xs, ys
	}
	series := func(name string, f func(Point) float64) lab.Series {
		xs, ys := col(f)
		return lab.Series{Name: name, X: xs, Y: ys}
	}
	prefix := "sale"
	if e.cfg.UnsafeInventory {
		prefix = "sale-unsafe"
	}
	charts := []struct {
		file  string
		chart lab.LineChart
	}{
		{"queue", lab.LineChart{Title: "Queue length and room", YLabel: "users", Series: []lab.Series{
			series("waiting", func(p Point) float64 { return p.Waiting }),
			series("active (room)", func(p Point) float64 { return p.Active }),
			series("buyers holding at the checkout", func(p Point) float64 { return max(0, p.CheckoutHeld) }),
		}, Lines: []lab.HLine{{Name: "capacity", Y: float64(e.cfg.Capacity)}}}},
		{"admitted", lab.LineChart{Title: "Admitted (total)", YLabel: "users", Series: []lab.Series{
			series("admitted", func(p Point) float64 { return p.AdmittedTotal }),
		}}},
		{"admission-rate", lab.LineChart{Title: "Admission rate", YLabel: "admissions/s", Series: []lab.Series{
			series("rate", func(p Point) float64 { return p.AdmissionRate }),
		}}},
		{"payments", lab.LineChart{Title: "Payments by status", YLabel: "payments", Series: []lab.Series{
			series("APPROVED", func(p Point) float64 { return p.Payments["APPROVED"] }),
			series("DECLINED", func(p Point) float64 { return p.Payments["DECLINED"] }),
			series("UNKNOWN", func(p Point) float64 { return p.Payments["UNKNOWN"] }),
			series("PENDING", func(p Point) float64 { return p.Payments["PENDING"] }),
			series("FAILED", func(p Point) float64 { return p.Payments["FAILED"] }),
		}}},
		{"lag", lab.LineChart{Title: "Outbox and consumer lag", YLabel: "events", Series: []lab.Series{
			series("outbox (unpublished)", func(p Point) float64 { return p.Outbox }),
			series("consumer lag (pending + held)", func(p Point) float64 { return p.ConsumerLag }),
		}}},
		{"seats", lab.LineChart{Title: "Seats left and sold", YLabel: "seats", Series: []lab.Series{
			series("seats left", func(p Point) float64 { return p.SeatsLeft }),
			series("sold", func(p Point) float64 { return p.Sold }),
		}, Lines: []lab.HLine{{Name: "seats", Y: float64(e.cfg.Seats)}}}},
	}
	b.WriteString("Dotted verticals mark the faults and the institution's changes.\n\n")
	for _, c := range charts {
		c.chart.XLabel = "seconds since the sale opened"
		c.chart.Marks = marks
		name := prefix + "-" + c.file + ".png"
		if err := c.chart.Save(filepath.Join(dir, name)); err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "![%s](%s)\n", c.chart.Title, name)
	}
	b.WriteString("\n| fault | from (s) | to (s) |\n|---|---:|---:|\n")
	for _, m := range s.Marks {
		fmt.Fprintf(&b, "| %s | %.1f | %.1f |\n", m.Fault, m.From, m.To)
	}
	return b.String(), nil
}
