package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// input has two runs of two lines at two X values, a GOMAXPROCS suffix,
// and lines that are not results.
const input = `goos: linux
BenchmarkWorkerScaling/noop/keyed/workers=1-2   	 100	  10 ns/op	 1000 items/s
BenchmarkWorkerScaling/noop/keyed/workers=1-2   	 100	  10 ns/op	 3000 items/s
BenchmarkWorkerScaling/noop/keyed/workers=2-2   	 100	  10 ns/op	 4000 items/s
BenchmarkWorkerScaling/noop/plain/workers=1-2   	 100	  10 ns/op	 5000 items/s
BenchmarkWorkerScaling/noop/plain/workers=2-2   	 100	  10 ns/op	 6000 items/s	 7 other
BenchmarkOther-2   	 100	  10 ns/op
PASS
`

func TestLinesAndCharts(t *testing.T) {
	s := samples{}
	if err := s.read(strings.NewReader(input)); err != nil {
		t.Fatal(err)
	}
	if got := s[result{"WorkerScaling/noop/keyed/workers=1", 2}]["items/s"]; !slices.Equal(got, []float64{1000, 3000}) {
		t.Errorf("keyed workers=1 items/s = %v, want [1000 3000]", got)
	}
	f := figure{pattern: regexp.MustCompile(`^WorkerScaling/`), param: "workers", logX: true,
		panels: []panel{{unit: "items/s"}, {unit: "other"}, {unit: "absent"}}}
	charts := f.charts(s)
	if len(charts) != 2 {
		t.Fatalf("%d charts, want 2 (a panel without data is left out)", len(charts))
	}
	c := charts[0]
	if len(c.Series) != 2 || c.Series[0].Name != "keyed" || c.Series[1].Name != "plain" {
		t.Fatalf("series %+v, want keyed and plain (the shared elements dropped)", c.Series)
	}
	// The median of 1000 and 3000 at workers=1 (log2 1 = 0).
	if k := c.Series[0]; !slices.Equal(k.X, []float64{0, 1}) || !slices.Equal(k.Y, []float64{2000, 4000}) {
		t.Errorf("keyed points X %v Y %v, want X [0 1] Y [2000 4000]", k.X, k.Y)
	}
	if len(c.XTicks) != 2 || c.XTicks[1].Label != "2" || c.XTicks[1].Value != 1 {
		t.Errorf("ticks %+v, want 1 and 2 at log2 positions", c.XTicks)
	}
	if o := charts[1]; len(o.Series) != 1 || o.Series[0].Name != "plain" {
		t.Errorf("other-metric series %+v, want the one line that has it, plain", o.Series)
	}
}

func TestGOMAXPROCSNamesLines(t *testing.T) {
	s := samples{}
	in := "BenchmarkD/keyed/workers=1 	 1	 1 ns/op	 5 items/s\nBenchmarkD/keyed/workers=1-2 	 1	 1 ns/op	 6 items/s\n"
	if err := s.read(strings.NewReader(in)); err != nil {
		t.Fatal(err)
	}
	f := figure{pattern: regexp.MustCompile(`^D/`), param: "workers", panels: []panel{{unit: "items/s"}}}
	var names []string
	for _, ser := range f.charts(s)[0].Series {
		names = append(names, ser.Name)
	}
	if want := []string{"keyed (GOMAXPROCS 1)", "keyed (GOMAXPROCS 2)"}; !slices.Equal(names, want) {
		t.Errorf("lines %q, want %q", names, want)
	}
}

func TestRunDrawsTheFiguresWithData(t *testing.T) {
	in := filepath.Join(t.TempDir(), "bench.txt")
	if err := os.WriteFile(in, []byte(input), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := run(dir, builtin, []string{in}); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != "dispatch-workers.png" {
		t.Errorf("wrote %v, want only dispatch-workers.png", entries)
	}
	if err := run(dir, builtin, []string{os.DevNull}); err == nil || !strings.Contains(err.Error(), "no results") {
		t.Errorf("run on empty input: %v, want a no-results error", err)
	}
}
