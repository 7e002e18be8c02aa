package events

import (
	"fmt"
	"strings"

	"github.com/stampede-lab/stampede/lab"
)

// Expectations implements lab.Expectations. Under every fault and worker
// count: nothing lost, no effect applied twice, no per-key order violation
// and no overlap (a worker paused past the ack deadline included: its late
// writes are fenced); the victims' p99 outside the fault windows within 3×
// the in-process keyed dispatcher's on the same stream (and the overall
// p99 too without a fault); and the hot key's partition neighbours no
// slower at the p99 than the other partitions' victims by more than one
// handler time of the hot key (HotCost: a key never waits for the hot
// key's queue, only, at worst, for the one handler it occupies). Under faults the overall victim p99 is reported,
// not claimed: a fault stalls a share of the partitions for longer than
// the 1 % tail can absorb (see the model in docs/lab/events.md).
func (e *Experiment) Expectations(r *lab.Result) *lab.Expectations {
	var x lab.Expectations
	judgeMetric := func(claim string, match map[string]any, m string, want func(float64) bool, figure func(float64) string) {
		v, ok := r.Median(m, match)
		var miss []string
		if !ok {
			miss = []string{m + " of " + claim}
		}
		x.Judge(claim, miss, func() (string, bool) { return figure(v), want(v) })
	}
	count := func(v float64) string { return fmt.Sprintf("%.0f", v) }
	hotMS := float64(e.cfg.hotCost()) / 1e6
	poisons := []float64{0}
	if e.cfg.Poison > 0 {
		poisons = append(poisons, e.cfg.Poison)
	}
	for _, load := range e.cfg.HotLoads {
		base, baseOK := r.Median("victim_p99_ms", map[string]any{"workers": 0, "fault": FaultNone, "hot_load": load})
		for _, w := range e.cfg.Workers {
			for _, f := range e.cfg.Faults {
				for _, poison := range poisons {
					match := map[string]any{"workers": w, "fault": f, "hot_load": load, "poison": poison}
					name := fmt.Sprintf("%d workers, fault %s, hot load %g", w, f, load)
					if poison > 0 {
						e.poisonExpectations(r, &x, fmt.Sprintf("%s, poison %g", name, poison), match, judgeMetric)
						continue
					}
					for _, m := range []string{"lost", "duplicate_effects", "violations", "overlaps"} {
						judgeMetric(fmt.Sprintf("%s: %s 0", name, m), match, m, func(v float64) bool { return v == 0 }, count)
					}
					ratio := func(m string) (float64, bool) {
						v, ok := r.Median(m, match)
						if !ok || !baseOK || base <= 0 {
							return 0, false
						}
						return v / base, true
					}
					within := func(m, what string) {
						claim := fmt.Sprintf("%s: %s within 3× in-process (%.1f ms)", name, what, base)
						q, ok := ratio(m)
						var miss []string
						if !ok {
							miss = []string{m + " or the in-process baseline"}
						}
						x.Judge(claim, miss, func() (string, bool) { return fmt.Sprintf("%.2f×", q), q <= 3 })
					}
					within("victim_p99_calm_ms", "victim p99 outside the fault windows")
					if f == FaultNone {
						within("victim_p99_ms", "victim p99")
					} else if q, ok := ratio("victim_p99_ms"); ok {
						v, _ := r.Median("victim_p99_ms", match)
						rec, _ := r.Median("recovery_ms", match)
						x.Report(fmt.Sprintf("%s: victim p99 over the whole run, faults included (not claimed)", name),
							fmt.Sprintf("%.0f ms = %.1f× in-process; longest recovery %.0f ms", v, q, rec))
					}
					nb, ok1 := r.Median("neighbour_p99_ms", match)
					ot, ok2 := r.Median("other_p99_ms", match)
					var miss []string
					if !ok1 || !ok2 {
						miss = []string{"neighbour_p99_ms or other_p99_ms"}
					}
					x.Judge(fmt.Sprintf("%s: the hot key's partition neighbours' p99 at most one hot handler time (%.0f ms) above the other partitions'", name, hotMS),
						miss, func() (string, bool) {
							return fmt.Sprintf("%.1f − %.1f = %+.1f ms", nb, ot, nb-ot), nb-ot <= hotMS
						})
				}
			}
		}
	}
	return &x
}

