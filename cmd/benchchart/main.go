// Command benchchart draws the scaling curves of the payment benchmark
// from `go test -bench` output: payments/s and p99 latency against the
// number of clients, one line per database, as PNG files.
//
//	go test -run '^$' -bench 'PaymentsHTTP' -count 6 ./pay/ > payments.txt
//	go run ./cmd/benchchart -out docs/img payments.txt
//
// It reads the sub-benchmarks BenchmarkPaymentsHTTP/<database>/clients=<n>
// and plots, for each database and client count, the median over the runs
// (the -count repetitions) of the metrics payments/s, p99-ms and x-bare.
// It writes payments-throughput.png, payments-p99.png and
// payments-x-bare.png into -out.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/stampede-lab/stampede/lab"
)

// line matches a result line of a sub-benchmark of BenchmarkPaymentsHTTP.
var line = regexp.MustCompile(`^BenchmarkPaymentsHTTP/([a-z]+)/clients=([0-9]+)(?:-[0-9]+)?\s+[0-9]+\s+(.*)$`)

// samples holds every value of every metric: database → clients → unit →
// values.
type samples map[string]map[int]map[string][]float64

func main() {
	out := flag.String("out", "docs/img", "the directory the PNG files are written to")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: benchchart [-out dir] [bench-output-file ...] (default: standard input)\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if err := run(*out, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "benchchart:", err)
		os.Exit(1)
	}
}

func run(out string, files []string) error {
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
	if len(s) == 0 {
		return errors.New("no BenchmarkPaymentsHTTP/<database>/clients=<n> results in the input")
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	charts := []struct {
		file, unit, title, ylabel string
		log                       bool
	}{
		{"payments-throughput.png", "payments/s", "Payments through HTTP", "payments/s (median)", false},
		{"payments-p99.png", "p99-ms", "Payment latency, 99th percentile", "p99 (ms, median of runs)", true},
		{"payments-x-bare.png", "x-bare", "Payments/s ÷ bare insert+update tx/s", "x-bare (median)", false},
	}
	for _, c := range charts {
		chart := lab.LineChart{
			Title:  c.title,
			XLabel: "clients (log scale)",
			YLabel: c.ylabel,
			LogY:   c.log,
			Series: s.series(c.unit),
			XTicks: s.ticks(),
			// Throughput rises with clients: the legend goes where the
			// lines are not.
			LegendBottomRight: c.unit == "payments/s",
		}
		if c.unit == "x-bare" {
			chart.Lines = []lab.HLine{{Name: "target 0.5×", Y: 0.5}}
		}
		path := filepath.Join(out, c.file)
		if err := chart.Save(path); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		fmt.Println("wrote", path)
	}
	return nil
}

// read adds the results of r.
func (s samples) read(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := line.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		db := m[1]
		clients, err := strconv.Atoi(m[2])
		if err != nil {
			return err
		}
		fields := strings.Fields(m[3])
		for i := 0; i+1 < len(fields); i += 2 {
			v, err := strconv.ParseFloat(fields[i], 64)
			if err != nil {
				continue
			}
			if s[db] == nil {
				s[db] = map[int]map[string][]float64{}
			}
			if s[db][clients] == nil {
				s[db][clients] = map[string][]float64{}
			}
			s[db][clients][fields[i+1]] = append(s[db][clients][fields[i+1]], v)
		}
	}
	return sc.Err()
}

// series returns one line per database: the median of unit at each client
// count, X being log2 of the clients.
func (s samples) series(unit string) []lab.Series {
	dbs := make([]string, 0, len(s))
	for db := range s {
		dbs = append(dbs, db)
	}
	slices.Sort(dbs)
	var out []lab.Series
	for _, db := range dbs {
		var clients []int
		for n := range s[db] {
			clients = append(clients, n)
		}
		slices.Sort(clients)
		ser := lab.Series{Name: db}
		for _, n := range clients {
			vs := s[db][n][unit]
			if len(vs) == 0 {
				continue
			}
			ser.X = append(ser.X, math.Log2(float64(n)))
			ser.Y = append(ser.Y, median(vs))
		}
		if len(ser.X) > 0 {
			out = append(out, ser)
		}
	}
	return out
}

// ticks labels every client count measured.
func (s samples) ticks() []lab.Tick {
	seen := map[int]bool{}
	for _, byClients := range s {
		for n := range byClients {
			seen[n] = true
		}
	}
	var ns []int
	for n := range seen {
		ns = append(ns, n)
	}
	slices.Sort(ns)
	ticks := make([]lab.Tick, len(ns))
	for i, n := range ns {
		ticks[i] = lab.Tick{Value: math.Log2(float64(n)), Label: strconv.Itoa(n)}
	}
	return ticks
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
