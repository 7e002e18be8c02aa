package events

import (
	"fmt"
	"strings"

	"github.com/stampede-lab/stampede/lab"
)

// Expectations implements lab.Expectations: under every fault and worker
// count, nothing lost and no effect applied twice; without a fault, and
// under a killed worker or a restarted server, no per-key order
// violation or overlap. (A worker paused past the ack deadline is the
// documented exception to per-key order: its events are redelivered
// elsewhere while it still holds them. Its violations are reported, not
// claimed.)
func (e *Experiment) Expectations(r *lab.Result) *lab.Expectations {
	var x lab.Expectations
	for _, load := range e.cfg.HotLoads {
		for _, w := range e.cfg.Workers {
			for _, f := range e.cfg.Faults {
				match := map[string]any{"workers": w, "fault": f, "hot_load": load}
				name := fmt.Sprintf("%d workers, fault %s, hot load %g", w, f, load)
				for _, m := range []string{"lost", "duplicate_effects"} {
					v, ok := r.Median(m, match)
					var miss []string
					if !ok {
						miss = []string{m + " of " + name}
					}
					x.Judge(fmt.Sprintf("%s: %s 0", name, m), miss, func() (string, bool) { return fmt.Sprintf("%.0f", v), v == 0 })
				}
				if f == FaultPause {
					if v, ok := r.Median("violations", match); ok {
						x.Report(name+": violations (paused past the ack deadline: not claimed)", fmt.Sprintf("%.0f", v))
					}
					continue
				}
				for _, m := range []string{"violations", "overlaps"} {
					v, ok := r.Median(m, match)
					var miss []string
					if !ok {
						miss = []string{m + " of " + name}
					}
					x.Judge(fmt.Sprintf("%s: %s 0", name, m), miss, func() (string, bool) { return fmt.Sprintf("%.0f", v), v == 0 })
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
	b.WriteString("Each other row runs real worker processes on one JetStream stream; the fault hits worker 0 (or the embedded nats-server) halfway through the arrivals. ")
	b.WriteString("lost: published events never applied; duplicate_effects: events applied twice despite the inbox; violations and overlaps: dispatch.Ledger replaying the applied effects' start and commit times; redeliveries: handler attempts with a delivery count above 1.\n")
	return b.String(), nil
}
