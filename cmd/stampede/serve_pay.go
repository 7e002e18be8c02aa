package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"

	"github.com/stampede-lab/stampede"
	instclient "github.com/stampede-lab/stampede/institution/client"
	"github.com/stampede-lab/stampede/internal/httpapi"
	"github.com/stampede-lab/stampede/pay"
	payapi "github.com/stampede-lab/stampede/pay/api"
	"github.com/stampede-lab/stampede/pay/institutionclient"
	"github.com/stampede-lab/stampede/pay/natspub"
	"github.com/stampede-lab/stampede/pay/postgres"
	payserver "github.com/stampede-lab/stampede/pay/server"
	"github.com/stampede-lab/stampede/pay/sqlite"
	"github.com/stampede-lab/stampede/pay/sqlstore"
	"github.com/stampede-lab/stampede/pay/stripeconnector"
	"github.com/stampede-lab/stampede/pay/tossconnector"
	"github.com/stampede-lab/stampede/pay/webhook"
)

// Environment variables of the payment service's backing services.
const (
	envPostgres = "STAMPEDE_POSTGRES_URL"
	envNATS     = "STAMPEDE_NATS_URL"
)

// defaultDataDir is where the embedded defaults keep their data: the
// SQLite file and the embedded nats-server's JetStream store.
const defaultDataDir = "stampede-data"

// oldDefaultSQLite is where serve pay kept its SQLite file before
// --data-dir.
const oldDefaultSQLite = "stampede-pay.db"

// payStoreOptions name the payment database; shared by serve pay and pay
// parity, and, with file fulfilment.db, by serve worker for the
// fulfilment database.
type payStoreOptions struct {
	postgres  string
	sqlite    string
	dataDir   string
	dbTimeout time.Duration
	// file is the SQLite file's name in dataDir; empty means pay.db.
	file string
}

func (o *payStoreOptions) flags(cmd *cobra.Command) {
	if o.file == "" {
		o.file = "pay.db"
	}
	cmd.Flags().StringVar(&o.postgres, "postgres", "", "PostgreSQL URL (empty: SQLite)")
	cmd.Flags().StringVar(&o.sqlite, "sqlite", "", "SQLite database file, used when no PostgreSQL URL is given (default: <data-dir>/"+o.file+")")
	cmd.Flags().StringVar(&o.dataDir, "data-dir", defaultDataDir, "directory of the embedded defaults' data: the SQLite file and the embedded nats-server's JetStream store")
	cmd.Flags().DurationVar(&o.dbTimeout, "db-timeout", sqlstore.DefaultOpTimeout, "deadline of every database call; past it the request answers 503 (a frozen or unreachable database)")
}

// sqlitePath is the SQLite file the options name.
func (o *payStoreOptions) sqlitePath() string {
	if o.sqlite != "" {
		return o.sqlite
	}
	if o.file == "" {
		return filepath.Join(o.dataDir, "pay.db")
	}
	return filepath.Join(o.dataDir, o.file)
}

// open opens the payment store the options name. With mustExist, a
// database that does not exist yet is an error rather than created.
func (o *payStoreOptions) open(cmd *cobra.Command, mustExist bool) (pay.Store, string, error) {
	if o.dbTimeout <= 0 {
		return nil, "", fmt.Errorf("--db-timeout must be positive, got %s", o.dbTimeout)
	}
	if o.postgres != "" {
		cfg := postgres.DefaultConfig()
		cfg.URL, cfg.OpTimeout = o.postgres, o.dbTimeout
		s, err := postgres.OpenConfig(cmd.Context(), cfg)
		if err != nil {
			return nil, "", fmt.Errorf("--postgres: cannot open the PostgreSQL database (does it exist, and is the server reachable?): %w", err)
		}
		return s, "postgres", nil
	}
	if o.sqlite == "" && o.dataDir == "" {
		return nil, "", errors.New("--data-dir must not be empty when neither --sqlite nor a PostgreSQL URL is given")
	}
	path := o.sqlitePath()
	if mustExist {
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			return nil, "", fmt.Errorf("--sqlite: no payment database at %s (check --sqlite or --data-dir); it is not created here", path)
		} else if err != nil {
			return nil, "", fmt.Errorf("--sqlite: %w", err)
		}
	} else if o.sqlite == "" {
		if err := os.MkdirAll(o.dataDir, 0o700); err != nil {
			return nil, "", fmt.Errorf("--data-dir: %w", err)
		}
	}
	cfg := sqlite.DefaultConfig()
	cfg.Path, cfg.OpTimeout = path, o.dbTimeout
	s, err := sqlite.OpenConfig(cmd.Context(), cfg)
	if err != nil {
		return nil, "", fmt.Errorf("--sqlite: %w", err)
	}
	return s, "sqlite " + path, nil
}

