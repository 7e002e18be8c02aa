package lab

import (
	"fmt"
	"image/color"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Panel is one plot of a TimeChart: its lines share a Y axis, so put
// quantities of different scale in panels of their own.
type Panel struct {
	// YLabel names the panel's quantity and unit.
	YLabel string
	// Series are the panel's lines; at least one, each with points.
	Series []Series
	// Lines are dashed horizontal references, such as a capacity.
	Lines []HLine
	// FromZero starts the Y axis at zero (or below a negative value).
	FromZero bool
}

// Span is a fault or an event in time: from From to To seconds (To equal
// to From for an instant).
type Span struct {
	Name     string
	From, To float64
}

// TimeChart is a time series chart: panels stacked one above the other
// sharing their time axis (small multiples), each with its legend outside
// the plot on the right; faults drawn as numbered bars in a strip above
// the panels and shaded across them, the numbers explained below the
// chart; the time axis trimmed to where something happens; lines without
// markers; a sans-serif font.
type TimeChart struct {
	Title, XLabel string
	Panels        []Panel
	Spans         []Span
	// Width is the image width; zero means DefaultChartWidth × 1.25.
	// PanelHeight is each panel's height; zero means 5 cm.
	Width, PanelHeight vg.Length
}

// sans is the charts' font family: Liberation Sans, shipped with gonum.
var sans = font.Font{Typeface: "Liberation", Variant: "Sans"}

// useSans sets every text of p in the sans-serif font.
func useSans(p *plot.Plot) {
	for _, f := range []*font.Font{&p.Title.TextStyle.Font, &p.X.Label.TextStyle.Font, &p.Y.Label.TextStyle.Font,
		&p.X.Tick.Label.Font, &p.Y.Tick.Label.Font, &p.Legend.TextStyle.Font} {
		f.Typeface, f.Variant = sans.Typeface, sans.Variant
	}
}

// textStyle is a sans-serif text style of size points.
func textStyle(points float64, c color.Color) text.Style {
	return text.Style{Font: font.From(sans, vg.Points(points)), Color: c, Handler: plot.DefaultTextHandler}
}

// validate reports the first field of c that cannot be drawn.
func (c TimeChart) validate() error {
	if len(c.Panels) == 0 {
		return fmt.Errorf("lab: chart %q: Panels: must not be empty", c.Title)
	}
	for i, p := range c.Panels {
		lc := LineChart{Title: fmt.Sprintf("%s, panel %d", c.Title, i), Series: p.Series, Lines: p.Lines}
		if err := lc.validate(); err != nil {
			return err
		}
	}
	for i, s := range c.Spans {
		if !finite(s.From) || !finite(s.To) || s.To < s.From {
			return fmt.Errorf("lab: chart %q: Spans[%d] (%q): from %v to %v", c.Title, i, s.Name, s.From, s.To)
		}
	}
	if c.Width < 0 || c.PanelHeight < 0 {
		return fmt.Errorf("lab: chart %q: Width, PanelHeight: must not be negative", c.Title)
	}
	return nil
}

// timeRange returns the time axis: from the first sample (or 0, if
// later) to a little after the last moment something changes: the last
// sample of any line whose value differs from its final one, or the end
// of a span, whichever is later.
func (c TimeChart) timeRange() (lo, hi float64) {
	lo, hi = 0, math.Inf(-1)
	dataMax := math.Inf(-1)
	for _, p := range c.Panels {
		for _, s := range p.Series {
			last := s.Y[len(s.Y)-1]
			for i := range s.X {
				lo = math.Min(lo, s.X[i])
				dataMax = math.Max(dataMax, s.X[i])
			}
			// The first sample of the final value: the line is flat after it.
			settled := s.X[len(s.X)-1]
			for i := len(s.Y) - 1; i >= 0 && s.Y[i] == last; i-- {
				settled = s.X[i]
			}
			hi = math.Max(hi, settled)
		}
	}
	for _, s := range c.Spans {
		hi = math.Max(hi, s.To)
	}
	if hi <= lo {
		hi = dataMax
	}
	hi += 0.08 * (hi - lo)
	hi = math.Min(hi, math.Max(dataMax, hi-0.08*(hi-lo)))
	if hi <= lo {
		hi = lo + 1
	}
	return lo, hi
}

// spanColor marks the faults: their bars in the strip, their starts
// across the panels.
var spanColor = color.NRGBA{R: 200, G: 80, B: 60, A: 200}

// Save draws the chart and writes it to path as a PNG image.
func (c TimeChart) Save(path string) (err error) {
	if err := c.validate(); err != nil {
		return err
	}
	width, panelH := c.Width, c.PanelHeight
	if width == 0 {
		width = DefaultChartWidth * 5 / 4
	}
	if panelH == 0 {
		panelH = 5 * vg.Centimeter
	}
	lo, hi := c.timeRange()

	// The panels, the fault strip and the legends.
	var plots []*plot.Plot
	var legends []plot.Legend
	colors := 0 // colors run on across the panels: one per quantity
	for i, pn := range c.Panels {
		p, lg, err := c.panel(pn, lo, hi, i == len(c.Panels)-1, colors)
		colors += len(pn.Series)
		if err != nil {
			return fmt.Errorf("lab: chart %q: %w", c.Title, err)
		}
		plots = append(plots, p)
		legends = append(legends, lg)
	}
	var strip *plot.Plot
	rowH := vg.Points(11)
	stripH := vg.Length(0)
	if len(c.Spans) > 0 {
		strip = c.strip(lo, hi)
		stripH = rowH*vg.Length(len(c.Spans)) + vg.Points(8)
	}

	titleSty := textStyle(13, color.Black)
	keySty := textStyle(9, color.Gray{Y: 40})
	keyLine := vg.Points(12)
	keyCols := 1
	if len(c.Spans) > 4 {
		keyCols = 2
	}
	keyRows := (len(c.Spans) + keyCols - 1) / keyCols
	titleH := vg.Points(24)
	keyH := vg.Length(0)
	if len(c.Spans) > 0 {
		keyH = keyLine*vg.Length(keyRows) + vg.Points(10)
	}
	height := titleH + stripH + panelH*vg.Length(len(plots)) + keyH

	// The legends' column, as wide as the widest legend.
	legendW := vg.Length(0)
	for i, pn := range c.Panels {
		names := []string{}
		for _, s := range pn.Series {
			names = append(names, s.Name)
		}
		for _, l := range pn.Lines {
			names = append(names, l.Name)
		}
		for _, n := range names {
			w := legends[i].ThumbnailWidth + legends[i].TextStyle.Width(" "+n)
			legendW = max(legendW, w)
		}
	}
	legendW += vg.Points(18)

	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("lab: chart %q: drawing failed: %v", c.Title, v)
		}
	}()
	img := vgimg.New(width, height)
	dc := draw.New(img)
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())

	// Rows from the top: title, strip, panels, key.
	top := height - titleH
	tcanvas := draw.Canvas{Canvas: img, Rectangle: vg.Rectangle{Min: vg.Point{X: 0, Y: top}, Max: vg.Point{X: width, Y: height}}}
	tsty := titleSty
	tsty.XAlign, tsty.YAlign = draw.XCenter, draw.YCenter
	tcanvas.FillText(tsty, vg.Point{X: (width - legendW) / 2, Y: top + titleH/2}, c.Title)

	type row struct {
		p      *plot.Plot
		c      draw.Canvas
		legend *plot.Legend
	}
	var rows []row
	plotRight := width - legendW
	if strip != nil {
		rows = append(rows, row{p: strip, c: draw.Canvas{Canvas: img, Rectangle: vg.Rectangle{
			Min: vg.Point{X: 0, Y: top - stripH}, Max: vg.Point{X: plotRight, Y: top}}}})
		top -= stripH
	}
	for i, p := range plots {
		rows = append(rows, row{p: p, legend: &legends[i], c: draw.Canvas{Canvas: img, Rectangle: vg.Rectangle{
			Min: vg.Point{X: 0, Y: top - panelH}, Max: vg.Point{X: plotRight, Y: top}}}})
		top -= panelH
	}
	// Align the data areas: the widest left and right margins for all.
	var left, right vg.Length
	for _, r := range rows {
		d := r.p.DataCanvas(r.c)
		left = max(left, d.Min.X-r.c.Min.X)
		right = max(right, r.c.Max.X-d.Max.X)
	}
	for _, r := range rows {
		d := r.p.DataCanvas(r.c)
		cv := r.c
		cv.Min.X = left - (d.Min.X - r.c.Min.X)
		cv.Max.X = plotRight - right + (r.c.Max.X - d.Max.X)
		r.p.Draw(cv)
		if r.legend != nil {
			lc := draw.Canvas{Canvas: img, Rectangle: vg.Rectangle{
				Min: vg.Point{X: plotRight + vg.Points(10), Y: r.c.Min.Y}, Max: vg.Point{X: width, Y: r.c.Max.Y - vg.Points(6)}}}
			r.legend.Draw(lc)
		}
	}

	// The key of the faults' numbers.
	if len(c.Spans) > 0 {
		colW := (width - left) / vg.Length(keyCols)
		for i, s := range c.Spans {
			col, line := i/keyRows, i%keyRows
			at := vg.Point{X: left + colW*vg.Length(col), Y: top - vg.Points(6) - keyLine*vg.Length(line+1)}
			when := fmt.Sprintf("%.1f s", s.From)
			if s.To > s.From {
				when = fmt.Sprintf("%.1f–%.1f s", s.From, s.To)
			}
			dc.FillText(keySty, at, fmt.Sprintf("%d  %s (%s)", i+1, s.Name, when))
		}
	}
	return writePNG(path, vgimg.PngCanvas{Canvas: img})
}

