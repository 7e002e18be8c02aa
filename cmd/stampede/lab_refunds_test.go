package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// refundsParams builds the refunds experiment from args and returns its
// parameters as the JSON shows them.
func refundsParams(t *testing.T, opts *labOptions, args ...string) (map[string]any, error) {
	t.Helper()
	cmd := newLabRefundsCmd(opts)
	if err := cmd.ParseFlags(args); err != nil {
		return nil, err
	}
	exp, err := buildRefunds(cmd, opts)
	if err != nil {
		return nil, err
	}
	data, err := json.Marshal(exp.Params())
	if err != nil {
		t.Fatal(err)
	}
	var p map[string]any
	if err := json.Unmarshal(data, &p); err != nil {
		t.Fatal(err)
	}
	return p, nil
}

// TestLabRefundsFlags: the defaults are the 2,000 payments with
// every fault and both conditions; each flag given reaches the
// experiment; bad values are refused naming the flag.
func TestLabRefundsFlags(t *testing.T) {
	p, err := refundsParams(t, &labOptions{seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if p["payments"] != 2000.0 || p["hang_ms"] != 4000.0 || p["timeout_ms"] != 1000.0 || len(p["faults"].([]any)) != 3 || len(p["conditions"].([]any)) != 2 {
		t.Errorf("default params: %v", p)
	}
	p, err = refundsParams(t, &labOptions{seed: 1, repeat: 3}, "--payments", "50", "--hang", "2s", "--timeout", "500ms",
		"--faults", "Hang,pay-kill", "--conditions", "stampede", "--kill-at", "700ms", "--restart-after", "2s",
		"--status-down-for", "3s", "--not-found-window", "200ms", "--settle-timeout", "10s")
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]any{"payments": 50.0, "hang_ms": 2000.0, "timeout_ms": 500.0, "repeat": 3.0, "kill_at_ms": 700.0,
		"restart_after_ms": 2000.0, "status_down_for_ms": 3000.0, "not_found_window_ms": 200.0, "settle_timeout_ms": 10000.0} {
		if p[k] != want {
			t.Errorf("%s = %v, want %v", k, p[k], want)
		}
	}
	if f := p["faults"].([]any); len(f) != 2 || f[0] != "hang" || f[1] != "pay-kill" {
		t.Errorf("faults = %v", f)
	}
	if p, err := refundsParams(t, &labOptions{seed: 1}, "--faults", ""); err != nil || len(p["faults"].([]any)) != 0 {
		t.Errorf(`--faults "": %v, %v; want no fault`, p, err)
	}
	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"--payments", "0"}, "payments:"},
		{[]string{"--payments", "99999"}, "payments:"},
		{[]string{"--faults", "flood"}, "faults:"},
		{[]string{"--conditions", "gentle"}, "conditions:"},
		{[]string{"--hang", "500ms", "--timeout", "1s"}, "hang:"},
		{[]string{"--timeout", "x"}, "timeout"},
	} {
		if _, err := refundsParams(t, &labOptions{seed: 1}, bad.args...); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%v: %v, want an error naming %q", bad.args, err, bad.want)
		}
	}
	if _, err := refundsParams(t, &labOptions{seed: 1, seconds: 5}); err == nil || !strings.Contains(err.Error(), "--seconds") {
		t.Errorf("--seconds: %v, want refused", err)
	}
	if _, err := refundsParams(t, &labOptions{seed: 1, full: true}); err == nil || !strings.Contains(err.Error(), "--full") {
		t.Errorf("--full: %v, want refused", err)
	}
}
