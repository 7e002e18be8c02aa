package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLabEventsCapacity drains a small backlog with 1 and 2 worker
// processes (this test binary re-run as `lab events-worker`) on a shared
// and on per-worker ledgers, and reads its JSON: every event applied once,
// in order, without overlap; each run reports its throughput, its CPU per
// event from the children's rusage, and the 2-worker runs their ratio to
// the 1-worker run. How fast is not asserted: that is the lab's figure,
// not a property a shared test machine can promise.
func TestLabEventsCapacity(t *testing.T) {
	if testing.Short() {
		t.Skip("runs worker processes")
	}
	useTestWorkers(t)
	out := t.TempDir()
	if _, _, err := execute(t, "lab", "events", "--capacity", "--out", out, "--backlog", "400", "--keys", "50",
		"--hot-share", "0.05", "--workers", "1,2", "--cost", "2ms"); err != nil {
		t.Fatalf("lab events --capacity: %v", err)
	}
	raw, err := os.ReadFile(filepath.Join(out, "events-capacity.json"))
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Valid bool        `json:"valid"`
		Runs  []eventsRun `json:"runs"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatal(err)
	}
	if !res.Valid || len(res.Runs) != 4 {
		t.Fatalf("valid %v, %d runs; want a valid result of 4 runs:\n%s", res.Valid, len(res.Runs), raw)
	}
	for _, r := range res.Runs {
		m := r.Metrics
		t.Logf("%v: %v", r.Condition, m)
		if m["events"] != 400 || m["lost"] != 0 || m["duplicate_effects"] != 0 || m["violations"] != 0 || m["overlaps"] != 0 {
			t.Errorf("%v: events %v, lost %v, duplicate effects %v, violations %v, overlaps %v; want 400 and zeros",
				r.Condition, m["events"], m["lost"], m["duplicate_effects"], m["violations"], m["overlaps"])
		}
		for _, name := range []string{"events_per_s", "worker_cpu_us_per_event", "lab_cpu_us_per_event", "cores_used"} {
			if !(m[name] > 0) {
				t.Errorf("%v: %s = %v, want a positive figure", r.Condition, name, m[name])
			}
		}
		if _, ok := m["x_one_worker"]; ok != (r.Condition["workers"] == float64(2)) {
			t.Errorf("%v: x_one_worker present %v, want it on the 2-worker runs only", r.Condition, ok)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "events-scaling.png")); err != nil {
		t.Errorf("the chart: %v", err)
	}
}

func TestLabEventsCapacityRejectsBadFlags(t *testing.T) {
	for name, args := range map[string][]string{
		"ledgers":   {"--ledgers", "mine"},
		"hot-share": {"--hot-share", "1.5"},
		"seconds":   {"--seconds", "3"},
		"workers":   {"--workers", "16"},
	} {
		_, _, err := execute(t, append([]string{"lab", "events", "--capacity", "--out", t.TempDir()}, args...)...)
		if err == nil || !strings.Contains(strings.ToLower(err.Error()), strings.Split(name, "-")[0]) {
			t.Errorf("--%s: err = %v, want an error naming it", name, err)
		}
	}
}
