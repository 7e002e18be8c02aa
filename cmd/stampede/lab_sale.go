package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/stampede-lab/stampede/lab"
	"github.com/stampede-lab/stampede/lab/sale"
	"github.com/stampede-lab/stampede/pay/natspub"
	"github.com/stampede-lab/stampede/waitroom/redisstore"
)

func newLabSaleCmd(opts *labOptions) *cobra.Command {
	d := sale.DefaultConfig()
	cmd := &cobra.Command{
		Use:   "sale",
		Short: "A whole ticket sale, every part a process, under a flash crowd and faults",
		Long: `Run a ticket sale end to end. Every part is a child process of this binary:
3 gates (serve gate, each with its waiting-room instance) on one Redis, serve
checkout, serve pay (--require-admission: a payment needs an admission still
holding its slot), serve institution and 3 serve worker processes. Without
--redis/--postgres/--nats the Redis is one embedded Redis-protocol server
process (lab sale-redis, which keeps its data across a restart), the
databases are SQLite files and NATS is one embedded nats-server process
(lab sale-nats, its store on disk).

The crowd: --buyers, 80 % of them within the first 10 s, joining through the
gates (their own X-Forwarded-For addresses), polling, some reloading, some
abandoning in the queue or with a seat on hold; bots hammering join from a
few addresses. The institution hangs after processing for part of the
sale, its status API goes down for a while, and it declines for a while.
Faults (--faults): waitroom-kill (kill -9 of gate 2), redis-restart,
pay-kill (kill -9), db-cut (3 s: SQLite files locked, or PostgreSQL cut by a
TCP proxy), worker-kill (kill -9 of worker 0, restarted 2 s later); and,
only when asked for, worker-kill-for-good (kill -9 of worker 1, never
restarted: the other workers take its partitions over, by pinning on
nats-server 2.11+ or by 3 s partition leases on an older one).

The report accounts for every buyer (ticket, declined, failed, abandoned,
sold out, not admitted), and checks: no seat sold twice or beyond the seats
(oversold), seats sold = tickets, 0 double charges, parity between the
institution, the payments, the orders and the tickets, the room never over
capacity at the checkout's view (sampled every 250 ms), 0 event order
violations; with time-series charts (faults marked) and join-to-ticket
p50/p95/p99. A broken invariant exits with status 2.

--unsafe-inventory runs the checkout without its inventory rule: the sale
oversells, and the report must catch it (exit status 2).

Not part of 'stampede lab' / 'lab all'.`,
		Example: `  stampede lab sale --quick
  stampede lab sale --quick --unsafe-inventory
  stampede lab sale --quick --faults '' --outflow 600 --compare-adaptive --hang 0.2-0.6 --status-down none --decline none --repeat 3
  stampede lab sale --buyers 5000 --seats 500 --capacity 100 --out lab-report/sale
  stampede lab sale --redis redis://127.0.0.1:6379/0 --postgres 'postgres://postgres@127.0.0.1:5432/test?sslmode=disable' --nats nats://127.0.0.1:4222`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			exp, err := buildSale(cmd, opts)
			if err != nil {
				return err
			}
			return runExperiments(cmd, opts, exp)
		},
	}
	f := cmd.Flags()
	f.Bool("quick", false, "a small fast sale (300 buyers, 60 seats, a room of 20) for tests")
	f.Int("buyers", d.Buyers, "simulated buyers")
	f.Int("seats", d.Seats, "seats of the event")
	f.Int("capacity", d.Capacity, "capacity of the room")
	f.StringSlice("faults", d.Faults, "faults: waitroom-kill, redis-restart, pay-kill, db-cut, worker-kill, worker-kill-for-good (none: --faults '')")
	f.Int("bots", d.Bots, "bots hammering join")
	f.Duration("surge", d.Surge, "80 % of the buyers arrive within this long of the opening")
	f.Duration("tail", d.Tail, "the other 20 % arrive over this long after the surge")
	f.Duration("timeline", d.Timeline, "the faults strike from 15 % to 75 % of this, and the institution's schedule follows it")
	f.Duration("max-sale", d.MaxSale, "longest the sale may last")
	f.String("redis", "", "a real Redis URL (empty: an embedded Redis-protocol server process)")
	f.String("postgres", "", "a real PostgreSQL URL; the lab creates (and drops) its own databases on that server (empty: SQLite)")
	f.String("nats", "", "a real NATS URL (empty: an embedded nats-server process)")
	f.Bool("unsafe-inventory", false, "run the checkout without its inventory rule: it oversells, and the report must catch it")
	f.String("capture", d.Capture, "the checkout's capture mode: automatic, or manual (authorise at the purchase, capture while the order is pending)")
	f.Duration("close-after", d.CloseAfter, "pay's closure window (serve pay --close-unconfirmed-after): an approval whose order the checkout has not confirmed this long after the payment is refunded, and its ticket revoked")
	f.Int("outflow", 0, "the room's max_admissions_per_minute (0: no limit)")
	f.Bool("adaptive", false, "run the gates with --adaptive-outflow: the room slows below --outflow while the checkout is unwell (needs --outflow)")
	f.Bool("compare-adaptive", false, "run the sale twice a repeat, interleaved: the outflow static at --outflow and adaptive below it; the report sets their medians side by side and checks that the adaptive outflow has fewer checkout timeouts, no more abandoned holds (fewer with --hang-mode before) and a join→ticket p99 no worse (needs --outflow)")
	f.String("hang", sale.FormatWindow(d.InstitutionHang), "when the institution hangs after processing, as shares of --timeline: FROM-TO, or none")
	f.Int64("hang-ms", d.HangMS, "how long the hanging institution holds each answer, in milliseconds")
	f.String("hang-mode", "after", "how the institution hangs: after (it charges, then holds the answer) or before (it holds the request and charges nothing: the payments fail)")
	f.String("status-down", sale.FormatWindow(d.StatusDown), "when the institution's status API is down, as shares of --timeline: FROM-TO, or none")
	f.String("decline", sale.FormatWindow(d.Decline), "when the institution declines every payment, as shares of --timeline: FROM-TO, or none")
	f.Bool("keep", false, "keep the run's directory (data, process logs) and, on PostgreSQL, its databases")
	f.String("dir", "", "directory of the runs' data and logs (default: a temporary one)")
	return cmd
}

