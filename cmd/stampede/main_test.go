package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/stampede-lab/stampede/pay/natspub"
)

// startNATS starts an embedded nats-server storing JetStream in dir and
// connects to it; the test's cleanup closes both.
func startNATS(t *testing.T, dir string) (*natspub.Embedded, *nats.Conn) {
	t.Helper()
	emb, err := natspub.StartEmbedded(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(emb.Close)
	nc, err := nats.Connect(emb.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return emb, nc
}

func TestLabOrderingRejectsBadFlags(t *testing.T) {
	out := t.TempDir()
	cases := map[string][]string{
		"workers":      {"--workers", "0"},
		"hot-loads":    {"--hot-loads", "fast"},
		"strategies":   {"--strategies", "shared,lifo"},
		"jitter":       {"--jitter", "1.5"},
		"seconds":      {"--seconds", "-1"},
		"normal-cost":  {"--normal-cost", "5"},
		"hot-arrivals": {"--hot-arrivals", "bursty"},
	}
	for flag, args := range cases {
		_, _, err := execute(t, append([]string{"lab", "ordering", "--out", out}, args...)...)
		if err == nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("%v: error %v, want one naming %s", args, err, flag)
		}
	}
	if _, _, err := execute(t, "lab", "nonsense"); err == nil {
		t.Error("an unknown experiment was accepted")
	}
}

func TestLabOrderingWritesTheReport(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a real 2-condition experiment for about a second")
	}
	dir := filepath.Join(t.TempDir(), "report")
	stdout, stderr, err := execute(t, "lab", "ordering", "--out", dir, "--json",
		"--seconds", "0.3", "--rate", "200", "--hot-loads", "1", "--normal-cost", "1ms", "--hot-cost", "10ms",
		"--strategies", "shared,keyed")
	if err != nil {
		t.Fatalf("lab ordering: %v\n%s", err, stderr)
	}
	var summaries []struct {
		Experiment string           `json:"experiment"`
		Valid      bool             `json:"valid"`
		Summary    []map[string]any `json:"summary"`
	}
	if err := json.Unmarshal([]byte(stdout), &summaries); err != nil {
		t.Fatalf("--json output is not JSON: %v\n%s", err, stdout)
	}
	if len(summaries) != 1 || summaries[0].Experiment != "ordering" || !summaries[0].Valid || len(summaries[0].Summary) != 2 {
		t.Fatalf("summaries = %+v", summaries)
	}
	for _, name := range []string{"REPORT.md", "ordering.json", "ordering-victim-p99.png"} {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.Size() == 0 {
			t.Errorf("%s missing or empty: %v", name, err)
		}
	}
	if !strings.Contains(stderr, "lab ordering: run 2/2") {
		t.Errorf("no progress lines on stderr:\n%s", stderr)
	}
}
