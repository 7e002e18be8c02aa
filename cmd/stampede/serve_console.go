package main

import (
	"errors"
	"fmt"
	"net"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"

	"github.com/stampede-lab/stampede/console"
)

// consoleOptions are the flags of `stampede serve console`.
type consoleOptions struct {
	http string
	cfg  console.Config
}

func newServeConsoleCmd() *cobra.Command {
	opts := &consoleOptions{cfg: console.DefaultConfig()}
	opts.cfg.HTTP.ShutdownTimeout = shutdownTimeout
	cmd := &cobra.Command{
		Use:   "console",
		Short: "Run the operator console: the sale live, with pause, resume, close, capacity and outflow",
		Long: `Run the operator console of a sale, a web page at /console:

  rooms      waiting, active of capacity, admitted, rate, ETA, open, paused or closed
             (the waiting room's admin API, --waitroom with --waitroom-token)
  payments   by status, the outbox lag and the flagged payments, each linked to its
             status history (pay's /v1/admin endpoints: serve pay --admin-token, --pay-token)
  seats      left, held and sold per event (--checkout, --events)
  consumers  the consumer lag of the event stream (--workers: the workers' /metrics)
  parked     the keys the workers parked after their event kept failing, with the
             reason (--worker-token: the workers' --admin-token, their GET /v1/parked)
  controls   pause, resume and close a room, change its capacity and outflow
             (max admissions per minute), through the waiting room's admin API

The page updates by server-sent events every --interval. A part that does not
answer within --timeout is shown as unavailable; the rest of the page stays live.

Log in with --admin-token: the console sets a signed session cookie (HttpOnly,
SameSite=Strict, --session long; --secure-cookie behind HTTPS). Every control
also carries the page's CSRF token in a header.

  GET  /console, POST /console/login, POST /console/logout, GET /console/payments/{id}
  GET  /console/api/snapshot, /console/api/stream (server-sent events)
  POST /console/api/rooms/{room}/pause|resume|close, PATCH /console/api/rooms/{room}
  GET  /healthz, /readyz (the waiting room answers), /metrics, /openapi.json`,
		Example: `  stampede serve console --admin-token "$CONSOLE_TOKEN" \
    --waitroom http://127.0.0.1:8080 --waitroom-token "$WAITROOM_ADMIN_TOKEN" \
    --pay http://127.0.0.1:8081 --pay-token "$PAY_ADMIN_TOKEN" \
    --checkout http://127.0.0.1:8083 --events concert \
    --workers http://127.0.0.1:9101,http://127.0.0.1:9102 --worker-token "$WORKER_ADMIN_TOKEN"`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runConsole(cmd, opts) },
	}
	f := cmd.Flags()
	c := &opts.cfg
	f.StringVar(&opts.http, "http", "127.0.0.1:8084", "address to listen on")
	f.StringVar(&c.AdminToken, "admin-token", "", "the token operators log in with, at least 16 bytes (required)")
	f.StringVar(&c.Waitroom.URL, "waitroom", "", "base URL of the waiting room (an instance or a gate), e.g. http://127.0.0.1:8080 (required)")
	f.StringVar(&c.Waitroom.Token, "waitroom-token", "", "the waiting room's --admin-token (required)")
	f.StringVar(&c.Pay.URL, "pay", "", "base URL of the payment service (empty: payments not shown)")
	f.StringVar(&c.Pay.Token, "pay-token", "", "pay's --admin-token")
	f.StringVar(&c.Checkout.URL, "checkout", "", "base URL of the checkout (empty: seats not shown)")
	f.StringSliceVar(&c.Events, "events", nil, "the checkout's events whose seats are shown, comma-separated")
	f.StringSliceVar(&c.Workers, "workers", nil, "base URLs of the event workers' metrics, comma-separated (empty: consumer lag not shown)")
	f.StringVar(&c.WorkerToken, "worker-token", "", "the workers' --admin-token: lists the parked keys (empty: not shown)")
	f.DurationVar(&c.Interval, "interval", c.Interval, "how often the page is updated")
	f.DurationVar(&c.Timeout, "timeout", c.Timeout, "deadline of each call to a part; past it the part is shown unavailable")
	f.DurationVar(&c.Session, "session", c.Session, "how long a login lasts")
	f.BoolVar(&c.SecureCookie, "secure-cookie", false, "mark the session cookie Secure (the console is reached over HTTPS)")
	f.DurationVar(&opts.cfg.HTTP.ReadHeaderTimeout, "read-header-timeout", opts.cfg.HTTP.ReadHeaderTimeout, "close a connection whose request headers take longer")
	f.DurationVar(&opts.cfg.HTTP.ReadTimeout, "read-timeout", opts.cfg.HTTP.ReadTimeout, "close a connection whose request, body included, takes longer to read")
	f.DurationVar(&opts.cfg.HTTP.WriteTimeout, "write-timeout", opts.cfg.HTTP.WriteTimeout, "longest time to answer a request (the event stream sets its own deadline per event)")
	f.DurationVar(&opts.cfg.HTTP.IdleTimeout, "idle-timeout", opts.cfg.HTTP.IdleTimeout, "close keep-alive connections idle this long")
	f.DurationVar(&opts.cfg.HTTP.ShutdownTimeout, "shutdown-timeout", opts.cfg.HTTP.ShutdownTimeout, "on SIGINT or SIGTERM, how long running requests may finish")
	return cmd
}

func runConsole(cmd *cobra.Command, opts *consoleOptions) error {
	if opts.http == "" {
		return errors.New("--http must not be empty")
	}
	if err := opts.cfg.Validate(); err != nil {
		return flagErrors("", err)
	}
	log := loggerOf(cmd)
	cfg := opts.cfg
	cfg.Logger = log
	cfg.Registry = prometheus.NewRegistry()
	cfg.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	ln, err := net.Listen("tcp", opts.http)
	if err != nil {
		return fmt.Errorf("--http: %w", err)
	}
	cfg.Listener = ln
	srv, err := console.New(cfg)
	if err != nil {
		ln.Close()
		return flagErrors("", err)
	}
	log.Info("console listening", "addr", ln.Addr().String(), "page", "http://"+ln.Addr().String()+"/console",
		"waitroom", cfg.Waitroom.URL, "pay", cfg.Pay.URL, "checkout", cfg.Checkout.URL, "events", cfg.Events,
		"workers", cfg.Workers, "interval", cfg.Interval)
	if err := srv.Run(cmd.Context()); err != nil {
		return fmt.Errorf("http server: %w", err)
	}
	log.Info("stopped")
	return nil
}
