package retry

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"pgregory.net/rapid"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// constRand always returns the same value.
type constRand float64

func (c constRand) Float64() float64 { return float64(c) }

// seqRand returns its values in turn and then repeats the last one.
type seqRand struct {
	vals []float64
	i    int
}

func (s *seqRand) Float64() float64 {
	v := s.vals[min(s.i, len(s.vals)-1)]
	s.i++
	return v
}

// tb is what the helpers need of *testing.T and *rapid.T.
type tb interface {
	Helper()
	Fatalf(format string, args ...any)
}

func mustNew(t tb, c Config, rnd Rand) Policy {
	t.Helper()
	p, err := New(c, rnd)
	if err != nil {
		t.Fatalf("New(%+v): %v", c, err)
	}
	return p
}

// waits drains a fresh sequence of p: every wait it grants, in order. It
// stops at limit so that a broken policy cannot loop forever.
func waits(t tb, p Policy, limit int) []time.Duration {
	t.Helper()
	s := p.Start()
	var out []time.Duration
	for range limit {
		d, ok := s.Next()
		if !ok {
			// Once stopped, a sequence stays stopped.
			if d2, ok2 := s.Next(); ok2 || d2 != 0 {
				t.Fatalf("Next after stop returned (%v, %v)", d2, ok2)
			}
			return out
		}
		out = append(out, d)
	}
	t.Fatalf("%s: sequence did not stop within %d calls", p.Name(), limit)
	return nil
}

func cfg(name string, mod func(*Config)) Config {
	c := DefaultConfig()
	c.Name = name
	if mod != nil {
		mod(&c)
	}
	return c
}

const ms = time.Millisecond

func TestDefaultConfig(t *testing.T) {
	c := DefaultConfig()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	want := Config{Name: None, MaxAttempts: 3, Base: 500 * ms, Cap: 10 * time.Second, Multiplier: 2}
	if c != want {
		t.Fatalf("DefaultConfig() = %+v, want %+v", c, want)
	}
	// Every name is valid on top of the defaults.
	for _, n := range Names() {
		if err := cfg(n, nil).Validate(); err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}
}

func TestValidateNamesTheField(t *testing.T) {
	tests := []struct {
		field string
		mod   func(*Config)
	}{
		{"Name", func(c *Config) { c.Name = "" }},
		{"Name", func(c *Config) { c.Name = "linear" }},
		{"MaxAttempts", func(c *Config) { c.MaxAttempts = 0 }},
		{"MaxAttempts", func(c *Config) { c.MaxAttempts = -1 }},
		{"Base", func(c *Config) { c.Base = 0 }},
		{"Base", func(c *Config) { c.Base = -ms }},
		{"Cap", func(c *Config) { c.Cap = c.Base - 1 }},
		{"Cap", func(c *Config) { c.Base, c.Cap = -ms, 0 }},
		{"Multiplier", func(c *Config) { c.Multiplier = 0.5 }},
		{"Multiplier", func(c *Config) { c.Multiplier = math.NaN() }},
		{"Multiplier", func(c *Config) { c.Multiplier = math.Inf(1) }},
	}
	for _, tt := range tests {
		c := cfg(Exponential, tt.mod)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tt.field+":") {
			t.Errorf("Validate(%+v) = %v, want an error naming %s", c, err, tt.field)
		}
		if p, err := New(c, nil); err == nil || p != nil {
			t.Errorf("New(%+v) = %v, %v; want an error", c, p, err)
		}
	}
	// All bad fields are reported at once.
	err := Config{}.Validate()
	for _, f := range []string{"Name", "MaxAttempts", "Base", "Cap", "Multiplier"} {
		if err == nil || !strings.Contains(err.Error(), f+":") {
			t.Errorf("Config{}.Validate() = %v, want it to name %s", err, f)
		}
	}
}

func TestNamesAndParseName(t *testing.T) {
	want := []string{"none", "exponential", "full-jitter", "equal-jitter", "decorrelated-jitter"}
	got := Names()
	if !slices.Equal(got, want) {
		t.Fatalf("Names() = %v, want %v", got, want)
	}
	got[0] = "mutated"
	if Names()[0] != "none" {
		t.Fatal("Names() shares its backing array")
	}
	for _, n := range want {
		if p, err := ParseName(n); err != nil || p != n {
			t.Errorf("ParseName(%q) = %q, %v", n, p, err)
		}
	}
	for in, out := range map[string]string{" Full_Jitter ": FullJitter, "EXPONENTIAL": Exponential, "decorrelated_jitter": DecorrelatedJitter} {
		if p, err := ParseName(in); err != nil || p != out {
			t.Errorf("ParseName(%q) = %q, %v; want %q", in, p, err, out)
		}
	}
	for _, in := range []string{"", "jitter", "budget", "full jitter"} {
		if _, err := ParseName(in); err == nil || !strings.Contains(err.Error(), "full-jitter") {
			t.Errorf("ParseName(%q) = %v, want an error listing the names", in, err)
		}
	}
	// New canonicalises the name.
	if n := mustNew(t, cfg("Equal_Jitter", nil), nil).Name(); n != EqualJitter {
		t.Errorf("Name() = %q, want %q", n, EqualJitter)
	}
}

