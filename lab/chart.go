package lab

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Default chart size, used when LineChart.Width or Height is zero.
const (
	DefaultChartWidth  = 16 * vg.Centimeter
	DefaultChartHeight = 10 * vg.Centimeter
)

// Series is one named line of a chart: the points (X[i], Y[i]).
type Series struct {
	Name string
	X, Y []float64
}

// HLine is a horizontal reference line, such as a capacity limit, drawn
// dashed across the chart at height Y and named in the legend.
type HLine struct {
	Name string
	Y    float64
}

// VLine is a vertical mark, such as a fault injected at time X, drawn
// dotted from the bottom to the top of the chart and labelled at the top.
type VLine struct {
	Name string
	X    float64
}

// Tick is a labelled position on an axis.
type Tick struct {
	Value float64
	Label string
}

// LineChart is a line chart with one line per series, each in its own
// color with its own point marker, and a legend. Experiments build one in
// Render and call Save.
type LineChart struct {
	Title, XLabel, YLabel string
	// LogY selects a logarithmic Y axis. A log axis cannot show zero or
	// negative values, so those are clamped to a floor one decade below
	// the smallest positive Y value in the chart (or to 1 when there is
	// none); they appear at the bottom of the chart.
	LogY bool
	// Series are the lines; at least one is required, each with at least
	// one point and as many X as Y values.
	Series []Series
	// Lines are optional dashed horizontal reference lines.
	Lines []HLine
	// Marks are optional vertical marks (events in time), each labelled.
	Marks []VLine
	// XTicks, if set, replaces the automatic X axis ticks with these
	// labelled positions (for example percentiles on a "nines" axis).
	XTicks []Tick
	// LegendBottomRight moves the legend from the top left corner to the
	// bottom right, for charts whose lines start low and end high.
	LegendBottomRight bool
	// FromZero starts a linear Y axis at zero (or below, if a value is
	// negative), so that a line's height shows its size and not only its
	// changes. A log axis (LogY) ignores it.
	FromZero bool
	// Width and Height are the image size; zero means DefaultChartWidth
	// and DefaultChartHeight.
	Width, Height vg.Length
}

// Save draws the chart and writes it to path as a PNG image, whatever the
// file name's extension.
func (c LineChart) Save(path string) (err error) {
	if err := c.validate(); err != nil {
		return err
	}
	width, height := c.Width, c.Height
	if width == 0 {
		width = DefaultChartWidth
	}
	if height == 0 {
		height = DefaultChartHeight
	}

	p, err := c.plot()
	if err != nil {
		return fmt.Errorf("lab: chart %q: %w", c.Title, err)
	}

	// gonum/plot panics on some degenerate input; turn that into an error
	// so that one bad chart does not lose a whole report.
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("lab: chart %q: drawing failed: %v", c.Title, v)
		}
	}()
	image, err := p.WriterTo(width, height, "png")
	if err != nil {
		return fmt.Errorf("lab: chart %q: %w", c.Title, err)
	}

	if err := writePNG(path, image); err != nil {
		return fmt.Errorf("lab: chart %q: %w", c.Title, err)
	}
	return nil
}

// SaveStacked draws charts one above the other in one PNG image at path,
// for panels that read together, such as throughput and latency against
// the same load. Each panel keeps its own title, axes and legend, and the
// panels' plotting areas are aligned. The image is as wide as the widest
// chart and as high as all of them together (each chart's Width and
// Height, or the defaults).
func SaveStacked(path string, charts ...LineChart) (err error) {
	if len(charts) == 0 {
		return fmt.Errorf("lab: stacked chart %s: charts: must not be empty", path)
	}
	var width, height vg.Length
	plots := make([][]*plot.Plot, len(charts))
	for i, c := range charts {
		if err := c.validate(); err != nil {
			return err
		}
		w, h := c.Width, c.Height
		if w == 0 {
			w = DefaultChartWidth
		}
		if h == 0 {
			h = DefaultChartHeight
		}
		width, height = max(width, w), height+h
		p, err := c.plot()
		if err != nil {
			return fmt.Errorf("lab: chart %q: %w", c.Title, err)
		}
		plots[i] = []*plot.Plot{p}
	}
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("lab: stacked chart %s: drawing failed: %v", path, v)
		}
	}()
	img := vgimg.New(width, height)
	tiles := draw.Tiles{Rows: len(charts), Cols: 1, PadY: vg.Millimeter}
	canvases := plot.Align(plots, tiles, draw.New(img))
	for i := range plots {
		plots[i][0].Draw(canvases[i][0])
	}
	if err := writePNG(path, vgimg.PngCanvas{Canvas: img}); err != nil {
		return fmt.Errorf("lab: stacked chart: %w", err)
	}
	return nil
}

// writePNG writes image to a new file at path.
func writePNG(path string, image interface {
	WriteTo(io.Writer) (int64, error)
}) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := image.WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// validate reports the first field of c that cannot be drawn.
func (c LineChart) validate() error {
	if len(c.Series) == 0 {
		return fmt.Errorf("lab: chart %q: Series: must not be empty", c.Title)
	}
	for i, s := range c.Series {
		where := fmt.Sprintf("lab: chart %q: Series[%d] (%q)", c.Title, i, s.Name)
		if len(s.X) != len(s.Y) {
			return fmt.Errorf("%s: X has %d values but Y has %d", where, len(s.X), len(s.Y))
		}
		if len(s.X) == 0 {
			return fmt.Errorf("%s: has no points", where)
		}
		for j := range s.X {
			if !finite(s.X[j]) || !finite(s.Y[j]) {
				return fmt.Errorf("%s: point %d (%v, %v) is not finite", where, j, s.X[j], s.Y[j])
			}
		}
	}
	for i, l := range c.Lines {
		if !finite(l.Y) {
			return fmt.Errorf("lab: chart %q: Lines[%d] (%q): Y %v is not finite", c.Title, i, l.Name, l.Y)
		}
	}
	for i, m := range c.Marks {
		if !finite(m.X) {
			return fmt.Errorf("lab: chart %q: Marks[%d] (%q): X %v is not finite", c.Title, i, m.Name, m.X)
		}
	}
	if c.Width < 0 || c.Height < 0 {
		return fmt.Errorf("lab: chart %q: Width, Height: must not be negative", c.Title)
	}
	return nil
}