// panel builds one panel over the time range [lo, hi], with its legend
// apart; only the bottom panel shows the time axis's labels.
func (c TimeChart) panel(pn Panel, lo, hi float64, bottom bool, firstColor int) (*plot.Plot, plot.Legend, error) {
	p := plot.New()
	useSans(p)
	p.Y.Label.Text = pn.YLabel
	p.Y.Label.TextStyle.Font.Size = vg.Points(10)
	p.Y.Tick.Label.Font.Size = vg.Points(9)
	p.X.Tick.Label.Font.Size = vg.Points(9)
	if bottom {
		p.X.Tick.Marker = compactTicks{}
		p.X.Label.Text = c.XLabel
		p.X.Label.TextStyle.Font.Size = vg.Points(10)
	} else {
		p.X.Tick.Marker = compactTicks{blank: true}
	}
	p.Y.Tick.Marker = compactTicks{}
	grid := plotter.NewGrid()
	grid.Vertical.Color = color.Gray{Y: 225}
	grid.Horizontal.Color = color.Gray{Y: 225}
	p.Add(grid)
	lg := plot.NewLegend()
	lg.TextStyle = textStyle(9, color.Black)
	lg.Top, lg.Left = true, true
	lg.ThumbnailWidth = vg.Points(16)

	var data []plot.Plotter // drawn after the fault marks, above them
	yMin, yMax := math.Inf(1), math.Inf(-1)
	for i, s := range pn.Series {
		pts := make(plotter.XYs, len(s.X))
		for j := range s.X {
			pts[j] = plotter.XY{X: s.X[j], Y: s.Y[j]}
			if s.X[j] >= lo && s.X[j] <= hi {
				yMin, yMax = math.Min(yMin, s.Y[j]), math.Max(yMax, s.Y[j])
			}
		}
		line, err := plotter.NewLine(pts)
		if err != nil {
			return nil, lg, fmt.Errorf("series %q: %w", s.Name, err)
		}
		line.Color = plotutil.Color(firstColor + i)
		line.Width = vg.Points(1.5)
		data = append(data, line)
		lg.Add(s.Name, line)
	}
	for _, l := range pn.Lines {
		line, err := plotter.NewLine(plotter.XYs{{X: lo, Y: l.Y}, {X: hi, Y: l.Y}})
		if err != nil {
			return nil, lg, fmt.Errorf("line %q: %w", l.Name, err)
		}
		line.Color = color.Gray{Y: 90}
		line.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		data = append(data, line)
		lg.Add(l.Name, line)
		yMin, yMax = math.Min(yMin, l.Y), math.Max(yMax, l.Y)
	}
	if math.IsInf(yMin, 0) {
		yMin, yMax = 0, 1
	}
	if pn.FromZero {
		yMin = math.Min(yMin, 0)
	}
	if yMax == yMin {
		yMax = yMin + 1
	}
	yMax += 0.05 * (yMax - yMin)
	p.Y.Min, p.Y.Max = yMin, yMax
	p.X.Min, p.X.Max = lo, hi
	// The faults' starts, as thin dotted lines under the data (the strip
	// above the panels shows how long each lasted).
	for _, s := range c.Spans {
		line, err := plotter.NewLine(plotter.XYs{{X: s.From, Y: yMin}, {X: s.From, Y: yMax}})
		if err != nil {
			return nil, lg, err
		}
		line.Color = spanColor
		line.Dashes = []vg.Length{vg.Points(1.5), vg.Points(2)}
		line.Width = vg.Points(0.8)
		p.Add(line)
	}
	p.Add(data...)
	// Adding widens the axes to the data: set them last.
	p.Y.Min, p.Y.Max = yMin, yMax
	p.X.Min, p.X.Max = lo, hi
	return p, lg, nil
}