// Render implements lab.Experiment: what the table means (no charts).
func (e *Experiment) Render(r *lab.Result, dir string) (string, error) {
	var b strings.Builder
	b.WriteString("Workers 0 is the in-process keyed dispatcher with one worker process's handlers: the victim p99 baseline. ")
	b.WriteString("Each other row runs real worker processes on one JetStream stream; a kill hits worker 0, a pause worker 1, a restart the embedded nats-server, halfway through the arrivals (several faults joined with + at evenly spaced points). ")
	b.WriteString("lost: published events never applied; duplicate_effects: events applied twice despite the inbox; violations and overlaps: dispatch.Ledger replaying the applied effects' start and commit times; redeliveries: handler attempts with a delivery count above 1; fenced: writes the ledger refused (stale epoch, or a key's sequence going backwards). ")
	b.WriteString("victim_p99_calm_ms: victims (keys other than the hot one) whose publish-to-commit interval meets no fault window (a fault until the last slow victim it caused, at most 5 s; recovery_ms is the longest window); neighbour_p99_ms and other_p99_ms split those by whether the key shares the hot key's partition. ")
	b.WriteString("With --poison, a poisoned row marks that share of the other keys' events to fail until healed: each is parked with its key's later events after --max-attempts deliveries; once every event is applied or parked the run heals the handlers and redrives every parked key. poisoned: poison events; parked_events and parked_keys: what was parked then; redriven: effects applied after the redrive began; parked_unprocessed: parked events not applied after it. The poisoned keys are no victims (their events wait for the redrive by design).\n")
	return b.String(), nil
}

// poisonExpectations judges a poisoned condition: nothing lost, no effect
// twice, no order violation or overlap, every parked event processed after
// the redrive (and at least one parked: else the condition tested
// nothing), and the victims' p99 (the keys without a poison event) within
// 1.5× of the same condition without poison: over the whole run without a
// fault, outside the fault windows under one (the overall figure is
// reported).
func (e *Experiment) poisonExpectations(r *lab.Result, x *lab.Expectations, name string, match map[string]any,
	judgeMetric func(string, map[string]any, string, func(float64) bool, func(float64) string)) {
	count := func(v float64) string { return fmt.Sprintf("%.0f", v) }
	for _, m := range []string{"lost", "duplicate_effects", "violations", "overlaps", "parked_unprocessed"} {
		judgeMetric(fmt.Sprintf("%s: %s 0", name, m), match, m, func(v float64) bool { return v == 0 }, count)
	}
	judgeMetric(fmt.Sprintf("%s: poison events parked (at least one)", name), match, "parked_events", func(v float64) bool { return v > 0 }, count)
	clean := map[string]any{}
	for k, v := range match {
		clean[k] = v
	}
	clean["poison"] = 0.0
	compare := func(m, what string, claim bool) {
		v, ok1 := r.Median(m, match)
		b, ok2 := r.Median(m, clean)
		text := fmt.Sprintf("%s: %s within 1.5× of no poison", name, what)
		if !claim {
			if ok1 && ok2 && b > 0 {
				x.Report(text+" (not claimed)", fmt.Sprintf("%.1f ms vs %.1f ms = %.2f×", v, b, v/b))
			}
			return
		}
		var miss []string
		if !ok1 || !ok2 || b <= 0 {
			miss = []string{m + " with and without poison"}
		}
		x.Judge(text, miss, func() (string, bool) { return fmt.Sprintf("%.1f ms vs %.1f ms = %.2f×", v, b, v/b), v <= 1.5*b })
	}
	if match["fault"] == FaultNone {
		compare("victim_p99_ms", "the other keys' p99", true)
	} else {
		compare("victim_p99_calm_ms", "the other keys' p99 outside the fault windows", true)
		compare("victim_p99_ms", "the other keys' p99 over the whole run, faults included", false)
	}
}
