package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stampede-lab/stampede/internal/testenv"
	"github.com/stampede-lab/stampede/lab"
)

// useTestSelf makes the sale's parts run as this test binary (through
// TestChildProcess) instead of the stampede binary.
func useTestSelf(t *testing.T) {
	orig := selfCmd
	t.Cleanup(func() { selfCmd = orig })
	selfCmd = func(args []string) *exec.Cmd {
		return childCmd(args)
	}
}

// saleJSON is the part of sale.json the tests read.
type saleJSON struct {
	Valid        bool     `json:"valid"`
	Problems     []string `json:"problems"`
	Expectations []struct {
		Claim string `json:"claim"`
		Holds bool   `json:"holds"`
	} `json:"expectations"`
	Runs []struct {
		Valid   bool               `json:"valid"`
		Broken  []string           `json:"broken"`
		Metrics map[string]float64 `json:"metrics"`
	} `json:"runs"`
	Summary []struct {
		Median map[string]any `json:"median"`
	} `json:"summary"`
}

// saleOutcomes is what a failed sale's runs say of their buyers (outcome
// counts and the failures' last answers), for the failure message: the
// lab's own output is long, and CI shows only part of it.
func saleOutcomes(dir string) string {
	raw, err := os.ReadFile(filepath.Join(dir, "sale.json"))
	if err != nil {
		return "no sale.json: " + err.Error()
	}
	var s struct {
		Runs []struct {
			Valid  bool            `json:"valid"`
			Reason string          `json:"reason"`
			Broken []string        `json:"broken"`
			Extra  json.RawMessage `json:"extra"`
		} `json:"runs"`
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return "sale.json: " + err.Error()
	}
	var b strings.Builder
	for i, r := range s.Runs {
		fmt.Fprintf(&b, "run %d: valid %v %s, broken %v, extra %s\n", i+1, r.Valid, r.Reason, r.Broken, r.Extra)
	}
	return b.String()
}

func readSale(t *testing.T, dir string) saleJSON {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "sale.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s saleJSON
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatal(err)
	}
	if len(s.Runs) != 1 {
		t.Fatalf("%d runs, want 1", len(s.Runs))
	}
	return s
}

// clearServiceEnv makes the sale use its embedded defaults.
func clearServiceEnv(t *testing.T) {
	for _, v := range []string{envRedis, envPostgres, envNATS} {
		t.Setenv(v, "")
	}
}

// checkHeld asserts a sale where every invariant held.
func checkHeld(t *testing.T, s saleJSON, buyers float64) {
	t.Helper()
	m := s.Runs[0].Metrics
	t.Logf("metrics: %v", m)
	if !s.Valid || !s.Runs[0].Valid || len(s.Runs[0].Broken) > 0 {
		t.Fatalf("valid %v, problems %v, broken %v; want a valid sale", s.Valid, s.Problems, s.Runs[0].Broken)
	}
	for _, k := range []string{"oversold", "double_charges", "parity_mismatches", "over_capacity_samples", "order_violations", "unaccounted_buyers"} {
		if v, ok := m[k]; !ok || v != 0 {
			t.Errorf("%s = %v (present %v), want 0", k, v, ok)
		}
	}
	if m["tickets"] < 1 || m["tickets"] != m["seats_sold"] || m["seats_sold"] > 60 {
		t.Errorf("tickets %v, seats sold %v of 60; want equal, at least 1, at most the seats", m["tickets"], m["seats_sold"])
	}
	sum := 0.0
	for _, k := range []string{"ticket", "declined", "failed", "abandoned", "sold_out", "not_admitted"} {
		sum += m["buyers_"+k]
	}
	if sum != buyers {
		t.Errorf("outcomes add up to %v, want %v buyers", sum, buyers)
	}
	if m["join_to_ticket_p99_ms"] <= 0 || m["join_to_ticket_p50_ms"] > m["join_to_ticket_p99_ms"] {
		t.Errorf("join to ticket p50 %v, p99 %v", m["join_to_ticket_p50_ms"], m["join_to_ticket_p99_ms"])
	}
	for _, e := range s.Expectations {
		if !e.Holds {
			t.Errorf("expectation does not hold: %s", e.Claim)
		}
	}
}

