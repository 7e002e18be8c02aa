// Command benchchart draws scaling curves from `go test -bench` output as
// PNG files.
//
//	go test -run '^$' -bench 'PaymentsHTTP' -count 6 ./pay/ > payments.txt
//	go run ./cmd/benchchart -out docs/img payments.txt
//
// A figure takes the benchmarks whose name matches its pattern and reads
// its X value from one element of the sub-benchmark name, a parameter such
// as clients=16. Every other element of the name (and the GOMAXPROCS
// suffix, when the input holds more than one) names a line; at each X the
// line's point is the median, over the runs (the -count repetitions), of a
// metric such as payments/s. A figure has one panel per metric, stacked in
// one image, with their X axes aligned.
//
// The figures below are built in; each is drawn into -out when the input
// holds its benchmarks, so one call can take every output file:
//
//	payments-throughput.png, payments-p99.png, payments-x-bare.png
//	    BenchmarkPaymentsHTTP/<database>/clients=<n> (pay): payments/s,
//	    p99-ms and x-bare against clients, a line per database
//	joins-instances.png
//	    BenchmarkJoinInstances/<redis>/instances=<n> (waitroom): joins/s,
//	    p99-ms and cpu-us/join against instances, a line per Redis
//	dispatch-workers.png
//	    BenchmarkWorkerScaling/<workload>/<pool>/workers=<n> (dispatch):
//	    items/s against workers, a panel per workload, a line per pool
//
// Any other benchmark is drawn with -x, -y and -o, for example:
//
//	go run ./cmd/benchchart -match 'PaymentsHTTP/sqlite' -x clients -logx -y payments/s,p99-ms -o sqlite.png payments.txt
package main

import (
	"bufio"
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/stampede-lab/stampede/lab"
)

// panel is one chart of a figure: a metric of the figure's benchmarks.
type panel struct {
	unit, title, ylabel string
	// only, if set, keeps the lines whose name (the benchmark name
	// without the parameter) matches it.
	only              *regexp.Regexp
	logY, fromZero    bool
	legendBottomRight bool
	lines             []lab.HLine
	// div, if set, divides every value (1e6 for a Y label in millions).
	div float64
	// bound, if set, is drawn as one more line: a limit that depends on X.
	bound *bound
}

// bound is a reference line y = f(x) over the X values measured.
type bound struct {
	name string
	f    func(x float64) float64
}

// figure is one PNG file: panels of the benchmarks that match pattern,
// against the sub-benchmark parameter param.
type figure struct {
	file    string
	pattern *regexp.Regexp
	param   string
	xlabel  string
	// logX plots X on a log2 scale (clients 1, 4, 16, 64).
	logX   bool
	panels []panel
}

// builtin are the figures drawn when the input holds their benchmarks.
var builtin = []figure{
	{
		file: "payments-throughput.png", pattern: regexp.MustCompile(`^PaymentsHTTP/`), param: "clients",
		xlabel: "clients (log scale)", logX: true,
		panels: []panel{{unit: "payments/s", title: "Payments through HTTP", ylabel: "payments/s (median)",
			// Throughput rises with clients: the legend goes where the
			// lines are not.
			legendBottomRight: true}},
	},
	{
		file: "payments-p99.png", pattern: regexp.MustCompile(`^PaymentsHTTP/`), param: "clients",
		xlabel: "clients (log scale)", logX: true,
		panels: []panel{{unit: "p99-ms", title: "Payment latency, 99th percentile", ylabel: "p99 (ms, median of runs)", logY: true}},
	},
	{
		file: "payments-x-bare.png", pattern: regexp.MustCompile(`^PaymentsHTTP/`), param: "clients",
		xlabel: "clients (log scale)", logX: true,
		panels: []panel{{unit: "x-bare", title: "Payments/s ÷ bare insert+update tx/s", ylabel: "x-bare (median)",
			lines: []lab.HLine{{Name: "target 0.5×", Y: 0.5}}}},
	},
	{
		file: "joins-instances.png", pattern: regexp.MustCompile(`^JoinInstances/`), param: "instances",
		xlabel: "waiting-room instances over one Redis",
		panels: []panel{
			{unit: "joins/s", title: "Joins through HTTP, 64 clients", ylabel: "joins/s (median)", fromZero: true, legendBottomRight: true},
			{unit: "p99-ms", title: "Join latency, 99th percentile", ylabel: "p99 (ms, median of runs)", fromZero: true, legendBottomRight: true},
			{unit: "cpu-us/join", title: "CPU per join: the process and Redis", ylabel: "µs (median)", fromZero: true, legendBottomRight: true},
		},
	},
	{
		file: "dispatch-workers.png", pattern: regexp.MustCompile(`^WorkerScaling/`), param: "workers",
		xlabel: "workers (log scale)", logX: true,
		panels: []panel{
			{unit: "items/s", only: regexp.MustCompile(`/noop/`), title: "Handler does nothing: the dispatcher's own cost",
				ylabel: "million items/s (median)", fromZero: true, div: 1e6, legendBottomRight: true},
			{unit: "items/s", only: regexp.MustCompile(`/io/`), title: "Handler waits 1 ms",
				ylabel: "items/s (median)", fromZero: true,
				bound: &bound{"bound: workers ÷ 1 ms", func(workers float64) float64 { return workers * 1000 }}},
		},
	},
}

