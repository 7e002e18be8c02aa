package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"

	"github.com/stampede-lab/stampede/institution"
	"github.com/stampede-lab/stampede/internal/httpapi"
	"github.com/stampede-lab/stampede/pay"
	"github.com/stampede-lab/stampede/pay/institutionclient"
	"github.com/stampede-lab/stampede/pay/jetstream"
	"github.com/stampede-lab/stampede/pay/postgres"
	"github.com/stampede-lab/stampede/pay/sqlite"
)

// Environment variables of the payment service's backing services.
const (
	envPostgres = "STAMPEDE_POSTGRES_URL"
	envNATS     = "STAMPEDE_NATS_URL"
)

// payStoreOptions name the payment database; shared by serve pay and pay
// parity.
type payStoreOptions struct {
	postgres string
	sqlite   string
}

func (o *payStoreOptions) flags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&o.postgres, "postgres", "", "PostgreSQL URL (default: $"+envPostgres+"; empty: SQLite)")
	cmd.Flags().StringVar(&o.sqlite, "sqlite", "stampede-pay.db", "SQLite database file, used when no PostgreSQL URL is given")
}

// open opens the payment store the options name.
func (o *payStoreOptions) open(cmd *cobra.Command) (pay.Store, string, error) {
	fromEnv(cmd, "postgres", envPostgres, &o.postgres)
	if o.postgres != "" {
		s, err := postgres.Open(cmd.Context(), o.postgres)
		if err != nil {
			return nil, "", fmt.Errorf("--postgres: %w", err)
		}
		return s, "postgres", nil
	}
	if o.sqlite == "" {
		return nil, "", errors.New("--sqlite must not be empty when no PostgreSQL URL is given")
	}
	s, err := sqlite.Open(o.sqlite)
	if err != nil {
		return nil, "", fmt.Errorf("--sqlite: %w", err)
	}
	return s, "sqlite " + o.sqlite, nil
}

type payOptions struct {
	store       payStoreOptions
	http        string
	institution string
	nats        string
	natsDir     string
	timeout     time.Duration
	inquiries   int
	logLevel    string
	server      httpapi.ServerConfig
}

// writeTimeoutMargin is what the default --write-timeout adds to the
// approval timeout: the longest handler, POST /v1/payments, also reads
// the body and writes to the store twice.
const writeTimeoutMargin = 10 * time.Second

