package ordering

import (
	"context"
	"math"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/dispatch"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestValidateNamesTheFlag(t *testing.T) {
	cases := []struct {
		mutate func(*Config)
		flag   string
	}{
		{func(c *Config) { c.Workers = 0 }, "workers"},
		{func(c *Config) { c.Rate = 0 }, "rate"},
		{func(c *Config) { c.Rate = math.NaN() }, "rate"},
		{func(c *Config) { c.Keys = 1 }, "keys"},
		{func(c *Config) { c.HotLoads = nil }, "hot_loads"},
		{func(c *Config) { c.HotLoads = []float64{-1} }, "hot_loads"},
		{func(c *Config) { c.HotLoads = []float64{50} }, "hot_loads"}, // 500 hot items/s > 400/s
		{func(c *Config) { c.NormalCost = 0 }, "normal_cost"},
		{func(c *Config) { c.HotCost = -time.Second }, "hot_cost"},
		{func(c *Config) { c.Jitter = 1 }, "jitter"},
		{func(c *Config) { c.StealAfter = 0 }, "steal_after"},
		{func(c *Config) { c.Strategies = nil }, "strategies"},
		{func(c *Config) { c.Strategies = []dispatch.Strategy{"fifo"} }, "strategies"},
		{func(c *Config) { c.Duration = 0 }, "seconds"},
		{func(c *Config) { c.Repeat = 0 }, "repeat"},
		{func(c *Config) { c.HotArrivals = "bursty" }, "hot_arrivals"},
	}
	for _, tc := range cases {
		c := DefaultConfig()
		tc.mutate(&c)
		if err := c.Validate(); !slices.Equal(badFields(err), []string{tc.flag}) {
			t.Errorf("Validate() = %v, want an error naming %s", err, tc.flag)
		}
	}
	for _, c := range []Config{DefaultConfig(), FullConfig()} {
		if err := c.Validate(); err != nil {
			t.Errorf("Validate() = %v", err)
		}
	}
}

