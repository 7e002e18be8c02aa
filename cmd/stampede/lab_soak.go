package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/stampede-lab/stampede/lab"
	"github.com/stampede-lab/stampede/lab/soak"
)

func newLabSoakCmd(opts *labOptions) *cobra.Command {
	d := soak.DefaultConfig()
	cmd := &cobra.Command{
		Use:   "soak",
		Short: "A rolling sale for minutes or hours; fails when anything keeps growing",
		Long: `Run a rolling sale on the sale lab's rig (every part a child process of this
binary: 3 gates with their waiting-room instances, checkout, pay with
--require-admission, the institution simulator, 3 event workers; an embedded
Redis-protocol server and nats-server, SQLite files, or real Redis,
PostgreSQL and NATS with --redis/--postgres/--nats) for --minutes: buyers
arrive at --rate a second and leave, pay, their events reach the workers,
and --refund-share of the paid orders are refunded through pay's API.

Every --sample it records each process's resident memory (/proc), goroutines
and Go heap in use (go_goroutines and go_memstats_heap_inuse_bytes on its
/metrics) and open files (/proc/PID/fd); the Redis's keys (DBSIZE: judged on
the embedded server, reported on a real one, whose database others may
use), the room's memory (MEMORY USAGE of its keys but the admission log)
and the admission log's bytes per entry (it keeps every admission), the
server's used_memory (reported only: on a shared server it is everyone's); each
database's size (SQLite file and WAL, or pg_database_size) and the event
stream's bytes, judged per payment (they keep every record); and the p99 of
join to admission and of payment per minute.

After the warm-up (--warmup, default a fifth of the run, and 30 minutes
for a run of an hour or more: a gate keeps each admission for its
30-minute session) it fits a
least-squares line to every series and judges its slope an hour against
its tolerance (a tenth of its mean, and at least 8 MiB of memory or heap, 20
goroutines or files, 10 keys, 1 MiB of Redis memory, 100 bytes per payment
or log entry, or a quarter of the mean and 50 ms for a p99). A series that grows beyond it,
a broken invariant (oversell, double charge, double refund, parity) or a
part that exited makes the run INVALID (exit status 2). A run that leaves
less than 5 minutes after its warm-up reports its slopes without judging
them.

--plant-leak N starts one more process beside the parts that retains N
bytes and one goroutine a second: the verdict must name it.

Not part of 'stampede lab' / 'lab all'.`,
		Example: `  stampede lab soak --minutes 60
  stampede lab soak --minutes 8 --plant-leak 262144
  stampede lab soak --minutes 60 --redis redis://127.0.0.1:6379/12 --postgres 'postgres://postgres@127.0.0.1:5432/test?sslmode=disable' --nats nats://127.0.0.1:4222`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			exp, err := buildSoak(cmd, opts)
			if err != nil {
				return err
			}
			return runExperiments(cmd, opts, exp)
		},
	}
	f := cmd.Flags()
	f.Float64("minutes", d.Duration.Minutes(), "how long buyers arrive (--seconds overrides it)")
	f.Duration("warmup", 0, "the first stretch whose samples the slopes leave out (default a fifth of the run; 30m for a run of an hour or more)")
	f.Duration("sample", d.Sample, "sampling period")
	f.Float64("rate", d.Rate, "buyers arriving a second")
	f.Float64("refund-share", d.RefundShare, "share of paid orders refunded")
	f.Int("capacity", d.Capacity, "capacity of the room")
	f.Duration("retention", d.Retention, "the room's retention of finished tickets")
	f.Int64("plant-leak", 0, "start a process beside the parts that retains this many bytes and one goroutine a second (0: none)")
	f.String("redis", "", "a real Redis URL (empty: an embedded Redis-protocol server process)")
	f.String("postgres", "", "a real PostgreSQL URL; the lab creates (and drops) its own databases on that server (empty: SQLite)")
	f.String("nats", "", "a real NATS URL (empty: an embedded nats-server process)")
	f.Bool("keep", false, "keep the run's directory (data, process logs) and, on PostgreSQL, its databases")
	f.String("dir", "", "directory of the run's data and logs (default: a temporary one)")
	return cmd
}

