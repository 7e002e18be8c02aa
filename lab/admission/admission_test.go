package admission

import (
	"context"
	"errors"
	"math"
	neturl "net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/internal/testenv"
	"github.com/stampede-lab/stampede/lab"
	"github.com/stampede-lab/stampede/waitroom"
	"github.com/stampede-lab/stampede/waitroom/redisstore"
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
		{func(c *Config) { c.ObserveMinSamples = 0 }, "observe_min_samples"},
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
	c.Capacity, c.Lease, c.ArrivalWindow = 0, time.Millisecond, time.Hour
	// The arrival window is bounded by the lease, which is bad: it is
	// not checked.
	if got, want := badFields(c.Validate()), []string{"capacity", "lease"}; !slices.Equal(got, want) {
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

func TestParseModesAndOnOff(t *testing.T) {
	if m, err := ParseModes([]string{"atomic", " naive"}); err != nil || len(m) != 2 || m[1] != ModeNaive {
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
	cfg.Modes = []waitroom.Mode{waitroom.ModeAtomic, ModeNaive}
	cfg.Duration = 1500 * time.Millisecond
	// This test is about the cap and the accounting, not the observer's
	// pace on a loaded machine: 1 sample at least, and one per 50 ms tick
	// on average (30 in the run), keeps the run valid on any machine that
	// can run it at all.
	cfg.ObserveMinSamples = 1
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range e.Conditions() {
		var res lab.RunResult
		// A run the observer could not follow (too few samples on a
		// starved machine: 14 in 1.5 s once, under -race in CI) is invalid
		// by the lab's own rule and says nothing about the cap: run it
		// again, up to twice; anything else invalid fails at once.
		for attempt := 0; ; attempt++ {
			res, err = e.Run(context.Background(), c, attempt)
			if err != nil {
				t.Fatalf("%s: %v", c.Label, err)
			}
			if res.Valid || attempt == 2 || !strings.Contains(res.Reason, "the observer took") {
				break
			}
			t.Logf("%s: run %d invalid (%s); again", c.Label, attempt+1, res.Reason)
		}
		m := res.Metrics
		if !res.Valid {
			t.Fatalf("%s: invalid: %s", c.Label, res.Reason)
		}
		d := res.Extra.(RunDetail)
		// Every user is accounted for in the atomic mode; the unsafe ones
		// may drop users a late step popped (a defect they are measured
		// for), which lost_users must then count exactly.
		st := d.Accounting
		sum := st.Waiting + st.Away + st.Active + st.ReleasedTotal + st.ExpiredTotal + st.LeftTotal + st.ClosedTotal + st.AbandonedTotal
		if st.JoinedTotal != 60 || m["lost_users"] != float64(st.JoinedTotal-sum) || m["lost_users"] < 0 {
			t.Errorf("%s: accounting %+v, lost_users %v", c.Label, st, m["lost_users"])
		}
		if c.Values["mode"] == string(waitroom.ModeAtomic) && sum != st.JoinedTotal {
			t.Errorf("%s: atomic accounting %+v", c.Label, st)
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

// TestObserverSeesNaiveGoOverCapacity runs the real naive mode with many
// instances on the embedded Redis and checks that the observer catches the
// room over capacity. Naive counts, pops and adds in separate round trips,
// so two passes that overlap fill the same free slots. Eight instances
// ticking every 10 ms on a room of 5, with 200 users in a burst, make
// overlapping passes the rule; users hold their slot for longer than the
// run and never abandon it, so once the room is over capacity it stays
// there and the observer needs only one sample afterwards. Whether passes
// overlap is still up to the scheduler, so the run is tried a bounded
// number of times; a correct checker sees it on the first try in practice.
func TestObserverSeesNaiveGoOverCapacity(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 8 instances in real time for about a second per attempt")
	}
	cfg := DefaultConfig()
	cfg.Instances, cfg.Capacity, cfg.Users = 8, 5, 200
	cfg.Hold, cfg.Lease, cfg.Abandon = time.Minute, time.Minute, 0
	cfg.Ticks, cfg.Immediate = []time.Duration{10 * time.Millisecond}, []bool{false}
	cfg.Modes = []waitroom.Mode{ModeNaive}
	cfg.Duration = time.Second
	cfg.ObserveMinSamples = 1
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := e.Conditions()[0]
	const attempts = 5
	for attempt := range attempts {
		res, err := e.Run(context.Background(), c, attempt)
		if err != nil {
			t.Fatalf("attempt %d: %v", attempt+1, err)
		}
		m, d := res.Metrics, res.Extra.(RunDetail)
		t.Logf("attempt %d: max_active_observed %v, over_cap_samples %v, final active %d, %d samples",
			attempt+1, m["max_active_observed"], m["over_cap_samples"], d.Accounting.Active, d.Samples)
		if m["max_active_observed"] > float64(cfg.Capacity) {
			if m["over_cap_samples"] < 1 {
				t.Errorf("max_active_observed %v over a capacity of %d, but over_cap_samples %v",
					m["max_active_observed"], cfg.Capacity, m["over_cap_samples"])
			}
			return
		}
		if d.Accounting.Active > int64(cfg.Capacity) {
			// Nobody left: the room ended over capacity, and the observer
			// never saw it.
			t.Fatalf("attempt %d: the room ended with %d in a room of %d, but the observer saw at most %v",
				attempt+1, d.Accounting.Active, cfg.Capacity, m["max_active_observed"])
		}
	}
	t.Fatalf("naive with %d instances never went over a capacity of %d in %d attempts", cfg.Instances, cfg.Capacity, attempts)
}

// TestFIFOInversions feeds the inversion counter a hand-made sequence of
// queue exits, out of time order.
func TestFIFOInversions(t *testing.T) {
	ms := func(n int) time.Time { return time.UnixMilli(int64(1_700_000_000_000 + n)) }
	for _, tc := range []struct {
		name  string
		exits []queueExit
		want  int
	}{
		{"empty", nil, 0},
		{"in order", []queueExit{{ms(0), 1}, {ms(1), 2}, {ms(1), 3}, {ms(5), 4}}, 0},
		// 3 left at 1 ms, then 2 at 2 ms: 2 joined before 3 and left after.
		{"one inversion", []queueExit{{ms(0), 1}, {ms(1), 3}, {ms(2), 2}, {ms(3), 4}}, 1},
		// Given out of time order: the counter sorts by the store's clock.
		{"unsorted input", []queueExit{{ms(2), 2}, {ms(3), 4}, {ms(0), 1}, {ms(1), 3}}, 1},
		// 5 and 4 in the same millisecond: the clock cannot order them.
		{"same millisecond", []queueExit{{ms(0), 5}, {ms(0), 4}, {ms(0), 6}}, 0},
		// 9 left first; every earlier joiner who left later is one.
		{"a late joiner first", []queueExit{{ms(0), 9}, {ms(1), 1}, {ms(2), 2}, {ms(2), 3}, {ms(3), 10}}, 3},
	} {
		in := append([]queueExit(nil), tc.exits...)
		if got := fifoInversions(tc.exits); got != tc.want {
			t.Errorf("%s: fifoInversions = %d, want %d", tc.name, got, tc.want)
		}
		for i := range in {
			if in[i] != tc.exits[i] {
				t.Errorf("%s: fifoInversions reordered its input", tc.name)
				break
			}
		}
	}
}

func TestRequiredSamples(t *testing.T) {
	c := DefaultConfig()
	for _, tc := range []struct {
		d, tick time.Duration
		want    int
	}{
		{5 * time.Second, 2 * time.Second, 100},                        // the floor
		{5 * time.Second, 200 * time.Millisecond, 100},                 // 25 ticks, the floor
		{5 * time.Second, 10 * time.Millisecond, 500},                  // one per tick
		{5*time.Second + time.Millisecond, 10 * time.Millisecond, 501}, // rounded up
	} {
		if got := c.RequiredSamples(tc.d, tc.tick); got != tc.want {
			t.Errorf("RequiredSamples(%s, %s) = %d, want %d", tc.d, tc.tick, got, tc.want)
		}
	}
}

func TestObserverProblems(t *testing.T) {
	if p := observerProblems(120, 100, 0, nil, 5*time.Second, 200*time.Millisecond); p != nil {
		t.Errorf("enough samples, no error: %q", p)
	}
	p := observerProblems(99, 100, 0, nil, 5*time.Second, 200*time.Millisecond)
	if len(p) != 1 || !strings.Contains(p[0], "took 99 samples in 5s, fewer than the 100 needed") {
		t.Errorf("too few samples: %q", p)
	}
	p = observerProblems(500, 100, 3, errors.New("connection reset"), 5*time.Second, 200*time.Millisecond)
	if len(p) != 1 || !strings.Contains(p[0], "failed 3 times") || !strings.Contains(p[0], "connection reset") {
		t.Errorf("errors: %q", p)
	}
}

// TestObserverCountsItsErrors makes the observer's reads fail for certain:
// the room's active set is a string, so counting it is a WRONGTYPE error.
func TestObserverCountsItsErrors(t *testing.T) {
	m, err := redisstore.StartEmbedded()
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ctx := context.Background()
	keys := redisstore.KeysFor("broken")
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer client.Close()
	if err := client.HSet(ctx, keys.Config, "capacity", 5).Err(); err != nil {
		t.Fatal(err)
	}
	if err := client.Set(ctx, keys.Active, "not a sorted set", 0).Err(); err != nil {
		t.Fatal(err)
	}

	o := newObserver(&redis.Options{Addr: m.Addr()}, "broken", time.Millisecond)
	defer o.client.Close()
	if !o.readCapacity(ctx) || o.capacity != 5 {
		t.Fatalf("readCapacity: capacity %d, errors %d (%v)", o.capacity, o.errs, o.firstErr)
	}
	for range 3 {
		if !o.sample(ctx, time.Now()) {
			t.Fatal("sample reported the end of the run")
		}
	}
	if o.errs != 3 || o.samples != 0 || o.firstErr == nil || !strings.Contains(o.firstErr.Error(), "WRONGTYPE") {
		t.Fatalf("errs %d, samples %d, first %v; want 3 WRONGTYPE errors and no sample", o.errs, o.samples, o.firstErr)
	}

	// No room at all: the capacity cannot be read.
	o2 := newObserver(&redis.Options{Addr: m.Addr()}, "nowhere", time.Millisecond)
	o2.run(ctx, time.Now()) // returns at once, and closes its client
	if o2.errs != 1 || o2.samples != 0 {
		t.Errorf("no room: errs %d, samples %d; want 1 error and no sample", o2.errs, o2.samples)
	}
}

// TestRunInvalidWhenTheObserverFallsShort asks for more samples than any
// run can take: the run is measured, but invalid, and says why.
func TestRunInvalidWhenTheObserverFallsShort(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 3 instances in real time for half a second")
	}
	cfg := DefaultConfig()
	cfg.Capacity, cfg.Users, cfg.Hold = 5, 20, 100*time.Millisecond
	cfg.Ticks, cfg.Immediate = []time.Duration{50 * time.Millisecond}, []bool{true}
	cfg.Modes = []waitroom.Mode{waitroom.ModeAtomic}
	cfg.Duration = 500 * time.Millisecond
	cfg.ObserveMinSamples = 100_000_000 // one every 5 ns
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	res, err := e.Run(context.Background(), e.Conditions()[0], 0)
	if err != nil {
		t.Fatal(err)
	}
	d := res.Extra.(RunDetail)
	if res.Valid || !strings.Contains(res.Reason, "fewer than the 100000000 needed") {
		t.Errorf("valid %v, reason %q; want invalid for too few samples", res.Valid, res.Reason)
	}
	if d.RequiredSamples != 100_000_000 || d.Samples == 0 || d.ObserverErrors != 0 {
		t.Errorf("detail: required %d, samples %d, errors %d", d.RequiredSamples, d.Samples, d.ObserverErrors)
	}
}

// labRedis is the Redis of the lab tests that measure at scale: the real
// one of STAMPEDE_REDIS_URL, in DB 7 unless the URL names a database
// other than 0 (the test is skipped without it, and fails in CI). DB 7 is
// these tests' own: the lab's Services admit in every room of their
// database, and another package's test must not find its rooms admitted
// (nor these tests find their passes slowed by another's rooms). The
// embedded server runs Lua too slowly on a small machine, under -race
// above all, for 1,000 users polling at once: its clients time out.
func labRedis(t *testing.T) string {
	url := testenv.URL(t, testenv.RedisURL)
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatalf("STAMPEDE_REDIS_URL: %v", err)
	}
	if opts.DB == 0 {
		u, err := neturl.Parse(url)
		if err != nil {
			t.Fatal(err)
		}
		u.Path = "/7"
		return u.String()
	}
	return url
}

// TestPrequeueIsShuffledThenFIFO: 1,000 users join before the room opens
// (a room of 1,100, so the first pass after the opening admits the whole
// pre-queue in its shuffled order); over three runs the median Spearman
// correlation between their join and admission order is below 0.1 in
// size, and users who join after the opening are admitted first come
// first served. A loaded machine may get some pre-queue joins to the room
// only after the opening: at least half must be shuffled.
func TestPrequeueIsShuffledThenFIFO(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 3 instances in real time for a few seconds")
	}
	cfg := DefaultConfig()
	cfg.RedisURL = labRedis(t)
	cfg.Capacity, cfg.Users, cfg.Prequeue, cfg.Hold, cfg.Abandon = 1100, 1100, 1000, 50*time.Millisecond, 0
	cfg.OpensAfter, cfg.Duration = 5*time.Second, 7*time.Second
	cfg.Ticks, cfg.Immediate, cfg.Modes = []time.Duration{100 * time.Millisecond}, []bool{true}, []waitroom.Mode{waitroom.ModeAtomic}
	cfg.ObserveMinSamples = 1
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := e.Conditions()[0]
	var rhos []float64
	// A run counts when the lab saw the opening's pass: on a loaded
	// machine (-race) its answer may come after the store's deadline,
	// although Redis ran it, and the lab's pass log then misses the
	// shuffle. Up to five runs are made to get three.
	for i := 0; i < 5 && len(rhos) < 3; i++ {
		res, err := e.Run(context.Background(), c, i)
		if err != nil {
			t.Fatal(err)
		}
		m := res.Metrics
		t.Logf("run %d: spearman_rho %.3f over %v shuffled pre-queue users, fifo_inversions_after_open %v, admitted %v",
			i, m["spearman_rho"], m["prequeue_shuffled"], m["fifo_inversions_after_open"], m["admitted"])
		if len(res.Broken) > 0 || m["fifo_inversions_after_open"] != 0 {
			t.Errorf("run %d: broken %v, metrics %v", i, res.Broken, m)
		}
		if m["prequeue_shuffled"] >= 500 {
			rhos = append(rhos, m["spearman_rho"])
		}
	}
	if len(rhos) < 3 {
		t.Fatalf("only %d of 5 runs saw the opening shuffle at least 500 of the 1000 pre-queue users", len(rhos))
	}
	slices.Sort(rhos)
	if math.Abs(rhos[1]) >= 0.1 {
		t.Errorf("median Spearman rho = %.3f (runs %v), want |rho| < 0.1", rhos[1], rhos)
	}
}

// TestAbandonmentKeepsSlotsUsed: 30 % of the users stop polling right
// after joining. With abandon_after and arrival set, the slots stay used
// by live users at least 90 % of the time users wait.
//
// An admitted user who never arrives holds a slot for the arrival window
// (2 s) and a live one for its hold, so the share is about hold / (hold +
// no-show share × window): with holds of 1 s it was 0.895–0.923 in five
// runs (643 admitted, 27–36 no-shows), at the threshold by construction;
// with 2 s, 0.924–0.938. Without abandonment and arrival (both 0) the
// same run measures 0.648: the test fails without the feature.
func TestAbandonmentKeepsSlotsUsed(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 3 instances in real time for a few seconds")
	}
	cfg := DefaultConfig()
	cfg.RedisURL = labRedis(t)
	cfg.Capacity, cfg.Users, cfg.Hold, cfg.Abandon = 50, 1000, 2*time.Second, 0
	// Windows of 2 s with polls at least every second: a live user whose
	// poll comes late on a loaded machine is not taken for gone.
	cfg.AbandonFraction, cfg.AbandonAfter, cfg.ArrivalWindow = 0.3, 2*time.Second, 2*time.Second
	// Long enough that the first seconds, when users who stopped polling
	// still hold slots they were given at once, weigh little.
	cfg.Duration = 14 * time.Second
	cfg.Ticks, cfg.Immediate, cfg.Modes = []time.Duration{100 * time.Millisecond}, []bool{true}, []waitroom.Mode{waitroom.ModeAtomic}
	cfg.ObserveMinSamples = 1
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	res, err := e.Run(context.Background(), e.Conditions()[0], 0)
	if err != nil {
		t.Fatal(err)
	}
	m := res.Metrics
	t.Logf("live_slot_utilization %.3f (slot_utilization %.3f), no_shows %v, abandoned %v, admitted %v, http_failures %v",
		m["live_slot_utilization"], m["slot_utilization"], m["no_shows"], m["abandoned"], m["admitted"], m["http_failures"])
	if len(res.Broken) > 0 {
		t.Fatalf("broken: %v", res.Broken)
	}
	// A lab user whose request fails gives up: on a machine too loaded to
	// answer (the store's 1 s deadline passing under -race), live users
	// leave en masse and the run measures the machine, not the room.
	if f := m["http_failures"]; f > 0.05*float64(cfg.Users) && m["live_slot_utilization"] < 0.9 {
		t.Skipf("%v of %d users' requests failed: the machine is too loaded for this measurement", f, cfg.Users)
	}
	if m["live_slot_utilization"] < 0.9 {
		t.Errorf("broken %v; live_slot_utilization %.3f, want at least 0.9", res.Broken, m["live_slot_utilization"])
	}
}

func TestSpearman(t *testing.T) {
	for _, c := range []struct {
		x, y []float64
		want float64
	}{
		{[]float64{1, 2, 3, 4}, []float64{10, 20, 30, 40}, 1},
		{[]float64{1, 2, 3, 4}, []float64{4, 3, 2, 1}, -1},
		{[]float64{1, 2, 3}, []float64{5, 5, 5}, 0},
		{[]float64{1, 2, 3, 4, 5}, []float64{2, 1, 4, 3, 5}, 0.8},
	} {
		if got := spearman(c.x, c.y); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("spearman(%v, %v) = %v, want %v", c.x, c.y, got, c.want)
		}
	}
}
