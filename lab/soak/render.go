package soak

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/stampede-lab/stampede/lab"
)

// Expectations implements lab.Experiment: every invariant 0, and every
// judged series flat within its tolerance (skipped when the run is too
// short to judge a slope).
func (e *Experiment) Expectations(r *lab.Result) *lab.Expectations {
	x := &lab.Expectations{}
	match := map[string]any{"services": e.services()}
	zero := func(claim, metric string) {
		v, ok := r.Median(metric, match)
		if !ok {
			x.Missing(claim, metric)
			return
		}
		x.Check(claim, fmt.Sprintf("%s = %g", metric, v), v == 0)
	}
	zero("no seat sold twice or beyond the seats", "oversold")
	zero("0 double charges", "double_charges")
	zero("0 double refunds", "double_refunds")
	zero("parity between institution, payments, orders and tickets", "parity_mismatches")
	zero("refunds: pay and the institution agree on every refunded payment", "refund_parity_mismatches")
	zero("no part exited", "parts_exited")
	judged, ok := r.Median("judged_series", match)
	switch {
	case !ok:
		x.Missing("every series flat after the warm-up (slope within its tolerance)", "judged_series")
	case judged == 0:
		x.Skip("every series flat after the warm-up (slope within its tolerance)",
			fmt.Sprintf("the run leaves less than %s (or fewer than %d samples) after its warm-up: slopes reported, not judged", e.cfg.MinWindow, MinSamples))
	default:
		zero("every series flat after the warm-up (slope within its tolerance)", "growing_series")
	}
	for _, k := range []string{"buyers", "tickets", "refunds_requested", "join_to_admission_p50_ms", "join_to_admission_p99_ms", "payment_p50_ms", "payment_p99_ms"} {
		if v, ok := r.Median(k, match); ok {
			x.Report(k, fmt.Sprintf("%g", v))
		}
	}
	return x
}

// Render implements lab.Experiment: the slopes' table and a chart per
// family of series; every series goes to soak-series.json.
func (e *Experiment) Render(r *lab.Result, dir string) (string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.cfg
	var b strings.Builder
	b.WriteString("### The soak\n\n")
	fmt.Fprintf(&b, "A rolling sale for %s on %s services: %.1f buyers a second (Poisson), a room of %d (lease %s, retention %s), %d seats, %.0f %% of paid orders refunded %s after paying, %.0f %% walking away in the queue and %.0f %% with a seat on hold; every part a process (3 gates, checkout, pay, institution, 3 workers). Sampled every %s; slopes fitted after a warm-up of %s.",
		c.Duration, e.services(), c.Rate, c.Capacity, c.Lease, c.Retention, c.seats(), 100*c.RefundShare, c.RefundAfter, 100*c.QueueAbandon, 100*c.CheckoutAbandon, c.Sample, c.warmup())
	if c.LeakRate > 0 {
		fmt.Fprintf(&b, " A planted leak (process `leak`: %d bytes and one goroutine a second) runs beside the parts.", c.LeakRate)
	}
	fmt.Fprintf(&b, "\n\nVerdict: **%s**.", r.Verdict())
	if len(r.Problems) > 0 {
		b.WriteString(" Broken or invalid: " + strings.Join(r.Problems, "; ") + ".")
	}
	b.WriteString("\n\n")
	if len(e.verdicts) > 0 {
		b.WriteString("| series | unit | mean | first → last | slope / h | allowed / h | verdict |\n|---|---|---:|---:|---:|---:|---|\n")
		for _, v := range e.verdicts {
			verdict := "flat"
			switch {
			case v.Grows:
				verdict = "**GROWS**"
			case !v.Judged:
				verdict = v.Reason
			}
			allowed := human(v.Allowed, v.Unit)
			if !v.Judged {
				allowed = "–"
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s → %s | %s | %s | %s |\n", v.Name, v.Unit, human(v.Mean, v.Unit), human(v.First, v.Unit), human(v.Last, v.Unit),
				human(v.SlopePerHour, v.Unit), allowed, verdict)
		}
		b.WriteString("\n")
	}
	data, _ := json.Marshal(map[string]any{"warmup_s": e.warmup, "series": e.series, "verdicts": e.verdicts})
	if err := os.WriteFile(filepath.Join(dir, "soak-series.json"), data, 0o644); err != nil {
		return "", err
	}
	if len(e.series) == 0 {
		return b.String(), nil
	}
	families := []struct{ family, title, ylabel string }{
		{FamilyRSS, "Resident memory per process", "bytes"},
		{FamilyHeap, "Go heap in use per process", "bytes"},
		{FamilyRuntime, "Go runtime: heap freed but kept, and stacks, per process", "bytes"},
		{FamilyGoroutines, "Goroutines per process", "goroutines"},
		{FamilyFiles, "Open files per process", "files"},
		{FamilyRedisKeys, "Redis keys", "keys"},
		{FamilyRedisBytes, "Redis: the room's memory", "bytes"},
		{"redis_server", "Redis: the server's used_memory", "bytes"},
		{FamilyLogEntry, "Redis: the room's admission log per entry", "bytes / entry"},
		{"log_bytes", "Redis: the room's admission log", "bytes"},
		{FamilyStore, "Databases per payment", "bytes / payment"},
		{"store_bytes", "Databases", "bytes"},
		{FamilyStream, "Event stream per payment", "bytes / payment"},
		{"stream_bytes", "Event stream", "bytes"},
		{FamilyLatency, "p99 latency per minute", "ms"},
		{"load", "Machine load (1 min)", "runnable"},
	}
	b.WriteString("The shaded strip is the warm-up, whose samples the slopes leave out.\n\n")
	for _, f := range families {
		var ss []lab.Series
		for _, s := range e.series {
			if s.Family != f.family || len(s.Points) == 0 {
				continue
			}
			var xs, ys []float64
			for _, p := range s.Points {
				xs = append(xs, p.T/60)
				ys = append(ys, p.V)
			}
			ss = append(ss, lab.Series{Name: s.Name, X: xs, Y: ys})
		}
		if len(ss) == 0 {
			continue
		}
		ch := lab.TimeChart{Title: f.title, XLabel: "minutes since the soak began",
			Panels: []lab.Panel{{YLabel: f.ylabel, FromZero: true, Series: ss}},
			Spans:  []lab.Span{{Name: "warm-up", From: 0, To: e.warmup / 60}}}
		name := "soak-" + strings.ReplaceAll(f.family, "_", "-") + ".png"
		if err := ch.Save(filepath.Join(dir, name)); err != nil {
			return "", fmt.Errorf("soak: chart %s: %w", f.family, err)
		}
		fmt.Fprintf(&b, "![%s](%s)\n", f.title, name)
	}
	return b.String(), nil
}
