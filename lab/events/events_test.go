package events

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/dispatch/natskeyed"
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
		"rate":          func(c *Config) { c.Rate = 0 },
		"keys":          func(c *Config) { c.Keys = 1 },
		"hot_loads":     func(c *Config) { c.HotLoads = []float64{100} },
		"workers":       func(c *Config) { c.Workers = []int{0} },
		"faults":        func(c *Config) { c.Faults = []string{"node-kill"} },
		"worker_cmd":    func(c *Config) { c.WorkerCmd = nil },
		"replicas":      func(c *Config) { c.Replicas = 0 },
		"ack_wait":      func(c *Config) { c.AckWait = 0 },
		"hot_cost":      func(c *Config) { c.HotCost = -time.Second },
		"jitter":        func(c *Config) { c.Jitter = 1 },
		"owner_timeout": func(c *Config) { c.OwnerTimeout = time.Millisecond },
		"lease":         func(c *Config) { c.Lease = time.Millisecond },
		"poison":        func(c *Config) { c.Poison = 0.5 },
		"max_attempts":  func(c *Config) { c.MaxAttempts = 0 },
	} {
		c := validConfig()
		mutate(&c)
		if err := c.Validate(); !slices.Equal(badFields(err), []string{field}) {
			t.Errorf("%s: Validate() = %v, want an error naming it", field, err)
		}
	}
	c := validConfig()
	c.Faults = []string{"kill+pause+nats-restart"}
	if err := c.Validate(); err != nil {
		t.Errorf("joined faults: Validate() = %v", err)
	}
	for _, f := range []string{"none+kill", "kill+bogus"} {
		c.Faults = []string{f}
		if err := c.Validate(); !slices.Equal(badFields(err), []string{"faults"}) {
			t.Errorf("%s: Validate() = %v, want an error naming faults", f, err)
		}
	}
	c = validConfig()
	c.NATS = "nats://127.0.0.1:4222"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "nats-restart") {
		t.Errorf("nats-restart on a real server: Validate() = %v, want an error", err)
	}
}

func TestConfigValidateNamesEveryBadField(t *testing.T) {
	c := validConfig()
	c.Keys, c.Replicas = 1, 9
	if got, want := badFields(c.Validate()), []string{"keys", "replicas"}; !slices.Equal(got, want) {
		t.Errorf("bad fields = %v, want %v", got, want)
	}
}

// badFields lists the fields err names, in order.
func badFields(err error) []string {
	var fields []string
	for _, e := range stampede.FieldErrors(err) {
		fields = append(fields, e.Field)
	}
	return fields
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
	want := 0.8 / c.HotCost.Seconds() * c.Seconds // 8/s × 20 s
	if f := float64(hot); f < 0.9*want || f > 1.1*want {
		t.Errorf("%d hot arrivals, want about %.0f", hot, want)
	}
	if n := len(e.Conditions()); n != 1+len(c.Workers)*len(c.Faults) {
		t.Errorf("%d conditions, want %d", n, 1+len(c.Workers)*len(c.Faults))
	}
}

// TestFaultWindows: a victim slowed by a fault falls in its window and out
// of the calm p99; the recovery is the time to the last slow victim's
// commit; neighbours of the hot key are split from the others.
func TestFaultWindows(t *testing.T) {
	e, err := New(validConfig())
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1000, 0)
	ms := func(d float64) int64 { return t0.Add(time.Duration(d * float64(time.Millisecond))).UnixNano() }
	var vs []effect
	other := keyName(1)
	for i := range 200 { // calm: 10 ms each, before and after the fault
		at := float64(i * 100)
		if at >= 10000 && at < 12000 {
			continue
		}
		vs = append(vs, effect{key: other, at: ms(at), done: ms(at + 10)})
	}
	for _, at := range []float64{10100, 10200, 10300} { // stalled by the fault
		vs = append(vs, effect{key: other, at: ms(at), done: ms(11500)})
	}
	lat := e.victimLatencies(vs, []injection{{fault: FaultKill, at: t0.Add(10 * time.Second)}})
	if lat.calm != 10 {
		t.Errorf("calm p99 %.1f ms, want 10 (the stalled victim is in the window)", lat.calm)
	}
	if lat.recovery != 1500 {
		t.Errorf("recovery %.1f ms, want 1500", lat.recovery)
	}
	all := e.victimLatencies(vs, nil)
	if all.calm < 1000 {
		t.Errorf("without fault windows the p99 is %.1f ms, want a stalled one (over 1,000)", all.calm)
	}
}

func TestWorkerConfigValidateNamesEveryBadField(t *testing.T) {
	c := WorkerConfig{Consumer: natskeyed.DefaultConfig(), Cost: time.Millisecond, Jitter: 2}
	got := badFields(c.Validate())
	if want := []string{"nats", "ledger", "jitter"}; len(got) < len(want) || !slices.Equal(got[:len(want)], want) {
		t.Errorf("bad fields = %v, want %v first", got, want)
	}
}