func main() {
	out := flag.String("out", "docs/img", "the directory the built-in figures are written to")
	x := flag.String("x", "", "with -y: the sub-benchmark parameter on the X axis (e.g. clients for …/clients=16)")
	y := flag.String("y", "", "draw one figure of these metrics (comma-separated units, a panel each) instead of the built-in ones")
	match := flag.String("match", "", "with -y: a regexp the benchmark name (without Benchmark) must match")
	o := flag.String("o", "chart.png", "with -y: the PNG file to write")
	title := flag.String("title", "", "with -y: the title of the first panel (default: the metric)")
	logX := flag.Bool("logx", false, "with -y: log2 X axis")
	logY := flag.Bool("logy", false, "with -y: log Y axes")
	zero := flag.Bool("zero", false, "with -y: start the Y axes at zero")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: benchchart [-out dir] [bench-output-file ...] (default: standard input)\n"+
			"       benchchart -x param -y unit[,unit...] [-match regexp] [-o file.png] [bench-output-file ...]\n")
		flag.PrintDefaults()
	}
	flag.Parse()

	figs, dir := builtin, *out
	if *y != "" {
		f, err := adHoc(*x, *y, *match, *title, *logX, *logY, *zero)
		if err != nil {
			fmt.Fprintln(os.Stderr, "benchchart:", err)
			os.Exit(2)
		}
		f.file = *o
		figs, dir = []figure{f}, ""
	}
	if err := run(dir, figs, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "benchchart:", err)
		os.Exit(1)
	}
}

// adHoc builds the figure of the command-line flags.
func adHoc(x, y, match, title string, logX, logY, zero bool) (figure, error) {
	if x == "" {
		return figure{}, errors.New("-x: the sub-benchmark parameter is required with -y")
	}
	pattern, err := regexp.Compile(match)
	if err != nil {
		return figure{}, fmt.Errorf("-match: %w", err)
	}
	f := figure{pattern: pattern, param: x, xlabel: x, logX: logX}
	if logX {
		f.xlabel += " (log scale)"
	}
	for i, unit := range strings.Split(y, ",") {
		p := panel{unit: unit, title: unit, ylabel: unit + " (median)", logY: logY, fromZero: zero}
		if i == 0 && title != "" {
			p.title = title
		}
		f.panels = append(f.panels, p)
	}
	return f, nil
}

