package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stampede-lab/stampede/internal/testenv"
)

// TestLabEventsUnderFaults runs the events lab briefly with 2 worker
// processes (this test binary re-run as `lab events-worker`) under each
// fault, and reads its JSON: nothing lost, no effect applied twice, no
// order violation and no overlap, the pause fault included (a paused
// worker's late writes are fenced). The claims are counts, whatever the
// timing.
func TestLabEventsUnderFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("runs worker processes under faults")
	}
	useTestWorkers(t)
	out := t.TempDir()
	if _, _, err := execute(t, "lab", "events", "--out", out, "--seconds", "2", "--rate", "200", "--workers", "2",
		"--faults", "none,kill,pause,nats-restart"); err != nil {
		t.Fatalf("lab events: %v", err)
	}
	runs := readEventsRuns(t, out)
	if len(runs) != 5 {
		t.Fatalf("%d runs, want 5", len(runs))
	}
	for _, r := range runs {
		m := r.Metrics
		t.Logf("%v: %v", r.Condition, m)
		if m["lost"] != 0 || m["duplicate_effects"] != 0 {
			t.Errorf("%v: lost %v, duplicate effects %v; want 0", r.Condition, m["lost"], m["duplicate_effects"])
		}
		if m["violations"] != 0 || m["overlaps"] != 0 {
			t.Errorf("%v: violations %v, overlaps %v; want 0", r.Condition, m["violations"], m["overlaps"])
		}
	}
}

// TestLabEventsPoison runs the events lab with poison events: the
// poisoned run parks them (with their keys' later events), redrives them
// at its end, and loses nothing, applies nothing twice and keeps every
// key's order. (The lab's must-show adds the kill and pause faults; here
// they would double the test's time.)
func TestLabEventsPoison(t *testing.T) {
	if testing.Short() {
		t.Skip("runs worker processes")
	}
	useTestWorkers(t)
	out := t.TempDir()
	if _, _, err := execute(t, "lab", "events", "--out", out, "--seconds", "2", "--rate", "200", "--workers", "2",
		"--faults", "none", "--poison", "0.02"); err != nil {
		t.Fatalf("lab events: %v", err)
	}
	runs := readEventsRuns(t, out)
	poisoned := 0
	for _, r := range runs {
		m := r.Metrics
		if r.Condition["poison"] != 0.02 {
			continue
		}
		poisoned++
		t.Logf("%v: %v", r.Condition, m)
		if m["parked_events"] < m["poisoned"] || m["poisoned"] == 0 {
			t.Errorf("%v: %v poison events, %v parked; want some, all parked", r.Condition, m["poisoned"], m["parked_events"])
		}
		for _, k := range []string{"lost", "duplicate_effects", "violations", "overlaps", "parked_unprocessed"} {
			if m[k] != 0 {
				t.Errorf("%v: %s %v, want 0", r.Condition, k, m[k])
			}
		}
		if m["redriven"] < m["parked_events"] {
			t.Errorf("%v: %v redriven of %v parked", r.Condition, m["redriven"], m["parked_events"])
		}
	}
	if poisoned != 1 {
		t.Fatalf("%d poisoned runs, want 1", poisoned)
	}
}

// TestLabEventsR3NodeKilled runs the events lab on the three-node NATS
// clusters .ci/nats-cluster starts, on an R3 stream, and kills one node
// mid-run with `.ci/nats-cluster kill`: nothing lost, no effect applied
// twice, no order violation or overlap. The node is started again after.
// It runs on both server generations: Debian's nats-server
// (STAMPEDE_NATS_CLUSTER_URL, 2.9: static partitions held by leases) and
// a current one built from the module (STAMPEDE_NATS_CLUSTER_NEW_URL,
// `.ci/nats-cluster --new`: pinned consumers).
func TestLabEventsR3NodeKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("runs worker processes against a NATS cluster")
	}
	for _, gen := range []struct {
		name, env string
		args      []string
	}{
		{"debian", testenv.NATSClusterURL, nil},
		{"new", testenv.NATSClusterNewURL, []string{"--new"}},
	} {
		t.Run(gen.name, func(t *testing.T) { labEventsR3NodeKilled(t, testenv.URL(t, gen.env), gen.args) })
	}
}

// labEventsR3NodeKilled is TestLabEventsR3NodeKilled on the cluster at
// url, which .ci/nats-cluster with args started.
func labEventsR3NodeKilled(t *testing.T, url string, args []string) {
	script, err := filepath.Abs(filepath.Join("..", "..", ".ci", "nats-cluster"))
	if err != nil {
		t.Fatal(err)
	}
	first := strings.TrimPrefix(strings.Split(url, ",")[0], "nats://")
	port := first[strings.LastIndex(first, ":")+1:]
	t.Cleanup(func() {
		if out, err := exec.Command(script, args...).CombinedOutput(); err != nil {
			t.Errorf("restarting the cluster's node: %v\n%s", err, out)
		}
	})
	useTestWorkers(t)
	out := t.TempDir()
	kill := strings.Join(append(append([]string{script}, args...), "kill", port), " ")
	if _, _, err := execute(t, "lab", "events", "--out", out, "--seconds", "3", "--rate", "200", "--workers", "2",
		"--nats", url, "--replicas", "3", "--faults", "node-kill", "--node-kill-cmd", kill); err != nil {
		report, _ := os.ReadFile(filepath.Join(out, "REPORT.md"))
		t.Fatalf("lab events: %v\n%s", err, report)
	}
	for _, r := range readEventsRuns(t, out) {
		m := r.Metrics
		t.Logf("%v: %v", r.Condition, m)
		if m["lost"] != 0 || m["duplicate_effects"] != 0 || m["violations"] != 0 || m["overlaps"] != 0 {
			t.Errorf("%v: lost %v, duplicate effects %v, violations %v, overlaps %v; want 0", r.Condition,
				m["lost"], m["duplicate_effects"], m["violations"], m["overlaps"])
		}
	}
}

// useTestWorkers makes the events lab's worker processes this test binary
// re-run as `lab events-worker` (through TestChildProcess).
func useTestWorkers(t *testing.T) {
	orig := eventsWorkerCmd
	t.Cleanup(func() { eventsWorkerCmd = orig })
	eventsWorkerCmd = func(args []string) *exec.Cmd {
		all := append(append(append([]string{}, labEventsWorkerCmd...), "--log-level", "warn"), args...)
		c := childCmd(all, "STAMPEDE_NATS_URL=")
		c.Stderr = os.Stderr
		return c
	}
}

// eventsRun is one run of events.json.
type eventsRun struct {
	Condition map[string]any     `json:"condition"`
	Metrics   map[string]float64 `json:"metrics"`
}

// readEventsRuns reads the runs of a valid events.json in dir.
func readEventsRuns(t *testing.T, dir string) []eventsRun {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "events.json"))
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
	if !res.Valid {
		t.Fatalf("events.json: not valid:\n%s", raw)
	}
	return res.Runs
}