func TestExactSchedules(t *testing.T) {
	s := time.Second
	tests := []struct {
		name string
		cfg  Config
		want []time.Duration
	}{
		{"exponential default stops after 3 attempts", cfg(Exponential, nil), []time.Duration{500 * ms, s}},
		{"exponential 4 attempts", cfg(Exponential, func(c *Config) { c.MaxAttempts = 4 }), []time.Duration{500 * ms, s, 2 * s}},
		{"exponential capped", cfg(Exponential, func(c *Config) { c.MaxAttempts, c.Cap = 7, 1500*ms }), []time.Duration{500 * ms, s, 1500 * ms, 1500 * ms, 1500 * ms, 1500 * ms}},
		{"exponential ×3", cfg(Exponential, func(c *Config) { c.MaxAttempts, c.Base, c.Multiplier = 5, 100*ms, 3 }), []time.Duration{100 * ms, 300 * ms, 900 * ms, 2700 * ms}},
		{"exponential ×1 is constant", cfg(Exponential, func(c *Config) { c.MaxAttempts, c.Multiplier = 4, 1 }), []time.Duration{500 * ms, 500 * ms, 500 * ms}},
		{"exponential base = cap", cfg(Exponential, func(c *Config) { c.MaxAttempts, c.Cap = 3, 500*ms }), []time.Duration{500 * ms, 500 * ms}},
		{"exponential far past overflow stays at cap", cfg(Exponential, func(c *Config) { c.MaxAttempts, c.Multiplier = 200, 1e10 }), append([]time.Duration{500 * ms}, slices.Repeat([]time.Duration{10 * s}, 198)...)},
		{"one attempt never retries", cfg(Exponential, func(c *Config) { c.MaxAttempts = 1 }), nil},
		{"none never retries", cfg(None, func(c *Config) { c.MaxAttempts = 10 }), nil},
		{"none default", DefaultConfig(), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := waits(t, mustNew(t, tt.cfg, constRand(0.5)), 1000)
			if !slices.Equal(got, tt.want) {
				t.Fatalf("waits = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestJitterBounds pins every jittered policy at the edges of its random
// draw: 0, 0.5, 0.999, and out-of-range values that must be clamped.
func TestJitterBounds(t *testing.T) {
	s := time.Second
	envelope := []time.Duration{500 * ms, s, 2 * s, 4 * s, 8 * s, 10 * s, 10 * s} // exponential, capped at 10 s
	scale := func(f float64, ds []time.Duration) []time.Duration {
		out := make([]time.Duration, len(ds))
		for i, d := range ds {
			out[i] = time.Duration(f * float64(d))
		}
		return out
	}
	equal := func(f float64) []time.Duration {
		out := make([]time.Duration, len(envelope))
		for i, v := range envelope {
			out[i] = v/2 + time.Duration(f*float64(v-v/2))
		}
		return out
	}
	tests := []struct {
		name string
		r    float64
		want []time.Duration
	}{
		{FullJitter, 0, scale(0, envelope)},
		{FullJitter, 0.5, scale(0.5, envelope)},
		{FullJitter, 0.999, scale(0.999, envelope)},
		{FullJitter, 1, envelope}, // clamped, never above v
		{FullJitter, 7, envelope},
		{FullJitter, -3, scale(0, envelope)},
		{FullJitter, math.NaN(), scale(0, envelope)},
		{EqualJitter, 0, equal(0)},
		{EqualJitter, 0.5, equal(0.5)},
		{EqualJitter, 0.999, equal(0.999)},
		{EqualJitter, 7, envelope},
		{EqualJitter, -1, equal(0)},
		// decorrelated: prev starts at Base; d = min(cap, base + r·(3·prev − base)).
		{DecorrelatedJitter, 0, slices.Repeat([]time.Duration{500 * ms}, 7)},
		{DecorrelatedJitter, 0.5, []time.Duration{1000 * ms, 1750 * ms, 2875 * ms, 4562500 * time.Microsecond, 7093750 * time.Microsecond, 10 * s, 10 * s}},
		{DecorrelatedJitter, 0.999, []time.Duration{1499 * ms, 4493003 * time.Microsecond, 10 * s, 10 * s, 10 * s, 10 * s, 10 * s}},
		{DecorrelatedJitter, 5, []time.Duration{1500 * ms, 4500 * ms, 10 * s, 10 * s, 10 * s, 10 * s, 10 * s}}, // clamped to 1
		{DecorrelatedJitter, math.NaN(), slices.Repeat([]time.Duration{500 * ms}, 7)},
	}
	for _, tt := range tests {
		c := cfg(tt.name, func(c *Config) { c.MaxAttempts = 8 })
		got := waits(t, mustNew(t, c, constRand(tt.r)), 100)
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s r=%v: waits = %v, want %v", tt.name, tt.r, got, tt.want)
		}
		for i, d := range got {
			lo, hi := time.Duration(0), envelope[i]
			switch tt.name {
			case EqualJitter:
				lo = envelope[i] / 2
			case DecorrelatedJitter:
				lo, hi = c.Base, c.Cap
			}
			if d < lo || d > hi {
				t.Errorf("%s r=%v wait %d = %v, outside [%v, %v]", tt.name, tt.r, i+1, d, lo, hi)
			}
		}
	}
}

// TestJitterBoundsProperty draws arbitrary configurations and random
// streams and checks that no wait ever leaves its policy's interval.
func TestJitterBoundsProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		c := Config{
			Name:        rapid.SampledFrom(Names()).Draw(rt, "name"),
			MaxAttempts: rapid.IntRange(1, 40).Draw(rt, "max"),
			Base:        time.Duration(rapid.Int64Range(1, int64(time.Hour)).Draw(rt, "base")),
			Multiplier:  rapid.Float64Range(1, 1e6).Draw(rt, "mult"),
		}
		c.Cap = c.Base + time.Duration(rapid.Int64Range(0, math.MaxInt64-int64(c.Base)).Draw(rt, "capExtra"))
		draws := rapid.SliceOfN(rapid.Float64Range(0, 0.9999999), 1, 64).Draw(rt, "draws")
		p := mustNew(rt, c, &seqRand{vals: draws})
		got := waits(rt, p, 100)
		if c.Name == None {
			if len(got) != 0 {
				rt.Fatalf("none retried: %v", got)
			}
			return
		}
		if len(got) != c.MaxAttempts-1 {
			rt.Fatalf("%d waits, want MaxAttempts-1 = %d", len(got), c.MaxAttempts-1)
		}
		pol := p.(*policy)
		for i, d := range got {
			v := pol.exponential(i + 1)
			lo, hi := time.Duration(0), v
			switch c.Name {
			case Exponential:
				lo = v
			case EqualJitter:
				lo = v / 2
			case DecorrelatedJitter:
				lo, hi = c.Base, c.Cap
			}
			if d < lo || d > hi || d > c.Cap {
				rt.Fatalf("%s wait %d = %v outside [%v, %v] (cap %v)", c.Name, i+1, d, lo, hi, c.Cap)
			}
		}
	})
}

// TestFullJitterStatistics draws the first wait 20,000 times from a seeded
// source: the mean must be within 2 % of Base/2 and a chi-square test over
// 10 equal bins must not reject uniformity. The seed is fixed, so the test
// is deterministic and cannot flake.
func TestFullJitterStatistics(t *testing.T) {
	const n, bins = 20_000, 10
	c := cfg(FullJitter, nil)
	p := mustNew(t, c, rand.New(rand.NewPCG(2015, 11)))
	var sum float64
	var hist [bins]int
	for range n {
		d, ok := p.Start().Next()
		if !ok || d < 0 || d >= c.Base {
			t.Fatalf("first wait = %v, %v; want in [0, %v)", d, ok, c.Base)
		}
		sum += float64(d)
		hist[int(float64(d)/float64(c.Base)*bins)]++
	}
	mean := time.Duration(sum / n)
	if want := c.Base / 2; math.Abs(float64(mean-want)) > 0.02*float64(want) {
		t.Errorf("mean first wait = %v, want %v ± 2%%", mean, want)
	}
	expected := float64(n) / bins
	var chi2 float64
	for _, o := range hist {
		chi2 += (float64(o) - expected) * (float64(o) - expected) / expected
	}
	// 9 degrees of freedom: p = 0.001 at 27.88. 40 is generous.
	if chi2 > 40 {
		t.Errorf("chi-square = %.1f over bins %v, want ≤ 40", chi2, hist)
	}
	t.Logf("mean %v, chi-square %.2f, bins %v", mean, chi2, hist)
}

func TestDecorrelatedDependsOnPreviousWait(t *testing.T) {
	c := cfg(DecorrelatedJitter, func(c *Config) { c.MaxAttempts = 4 })
	// The same draw gives different waits after different previous waits:
	// 0.9 then 0.5 versus 0.1 then 0.5.
	hi := waits(t, mustNew(t, c, &seqRand{vals: []float64{0.9, 0.5, 0.5}}), 10)
	lo := waits(t, mustNew(t, c, &seqRand{vals: []float64{0.1, 0.5, 0.5}}), 10)
	if hi[1] <= lo[1] {
		t.Fatalf("second wait after a long first wait (%v) = %v, not above second wait after a short one (%v) = %v", hi[0], hi[1], lo[0], lo[1])
	}
	// Every later draw is 0.5, so wait i+1 = base + 0.5·(3·wait i − base).
	for _, ws := range [][]time.Duration{hi, lo} {
		for i := 1; i < len(ws); i++ {
			want := min(c.Base+time.Duration(0.5*float64(3*ws[i-1]-c.Base)), c.Cap)
			if ws[i] != want {
				t.Errorf("wait %d = %v after %v, want %v", i+1, ws[i], ws[i-1], want)
			}
		}
	}
}

// TestDecorrelatedProperty: waits stay within [Base, Cap] and each follows
// from the one before it.
func TestDecorrelatedProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		base := time.Duration(rapid.Int64Range(1, int64(time.Minute)).Draw(rt, "base"))
		c := Config{
			Name:        DecorrelatedJitter,
			MaxAttempts: rapid.IntRange(2, 30).Draw(rt, "max"),
			Base:        base,
			Cap:         base + time.Duration(rapid.Int64Range(0, int64(time.Hour)).Draw(rt, "capExtra")),
			Multiplier:  2,
		}
		draws := rapid.SliceOfN(rapid.Float64Range(0, 0.9999999), c.MaxAttempts, c.MaxAttempts).Draw(rt, "draws")
		got := waits(rt, mustNew(rt, c, &seqRand{vals: draws}), 100)
		prev := c.Base
		for i, d := range got {
			if d < c.Base || d > c.Cap {
				rt.Fatalf("wait %d = %v outside [%v, %v]", i+1, d, c.Base, c.Cap)
			}
			want := min(clamp(float64(c.Base)+draws[i]*(3*float64(prev)-float64(c.Base)), c.Cap), c.Cap)
			if d != want {
				rt.Fatalf("wait %d = %v after %v with draw %v, want %v", i+1, d, prev, draws[i], want)
			}
			prev = d
		}
	})
}

