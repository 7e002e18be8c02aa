package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"

	dispatchjs "github.com/stampede-lab/stampede/dispatch/natskeyed"
	"github.com/stampede-lab/stampede/fulfilment/outlet"
	"github.com/stampede-lab/stampede/fulfilment/sqlstore"
	"github.com/stampede-lab/stampede/fulfilment/worker"
	"github.com/stampede-lab/stampede/internal/httpapi"
)

// workerOptions are serve worker's flags.
type workerOptions struct {
	http   string
	nats   string
	store  payStoreOptions
	cfg    worker.Config
	serve  string
	prefer string
	server httpapi.ServerConfig
	outlet outlet.Config // with --deliver (its URL)
}

// envDeliverSecret holds the key serve worker --deliver signs with: an
// environment variable, not a flag, so that it is not in the process list.
const envDeliverSecret = "STAMPEDE_DELIVER_SECRET"

func newServeWorkerCmd() *cobra.Command {
	opts := &workerOptions{cfg: worker.DefaultConfig(), server: httpapi.DefaultServerConfig(), store: payStoreOptions{file: "fulfilment.db"},
		outlet: outlet.DefaultConfig()}
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Run a fulfilment worker: payment events from JetStream into tickets",
		Long: `Run a fulfilment worker. It consumes the payment events serve pay publishes
(stream --stream, payments.<partition>.<payment id> in --partitions
partitions) with a keyed consumer — one payment's events one at a time and in
order, --concurrency handlers at once — and applies each exactly once to the
fulfilment store (inbox and ticket in one transaction): a ticket for every
APPROVED payment, a release for every DECLINED or FAILED one.

Run several workers on one NATS and one store: on nats-server 2.11+ each
partition is pinned to one worker at a time and moves when it stops. On an
older server (or with --serve) each partition is held by a lease (--lease,
10s) in a JetStream KV bucket: give each worker its own --serve share; a
worker takes over the partitions of one that died within --lease plus a
third of it, and hands them back when that worker returns. With --lease 0
the partitions are static: two workers on one partition would break
per-payment order, and nobody takes over a dead worker's share.

--nats is required: the worker must read the stream serve pay writes, and
serve pay's embedded nats-server is private to it. Run a nats-server (with
JetStream) and give both the same --nats.

Store: --postgres (or $STAMPEDE_POSTGRES_URL), else SQLite --sqlite (default
<data-dir>/fulfilment.db).

  GET /healthz   the process is up
  GET /readyz    NATS, the store, and the partitions' consumers
  GET /metrics   lag, held messages and deepest key queue per partition,
                 handlers in flight, deliveries, redeliveries, failures,
                 invalid events set aside
  GET /v1/parked the parked keys, each with its failed event and reason
                 (Bearer --admin-token; absent without it)

An event that is not a valid payment event is logged, counted
(stampede_worker_invalid_events_total) and acknowledged: it is never retried.
A store error is retried with a growing delay; the payment's later events
wait for it.

HTTP outlet: with --deliver URL the worker does not fulfil; it POSTs each
payment event, in the same per-payment order, to URL (another team's
endpoint) and opens no store. The body is the event's JSON as published;
Idempotency-Key (and Stampede-Event-Id) is the event id <payment id>-<seq>;
Stampede-Signature is "t=<unix>,v1=<hex HMAC-SHA256 of "<t>.<body>">" under
the secret in $STAMPEDE_DELIVER_SECRET (required), the scheme of serve pay's
webhooks. A 2xx delivers the event. A 5xx, 408, 429, timeout
(--deliver-timeout) or connection error is retried --deliver-attempts times
with jittered exponential backoff (--deliver-backoff doubling to
--deliver-max-backoff; a longer Retry-After is waited, up to
--deliver-max-retry-after), then redelivered by the consumer after its own
delay, and parked after --max-attempts deliveries. Any other 4xx (or a 3xx:
redirects are not followed) parks the event at once with its payment's later
events while other payments flow: see stampede events parked and redrive.
Receivers de-duplicate by Idempotency-Key (examples/receiver-python).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runWorker(cmd, opts) },
	}
	f := cmd.Flags()
	c := &opts.cfg.Consumer
	f.StringVar(&opts.http, "http", "127.0.0.1:8082", "address to listen on for /healthz, /readyz and /metrics")
	f.StringVar(&opts.nats, "nats", "", "NATS URL of the server serve pay publishes to (required)")
	opts.store.flags(cmd)
	f.StringVar(&c.Stream, "stream", c.Stream, "the payment event stream")
	f.StringVar(&c.Subject, "subject", c.Subject, "the stream's subject prefix")
	f.StringVar(&c.Durable, "durable", c.Durable, "durable consumer name prefix, <durable>-<partition>; workers sharing it share the work")
	f.IntVar(&c.Partitions, "partitions", c.Partitions, "partitions of the stream; must match serve pay's --partitions")
	f.IntVar(&c.Workers, "concurrency", c.Workers, "handlers running at once")
	f.IntVar(&c.MaxPending, "max-pending", c.MaxPending, "unacknowledged events per partition at most (memory bound)")
	f.IntVar(&c.MaxAttempts, "max-attempts", c.MaxAttempts, "deliveries of a failing event before it is parked with its key's later events (stampede events parked, redrive); 0: retry for ever")
	f.DurationVar(&c.AckWait, "ack-wait", c.AckWait, "how long the server waits for an acknowledgement before redelivering")
	f.StringVar(&opts.serve, "serve", "", "comma-separated partitions this worker serves, e.g. 0,1,2,3 (empty: pinned on nats-server 2.11+, else all)")
	f.DurationVar(&c.OwnerTimeout, "owner-timeout", c.OwnerTimeout, "pinned only: unpin a partition whose owning worker was not heard of for this long, so a live worker takes it over (0: off, wait for the pin's TTL)")
	f.DurationVar(&c.Lease, "lease", c.Lease, "unpinned (nats-server before 2.11, or --serve): hold each partition by a lease of this length in a KV bucket, so that a live worker takes a dead one's partitions over within lease + lease/3; --serve is then this worker's own share, handed back to it when it returns (0: off, static partitions, nothing taken over)")
	f.DurationVar(&c.PinnedTTL, "pinned-ttl", c.PinnedTTL, "pinned only: how long the server keeps a partition pinned to a worker that stopped pulling")
	f.StringVar(&opts.prefer, "prefer", "", "comma-separated partitions this worker pins first (pinned only; the others after the pull expiry), to spread partitions over workers")
	f.StringVar(&opts.outlet.URL, "deliver", "", "POST every payment event to this URL instead of fulfilling it (HTTP outlet; needs $"+envDeliverSecret+"; no store is opened)")
	f.DurationVar(&opts.outlet.Timeout, "deliver-timeout", opts.outlet.Timeout, "with --deliver: how long one request may take")
	f.IntVar(&opts.outlet.Attempts, "deliver-attempts", opts.outlet.Attempts, "with --deliver: requests per delivery of an event before it is handed back for a later redelivery")
	f.DurationVar(&opts.outlet.BaseBackoff, "deliver-backoff", opts.outlet.BaseBackoff, "with --deliver: wait after a failed request, doubling per failure, jittered")
	f.DurationVar(&opts.outlet.MaxBackoff, "deliver-max-backoff", opts.outlet.MaxBackoff, "with --deliver: the longest wait between two requests")
	f.DurationVar(&opts.outlet.MaxRetryAfter, "deliver-max-retry-after", opts.outlet.MaxRetryAfter, "with --deliver: the longest Retry-After honoured")
	f.DurationVar(&opts.server.ShutdownTimeout, "shutdown-timeout", opts.server.ShutdownTimeout, "on SIGINT or SIGTERM, how long running handlers and requests may finish")
	f.StringVar(&opts.cfg.AdminToken, "admin-token", "", "bearer token of the read-only GET /v1/parked (the parked keys, for the operator console), at least 16 bytes (empty: no admin endpoint)")
	return cmd
}

// config checks the options, naming the flag of every bad one, and
// returns the worker's configuration for a server of the given version,
// without its connection and store (set by the caller before worker.New).
func (o *workerOptions) config(serverVersion string) (worker.Config, error) {
	cfg := o.cfg
	cfg.Consumer.DrainTimeout = o.server.ShutdownTimeout
	if o.serve != "" {
		for _, s := range strings.Split(o.serve, ",") {
			p, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil {
				return cfg, fmt.Errorf("--serve: %q is not a partition number", s)
			}
			cfg.Consumer.Serve = append(cfg.Consumer.Serve, p)
		}
	}
	if o.prefer != "" {
		for _, s := range strings.Split(o.prefer, ",") {
			p, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil {
				return cfg, fmt.Errorf("--prefer: %q is not a partition number", s)
			}
			cfg.Consumer.Prefer = append(cfg.Consumer.Prefer, p)
		}
	}
	cfg.Consumer.Pinned = o.serve == "" && dispatchjs.PinningSupported(serverVersion)
	if !cfg.Consumer.Pinned {
		cfg.Consumer.OwnerTimeout, cfg.Consumer.Prefer = 0, nil
	}
	if cfg.Consumer.InProgressEvery > cfg.Consumer.AckWait/2 {
		cfg.Consumer.InProgressEvery = cfg.Consumer.AckWait / 3
	}
	return cfg, flagErrors("", cfg.Consumer.Validate())
}

// fulfilmentStore opens the fulfilment database the store options name.
func (o *payStoreOptions) fulfilmentStore(ctx context.Context) (*sqlstore.Store, string, error) {
	cfg := sqlstore.DefaultConfig()
	cfg.OpTimeout = o.dbTimeout
	if o.dbTimeout <= 0 {
		return nil, "", flagErrors("", cfg.Validate())
	}
	where := "postgres"
	if o.postgres != "" {
		cfg.PostgresURL = o.postgres
	} else {
		if o.sqlite == "" && o.dataDir == "" {
			return nil, "", errors.New("--data-dir must not be empty when neither --sqlite nor a PostgreSQL URL is given")
		}
		if o.sqlite == "" {
			if err := os.MkdirAll(o.dataDir, 0o700); err != nil {
				return nil, "", fmt.Errorf("--data-dir: %w", err)
			}
		}
		cfg.SQLitePath = o.sqlitePath()
		where = "sqlite " + cfg.SQLitePath
	}
	if err := cfg.Validate(); err != nil {
		return nil, "", flagErrors("", err)
	}
	s, err := sqlstore.Open(ctx, cfg)
	if err != nil {
		if o.postgres != "" {
			return nil, "", fmt.Errorf("--postgres: %w", err)
		}
		return nil, "", fmt.Errorf("--sqlite: %w", err)
	}
	return s, where, nil
}

func runWorker(cmd *cobra.Command, opts *workerOptions) error {
	if opts.nats == "" {
		return fmt.Errorf("--nats (or %s) is required: the NATS server serve pay publishes to (serve pay's embedded nats-server is private to it; run a nats-server with JetStream and give both --nats)", envNATS)
	}
	if err := opts.server.Validate(); err != nil {
		return flagErrors("", err)
	}
	log := loggerOf(cmd)
	var out *outlet.Outlet
	if cmd.Flags().Changed("deliver") || opts.outlet.URL != "" {
		oc := opts.outlet
		oc.Secret, oc.Logger = os.Getenv(envDeliverSecret), log
		if oc.Secret == "" {
			return fmt.Errorf("--deliver needs $%s: the secret every request is signed with (the receiver verifies it); set it in the environment, never on the command line", envDeliverSecret)
		}
		var err error
		if out, err = outlet.New(oc); err != nil {
			return flagErrors("", err)
		}
	}
	ctx := cmd.Context()
	nc, err := nats.Connect(opts.nats, nats.MaxReconnects(-1), nats.Name("stampede-worker"))
	if err != nil {
		return fmt.Errorf("--nats: %w", err)
	}
	defer nc.Close()
	cfg, err := opts.config(nc.ConnectedServerVersion())
	if err != nil {
		return err
	}
	cfg.Consumer.Logger = log
	if !cfg.Consumer.Pinned && len(cfg.Consumer.Serve) == 0 && cfg.Consumer.Lease == 0 {
		log.Warn("nats-server older than 2.11 has no pinned consumers and --lease is 0: this worker serves every partition; run only one, or give each its own --serve",
			"server_version", nc.ConnectedServerVersion())
	}
	js, err := natsjs.New(nc)
	if err != nil {
		return err
	}
	var store *sqlstore.Store
	where := "none: delivering to " + endpointOf(opts.outlet.URL)
	if out == nil {
		if store, where, err = opts.store.fulfilmentStore(ctx); err != nil {
			return err
		}
		defer store.Close()
		cfg.Store = store
	} else {
		cfg.Deliver = out.Deliver
	}
	cfg.JetStream = js
	w, err := worker.New(cfg)
	if err != nil {
		return flagErrors("", err)
	}
	// The consumers first: a missing stream or a busy partition stops the
	// command before it serves HTTP. The worker runs until the command's
	// context ends, or until the command gives up (stop).
	runCtx, stopConsuming := context.WithCancel(ctx)
	defer stopConsuming()
	consuming := make(chan error, 1)
	go func() { consuming <- w.Run(runCtx) }()
	stop := func(err error) error {
		stopConsuming()
		return errors.Join(err, <-consuming)
	}
	select {
	case <-w.Started():
	case err := <-consuming:
		if errors.Is(err, dispatchjs.ErrPartitionBusy) {
			return fmt.Errorf("%w: another worker serves it, and nats-server %s cannot pin a partition to one worker (2.11+ can): give each worker its own partitions, e.g. --serve 0,1,2,3 and --serve 4,5,6,7", err, nc.ConnectedServerVersion())
		}
		if errors.Is(err, natsjs.ErrStreamNotFound) {
			return fmt.Errorf("%w: serve pay creates the stream when it starts; start it first, with the same --nats and --stream (%s)", err, cfg.Consumer.Stream)
		}
		return err
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), w.Collector())
	if out != nil {
		reg.MustRegister(out.Collector())
	}
	api, err := httpapi.New(httpapi.Config{Name: "worker", Logger: log, Registry: reg})
	if err != nil {
		return stop(err)
	}
	api.AddCheck(httpapi.Check{Name: "nats", Ping: natsReady(nc)})
	if store != nil {
		api.AddCheck(httpapi.Check{Name: "store", Ping: store.Ping})
	}
	api.AddCheck(httpapi.Check{Name: "consumer", Ping: w.Alive})
	if cfg.AdminToken != "" {
		pk, err := dispatchjs.OpenParking(ctx, js, cfg.Consumer)
		if err != nil {
			return stop(err)
		}
		worker.RegisterAdmin(api, pk, cfg.AdminToken)
	}

	ln, err := net.Listen("tcp", opts.http)
	if err != nil {
		return stop(fmt.Errorf("--http: %w", err))
	}
	log.Info("fulfilment worker running", "addr", ln.Addr().String(), "store", where, "stream", cfg.Consumer.Stream,
		"partitions", cfg.Consumer.Partitions, "serve", cfg.Consumer.Serve, "pinned", cfg.Consumer.Pinned,
		"concurrency", cfg.Consumer.Workers, "server_version", nc.ConnectedServerVersion())
	// On SIGINT or SIGTERM: stop consuming first (hand queued events back,
	// finish running ones), then stop serving HTTP.
	serveCtx, stopServing := context.WithCancel(context.WithoutCancel(ctx))
	defer stopServing()
	stopped := make(chan error, 1)
	go func() {
		err := <-consuming
		log.Info("stopped consuming", "stats", fmt.Sprintf("%+v", w.Stats()), "invalid", w.Invalid())
		stopServing()
		stopped <- err
	}()
	if err := httpapi.Serve(serveCtx, ln, api, opts.server, log); err != nil {
		stopConsuming()
		return errors.Join(fmt.Errorf("http server: %w", err), <-stopped)
	}
	if err := <-stopped; err != nil {
		return err
	}
	log.Info("stopped")
	return nil
}

// endpointOf is a --deliver URL without its query, which may carry a
// token, for the logs.
func endpointOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	u.RawQuery, u.User = "", nil
	return u.String()
}
