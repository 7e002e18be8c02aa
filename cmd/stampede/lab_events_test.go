package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestLabEventsUnderFaults runs the events lab briefly with 2 worker
// processes (this test binary re-run as `lab events-worker`) under each
// fault, and reads its JSON: nothing lost, no effect applied twice, and no
// order violation or overlap except under the pause fault (the documented
// exception). The claims are counts, whatever the timing.
func TestLabEventsUnderFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("runs worker processes under faults")
	}
	orig := eventsWorkerCmd
	t.Cleanup(func() { eventsWorkerCmd = orig })
	eventsWorkerCmd = func(args []string) *exec.Cmd {
		c := exec.Command(os.Args[0], "-test.run=^TestPayChildProcess$")
		all := append(append(append([]string{}, labEventsWorkerCmd...), "--log-level", "warn"), args...)
		c.Env = append(os.Environ(), "STAMPEDE_PAY_CHILD_ARGS="+strings.Join(all, "\x1f"), "STAMPEDE_NATS_URL=")
		c.Stderr = os.Stderr
		return c
	}
	out := t.TempDir()
	if _, _, err := execute(t, "lab", "events", "--out", out, "--seconds", "2", "--rate", "200", "--workers", "2",
		"--faults", "none,kill,pause,nats-restart"); err != nil {
		t.Fatalf("lab events: %v", err)
	}
	raw, err := os.ReadFile(filepath.Join(out, "events.json"))
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Valid bool `json:"valid"`
		Runs  []struct {
			Condition map[string]any     `json:"condition"`
			Metrics   map[string]float64 `json:"metrics"`
		} `json:"runs"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatal(err)
	}
	if !res.Valid || len(res.Runs) != 5 {
		t.Fatalf("valid %v, %d runs; want valid, 5 runs", res.Valid, len(res.Runs))
	}
	for _, r := range res.Runs {
		m := r.Metrics
		t.Logf("%v: %v", r.Condition, m)
		if m["lost"] != 0 || m["duplicate_effects"] != 0 {
			t.Errorf("%v: lost %v, duplicate effects %v; want 0", r.Condition, m["lost"], m["duplicate_effects"])
		}
		if r.Condition["fault"] != "pause" && (m["violations"] != 0 || m["overlaps"] != 0) {
			t.Errorf("%v: violations %v, overlaps %v; want 0", r.Condition, m["violations"], m["overlaps"])
		}
	}
}