// buildSoak makes the soak experiment from the flags.
func buildSoak(cmd *cobra.Command, opts *labOptions) (lab.Experiment, error) {
	cfg := soak.DefaultConfig()
	x := &explicitFlags{cmd: cmd}
	x.set("minutes", func(f *pflag.FlagSet) error {
		m, err := f.GetFloat64("minutes")
		cfg.Duration = time.Duration(m * float64(time.Minute))
		return err
	})
	repeat := 1
	if err := opts.common(&cfg.Seed, &repeat, &cfg.Duration); err != nil {
		return nil, err
	}
	if repeat != 1 {
		return nil, errors.New("--repeat: the soak runs once")
	}
	x.set("warmup", func(f *pflag.FlagSet) (e error) { cfg.Warmup, e = f.GetDuration("warmup"); return })
	x.set("sample", func(f *pflag.FlagSet) (e error) { cfg.Sample, e = f.GetDuration("sample"); return })
	x.set("rate", func(f *pflag.FlagSet) (e error) { cfg.Rate, e = f.GetFloat64("rate"); return })
	x.set("refund-share", func(f *pflag.FlagSet) (e error) { cfg.RefundShare, e = f.GetFloat64("refund-share"); return })
	x.set("capacity", func(f *pflag.FlagSet) (e error) { cfg.Capacity, e = f.GetInt("capacity"); return })
	x.set("retention", func(f *pflag.FlagSet) (e error) { cfg.Retention, e = f.GetDuration("retention"); return })
	x.set("plant-leak", func(f *pflag.FlagSet) (e error) { cfg.LeakRate, e = f.GetInt64("plant-leak"); return })
	x.set("redis", func(f *pflag.FlagSet) (e error) { cfg.Redis, e = f.GetString("redis"); return })
	x.set("postgres", func(f *pflag.FlagSet) (e error) { cfg.Postgres, e = f.GetString("postgres"); return })
	x.set("nats", func(f *pflag.FlagSet) (e error) { cfg.NATS, e = f.GetString("nats"); return })
	x.set("keep", func(f *pflag.FlagSet) (e error) { cfg.Keep, e = f.GetBool("keep"); return })
	x.set("dir", func(f *pflag.FlagSet) (e error) { cfg.Dir, e = f.GetString("dir"); return })
	if x.err != nil {
		return nil, x.err
	}
	if cfg.Keep && cfg.Dir == "" {
		cfg.Dir = filepath.Join(opts.out, "soak-data")
	}
	cfg.Cmd = selfCmd
	cfg.Log = func(format string, args ...any) { fmt.Fprintf(cmd.ErrOrStderr(), format+"\n", args...) }
	return soak.New(cfg)
}

// newLabSoakLeakCmd is the soak's planted leak: a process that retains
// --rate bytes (written, so resident) and one blocked goroutine a second,
// and serves /healthz and /metrics (go_goroutines) like a part.
func newLabSoakLeakCmd() *cobra.Command {
	var addr string
	var rate int64
	cmd := &cobra.Command{
		Use:    "soak-leak",
		Short:  "The soak lab's planted leak (internal)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if rate <= 0 {
				return errors.New("--rate: must be positive")
			}
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return err
			}
			mux := http.NewServeMux()
			mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
			mux.Handle("GET /metrics", promhttp.Handler())
			srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
			ctx := cmd.Context()
			go func() {
				<-ctx.Done()
				sctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				_ = srv.Shutdown(sctx)
			}()
			block := make(chan struct{})
			go func() {
				var kept [][]byte
				t := time.NewTicker(time.Second)
				defer t.Stop()
				for {
					select {
					case <-ctx.Done():
						loggerOf(cmd).Info("soak-leak retained", "bytes", int64(len(kept))*rate, "goroutines", len(kept))
						return
					case <-t.C:
					}
					b := make([]byte, rate)
					for i := 0; i < len(b); i += 512 {
						b[i] = 1 // touch every page: resident, not only reserved
					}
					kept = append(kept, b)
					go func() { <-block }()
				}
			}()
			loggerOf(cmd).Info("soak-leak listening", "addr", ln.Addr().String(), "bytes_per_second", rate)
			if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			close(block)
			return nil
		},
	}
	cmd.Flags().StringVar(&addr, "http", "127.0.0.1:0", "address of /healthz and /metrics")
	cmd.Flags().Int64Var(&rate, "rate", 256<<10, "bytes retained a second")
	return cmd
}
