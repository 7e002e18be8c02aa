package events

import (
	"os/exec"
	"strings"
	"testing"
)

func validConfig() Config {
	c := DefaultConfig()
	c.WorkerCmd = func([]string) *exec.Cmd { return nil }
	return c
}

func TestConfigValidateNamesTheField(t *testing.T) {
	if err := validConfig().Validate(); err != nil {
		t.Fatalf("the default config (with a WorkerCmd) is invalid: %v", err)
	}
	for field, mutate := range map[string]func(*Config){
		"Rate":      func(c *Config) { c.Rate = 0 },
		"Keys":      func(c *Config) { c.Keys = 1 },
		"HotLoads":  func(c *Config) { c.HotLoads = []float64{100} },
		"Workers":   func(c *Config) { c.Workers = []int{0} },
		"Faults":    func(c *Config) { c.Faults = []string{"node-kill"} },
		"WorkerCmd": func(c *Config) { c.WorkerCmd = nil },
		"Replicas":  func(c *Config) { c.Replicas = 0 },
		"AckWait":   func(c *Config) { c.AckWait = 0 },
	} {
		c := validConfig()
		mutate(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: Validate() = %v, want an error naming it", field, err)
		}
	}
	c := validConfig()
	c.NATS = "nats://127.0.0.1:4222"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "nats-restart") {
		t.Errorf("nats-restart on a real server: Validate() = %v, want an error", err)
	}
}

// TestScheduleHotShare: the hot key gets its load's share of the
// arrivals, and the stream is sorted.
func TestScheduleHotShare(t *testing.T) {
	c := validConfig()
	c.Seconds = 20
	e, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	plan := e.schedule(0.8, 1)
	hot := 0
	for i, a := range plan {
		if a.key == 0 {
			hot++
		}
		if i > 0 && a.at < plan[i-1].at {
			t.Fatal("arrivals not sorted")
		}
	}
	want := 0.8 / c.Cost.Seconds() * c.Seconds // 160/s × 20 s
	if f := float64(hot); f < 0.9*want || f > 1.1*want {
		t.Errorf("%d hot arrivals, want about %.0f", hot, want)
	}
	if n := len(e.Conditions()); n != 1+len(c.Workers)*len(c.Faults) {
		t.Errorf("%d conditions, want %d", n, 1+len(c.Workers)*len(c.Faults))
	}
}
