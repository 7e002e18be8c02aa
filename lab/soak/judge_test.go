package soak

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// hour of samples every 10 s: base + growth per hour × t + noise.
func constructed(name, family, unit string, base, perHour, noise float64) Series {
	rng := rand.New(rand.NewPCG(7, 7))
	s := Series{Name: name, Family: family, Unit: unit, Judged: true, Tolerance: DefaultTolerances()[family]}
	for t := 0.0; t <= 3600; t += 10 {
		s.Points = append(s.Points, Sample{T: t, V: base + perHour*t/3600 + noise*(2*rng.Float64()-1)})
	}
	return s
}

// TestJudgeCatchesALeak feeds the judge an hour of constructed samples:
// flat series with noise pass, a series that keeps growing beyond its
// tolerance fails, a falling one passes, and a run too short to tell is
// reported without a verdict.
func TestJudgeCatchesALeak(t *testing.T) {
	const warmup, window = 720.0, 5 * time.Minute
	cases := []struct {
		s     Series
		grows bool
	}{
		// 60 MiB ± 4 MiB of noise, flat: passes.
		{constructed("pay rss", FamilyRSS, "bytes", 60<<20, 0, 4<<20), false},
		// 60 MiB growing 30 MiB an hour (a leak of 8 KiB a second): fails.
		{constructed("pay rss", FamilyRSS, "bytes", 60<<20, 30<<20, 4<<20), true},
		// Growing 4 MiB an hour: within the 8 MiB floor.
		{constructed("pay rss", FamilyRSS, "bytes", 60<<20, 4<<20, 1<<20), false},
		// A goroutine per 30 s: 120 an hour on 40, beyond 20.
		{constructed("gate-0 goroutines", FamilyGoroutines, "goroutines", 40, 120, 5), true},
		// Goroutines between 35 and 45: flat.
		{constructed("gate-0 goroutines", FamilyGoroutines, "goroutines", 40, 0, 5), false},
		// A database shrinking per payment as its fixed part is shared: passes.
		{constructed("pay database per payment", FamilyStore, "bytes/payment", 5000, -2000, 100), false},
		// A p99 drifting from 100 ms to 400 ms within the hour: fails.
		{constructed("payment p99", FamilyLatency, "ms", 100, 300, 20), true},
	}
	for _, c := range cases {
		v := Judge(c.s, warmup, window)
		t.Logf("%s: slope %.4g/h allowed %.4g/h mean %.4g: judged %v grows %v", c.s.Name, v.SlopePerHour, v.Allowed, v.Mean, v.Judged, v.Grows)
		if !v.Judged {
			t.Errorf("%s: not judged (%s), want a verdict", c.s.Name, v.Reason)
		}
		if v.Grows != c.grows {
			t.Errorf("%s: grows = %v, want %v (slope %.4g/h, allowed %.4g/h)", c.s.Name, v.Grows, c.grows, v.SlopePerHour, v.Allowed)
		}
		if v.Samples != 289 {
			t.Errorf("%s: %d samples after the warm-up, want 289 (720 s to 3600 s every 10 s)", c.s.Name, v.Samples)
		}
	}
	// The leak's verdict names its series and the growth.
	v := Judge(constructed("pay rss", FamilyRSS, "bytes", 60<<20, 30<<20, 0), warmup, window)
	if !strings.HasPrefix(v.String(), "pay rss grows 30.0 MiB bytes/h") {
		t.Errorf("verdict %q", v.String())
	}

	// Too short a window after the warm-up, or a series only reported: no
	// verdict, however steep.
	short := constructed("pay rss", FamilyRSS, "bytes", 60<<20, 1<<30, 0)
	short.Points = short.Points[:40] // 390 s in all: 90 s after a 300 s warm-up
	if v := Judge(short, 300, window); v.Judged || v.Grows {
		t.Errorf("a 90 s window: judged %v grows %v, want neither (%s)", v.Judged, v.Grows, v.Reason)
	}
	reported := constructed("redis used_memory (server)", "redis_server", "bytes", 60<<20, 1<<30, 0)
	reported.Judged = false
	if v := Judge(reported, warmup, window); v.Judged || v.Grows {
		t.Errorf("a reported series: judged %v grows %v, want neither", v.Judged, v.Grows)
	}
}

// TestConfigValidateNamesEveryField: every bad field at once, by its flag.
func TestConfigValidateNamesEveryField(t *testing.T) {
	c := DefaultConfig()
	c.Duration, c.Sample, c.Rate, c.RefundShare, c.Capacity, c.Retention = 0, 0, 0, 2, 0, 0
	err := c.Validate()
	if err == nil {
		t.Fatal("no error")
	}
	for _, f := range []string{"minutes", "sample", "rate", "refund_share", "capacity", "retention", "cmd"} {
		if !strings.Contains(err.Error(), f) {
			t.Errorf("error %q does not name %s", err, f)
		}
	}
}

// The nats-server's current block is the highest-numbered block file of
// the stream (numbers compared as numbers: 10.blk is newer than 9.blk),
// and a stream without a block is an error, not a size of 0.
func TestCurrentBlockIsTheNewest(t *testing.T) {
	dir := t.TempDir()
	msgs := filepath.Join(dir, "jetstream", "$G", "streams", "PAY", "msgs")
	if err := os.MkdirAll(msgs, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := currentBlock(dir, "PAY"); err == nil {
		t.Fatal("a stream without blocks gave a size")
	}
	for name, size := range map[string]int{"9.blk": 900, "10.blk": 100, "2.blk": 200, "index.db": 5000} {
		if err := os.WriteFile(filepath.Join(msgs, name), make([]byte, size), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	got, err := currentBlock(dir, "PAY")
	if err != nil || got != 100 {
		t.Fatalf("current block = %d, %v; want 100 (10.blk)", got, err)
	}
}