type payOptions struct {
	// adminToken opens the operator's /v1/admin endpoints (the console's).
	adminToken  string
	store       payStoreOptions
	http        string
	institution string
	connector   string
	nats        string
	natsDir     string
	natsSync    bool
	giveUpAfter time.Duration
	stream      natspub.Config
	timeout     time.Duration
	inquiries   int
	authWindow  time.Duration
	closeAfter  time.Duration
	server      httpapi.ServerConfig
	webhooks    webhook.Config
	admission   payAdmissionOptions
}

// writeTimeoutMargin is what the default --write-timeout adds to the
// approval timeout: the longest handler, POST /v1/payments, also reads
// the body and writes to the store twice.
const writeTimeoutMargin = 10 * time.Second

func newServePayCmd() *cobra.Command {
	opts := &payOptions{server: httpapi.DefaultServerConfig(), stream: natspub.DefaultConfig(), webhooks: webhook.DefaultConfig()}
	opts.server.WriteTimeout = 0 // the approval timeout plus writeTimeoutMargin
	cmd := &cobra.Command{
		Use:   "pay",
		Short: "Run the payment service: idempotent payments that never charge twice",
		Long: `Run the payment API in front of a payment institution:

  POST /v1/payments        Authorization: Bearer <API key>, Idempotency-Key header;
                           {"merchant_id" (optional: the key's),"order_id","amount","currency",
                           "capture" (optional: automatic, or manual for an authorisation)}
                           → 201 APPROVED/AUTHORIZED/DECLINED/FAILED, 202 UNKNOWN, 400, 401, 403, 409
                             (in flight, or order_exists), 413, 415, 422, 503
  GET  /v1/payments       the key's merchant's payments: ?order_id, status, created_after,
                           created_before, limit, cursor (next_cursor of the last page)
  GET  /v1/payments/{id}   the key's merchant's payment with its status history
  POST /v1/payments/{id}/refunds   Idempotency-Key header; {"amount" (optional: what is
                           left),"reason" (optional)} → 201 SUCCEEDED/FAILED, 202 UNKNOWN;
                           409 refund_exceeds when the refunds would pass the amount
  GET  /v1/payments/{id}/refunds   the payment's refunds with their histories
  POST /v1/payments/{id}/capture   Idempotency-Key header; {"amount" (optional: all)} of an
                           AUTHORIZED payment → 201 SUCCEEDED/FAILED, 202 UNKNOWN; 409
                           not_authorized, operation_exists (a capture or void holds it)
  POST /v1/payments/{id}/void      Idempotency-Key header; no body; as capture
  GET  /v1/payments/{id}/operations  the payment's captures and voids
  GET  /v1/events          the merchant's events, in order: ?after (next_cursor), limit
  GET  /v1/admin/payments?flagged=true, /v1/admin/payments/{id}, /v1/admin/stats
                           any merchant's payments, flagged ones, counts by status and the
                           outbox lag (Bearer --admin-token; absent without it)
  GET  /healthz            alive (asks no dependency)
  GET  /readyz             the store, NATS, the reconciler and the relay
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

The institution is reached through a connector (--connector): simulator (the
institution simulator's protocol at --institution), stripe (Stripe's API
through the official client; the secret key from $STAMPEDE_STRIPE_SECRET_KEY,
--institution overriding Stripe's URL, e.g. for stripe-mock), or toss (Toss
Payments' v1 API; the secret key from $STAMPEDE_TOSS_SECRET_KEY, --institution
overriding Toss's URL, e.g. for serve institution --protocol toss; a payment
then needs the widget's "payment_key", its order_id being Toss's orderId, in
KRW). Each declares
what it guarantees; a missing or malformed key is refused at start. A refund,
like an approval, is never sent again after a lost answer: it is UNKNOWN
until a status inquiry settles it. A payment made with "capture": "manual" (a
connector with manual capture: simulator, stripe) is an authorisation
(AUTHORIZED), captured (POST /v1/payments/{id}/capture) or voided (POST
/v1/payments/{id}/void) under the same rules, or voided by the reconciler once
older than --auth-window. GET /v1/events is the merchant's events feed.
With --close-unconfirmed-after D, an APPROVED or AUTHORIZED payment whose
order the merchant has not confirmed (POST /v1/payments/{id}/confirm) D after
its creation is cancelled: refunded or voided, once.

Storage: --postgres (or $STAMPEDE_POSTGRES_URL), else SQLite (--sqlite,
default <data-dir>/pay.db). Events: --nats (or $STAMPEDE_NATS_URL), else an
embedded nats-server keeping its JetStream store in <data-dir>/nats, so a
restart loses no event. The stream keeps events --stream-max-age and at most
--stream-max-bytes (set on create, updated on every start).

Merchants and their API keys: stampede pay merchant add|list|revoke. Every
payment event of a merchant with a webhook (stampede pay merchant webhook)
is POSTed to it, signed (Stampede-Signature), in per-payment order, retried
with backoff for --webhook-max-age; stampede pay webhooks lists them.

The HTTP server, the reconciler, the relay and the webhook deliverer run together: when the
reconciler or the relay fails for good (failing for --give-up-after), /readyz
reports it, and the process stops with a non-zero status.

The server closes a connection whose headers or body stall past
--read-header-timeout or --read-timeout, and keep-alive connections idle
past --idle-timeout.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runPay(cmd, opts) },
	}
	opts.store.flags(cmd)
	f := cmd.Flags()
	f.StringVar(&opts.http, "http", "127.0.0.1:8081", "address to listen on")
	f.StringVar(&opts.adminToken, "admin-token", "", "bearer token of the read-only /v1/admin endpoints (the operator console), at least 16 bytes (empty: no admin endpoints)")
	f.StringVar(&opts.institution, "institution", "", "base URL of the payment institution, e.g. http://127.0.0.1:8090 (required for the simulator connector; for stripe and toss it overrides their URL)")
	f.StringVar(&opts.connector, "connector", "simulator", "the institution's connector: simulator, stripe or toss; keys come from the environment")
	f.StringVar(&opts.nats, "nats", "", "NATS URL (empty: an embedded nats-server)")
	f.StringVar(&opts.natsDir, "nats-dir", "", "JetStream directory of the embedded nats-server (default: <data-dir>/nats)")
	f.BoolVar(&opts.natsSync, "nats-sync-always", false, "the embedded nats-server fsyncs every message before acknowledging it (survives power loss, not only a killed process)")
	f.DurationVar(&opts.stream.MaxAge, "stream-max-age", opts.stream.MaxAge, "how long the event stream keeps a message (0: for ever)")
	f.StringVar(&opts.stream.Stream, "stream", opts.stream.Stream, "the payment event stream's name; serve worker's --stream must match")
	f.StringVar(&opts.stream.Subject, "subject", opts.stream.Subject, "the stream's subject prefix, <subject>.<p>.<payment id>; serve worker's --subject must match")
	f.IntVar(&opts.stream.Partitions, "partitions", opts.stream.Partitions, "partitions of the event stream, payments.<p>.<payment id>; must match serve worker's --partitions")
	f.Var(&byteSize{&opts.stream.MaxBytes}, "stream-max-bytes", "the event stream's size limit, e.g. 1GiB or 500MB (-1: none); the oldest messages go first")
	f.DurationVar(&opts.giveUpAfter, "give-up-after", pay.DefaultRelayConfig().GiveUpAfter, "how long the reconciler or the relay may keep failing before the service stops (exit status 1)")
	f.DurationVar(&opts.timeout, "timeout", 3*time.Second, "client timeout of one approval call")
	f.DurationVar(&opts.webhooks.MaxAge, "webhook-max-age", opts.webhooks.MaxAge, "how long a webhook event is retried before it is marked failed")
	f.DurationVar(&opts.webhooks.Timeout, "webhook-timeout", opts.webhooks.Timeout, "timeout of one webhook attempt")
	f.IntVar(&opts.webhooks.Concurrency, "webhook-concurrency", opts.webhooks.Concurrency, "webhook attempts in flight at once")
	f.IntVar(&opts.inquiries, "inquiry-concurrency", pay.DefaultConfig().InquiryConcurrency, "status inquiries the reconciler runs at once")
	f.DurationVar(&opts.closeAfter, "close-unconfirmed-after", 0, "refund or void an APPROVED or AUTHORIZED payment whose order is not confirmed (POST /v1/payments/{id}/confirm) this long after its creation (0: never; set it only when every merchant confirms)")
	f.DurationVar(&opts.authWindow, "auth-window", pay.DefaultAuthWindow, `how long an authorisation ("capture": "manual") waits for its capture before the reconciler voids it (0: never)`)
	f.DurationVar(&opts.server.ReadHeaderTimeout, "read-header-timeout", opts.server.ReadHeaderTimeout, "close a connection whose request headers take longer")
	f.DurationVar(&opts.server.ReadTimeout, "read-timeout", opts.server.ReadTimeout, "close a connection whose request, body included, takes longer to read")
	f.DurationVar(&opts.server.WriteTimeout, "write-timeout", 0, "longest time from a request's headers to the end of its answer (0: --timeout plus "+writeTimeoutMargin.String()+"); must exceed --timeout")
	f.DurationVar(&opts.server.IdleTimeout, "idle-timeout", opts.server.IdleTimeout, "close keep-alive connections idle this long")
	f.DurationVar(&opts.server.ShutdownTimeout, "shutdown-timeout", shutdownTimeout, "on SIGINT or SIGTERM, how long running requests may finish")
	opts.admission.flags(cmd)
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
		return cfg, flagErrors("", err)
	}
	return cfg, nil
}

func runPay(cmd *cobra.Command, opts *payOptions) error {
	if err := pay.ValidateConnector(opts.connector); err != nil {
		return flagErrors("", err)
	}
	if opts.connector == "simulator" && opts.institution == "" {
		return errors.New("--institution is required: the base URL of the payment institution")
	}
	scfg, err := opts.serverConfig()
	if err != nil {
		return err
	}
	if opts.giveUpAfter <= 0 {
		return fmt.Errorf("--give-up-after must be positive, got %s", opts.giveUpAfter)
	}
	if err := opts.stream.Validate(); err != nil {
		return flagErrors("", err)
	}
	admission, err := opts.admission.verifier()
	if err != nil {
		return err
	}
	log := loggerOf(cmd)
	ctx := cmd.Context()
	// Every flag is checked before anything is opened or created.
	svcCfg := pay.DefaultConfig()
	svcCfg.ApprovalTimeout, svcCfg.InquiryConcurrency, svcCfg.GiveUpAfter = opts.timeout, opts.inquiries, opts.giveUpAfter
	svcCfg.AuthWindow = opts.authWindow
	svcCfg.CloseAfter = opts.closeAfter
	apiCfg := payapi.DefaultConfig()
	apiCfg.AdminToken, apiCfg.Admission = opts.adminToken, admission
	wcfg := opts.webhooks
	wcfg.Logger = log
	if wcfg.Lease <= wcfg.Timeout {
		wcfg.Lease = 3 * wcfg.Timeout
	}
	if err := stampede.Join(flagErrors("", stampede.Join(svcCfg.Validate(), apiCfg.Validate())), flagErrors("webhook-", wcfg.Validate())); err != nil {
		return err
	}

	inst, err := opts.newConnector()
	if err != nil {
		return err
	}

	store, where, err := opts.store.open(cmd, false)
	if err != nil {
		return err
	}
	defer store.Close()
	if opts.store.postgres == "" && opts.store.sqlite == "" {
		if _, err := os.Stat(oldDefaultSQLite); err == nil {
			log.Warn("a database at the old default path exists and is not used; pass --sqlite to keep using it",
				"old", oldDefaultSQLite, "used", opts.store.sqlitePath())
		}
	}

	natsURL := opts.nats
	if natsURL == "" {
		dir := opts.natsDir
		if dir == "" {
			if opts.store.dataDir == "" {
				return errors.New("--data-dir must not be empty when neither --nats nor --nats-dir is given")
			}
			dir = filepath.Join(opts.store.dataDir, "nats")
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("--nats-dir: %w", err)
		}
		ecfg := natspub.DefaultEmbeddedConfig(filepath.Clean(dir))
		ecfg.SyncAlways, ecfg.Logger = opts.natsSync, log
		emb, err := natspub.StartEmbeddedConfig(ecfg)
		if err != nil {
			return err
		}
		defer emb.Close()
		natsURL = emb.URL()
		log.Info("no --nats given: started an embedded nats-server", "url", natsURL, "dir", dir, "sync_always", opts.natsSync)
	}
	nc, err := nats.Connect(natsURL, nats.MaxReconnects(-1))
	if err != nil {
		return fmt.Errorf("--nats: %w", err)
	}
	defer nc.Close()
	events, err := natspub.NewPublisher(ctx, nc, opts.stream)
	if err != nil {
		return err
	}
	if events.ServerPartitions() {
		log.Info("event stream partitioned by the server's subject transform", "stream", opts.stream.Stream, "partitions", opts.stream.Partitions)
	} else {
		log.Warn("nats-server older than 2.10 has no subject transforms: the relay partitions events itself", "stream", opts.stream.Stream,
			"partitions", opts.stream.Partitions, "server_version", nc.ConnectedServerVersion())
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	ws, ok := store.(pay.WebhookStore)
	if !ok {
		return fmt.Errorf("the store %T cannot deliver webhooks", store)
	}
	deliverer, err := webhook.New(ws, wcfg)
	if err != nil {
		return flagErrors("webhook-", err)
	}
	ln, err := net.Listen("tcp", opts.http)
	if err != nil {
		return fmt.Errorf("--http: %w", err)
	}
	cfg := payserver.DefaultConfig()
	cfg.Background = []payserver.Component{{Name: "webhooks", Run: deliverer.Run}}
	cfg.Store, cfg.Institution, cfg.Events, cfg.Listener = store, inst, events, ln
	cfg.Service, cfg.API, cfg.Relay.GiveUpAfter = svcCfg, apiCfg, opts.giveUpAfter
	cfg.HTTP = scfg
	cfg.Checks = []httpapi.Check{{Name: "nats", Ping: natsReady(nc)}}
	cfg.Registry, cfg.Logger = reg, log
	srv, err := payserver.New(cfg)
	if err != nil {
		ln.Close()
		return err
	}
	log.Info("payment service listening", "addr", ln.Addr().String(), "store", where, "institution", opts.institution,
		"connector", inst.Name(), "capabilities", inst.Capabilities().String(),
		"stream", opts.stream.Stream, "stream_max_age", opts.stream.MaxAge, "stream_max_bytes", opts.stream.MaxBytes,
		"read_timeout", scfg.ReadTimeout, "write_timeout", scfg.WriteTimeout, "idle_timeout", scfg.IdleTimeout)
	if err := srv.Run(ctx); err != nil {
		return err
	}
	log.Info("stopped")
	return nil
}

// Environment variables of the connectors' credentials.
const (
	envStripeKey = "STAMPEDE_STRIPE_SECRET_KEY"
	envTossKey   = tossconnector.EnvSecretKey
)

// newConnector makes the connector --connector names, its credentials
// from the environment; a missing or malformed one is refused here,
// before anything is served.
func (o *payOptions) newConnector() (pay.Connector, error) {
	// Keep connections to the institution open for bursts of payments.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 256
	hc := &http.Client{Transport: tr}
	switch o.connector {
	case "stripe":
		cfg := stripeconnector.DefaultConfig()
		cfg.SecretKey, cfg.URL, cfg.HTTPClient = os.Getenv(envStripeKey), o.institution, hc
		c, err := stripeconnector.New(cfg)
		if err != nil {
			return nil, fmt.Errorf("--connector stripe: %w", err)
		}
		return c, nil
	case "toss":
		cfg := tossconnector.DefaultConfig()
		cfg.SecretKey, cfg.HTTPClient = os.Getenv(envTossKey), hc
		if o.institution != "" {
			cfg.URL = o.institution
		}
		c, err := tossconnector.New(cfg)
		if err != nil {
			return nil, fmt.Errorf("--connector toss: %w", err)
		}
		return c, nil
	default:
		return institutionclient.New(instclient.NewClient(o.institution, hc)), nil
	}
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

// byteSize is a flag holding a size in bytes, written as a number with an
// optional unit: B, KB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB
// (powers of 1024); -1 means no limit.
type byteSize struct{ n *int64 }

var byteUnits = []struct {
	suffix string
	mult   int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1},
}

// String writes the size with the largest binary unit that divides it.
func (b *byteSize) String() string {
	if b.n == nil {
		return ""
	}
	for _, u := range byteUnits[:4] {
		if *b.n > 0 && *b.n%u.mult == 0 && *b.n/u.mult < 1024 {
			return strconv.FormatInt(*b.n/u.mult, 10) + u.suffix
		}
	}
	return strconv.FormatInt(*b.n, 10)
}

// Set parses a size such as 1GiB, 500MB or 1048576, or -1.
func (b *byteSize) Set(s string) error {
	s = strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range byteUnits {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || (n < 0 && n != -1) || (mult > 1 && n > (1<<62)/mult) {
		return fmt.Errorf("want a size such as 1GiB, 500MB or 1048576 (or -1), got %q", s)
	}
	if n > 0 {
		n *= mult
	}
	*b.n = n
	return nil
}

// Type names the flag's value in the help.
func (b *byteSize) Type() string { return "size" }