// buildSale makes the sale experiment from the profile and the flags.
func buildSale(cmd *cobra.Command, opts *labOptions) (lab.Experiment, error) {
	cfg := sale.DefaultConfig()
	if q, _ := cmd.Flags().GetBool("quick"); q {
		cfg = sale.QuickConfig()
	}
	if err := opts.common(&cfg.Seed, &cfg.Repeat, nil); err != nil {
		return nil, err
	}
	x := &explicitFlags{cmd: cmd}
	x.set("buyers", func(f *pflag.FlagSet) (e error) { cfg.Buyers, e = f.GetInt("buyers"); return })
	x.set("seats", func(f *pflag.FlagSet) (e error) { cfg.Seats, e = f.GetInt("seats"); return })
	x.set("capacity", func(f *pflag.FlagSet) (e error) { cfg.Capacity, e = f.GetInt("capacity"); return })
	x.set("faults", func(f *pflag.FlagSet) (e error) { cfg.Faults, e = f.GetStringSlice("faults"); return })
	x.set("bots", func(f *pflag.FlagSet) (e error) { cfg.Bots, e = f.GetInt("bots"); return })
	x.set("surge", func(f *pflag.FlagSet) (e error) { cfg.Surge, e = f.GetDuration("surge"); return })
	x.set("tail", func(f *pflag.FlagSet) (e error) { cfg.Tail, e = f.GetDuration("tail"); return })
	x.set("timeline", func(f *pflag.FlagSet) (e error) { cfg.Timeline, e = f.GetDuration("timeline"); return })
	x.set("max-sale", func(f *pflag.FlagSet) (e error) { cfg.MaxSale, e = f.GetDuration("max-sale"); return })
	x.set("redis", func(f *pflag.FlagSet) (e error) { cfg.Redis, e = f.GetString("redis"); return })
	x.set("postgres", func(f *pflag.FlagSet) (e error) { cfg.Postgres, e = f.GetString("postgres"); return })
	x.set("nats", func(f *pflag.FlagSet) (e error) { cfg.NATS, e = f.GetString("nats"); return })
	x.set("unsafe-inventory", func(f *pflag.FlagSet) (e error) { cfg.UnsafeInventory, e = f.GetBool("unsafe-inventory"); return })
	x.set("capture", func(f *pflag.FlagSet) (e error) { cfg.Capture, e = f.GetString("capture"); return })
	x.set("close-after", func(f *pflag.FlagSet) (e error) { cfg.CloseAfter, e = f.GetDuration("close-after"); return })
	x.set("outflow", func(f *pflag.FlagSet) (e error) { cfg.Outflow, e = f.GetInt("outflow"); return })
	x.set("adaptive", func(f *pflag.FlagSet) (e error) { cfg.Adaptive, e = f.GetBool("adaptive"); return })
	x.set("compare-adaptive", func(f *pflag.FlagSet) (e error) { cfg.CompareAdaptive, e = f.GetBool("compare-adaptive"); return })
	window := func(name string, w *[2]float64) {
		x.set(name, func(f *pflag.FlagSet) error {
			v, _ := f.GetString(name)
			p, err := sale.ParseWindow(v)
			*w = p
			return err
		})
	}
	window("hang", &cfg.InstitutionHang)
	window("status-down", &cfg.StatusDown)
	window("decline", &cfg.Decline)
	x.set("hang-ms", func(f *pflag.FlagSet) (e error) { cfg.HangMS, e = f.GetInt64("hang-ms"); return })
	x.set("hang-mode", func(f *pflag.FlagSet) error {
		switch mode, _ := f.GetString("hang-mode"); mode {
		case "after":
			cfg.HangBefore = false
		case "before":
			cfg.HangBefore = true
		default:
			return fmt.Errorf("want after or before, got %q", mode)
		}
		return nil
	})
	x.set("keep", func(f *pflag.FlagSet) (e error) { cfg.Keep, e = f.GetBool("keep"); return })
	x.set("dir", func(f *pflag.FlagSet) (e error) { cfg.Dir, e = f.GetString("dir"); return })
	if x.err != nil {
		return nil, x.err
	}
	cfg.Faults = slices.DeleteFunc(cfg.Faults, func(f string) bool { return f == "" || f == "none" })
	if cfg.Keep && cfg.Dir == "" {
		cfg.Dir = filepath.Join(opts.out, "sale-data")
	}
	cfg.Cmd = selfCmd
	cfg.Log = func(format string, args ...any) { fmt.Fprintf(cmd.ErrOrStderr(), format+"\n", args...) }
	return sale.New(cfg)
}