// plot builds the gonum plot for c, which must be valid.
func (c LineChart) plot() (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = c.Title
	p.X.Label.Text = c.XLabel
	p.Y.Label.Text = c.YLabel
	p.Legend.Top = !c.LegendBottomRight
	p.Legend.Left = !c.LegendBottomRight
	p.Add(plotter.NewGrid())
	if len(c.XTicks) > 0 {
		ticks := make(plot.ConstantTicks, len(c.XTicks))
		for i, t := range c.XTicks {
			ticks[i] = plot.Tick{Value: t.Value, Label: t.Label}
		}
		p.X.Tick.Marker = ticks
	}

	floor := 0.0
	if c.LogY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
		floor = c.logFloor()
	}
	y := func(v float64) float64 {
		if c.LogY && v < floor {
			return floor
		}
		return v
	}

	xMin, xMax := math.Inf(1), math.Inf(-1)
	for i, s := range c.Series {
		points := make(plotter.XYs, len(s.X))
		for j := range s.X {
			points[j] = plotter.XY{X: s.X[j], Y: y(s.Y[j])}
			xMin = math.Min(xMin, s.X[j])
			xMax = math.Max(xMax, s.X[j])
		}
		line, marks, err := plotter.NewLinePoints(points)
		if err != nil {
			return nil, fmt.Errorf("series %d (%q): %w", i, s.Name, err)
		}
		line.Color = plotutil.Color(i)
		marks.Color = plotutil.Color(i)
		marks.Shape = plotutil.Shape(i)
		p.Add(line, marks)
		p.Legend.Add(s.Name, line, marks)
	}

	for i, l := range c.Lines {
		points := plotter.XYs{{X: xMin, Y: y(l.Y)}, {X: xMax, Y: y(l.Y)}}
		line, err := plotter.NewLine(points)
		if err != nil {
			return nil, fmt.Errorf("line %d (%q): %w", i, l.Name, err)
		}
		line.Color = plotutil.Color(len(c.Series) + i)
		line.Dashes = []vg.Length{vg.Points(6), vg.Points(4)}
		p.Add(line)
		p.Legend.Add(l.Name, line)
	}

	if c.FromZero && !c.LogY {
		p.Y.Min = math.Min(p.Y.Min, 0)
	}

	// A log axis needs a range of positive values; widen a flat one by a
	// decade each way (gonum would widen it by ±1, possibly below zero).
	if c.LogY && p.Y.Min == p.Y.Max {
		p.Y.Min /= 10
		p.Y.Max *= 10
	}
	if err := c.addMarks(p); err != nil {
		return nil, err
	}
	return p, nil
}

// logFloor returns the value that zero and negative Y values are clamped
// to on a log axis: a tenth of the smallest positive Y, or 1 if there is
// no positive Y at all.
func (c LineChart) logFloor() float64 {
	smallest := math.Inf(1)
	for _, s := range c.Series {
		for _, v := range s.Y {
			if v > 0 {
				smallest = math.Min(smallest, v)
			}
		}
	}
	for _, l := range c.Lines {
		if l.Y > 0 {
			smallest = math.Min(smallest, l.Y)
		}
	}
	if math.IsInf(smallest, 1) {
		return 1
	}
	return smallest / 10
}

// finite reports whether v is neither NaN nor infinite.
func finite(v float64) bool {
	return !math.IsNaN(v) && !math.IsInf(v, 0)
}

// addMarks draws c.Marks across the Y range the data gave p, each with
// its name at the top, in gray.
func (c LineChart) addMarks(p *plot.Plot) error {
	if len(c.Marks) == 0 {
		return nil
	}
	lo, hi := p.Y.Min, p.Y.Max
	if lo == hi {
		hi = lo + 1
	}
	labels := plotter.XYLabels{}
	for i, m := range c.Marks {
		line, err := plotter.NewLine(plotter.XYs{{X: m.X, Y: lo}, {X: m.X, Y: hi}})
		if err != nil {
			return fmt.Errorf("mark %d (%q): %w", i, m.Name, err)
		}
		line.Color = color.Gray{Y: 110}
		line.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
		p.Add(line)
		labels.XYs = append(labels.XYs, plotter.XY{X: m.X, Y: hi})
		labels.Labels = append(labels.Labels, m.Name)
	}
	l, err := plotter.NewLabels(labels)
	if err != nil {
		return err
	}
	for i := range l.TextStyle {
		l.TextStyle[i].Rotation = -math.Pi / 2
		l.TextStyle[i].Font.Size = vg.Points(7)
		l.TextStyle[i].Color = color.Gray{Y: 60}
	}
	p.Add(l)
	p.Y.Max = hi
	if p.Y.Min > lo {
		p.Y.Min = lo
	}
	if p.X.Min > c.Marks[0].X {
		p.X.Min = c.Marks[0].X
	}
	return nil
}