func TestValidateNamesEveryBadField(t *testing.T) {
	c := DefaultConfig()
	c.Workers, c.Jitter = 0, 2
	if got, want := badFields(c.Validate()), []string{"workers", "jitter"}; !slices.Equal(got, want) {
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

func TestParseStrategies(t *testing.T) {
	got, err := ParseStrategies([]string{"keyed", " shared"})
	if err != nil || len(got) != 2 || got[0] != dispatch.Keyed || got[1] != dispatch.Shared {
		t.Fatalf("ParseStrategies = %v, %v", got, err)
	}
	for _, bad := range [][]string{{"keyed", "keyed"}, {"lifo"}} {
		if _, err := ParseStrategies(bad); err == nil {
			t.Errorf("ParseStrategies(%q) succeeded", bad)
		}
	}
}

// TestScheduleMatchesTheOfferedLoad: the stream has the configured rate and
// hot share, and the same seed gives every strategy the same stream.
func TestScheduleMatchesTheOfferedLoad(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Duration = 100 * time.Second
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const load = 2.0
	plan := e.schedule(load, 7)
	wantN := cfg.Rate * cfg.Duration.Seconds() // 40,000
	if n := float64(len(plan)); math.Abs(n-wantN) > 4*math.Sqrt(wantN) {
		t.Errorf("%d arrivals, want %.0f ± 4σ", len(plan), wantN)
	}
	hot, keys := 0, map[int]bool{}
	var prev time.Duration
	for _, a := range plan {
		if a.at < prev || a.at >= cfg.Duration {
			t.Fatalf("arrival at %s out of order or past the run", a.at)
		}
		prev = a.at
		keys[a.key] = true
		mean := cfg.NormalCost
		if a.key == 0 {
			hot++
			mean = cfg.HotCost
		}
		lo, hi := time.Duration(float64(mean)*(1-cfg.Jitter)), time.Duration(float64(mean)*(1+cfg.Jitter))
		if a.cost < lo || a.cost > hi {
			t.Fatalf("cost %s outside [%s, %s]", a.cost, lo, hi)
		}
	}
	// Hot load 2.0 workers at 100 ms a hot item is 20 hot items/s.
	wantHot := load / cfg.HotCost.Seconds() * cfg.Duration.Seconds()
	if math.Abs(float64(hot)-wantHot) > 4*math.Sqrt(wantHot) {
		t.Errorf("%d hot items, want %.0f ± 4σ", hot, wantHot)
	}
	if len(keys) != cfg.Keys {
		t.Errorf("%d keys used, want %d", len(keys), cfg.Keys)
	}
	again := e.schedule(load, 7)
	if len(again) != len(plan) || again[len(again)-1] != plan[len(plan)-1] {
		t.Error("the same seed gave a different stream")
	}
}

// TestEvenHotArrivalsAreEvenlySpaced: with HotEven the hot key's items are
// exactly 1/(hot rate) apart and the other keys keep their rate.
func TestEvenHotArrivalsAreEvenlySpaced(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Duration, cfg.HotArrivals = 50*time.Second, HotEven
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const load = 1.0 // 10 hot items/s at 100 ms
	var hot []time.Duration
	others := 0
	for _, a := range e.schedule(load, 3) {
		if a.key == 0 {
			hot = append(hot, a.at)
		} else {
			others++
		}
	}
	if len(hot) != 500 {
		t.Fatalf("%d hot items in 50 s, want 500", len(hot))
	}
	for i := 1; i < len(hot); i++ {
		if gap := hot[i] - hot[i-1]; gap != 100*time.Millisecond {
			t.Fatalf("hot gap %s, want 100ms", gap)
		}
	}
	wantOthers := (cfg.Rate - 10) * cfg.Duration.Seconds()
	if math.Abs(float64(others)-wantOthers) > 4*math.Sqrt(wantOthers) {
		t.Errorf("%d other items, want %.0f ± 4σ", others, wantOthers)
	}
}

// TestRunChecksEveryStrategy runs a short, small experiment for real and
// checks what the run reports, not how fast it was.
func TestRunChecksEveryStrategy(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the dispatcher in real time for about 2 s")
	}
	cfg := DefaultConfig()
	cfg.Duration = 300 * time.Millisecond
	cfg.Rate = 200
	cfg.NormalCost, cfg.HotCost = time.Millisecond, 20*time.Millisecond
	cfg.HotLoads = []float64{2}
	cfg.StealAfter = 50 * time.Millisecond
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range e.Conditions() {
		res, err := e.Run(context.Background(), c, 0)
		if err != nil {
			t.Fatalf("%s: %v", c.Label, err)
		}
		d := res.Extra.(RunDetail)
		m := res.Metrics
		if !res.Valid || len(res.Broken) > 0 {
			t.Errorf("%s: valid=%v (%s), broken=%v", c.Label, res.Valid, res.Reason, res.Broken)
		}
		if m["items"] != float64(d.Arrivals) || m["lost"] != 0 || m["duplicates"] != 0 {
			t.Errorf("%s: items=%v lost=%v duplicates=%v, want all %d arrivals once", c.Label, m["items"], m["lost"], m["duplicates"], d.Arrivals)
		}
		if m["violations"] != m["hot_violations"]+m["other_violations"] {
			t.Errorf("%s: violations %v != hot %v + other %v", c.Label, m["violations"], m["hot_violations"], m["other_violations"])
		}
		if m["victim_p50_ms"] > m["victim_p99_ms"] || m["victim_p50_ms"] <= 0 {
			t.Errorf("%s: victim p50 %v, p99 %v", c.Label, m["victim_p50_ms"], m["victim_p99_ms"])
		}
		s := dispatch.Strategy(c.Values["strategy"].(string))
		if (s == dispatch.Keyed || s == dispatch.Partition) && (m["violations"] != 0 || m["overlaps"] != 0) {
			t.Errorf("%s broke per-key order: %v", c.Label, m)
		}
	}
}

func TestRunStopsOnCancel(t *testing.T) {
	e, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := e.Run(ctx, e.Conditions()[0], 0); err == nil {
		t.Fatal("Run with a cancelled context succeeded")
	}
}
