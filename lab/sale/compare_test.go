package sale

import (
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/stampede-lab/stampede/lab"
)

// TestParseWindow reads FROM-TO shares and none, and refuses the rest.
func TestParseWindow(t *testing.T) {
	for in, want := range map[string][2]float64{"0.2-0.6": {0.2, 0.6}, "none": {}, "0-1": {0, 1}} {
		got, err := ParseWindow(in)
		if err != nil || got != want {
			t.Errorf("ParseWindow(%q) = %v, %v; want %v", in, got, err, want)
		}
		if in != "0-1" && FormatWindow(got) != in {
			t.Errorf("FormatWindow(%v) = %q, want %q", got, FormatWindow(got), in)
		}
	}
	for _, in := range []string{"0.5", "0.6-0.2", "a-b", "0.2-1.5", "-0.1-0.2"} {
		if _, err := ParseWindow(in); err == nil {
			t.Errorf("ParseWindow(%q) accepted", in)
		}
	}
}

// TestCompareAdaptiveClaims: with CompareAdaptive the sale has a static
// and an adaptive condition, and the claim about the adaptive outflow
// holds only when its medians beat the static ones (fewer UNKNOWN
// payments, no more released holds, or fewer when the institution hangs
// before processing, a p99 no worse), each invariant is checked for both,
// and the table shows each run.
func TestCompareAdaptiveClaims(t *testing.T) {
	cfg := QuickConfig()
	cfg.Outflow, cfg.CompareAdaptive = 600, true
	cfg.Cmd = func(args []string) *exec.Cmd { return nil }
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	conds := e.Conditions()
	if len(conds) != 2 || conds[0].Values["outflow"] != "static-600" || conds[1].Values["outflow"] != "adaptive-600" {
		t.Fatalf("conditions %v, want static-600 and adaptive-600", conds)
	}
	result := func(static, adaptive lab.Metrics) *lab.Result {
		r := &lab.Result{}
		for i, m := range []lab.Metrics{static, adaptive} {
			med := map[string]any{}
			for k, v := range conds[i].Values {
				med[k] = v
			}
			for k, v := range m {
				med[k] = v
			}
			r.Summary = append(r.Summary, lab.Summary{Condition: conds[i].Values, Median: med, ValidRuns: 1})
			r.Runs = append(r.Runs, lab.Run{Condition: conds[i].Values, Valid: true, Metrics: m})
		}
		return r
	}
	sale := func(unknown, released, p99 float64) lab.Metrics {
		m := lab.Metrics{"unknown_payments": unknown, "abandoned_holds": released, "join_to_ticket_p99_ms": p99, "tickets": 60, "seats_sold": 60,
			"p99_ticket_queue_ms": p99 / 4, "p99_ticket_checkout_ms": p99 * 3 / 4, "admitted_5s_after_hang": 100 + unknown}
		for _, z := range invariantMetrics {
			m[z.metric] = 0
		}
		return m
	}
	held := func(r *lab.Result) (holds, fails []string) {
		for _, x := range e.Expectations(r).List() {
			if !strings.HasPrefix(x.Claim, "adaptive outflow:") {
				if !x.Holds {
					t.Errorf("invariant %q does not hold: %s", x.Claim, x.Figure)
				}
				continue
			}
			if x.Holds {
				holds = append(holds, x.Claim)
			} else {
				fails = append(fails, x.Claim)
			}
		}
		return holds, fails
	}
	if h, f := held(result(sale(40, 3, 9000), sale(12, 3, 8000))); len(h) != 3 || len(f) != 0 {
		t.Errorf("adaptive better: held %v, failed %v; want all three held", h, f)
	}
	if _, f := held(result(sale(40, 3, 9000), sale(40, 4, 9500))); len(f) != 3 {
		t.Errorf("adaptive no better: failed %v, want all three failed", f)
	}
	if h, _ := held(result(sale(40, 3, 9000), sale(12, 3, 8000))); !slices.Contains(h, "adaptive outflow: no more abandoned holds (released unsold) than static") {
		t.Errorf("hang after processing, as many released holds: held %v, want the holds' claim (no more) held", h)
	}
	e.cfg.HangBefore = true
	if _, f := held(result(sale(40, 3, 9000), sale(12, 3, 8000))); !slices.Equal(f, []string{"adaptive outflow: fewer abandoned holds (released unsold) than static"}) {
		t.Errorf("hang before processing, as many released holds: failed %v, want only the holds' claim (fewer)", f)
	}
	if h, f := held(result(sale(40, 3, 9000), sale(12, 2, 8000))); len(h) != 3 || len(f) != 0 {
		t.Errorf("hang before processing, adaptive better: held %v, failed %v; want all three held", h, f)
	}
	e.cfg.HangBefore = false
	n := 0
	for _, x := range e.Expectations(result(sale(1, 1, 1), sale(1, 1, 1))).List() {
		if strings.HasPrefix(x.Claim, "static-600: ") || strings.HasPrefix(x.Claim, "adaptive-600: ") {
			n++
		}
	}
	if want := 2 * (len(invariantMetrics) + 1); n != want {
		t.Errorf("%d invariant claims, want %d: each invariant and seats = tickets for both outflows", n, want)
	}
	table := e.comparison(result(sale(40, 3, 9000), sale(12, 2, 8000)))
	for _, want := range []string{"| static-600 | 40 (40) | 3 (3) |", "| adaptive-600 | 12 (12) | 2 (2) |", "9.0 (9.0) s", "8.0 (8.0) s",
		"| static-600 | 2.2 (2.2) s | 6.8 (6.8) s | 140 (140) |", "| adaptive-600 | 2.0 (2.0) s | 6.0 (6.0) s | 112 (112) |"} {
		if !strings.Contains(table, want) {
			t.Errorf("the table lacks %q:\n%s", want, table)
		}
	}
}

// TestAdmittedAfterHang reads the admitted total at the last sample within
// the given seconds after the hang's end, the hang split by another
// fault's window included, and nothing without a hang.
func TestAdmittedAfterHang(t *testing.T) {
	var points []Point
	for i := range 30 {
		points = append(points, Point{T: float64(i) / 2, AdmittedTotal: float64(10 * i)})
	}
	marks := []Mark{{Fault: "institution hangs", From: 2, To: 4}, {Fault: "institution hangs, status API down", From: 4, To: 6}, {Fault: "status API down", From: 6, To: 9}}
	if n, ok := admittedAfterHang(points, marks, 5); !ok || n != 220 {
		t.Errorf("admittedAfterHang = %v, %v; want 220 (t = 11 s), true", n, ok)
	}
	if n, ok := admittedAfterHang(points, marks[2:], 5); ok {
		t.Errorf("admittedAfterHang without a hang = %v, true; want false", n)
	}
}
