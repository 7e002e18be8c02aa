package admission

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/stampede-lab/stampede/waitroom"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// The Redis client's connection reaper and net/http's idle
		// connections close asynchronously after Close.
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	)
}

func TestValidateNamesTheFlag(t *testing.T) {
	cases := []struct {
		mutate func(*Config)
		flag   string
	}{
		{func(c *Config) { c.Instances = 0 }, "instances"},
		{func(c *Config) { c.Capacity = 0 }, "capacity"},
		{func(c *Config) { c.Users = 0 }, "users"},
		{func(c *Config) { c.Arrival = "trickle" }, "arrival"},
		{func(c *Config) { c.Arrival, c.Rate = Rate, 0 }, "rate"},
		{func(c *Config) { c.Hold = 0 }, "hold"},
		{func(c *Config) { c.Abandon = 2 }, "abandon"},
		{func(c *Config) { c.Lease = time.Millisecond }, "lease"},
		{func(c *Config) { c.Ticks = nil }, "ticks"},
		{func(c *Config) { c.Ticks = []time.Duration{time.Microsecond} }, "ticks"},
		{func(c *Config) { c.Modes = nil }, "modes"},
		{func(c *Config) { c.Immediate = nil }, "immediate"},
		{func(c *Config) { c.Duration = 0 }, "seconds"},
		{func(c *Config) { c.Repeat = 0 }, "repeat"},
	}
	for _, tc := range cases {
		c := DefaultConfig()
		tc.mutate(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("Validate() = %v, want an error naming %s", err, tc.flag)
		}
	}
	for _, c := range []Config{DefaultConfig(), FullConfig()} {
		if err := c.Validate(); err != nil {
			t.Errorf("Validate() = %v", err)
		}
	}
}

func TestParseModesAndOnOff(t *testing.T) {
	if m, err := ParseModes([]string{"atomic", " naive"}); err != nil || len(m) != 2 || m[1] != waitroom.ModeNaive {
		t.Errorf("ParseModes = %v, %v", m, err)
	}
	for _, bad := range [][]string{{"atomic", "atomic"}, {"magic"}} {
		if _, err := ParseModes(bad); err == nil {
			t.Errorf("ParseModes(%q) succeeded", bad)
		}
	}
	if b, err := ParseOnOff([]string{"on", "off"}); err != nil || !b[0] || b[1] {
		t.Errorf("ParseOnOff = %v, %v", b, err)
	}
	if _, err := ParseOnOff([]string{"yes"}); err == nil {
		t.Error("ParseOnOff(yes) succeeded")
	}
}

// TestRunHoldsTheCapAndAccountsForEveryone runs a small experiment for
// real on the embedded Redis and checks what the runs report.
func TestRunHoldsTheCapAndAccountsForEveryone(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 3 instances in real time for a few seconds")
	}
	cfg := DefaultConfig()
	cfg.Capacity, cfg.Users, cfg.Hold = 5, 60, 100*time.Millisecond
	cfg.Ticks, cfg.Immediate = []time.Duration{50 * time.Millisecond}, []bool{true}
	cfg.Modes = []waitroom.Mode{waitroom.ModeAtomic, waitroom.ModeNaive}
	cfg.Duration = 1500 * time.Millisecond
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range e.Conditions() {
		res, err := e.Run(context.Background(), c, 0)
		if err != nil {
			t.Fatalf("%s: %v", c.Label, err)
		}
		m := res.Metrics
		if !res.Valid {
			t.Fatalf("%s: invalid: %s", c.Label, res.Reason)
		}
		d := res.Extra.(RunDetail)
		if st := d.Accounting; st.Waiting+st.Active+st.ReleasedTotal+st.ExpiredTotal+st.LeftTotal != st.JoinedTotal || st.JoinedTotal != 60 {
			t.Errorf("%s: accounting %+v", c.Label, st)
		}
		if m["admitted"] < float64(cfg.Capacity) {
			t.Errorf("%s: admitted only %v", c.Label, m["admitted"])
		}
		if d.Samples == 0 {
			t.Errorf("%s: the observer took no sample", c.Label)
		}
		if c.Values["mode"] == string(waitroom.ModeAtomic) {
			if len(res.Broken) > 0 || m["max_active_observed"] > float64(cfg.Capacity) || m["fifo_inversions"] != 0 {
				t.Errorf("%s: broken %v, metrics %v", c.Label, res.Broken, m)
			}
		}
	}
}