// selfCmd runs this binary with args (a variable: tests run the test
// binary instead).
var selfCmd = func(args []string) *exec.Cmd {
	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	return exec.Command(exe, args...)
}

// newLabSaleRedisCmd is the sale's Redis: an embedded Redis-protocol
// server process on a fixed address that saves its data on SIGTERM and
// loads it on start.
func newLabSaleRedisCmd() *cobra.Command {
	var addr, snapshot string
	cmd := &cobra.Command{
		Use:    "sale-redis",
		Short:  "The sale lab's embedded Redis-protocol server (internal)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			e, err := redisstore.StartEmbeddedAt(addr, snapshot)
			if err != nil {
				return err
			}
			loggerOf(cmd).Info("sale-redis listening", "addr", e.Addr())
			<-cmd.Context().Done()
			e.CloseListener()
			if snapshot != "" {
				if err := e.Save(snapshot); err != nil {
					return err
				}
			}
			e.Close()
			return nil
		},
	}
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:6390", "address to listen on")
	cmd.Flags().StringVar(&snapshot, "snapshot", "", "file the data is saved to on SIGTERM and loaded from on start")
	return cmd
}

// newLabSaleNATSCmd is the sale's NATS: an embedded nats-server process
// with JetStream, its store in a directory that survives restarts.
func newLabSaleNATSCmd() *cobra.Command {
	var port int
	var dir string
	cmd := &cobra.Command{
		Use:    "sale-nats",
		Short:  "The sale lab's embedded nats-server (internal)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return err
			}
			cfg := natspub.DefaultEmbeddedConfig(dir)
			cfg.Port, cfg.Logger = port, loggerOf(cmd)
			e, err := natspub.StartEmbeddedConfig(cfg)
			if err != nil {
				return err
			}
			loggerOf(cmd).Info("sale-nats listening", "url", e.URL(), "port", strconv.Itoa(port))
			<-cmd.Context().Done()
			e.Close()
			return nil
		},
	}
	cmd.Flags().IntVar(&port, "port", 4299, "client port on 127.0.0.1")
	cmd.Flags().StringVar(&dir, "dir", "sale-nats", "JetStream store directory")
	return cmd
}