// TestSequencesAreIndependent: one policy, many operations; each keeps its
// own attempt count and previous wait.
func TestSequencesAreIndependent(t *testing.T) {
	p := mustNew(t, cfg(DecorrelatedJitter, func(c *Config) { c.MaxAttempts = 5 }), constRand(0.5))
	a := p.Start()
	for range 3 {
		a.Next()
	}
	b := p.Start()
	if d, ok := b.Next(); !ok || d != time.Second {
		t.Fatalf("fresh sequence's first wait = %v, %v; want 1s (prev = Base, not a's state)", d, ok)
	}
	if _, ok := a.Next(); !ok {
		t.Fatal("a's 4th Next should still retry (MaxAttempts 5)")
	}
	if _, ok := a.Next(); ok {
		t.Fatal("a should stop after 4 retries")
	}
	if _, ok := b.Next(); !ok {
		t.Fatal("b's count must not be affected by a")
	}
}

// TestSharedPolicyConcurrent shares one policy and one non-thread-safe
// seeded source among many goroutines; run with -race.
func TestSharedPolicyConcurrent(t *testing.T) {
	for _, name := range Names() {
		c := cfg(name, func(c *Config) { c.MaxAttempts = 6 })
		p := mustNew(t, c, rand.New(rand.NewPCG(1, 2)))
		var wg sync.WaitGroup
		for range 32 {
			wg.Go(func() {
				for range 50 {
					s, retries := p.Start(), 0
					for d, ok := s.Next(); ok; d, ok = s.Next() {
						retries++
						if d < 0 || d > c.Cap {
							t.Errorf("%s: wait %v outside [0, %v]", name, d, c.Cap)
						}
					}
					if want := map[bool]int{true: 0, false: 5}[name == None]; retries != want {
						t.Errorf("%s: %d retries, want %d", name, retries, want)
					}
				}
			})
		}
		wg.Wait()
	}
	// The nil source (math/rand/v2's global generator) too.
	p := mustNew(t, cfg(FullJitter, nil), nil)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 100 {
				if d, ok := p.Start().Next(); !ok || d < 0 || d >= 500*ms {
					t.Errorf("first wait %v, %v", d, ok)
				}
			}
		})
	}
	wg.Wait()
}