// TestLabSaleQuick runs the quick sale (300 buyers, every fault) on the
// embedded defaults: every invariant holds, every buyer is accounted for,
// and the charts are drawn.
func TestLabSaleQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a sale of child processes")
	}
	clearServiceEnv(t)
	useTestSelf(t)
	out := t.TempDir()
	if _, errOut, err := execute(t, "lab", "sale", "--quick", "--out", out); err != nil {
		t.Fatalf("lab sale --quick: %v\n%s\n%s", err, saleOutcomes(out), errOut)
	}
	checkHeld(t, readSale(t, out), 300)
	for _, c := range []string{"queue", "admitted", "admission-rate", "payments", "lag", "seats"} {
		if fi, err := os.Stat(filepath.Join(out, "sale-"+c+".png")); err != nil || fi.Size() == 0 {
			t.Errorf("chart %s: %v", c, err)
		}
	}
}

// TestLabSaleQuickUnsafeInventoryIsCaught runs the quick sale with the
// checkout's inventory rule off: it oversells, and the report says so
// (a broken invariant: lab.ErrInvalid, exit status 2).
func TestLabSaleQuickUnsafeInventoryIsCaught(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a sale of child processes")
	}
	clearServiceEnv(t)
	useTestSelf(t)
	out := t.TempDir()
	// Everyone admitted at once (capacity = buyers) and a short sale:
	// 120 buyers race for 30 seats, which the unsafe rule oversells.
	_, errOut, err := execute(t, "lab", "sale", "--quick", "--unsafe-inventory", "--faults", "", "--out", out,
		"--buyers", "120", "--seats", "30", "--capacity", "120", "--bots", "0", "--surge", "1s", "--tail", "1s", "--timeline", "6s")
	if !errors.Is(err, lab.ErrInvalid) || exitCode(err) != 2 {
		t.Fatalf("lab sale --quick --unsafe-inventory: %v (exit %d), want an invalid experiment (exit 2)\n%s", err, exitCode(err), errOut)
	}
	s := readSale(t, out)
	m := s.Runs[0].Metrics
	t.Logf("metrics: %v, broken: %v", m, s.Runs[0].Broken)
	if m["oversold"] <= 0 {
		t.Fatalf("oversold = %v, want > 0", m["oversold"])
	}
	if !strings.Contains(strings.Join(s.Runs[0].Broken, ";"), "oversold") {
		t.Errorf("broken %v, want the oversell named", s.Runs[0].Broken)
	}
}

// TestLabSaleQuickRealServices runs the quick sale on real Redis,
// PostgreSQL and NATS (the CI services): every invariant holds.
func TestLabSaleQuickRealServices(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a sale of child processes")
	}
	redisURL := testenv.URL(t, testenv.RedisURL)
	pgURL := testenv.URL(t, testenv.PostgresURL)
	natsURL := testenv.URL(t, testenv.NATSURL)
	clearServiceEnv(t)
	useTestSelf(t)
	out := t.TempDir()
	if _, errOut, err := execute(t, "lab", "sale", "--quick", "--out", out, "--redis", redisURL, "--postgres", pgURL, "--nats", natsURL); err != nil {
		t.Fatalf("lab sale --quick on real services: %v\n%s\n%s", err, saleOutcomes(out), errOut)
	}
	checkHeld(t, readSale(t, out), 300)
}

// TestLabSaleHangMode: --hang-mode before makes the sale's institution
// hang before processing (its parameters say so); a mode other than
// after or before is refused by name.
func TestLabSaleHangMode(t *testing.T) {
	build := func(args ...string) (map[string]any, error) {
		cmd := newLabSaleCmd(&labOptions{seed: 1, repeat: 1})
		if err := cmd.ParseFlags(args); err != nil {
			return nil, err
		}
		exp, err := buildSale(cmd, &labOptions{seed: 1, repeat: 1})
		if err != nil {
			return nil, err
		}
		p, _ := exp.Params().(map[string]any)
		return p, nil
	}
	for args, want := range map[string]bool{"": false, "--hang-mode=after": false, "--hang-mode=before": true} {
		p, err := build(append([]string{"--quick"}, strings.Fields(args)...)...)
		if err != nil || p["hang_before"] != want {
			t.Errorf("%q: hang_before %v, %v; want %v", args, p["hang_before"], err, want)
		}
	}
	if _, err := build("--quick", "--hang-mode", "sideways"); err == nil || !strings.Contains(err.Error(), "--hang-mode") {
		t.Errorf("--hang-mode sideways: %v, want an error naming the flag", err)
	}
}
