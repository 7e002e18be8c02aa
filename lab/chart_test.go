package lab

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
