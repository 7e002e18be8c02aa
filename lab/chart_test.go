package lab

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/vgimg"
)

// pngMagic starts every PNG file.
var pngMagic = []byte("\x89PNG\r\n\x1a\n")

func checkPNG(t *testing.T, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(data, pngMagic) {
		t.Errorf("%s is not a PNG (%d bytes, starts %q)", path, len(data), data[:min(len(data), 8)])
	}
}

func TestLineChartSave(t *testing.T) {
	tests := []struct {
		name  string
		chart LineChart
	}{
		{"linear", LineChart{
			Title: "p99 by load", XLabel: "hot load", YLabel: "p99 (ms)",
			Series: []Series{
				{Name: "keyed", X: []float64{0.5, 1, 2}, Y: []float64{3, 4, 9}},
				{Name: "random", X: []float64{0.5, 1, 2}, Y: []float64{2, 2.5, 3}},
			},
			Lines: []HLine{{Name: "capacity", Y: 8}},
		}},
		{"labelled ticks, legend bottom right", LineChart{
			Title: "latency", LogY: true, LegendBottomRight: true,
			XTicks: []Tick{{Value: 0.3, Label: "p50"}, {Value: 1, Label: "p90"}, {Value: 2, Label: "p99"}},
			Series: []Series{{Name: "victim", X: []float64{0.3, 1, 2}, Y: []float64{5, 8, 12}}},
		}},
		{"log with zero and negative values", LineChart{
			Title: "violations", LogY: true,
			Series: []Series{
				{Name: "keyed", X: []float64{1, 2, 3}, Y: []float64{0, 10, 1000}},
				{Name: "random", X: []float64{1, 2, 3}, Y: []float64{-1, 0.5, 20}},
			},
			Lines: []HLine{{Name: "limit", Y: 100}},
		}},
		{"log with a flat line", LineChart{
			Title: "flat", LogY: true,
			Series: []Series{{Name: "only", X: []float64{1, 2}, Y: []float64{5, 5}}},
		}},
		{"log with no positive value", LineChart{
			Title: "zeros", LogY: true,
			Series: []Series{{Name: "only", X: []float64{1}, Y: []float64{0}}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "chart.png")
			if err := tt.chart.Save(path); err != nil {
				t.Fatalf("Save: %v", err)
			}
			checkPNG(t, path)
		})
	}
}

func TestLineChartSaveRejectsBadInput(t *testing.T) {
	tests := []struct {
		name  string
		chart LineChart
		want  string
	}{
		{"no series", LineChart{Title: "empty"}, "Series: must not be empty"},
		{"length mismatch", LineChart{Series: []Series{{Name: "a", X: []float64{1, 2}, Y: []float64{1}}}}, `Series[0] ("a")`},
		{"no points", LineChart{Series: []Series{{Name: "a"}}}, "no points"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "chart.png")
			err := tt.chart.Save(path)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Save error = %v, want one containing %q", err, tt.want)
			}
			if _, statErr := os.Stat(path); !os.IsNotExist(statErr) {
				t.Errorf("a file was written despite the error")
			}
		})
	}
}

func TestLineChartFromZero(t *testing.T) {
	c := LineChart{Title: "rate", Series: []Series{{Name: "a", X: []float64{1, 2}, Y: []float64{900, 1000}}}}
	p, err := c.plot()
	if err != nil {
		t.Fatal(err)
	}
	if p.Y.Min != 900 {
		t.Errorf("without FromZero, Y.Min = %v, want the smallest value 900", p.Y.Min)
	}
	c.FromZero = true
	if p, err = c.plot(); err != nil {
		t.Fatal(err)
	}
	if p.Y.Min != 0 || p.Y.Max != 1000 {
		t.Errorf("with FromZero, Y from %v to %v, want 0 to 1000", p.Y.Min, p.Y.Max)
	}
	c.Series[0].Y[0] = -5
	if p, err = c.plot(); err != nil {
		t.Fatal(err)
	}
	if p.Y.Min != -5 {
		t.Errorf("with FromZero and a negative value, Y.Min = %v, want -5", p.Y.Min)
	}
}

