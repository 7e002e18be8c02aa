package admission

import (
	"cmp"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/stampede-lab/stampede/lab"
	"github.com/stampede-lab/stampede/waitroom"
)

// median returns a summary's median metric for one condition.
func median(r *lab.Result, mode waitroom.Mode, tickMS float64, immediate, metric string) (float64, bool) {
	return r.Median(metric, map[string]any{"mode": string(mode), "tick_ms": tickMS, "immediate": immediate})
}

// Render implements lab.Experiment: occupancy over time against capacity
// per tick and immediate setting (first repeat), and admissions per second
// per tick with and without immediate admission. The Runner adds the
// expectations table.
func (e *Experiment) Render(r *lab.Result, dir string) (string, error) {
	var b strings.Builder
	c := e.cfg
	for _, tick := range c.Ticks {
		for _, imm := range c.Immediate {
			chart := lab.LineChart{
				Title:  fmt.Sprintf("Room occupancy, tick %s, immediate %s (repeat 1)", tick, onOff(imm)),
				XLabel: "time since start (s)", YLabel: "users in the room",
				Lines: []lab.HLine{{Name: "capacity", Y: float64(c.Capacity)}},
			}
			for _, run := range r.Runs {
				d, ok := run.Extra.(RunDetail)
				if !ok || run.Repeat != 0 || run.Condition["tick_ms"] != float64(tick.Milliseconds()) || run.Condition["immediate"] != onOff(imm) {
					continue
				}
				s := lab.Series{Name: fmt.Sprint(run.Condition["mode"])}
				for _, p := range d.Active {
					s.X = append(s.X, float64(p.MS)/1000)
					s.Y = append(s.Y, float64(p.Value))
				}
				if len(s.X) > 0 {
					chart.Series = append(chart.Series, s)
				}
			}
			if len(chart.Series) == 0 {
				continue
			}
			name := fmt.Sprintf("admission-active-tick%dms-immediate-%s.png", tick.Milliseconds(), onOff(imm))
			if err := chart.Save(filepath.Join(dir, name)); err != nil {
				return "", err
			}
			fmt.Fprintf(&b, "![occupancy, tick %s, immediate %s](%s)\n\n", tick, onOff(imm), name)
		}
	}

	rate := lab.LineChart{Title: "Admissions per second against the admit interval (atomic)", XLabel: "admit interval (ms)", YLabel: "admissions/s"}
	for _, imm := range c.Immediate {
		s := lab.Series{Name: "immediate " + onOff(imm)}
		for _, tick := range c.Ticks {
			if v, ok := median(r, waitroom.ModeAtomic, float64(tick.Milliseconds()), onOff(imm), "admissions_per_s"); ok {
				s.X, s.Y = append(s.X, float64(tick.Milliseconds())), append(s.Y, v)
			}
		}
		if len(s.X) > 0 {
			rate.Series = append(rate.Series, s)
		}
	}
	if len(rate.Series) > 0 {
		if err := rate.Save(filepath.Join(dir, "admission-rate-by-tick.png")); err != nil {
			return "", err
		}
		b.WriteString("![admissions per second by tick](admission-rate-by-tick.png)\n\n")
	}
	return b.String(), nil
}

// Expectations implements lab.Experiment: the claims checked
// against the runs (over capacity) and the medians (utilization, rate). A
// claim about a configured mode, tick or immediate setting whose figure is
// missing does not hold.
func (e *Experiment) Expectations(r *lab.Result) *lab.Expectations {
	c := e.cfg
	var x lab.Expectations
	hasMode := func(m waitroom.Mode) bool { return slices.Contains(c.Modes, m) }
	hasImmediate := func(on bool) bool { return slices.Contains(c.Immediate, on) }
	// Over capacity is judged on every run that measured it, valid or
	// not, not on medians: one sighting is enough.
	maxBy := map[string]float64{}
	for _, run := range r.Runs {
		v, ok := run.Metrics["max_active_observed"]
		if !ok || math.IsNaN(v) {
			continue
		}
		m := fmt.Sprint(run.Condition["mode"])
		maxBy[m] = max(maxBy[m], v)
	}
	for _, m := range c.Modes {
		v, ok := maxBy[string(m)]
		var claim string
		switch m {
		case ModeNaive:
			claim = fmt.Sprintf("naive with %d instances goes over capacity (the published write-up: 193 in a room of 100)", c.Instances)
		case waitroom.ModeAtomic:
			claim = "atomic never goes over capacity, in any run"
		default:
			if ok {
				x.Report(fmt.Sprintf("%s: reported, no claim", m), fmt.Sprintf("max %.0f in a room of %d", v, c.Capacity))
			}
			continue
		}
		if !ok {
			x.Missing(claim, fmt.Sprintf("max_active_observed of every %s run", m))
			continue
		}
		figure := fmt.Sprintf("max %.0f in a room of %d", v, c.Capacity)
		if m == ModeNaive {
			x.Check(claim, figure, v > float64(c.Capacity))
		} else {
			x.Check(claim, figure, v <= float64(c.Capacity))
		}
	}
	if hasMode(waitroom.ModeAtomic) && hasImmediate(true) {
		for _, tick := range c.Ticks {
			claim := fmt.Sprintf("atomic, tick %s, immediate on: slot utilization ≥ 0.95", tick)
			if v, ok := median(r, waitroom.ModeAtomic, float64(tick.Milliseconds()), "on", "slot_utilization"); ok {
				x.Check(claim, fmt.Sprintf("%.3f", v), v >= 0.95)
			} else {
				x.Missing(claim, fmt.Sprintf("slot_utilization of atomic, tick %s, immediate on", tick))
			}
		}
	}
	if hasMode(waitroom.ModeAtomic) && hasImmediate(false) && len(c.Ticks) >= 2 {
		claim := "immediate off: a shorter tick admits more per second (the published write-up: 2 s → 15/s, 200 ms → 19/s)"
		var parts, missing []string
		increasing := true
		prev := -1.0
		for _, tick := range sortedDesc(c.Ticks) {
			v, ok := median(r, waitroom.ModeAtomic, float64(tick.Milliseconds()), "off", "admissions_per_s")
			if !ok {
				missing = append(missing, fmt.Sprintf("admissions_per_s of atomic, tick %s, immediate off", tick))
				continue
			}
			parts = append(parts, fmt.Sprintf("%s: %.1f/s", tick, v))
			if v < prev {
				increasing = false
			}
			prev = v
		}
		if len(missing) > 0 {
			x.Missing(claim, missing...)
		} else {
			x.Check(claim, strings.Join(parts, ", "), increasing)
		}
	}
	return &x
}

// sortedDesc returns the ticks from the longest to the shortest.
func sortedDesc(ticks []time.Duration) []time.Duration {
	out := slices.Clone(ticks)
	slices.SortFunc(out, func(a, b time.Duration) int { return cmp.Compare(b, a) })
	return out
}