// strip builds the fault strip: one row per span from the top, a bar from
// its start to its end (a short one for an instant) and its number.
func (c TimeChart) strip(lo, hi float64) *plot.Plot {
	p := plot.New()
	useSans(p)
	p.HideY()
	p.X.Tick.Marker = compactTicks{blank: true}
	p.X.Tick.Length = 0
	p.X.LineStyle.Width = 0
	n := float64(len(c.Spans))
	p.X.Min, p.X.Max = lo, hi
	p.Y.Min, p.Y.Max = 0, n
	labels := plotter.XYLabels{}
	for i, s := range c.Spans {
		y := n - float64(i) - 0.5
		to := math.Max(s.To, s.From+(hi-lo)/150)
		bar, err := plotter.NewPolygon(plotter.XYs{{X: s.From, Y: y - 0.3}, {X: to, Y: y - 0.3}, {X: to, Y: y + 0.3}, {X: s.From, Y: y + 0.3}})
		if err == nil {
			bar.Color = spanColor
			bar.LineStyle.Width = 0
			p.Add(bar)
		}
		labels.XYs = append(labels.XYs, plotter.XY{X: to, Y: y})
		labels.Labels = append(labels.Labels, fmt.Sprint(i+1))
	}
	if l, err := plotter.NewLabels(labels); err == nil {
		for i := range l.TextStyle {
			l.TextStyle[i] = textStyle(8, color.Gray{Y: 30})
			l.TextStyle[i].YAlign = draw.YCenter
		}
		l.Offset = vg.Point{X: vg.Points(3)}
		p.Add(l)
	}
	return p
}

// compactTicks are gonum's default tick positions labelled compactly
// ("50", not "50.00"), or not labelled at all (blank) on panels whose time
// axis the bottom panel labels.
type compactTicks struct{ blank bool }

// Ticks implements plot.Ticker: a labelled tick every 1, 2 or 5 × 10^k,
// so that about six are labelled, and four minor ticks between them.
func (t compactTicks) Ticks(min, max float64) []plot.Tick {
	if !(max > min) {
		return plot.DefaultTicks{}.Ticks(min, max)
	}
	raw := (max - min) / 6
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{2, 5, 10} {
		if step >= raw {
			break
		}
		step = m * mag
	}
	var ts []plot.Tick
	for v := math.Ceil(min/(step/5)) * (step / 5); v <= max+step/1e6; v += step / 5 {
		tick := plot.Tick{Value: v}
		if r := math.Round(v / step); math.Abs(v/step-r) < 1e-6 {
			tick.Value = r * step
			tick.Label = "x"
		}
		ts = append(ts, tick)
	}
	for i := range ts {
		switch {
		case ts[i].Label == "":
		case t.blank:
			ts[i].Label = ""
		default:
			ts[i].Label = formatNumber(ts[i].Value)
		}
	}
	return ts
}