func TestSaveStacked(t *testing.T) {
	a := LineChart{Title: "rate", FromZero: true, Series: []Series{{Name: "a", X: []float64{1, 2, 3}, Y: []float64{5, 9, 12}}}}
	b := LineChart{Title: "p99", LogY: true, Series: []Series{{Name: "a", X: []float64{1, 2, 3}, Y: []float64{40, 80, 300}}}, Width: 20 * vg.Centimeter}
	path := filepath.Join(t.TempDir(), "stacked.png")
	if err := SaveStacked(path, a, b); err != nil {
		t.Fatalf("SaveStacked: %v", err)
	}
	checkPNG(t, path)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cfg, err := png.DecodeConfig(f)
	if err != nil {
		t.Fatal(err)
	}
	px := func(l vg.Length) int { return int(l.Dots(vgimg.DefaultDPI) + 0.5) }
	wantW, wantH := px(20*vg.Centimeter), px(2*DefaultChartHeight)
	if abs(cfg.Width-wantW) > 1 || abs(cfg.Height-wantH) > 1 {
		t.Errorf("image is %d×%d px, want %d×%d (the widest chart, the panels' heights added)", cfg.Width, cfg.Height, wantW, wantH)
	}
}

func TestSaveStackedRejectsBadInput(t *testing.T) {
	good := LineChart{Title: "ok", Series: []Series{{Name: "a", X: []float64{1}, Y: []float64{1}}}}
	for _, tt := range []struct {
		name   string
		charts []LineChart
		want   string
	}{
		{"no charts", nil, "charts: must not be empty"},
		{"a bad panel", []LineChart{good, {Title: "bad", Series: []Series{{Name: "b"}}}}, `chart "bad": Series[0] ("b"): has no points`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "stacked.png")
			err := SaveStacked(path, tt.charts...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("SaveStacked error = %v, want one containing %q", err, tt.want)
			}
			if _, statErr := os.Stat(path); !os.IsNotExist(statErr) {
				t.Errorf("a file was written despite the error")
			}
		})
	}
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// TestTimeChart draws a chart of two panels with faults, and checks the
// time axis: trimmed a little after the last change (a queue that is empty
// from 110 s of a 600 s run ends the axis near 110 s, not at 600 s), and
// never before a fault's end.
func TestTimeChart(t *testing.T) {
	var xs, queue, room []float64
	for s := 0.0; s <= 600; s += 2 {
		xs = append(xs, s)
		q := 0.0
		if s < 110 {
			q = 16000 * (1 - s/110)
		}
		queue = append(queue, q)
		room = append(room, min(200, s*10))
	}
	c := TimeChart{Title: "Queue and room", XLabel: "seconds",
		Panels: []Panel{
			{YLabel: "waiting", FromZero: true, Series: []Series{{Name: "waiting", X: xs, Y: queue}}},
			{YLabel: "users", FromZero: true, Series: []Series{{Name: "active", X: xs, Y: room}}, Lines: []HLine{{Name: "capacity", Y: 200}}},
		},
		Spans: []Span{{Name: "gate killed", From: 9, To: 9}, {Name: "database cut", From: 36, To: 39}},
	}
	lo, hi := c.timeRange()
	if lo != 0 || hi < 110 || hi > 130 {
		t.Errorf("time axis %v to %v, want 0 to a little after 110", lo, hi)
	}
	p, _, err := c.panel(c.Panels[0], lo, hi, true, 0)
	if err != nil {
		t.Fatal(err)
	}
	if p.X.Min != lo || p.X.Max != hi {
		t.Errorf("the panel's time axis runs from %v to %v, want the trimmed %v to %v", p.X.Min, p.X.Max, lo, hi)
	}
	var labels []string
	for _, tk := range (compactTicks{}).Ticks(lo, hi) {
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
	}
	if want := "0 20 40 60 80 100 120"; strings.Join(labels, " ") != want && strings.Join(labels, " ") != "0 20 40 60 80 100" {
		t.Errorf("time axis labels %q, want %q", labels, want)
	}
	path := filepath.Join(t.TempDir(), "time.png")
	if err := c.Save(path); err != nil {
		t.Fatalf("Save: %v", err)
	}
	checkPNG(t, path)

	c.Spans = append(c.Spans, Span{Name: "late fault", From: 200, To: 250})
	if _, hi := c.timeRange(); hi < 250 {
		t.Errorf("time axis ends at %v, before the last fault's end (250)", hi)
	}
	for _, bad := range []TimeChart{
		{Title: "none"},
		{Title: "span", Panels: c.Panels, Spans: []Span{{Name: "backwards", From: 5, To: 1}}},
		{Title: "series", Panels: []Panel{{Series: []Series{{Name: "empty"}}}}},
	} {
		if err := bad.Save(filepath.Join(t.TempDir(), "bad.png")); err == nil {
			t.Errorf("chart %q: Save accepted bad input", bad.Title)
		}
	}
}