func newServePayCmd() *cobra.Command {
	opts := &payOptions{server: httpapi.DefaultServerConfig()}
	opts.server.WriteTimeout = 0 // the approval timeout plus writeTimeoutMargin
	cmd := &cobra.Command{
		Use:   "pay",
		Short: "Run the payment service: idempotent payments that never charge twice",
		Long: `Run the payment API in front of a payment institution:

  POST /v1/payments        Idempotency-Key header; {"merchant_id","order_id","amount","currency"}
                           → 201 APPROVED/DECLINED/FAILED, 202 UNKNOWN, 400, 409, 413, 415, 422, 503
  GET  /v1/payments/{id}   the payment with its status history (codes and safe text)
  GET  /healthz            alive (asks no dependency)
  GET  /readyz             the store and NATS, each within 1 s
  GET  /metrics            Prometheus, with http_requests_total{route,method,code}
  GET  /openapi.json       the OpenAPI 3 description

Errors are RFC 9457 application/problem+json with a code and, for a field at
fault, the field.

An approval that times out is UNKNOWN (202), never retried: a reconciler asks
the institution for the status and settles it, --inquiry-concurrency inquiries
at once. A PENDING payment whose approval call must have ended (a crash, or a
database failure after the institution answered) is taken over as UNKNOWN by
any instance; a younger one is left to the instance calling. Every change writes an outbox row in the
same transaction; a relay publishes the rows to NATS JetStream
(payments.<id>, de-duplicated by <id>-<seq>).

Storage: --postgres (or $STAMPEDE_POSTGRES_URL), else SQLite (--sqlite).
Events: --nats (or $STAMPEDE_NATS_URL), else an embedded nats-server.
The server closes a connection whose headers or body stall past
--read-header-timeout or --read-timeout, and keep-alive connections idle
past --idle-timeout.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runPay(cmd, opts) },
	}
	opts.store.flags(cmd)
	f := cmd.Flags()
	f.StringVar(&opts.http, "http", "127.0.0.1:8081", "address to listen on")
	f.StringVar(&opts.institution, "institution", "", "base URL of the payment institution, e.g. http://127.0.0.1:8090 (required)")
	f.StringVar(&opts.nats, "nats", "", "NATS URL (default: $"+envNATS+"; empty: an embedded nats-server)")
	f.StringVar(&opts.natsDir, "nats-dir", "", "JetStream directory of the embedded nats-server (default: a temporary directory)")
	f.DurationVar(&opts.timeout, "timeout", 3*time.Second, "client timeout of one approval call")
	f.IntVar(&opts.inquiries, "inquiry-concurrency", pay.DefaultConfig().InquiryConcurrency, "status inquiries the reconciler runs at once")
	f.StringVar(&opts.logLevel, "log-level", "info", "debug, info, warn or error")
	f.DurationVar(&opts.server.ReadHeaderTimeout, "read-header-timeout", opts.server.ReadHeaderTimeout, "close a connection whose request headers take longer")
	f.DurationVar(&opts.server.ReadTimeout, "read-timeout", opts.server.ReadTimeout, "close a connection whose request, body included, takes longer to read")
	f.DurationVar(&opts.server.WriteTimeout, "write-timeout", 0, "longest time from a request's headers to the end of its answer (0: --timeout plus "+writeTimeoutMargin.String()+"); must exceed --timeout")
	f.DurationVar(&opts.server.IdleTimeout, "idle-timeout", opts.server.IdleTimeout, "close keep-alive connections idle this long")
	f.DurationVar(&opts.server.ShutdownTimeout, "shutdown-timeout", shutdownTimeout, "on SIGINT or SIGTERM, how long running requests may finish")
	return cmd
}

// serverConfig checks the server flags, naming the flag, and returns the
// server's limits.
func (o *payOptions) serverConfig() (httpapi.ServerConfig, error) {
	cfg := o.server
	if o.timeout <= 0 {
		return cfg, fmt.Errorf("--timeout must be positive, got %s", o.timeout)
	}
	if cfg.WriteTimeout == 0 {
		cfg.WriteTimeout = o.timeout + writeTimeoutMargin
	}
	if cfg.WriteTimeout <= o.timeout {
		return cfg, fmt.Errorf("--write-timeout must exceed --timeout (%s), the longest approval call, got %s", o.timeout, cfg.WriteTimeout)
	}
	if err := cfg.Validate(); err != nil {
		flag := map[string]string{"ReadHeaderTimeout": "--read-header-timeout", "ReadTimeout": "--read-timeout",
			"WriteTimeout": "--write-timeout", "IdleTimeout": "--idle-timeout", "ShutdownTimeout": "--shutdown-timeout"}
		if e, ok := errors.AsType[*httpapi.Error](err); ok && flag[e.Field] != "" {
			return cfg, fmt.Errorf("%s %s", flag[e.Field], e.Message)
		}
		return cfg, err
	}
	return cfg, nil
}

func runPay(cmd *cobra.Command, opts *payOptions) error {
	if opts.institution == "" {
		return errors.New("--institution is required: the base URL of the payment institution")
	}
	level, err := parseLogLevel(opts.logLevel)
	if err != nil {
		return err
	}
	scfg, err := opts.serverConfig()
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level}))
	ctx := cmd.Context()

	store, where, err := opts.store.open(cmd)
	if err != nil {
		return err
	}
	defer store.Close()

	fromEnv(cmd, "nats", envNATS, &opts.nats)
	natsURL := opts.nats
	if natsURL == "" {
		dir := opts.natsDir
		if dir == "" {
			if dir, err = os.MkdirTemp("", "stampede-nats-"); err != nil {
				return err
			}
			defer os.RemoveAll(dir)
		}
		emb, err := jetstream.StartEmbedded(filepath.Clean(dir))
		if err != nil {
			return err
		}
		defer emb.Close()
		natsURL = emb.URL()
		log.Info("no --nats given: started an embedded nats-server", "url", natsURL, "dir", dir)
	}
	nc, err := nats.Connect(natsURL)
	if err != nil {
		return fmt.Errorf("--nats: %w", err)
	}
	defer nc.Close()
	relay, err := jetstream.New(ctx, store, nc, jetstream.DefaultConfig())
	if err != nil {
		return err
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cfg := pay.DefaultConfig()
	cfg.ApprovalTimeout, cfg.Logger, cfg.Metrics = opts.timeout, log, pay.NewMetrics(reg)
	cfg.InquiryConcurrency = opts.inquiries
	// Keep connections to the institution open for bursts of payments.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 256
	client := institution.NewClient(opts.institution, &http.Client{Transport: tr})
	svc, err := pay.NewService(store, institutionclient.New(client), cfg)
	if e, ok := errors.AsType[*pay.Error](err); ok && e.Field == "InquiryConcurrency" {
		return fmt.Errorf("--inquiry-concurrency %s", e.Message)
	}
	if err != nil {
		return err
	}
	hcfg := pay.DefaultHandlerConfig()
	hcfg.Logger = log
	api, err := pay.NewHandler(svc, store, hcfg, reg)
	if err != nil {
		return err
	}
	api.AddCheck(httpapi.Check{Name: "nats", Ping: natsReady(nc)})
	ln, err := net.Listen("tcp", opts.http)
	if err != nil {
		return fmt.Errorf("--http: %w", err)
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan struct{}, 2)
	// The reconciler's first pass, at once, takes over the PENDING
	// payments a crash left (once their approval must have ended).
	go func() { _ = svc.Run(runCtx); done <- struct{}{} }()
	go func() { _ = relay.Run(runCtx); done <- struct{}{} }()
	log.Info("payment service listening", "addr", ln.Addr().String(), "store", where, "institution", opts.institution,
		"read_timeout", scfg.ReadTimeout, "write_timeout", scfg.WriteTimeout, "idle_timeout", scfg.IdleTimeout)

	// Serve until ctx ends, then shut down within --shutdown-timeout.
	err = httpapi.Serve(ctx, ln, api, scfg, log)
	stop()
	<-done
	<-done
	if err != nil {
		return fmt.Errorf("http server: %w", err)
	}
	log.Info("stopped")
	return nil
}

// natsReady is the readiness check of the NATS connection: connected, and
// a round trip to the server within the check's deadline.
func natsReady(nc *nats.Conn) func(context.Context) error {
	return func(ctx context.Context) error {
		if st := nc.Status(); st != nats.CONNECTED {
			return fmt.Errorf("nats: connection %s", st)
		}
		return nc.FlushWithContext(ctx)
	}
}