// run reads the files (standard input if none) and draws every figure
// whose benchmarks they hold into dir.
func run(dir string, figs []figure, files []string) error {
	s := samples{}
	if len(files) == 0 {
		if err := s.read(os.Stdin); err != nil {
			return err
		}
	}
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		err = s.read(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	if dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	drawn := 0
	for _, f := range figs {
		charts := f.charts(s)
		if len(charts) == 0 {
			continue
		}
		path := filepath.Join(dir, f.file)
		var err error
		if len(charts) == 1 {
			err = charts[0].Save(path)
		} else {
			err = lab.SaveStacked(path, charts...)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		fmt.Println("wrote", path)
		drawn++
	}
	if drawn == 0 {
		var want []string
		for _, f := range figs {
			want = append(want, fmt.Sprintf("%s…/%s=<n> with %s", f.pattern, f.param, f.panels[0].unit))
		}
		return fmt.Errorf("no results to draw in the input (looked for %s)", strings.Join(want, "; "))
	}
	return nil
}

// result is one benchmark of the input: its name without "Benchmark" and
// without the GOMAXPROCS suffix, and that suffix.
type result struct {
	name  string
	procs int
}

// samples holds every value of every metric: benchmark → unit → values.
type samples map[result]map[string][]float64

// line matches a result line: name, iterations, then value-unit pairs.
var line = regexp.MustCompile(`^Benchmark(\S+)\s+[0-9]+\s+(.*)$`)

// procsSuffix is the -N that `go test` appends to a benchmark's name when
// GOMAXPROCS is not 1.
var procsSuffix = regexp.MustCompile(`-([0-9]+)$`)

// read adds the results of r.
func (s samples) read(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := line.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		res := result{name: m[1], procs: 1}
		if p := procsSuffix.FindStringSubmatchIndex(res.name); p != nil {
			res.procs, _ = strconv.Atoi(res.name[p[2]:p[3]])
			res.name = res.name[:p[0]]
		}
		fields := strings.Fields(m[2])
		for i := 0; i+1 < len(fields); i += 2 {
			v, err := strconv.ParseFloat(fields[i], 64)
			if err != nil {
				continue
			}
			if s[res] == nil {
				s[res] = map[string][]float64{}
			}
			s[res][fields[i+1]] = append(s[res][fields[i+1]], v)
		}
	}
	return sc.Err()
}

// point is one X of one line, with every value of the metrics there.
type point struct {
	x       float64
	metrics map[string][]float64
}

// lines groups the results of f's benchmarks by line name.
func (f figure) lines(s samples) map[string][]point {
	procs := map[int]bool{}
	for r := range s {
		if f.pattern.MatchString(r.name) {
			procs[r.procs] = true
		}
	}
	out := map[string][]point{}
	for r, metrics := range s {
		if !f.pattern.MatchString(r.name) {
			continue
		}
		var rest []string
		x, found := 0.0, false
		for _, el := range strings.Split(r.name, "/") {
			if v, ok := strings.CutPrefix(el, f.param+"="); ok && !found {
				n, err := strconv.ParseFloat(v, 64)
				if err != nil {
					continue
				}
				x, found = n, true
				continue
			}
			rest = append(rest, el)
		}
		if !found {
			continue
		}
		name := strings.Join(rest, "/")
		if len(procs) > 1 {
			name += fmt.Sprintf(" (GOMAXPROCS %d)", r.procs)
		}
		out[name] = append(out[name], point{x, metrics})
	}
	return out
}

// charts returns f's panels that have data, as charts.
func (f figure) charts(s samples) []lab.LineChart {
	all := f.lines(s)
	var charts []lab.LineChart
	for _, p := range f.panels {
		var names []string
		for name, pts := range all {
			if p.only != nil && !p.only.MatchString(name) {
				continue
			}
			if slices.ContainsFunc(pts, func(pt point) bool { return len(pt.metrics[p.unit]) > 0 }) {
				names = append(names, name)
			}
		}
		if len(names) == 0 {
			continue
		}
		slices.Sort(names)
		labels := shortNames(names)
		c := lab.LineChart{
			Title: p.title, XLabel: f.xlabel, YLabel: p.ylabel,
			LogY: p.logY, FromZero: p.fromZero, LegendBottomRight: p.legendBottomRight,
			Lines: p.lines,
		}
		xs := map[float64]bool{}
		for i, name := range names {
			pts := slices.Clone(all[name])
			slices.SortFunc(pts, func(a, b point) int { return cmp.Compare(a.x, b.x) })
			ser := lab.Series{Name: labels[i]}
			for _, pt := range pts {
				vs := pt.metrics[p.unit]
				if len(vs) == 0 {
					continue
				}
				y := median(vs)
				if p.div != 0 {
					y /= p.div
				}
				ser.X = append(ser.X, f.scale(pt.x))
				ser.Y = append(ser.Y, y)
				xs[pt.x] = true
			}
			c.Series = append(c.Series, ser)
		}
		ref := lab.Series{}
		for _, x := range slices.Sorted(maps.Keys(xs)) {
			c.XTicks = append(c.XTicks, lab.Tick{Value: f.scale(x), Label: strconv.FormatFloat(x, 'f', -1, 64)})
			if p.bound != nil {
				ref.Name = p.bound.name
				ref.X, ref.Y = append(ref.X, f.scale(x)), append(ref.Y, p.bound.f(x))
			}
		}
		if p.bound != nil {
			c.Series = append(c.Series, ref)
		}
		charts = append(charts, c)
	}
	return charts
}

// scale maps a parameter value to the X axis.
func (f figure) scale(x float64) float64 {
	if f.logX {
		return math.Log2(x)
	}
	return x
}

// shortNames drops the leading name elements that every one of names
// shares ("PaymentsHTTP/sqlite", "PaymentsHTTP/postgres" → "sqlite",
// "postgres"), keeping at least the last element of each.
func shortNames(names []string) []string {
	split := make([][]string, len(names))
	shortest := math.MaxInt
	for i, n := range names {
		split[i] = strings.Split(n, "/")
		shortest = min(shortest, len(split[i]))
	}
	common := 0
	for common < shortest-1 {
		el := split[0][common]
		if slices.ContainsFunc(split, func(s []string) bool { return s[common] != el }) {
			break
		}
		common++
	}
	out := make([]string, len(names))
	for i, s := range split {
		out[i] = strings.Join(s[common:], "/")
	}
	return out
}

// median returns the median of xs.
func median(xs []float64) float64 {
	xs = slices.Clone(xs)
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}
