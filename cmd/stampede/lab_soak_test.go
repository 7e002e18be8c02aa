package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLabSoakReportShape runs a soak of 8 s on the embedded
// defaults (every part a child process) and checks the report's shape:
// every invariant 0, a series of each kind for each part, slopes
// reported but not judged (the run is far too short to tell, and says
// so), the table and the charts. The slope judge itself is tested on
// constructed samples in lab/soak. Eight seconds, not four: the series
// per payment begin with the first payment sampled, and on a loaded
// machine the first payments take seconds.
func TestLabSoakReportShape(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a rolling sale of child processes")
	}
	clearServiceEnv(t)
	useTestSelf(t)
	out := t.TempDir()
	if _, errOut, err := execute(t, "lab", "soak", "--seconds", "8", "--sample", "1s", "--rate", "4", "--out", out); err != nil {
		t.Fatalf("lab soak: %v\n%s", err, errOut)
	}
	raw, err := os.ReadFile(filepath.Join(out, "soak.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		Valid   bool `json:"valid"`
		Skipped []struct {
			Claim string `json:"claim"`
		} `json:"skipped"`
		Runs []struct {
			Valid   bool               `json:"valid"`
			Broken  []string           `json:"broken"`
			Metrics map[string]float64 `json:"metrics"`
			Extra   struct {
				Verdicts []struct {
					Name    string  `json:"name"`
					Family  string  `json:"family"`
					Samples int     `json:"samples"`
					Judged  bool    `json:"judged"`
					Reason  string  `json:"reason"`
					Mean    float64 `json:"mean"`
				} `json:"verdicts"`
			} `json:"extra"`
		} `json:"runs"`
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatal(err)
	}
	if !s.Valid || len(s.Runs) != 1 || !s.Runs[0].Valid || len(s.Runs[0].Broken) > 0 {
		t.Fatalf("valid %v, runs %d, broken %v; want one valid run", s.Valid, len(s.Runs), s.Runs)
	}
	run := s.Runs[0]
	m := run.Metrics
	t.Logf("metrics: %v", m)
	if m["buyers"] < 1 || m["buyers_ticket"] < 1 || m["samples"] < 3 {
		t.Errorf("buyers %v, tickets %v, samples %v; want some of each", m["buyers"], m["buyers_ticket"], m["samples"])
	}
	for _, k := range []string{"oversold", "double_charges", "double_refunds", "parity_mismatches", "refund_parity_mismatches", "parts_exited", "growing_series", "judged_series"} {
		if v, ok := m[k]; !ok || v != 0 {
			t.Errorf("%s = %v (present %v), want 0", k, v, ok)
		}
	}
	for _, k := range []string{"join_to_admission_p99_ms", "payment_p99_ms"} {
		if m[k] <= 0 {
			t.Errorf("%s = %v, want a latency", k, m[k])
		}
	}
	// A series of each kind for each part.
	have := map[string]bool{}
	for _, v := range run.Extra.Verdicts {
		have[v.Name] = true
		if v.Judged {
			t.Errorf("%s judged on an 8 s run", v.Name)
		}
		if v.Reason == "" {
			t.Errorf("%s: no reason for not judging it", v.Name)
		}
	}
	want := []string{"redis rss", "nats rss", "nats stream's current block", "redis keys", "redis room memory (without the log)", "admission log per entry", "stream per payment",
		"pay database per payment", "checkout database per payment", "fulfilment database per payment", "join to admission p99", "payment p99"}
	for _, p := range []string{"institution", "pay", "checkout", "gate-0", "gate-1", "gate-2", "worker-0", "worker-1", "worker-2"} {
		want = append(want, p+" rss", p+" open files", p+" goroutines", p+" heap in use")
	}
	for _, w := range want {
		if !have[w] {
			t.Errorf("no series %q", w)
		}
	}
	if len(s.Skipped) != 1 || !strings.Contains(s.Skipped[0].Claim, "every series flat") {
		t.Errorf("skipped %v, want the slopes' claim skipped", s.Skipped)
	}
	report, err := os.ReadFile(filepath.Join(out, "REPORT.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(report), "| series | unit | mean | first → last | slope / h | allowed / h | verdict |") {
		t.Error("REPORT.md has no slopes table")
	}
	for _, f := range []string{"soak-rss.png", "soak-heap.png", "soak-goroutines.png", "soak-open-files.png", "soak-redis-keys.png", "soak-store-bytes-per-payment.png", "soak-p99-ms.png", "soak-series.json"} {
		if fi, err := os.Stat(filepath.Join(out, f)); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
}
