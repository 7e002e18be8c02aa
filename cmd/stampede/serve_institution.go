package main

import (
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"

	"github.com/stampede-lab/stampede"
	instapi "github.com/stampede-lab/stampede/institution/api"
	"github.com/stampede-lab/stampede/internal/httpapi"
)

// institutionOptions are the flags of `stampede serve institution`.
type institutionOptions struct {
	http           string
	adminToken     string
	notFoundWindow time.Duration
	maxHung        int
	protocol       string
	tossSecretKey  string
	// server holds the server timeouts; WriteTimeout is derived (see
	// instapi.ServerConfig), not a flag.
	server httpapi.ServerConfig
}

func newServeInstitutionCmd() *cobra.Command {
	defaults := instapi.DefaultConfig()
	opts := &institutionOptions{server: instapi.ServerConfig()}
	cmd := &cobra.Command{
		Use:   "institution",
		Short: "Run the payment-institution simulator",
		Long: `Run the payment-institution simulator: the PG the payment service calls to
approve payments, with fault modes that decline, fail, or hang before or
after the money moves. State is in memory and lost on exit.

  POST /v1/approvals                 {"external_key","amount","currency"} → APPROVED or DECLINED
  GET  /v1/approvals/{external_key}  the record; 404 says whether not-found is definitive yet
  PUT  /admin/behavior               {"mode","hang_ms","idempotent","status_api"} (Bearer admin token)
  GET  /admin/behavior, /admin/arrivals, /admin/approvals   (Bearer admin token)
  POST /admin/reset                  clear, back to NORMAL, release every held request
  GET  /healthz, /readyz, /metrics, /openapi.json

Errors are RFC 9457 application/problem+json bodies with a stable "code".
Modes: NORMAL, DECLINE, HANG_BEFORE_PROCESSING, HANG_AFTER_PROCESSING, ERROR.
A hang holds the request for hang_ms (default 8000, at most 600000); at most
--max-hung requests are held at once, the rest are answered 503 busy at once.
The server's write timeout is the longest hang plus 30 s, so that a held
request is always answered; the read, header and idle timeouts close stalled
and idle connections.

--protocol toss speaks a subset of Toss Payments' v1 API instead of the /v1
routes above, over the same ledger, fault modes and admin API (serve pay
--connector toss talks to it):

  POST /v1/payments/confirm              {"paymentKey","orderId","amount"}
  GET  /v1/payments/orders/{orderId}     the payment, its cancels included
  POST /v1/payments/{paymentKey}/cancel  {"cancelReason","cancelAmount"}, Idempotency-Key

each with "Authorization: Basic base64(<--toss-secret-key>:)"; errors are
Toss's {"code","message"} (DECLINE: 403 REJECT_CARD_PAYMENT, ERROR: 500
FAILED_INTERNAL_SYSTEM_PROCESSING, status_api DOWN: the inquiry answers 500).

Every flag can also be set with STAMPEDE_<FLAG>, e.g. STAMPEDE_ADMIN_TOKEN or
STAMPEDE_TOSS_SECRET_KEY (the variable serve pay --connector toss reads too).`,
		Example: `  stampede serve institution --admin-token "$(openssl rand -hex 16)"
  curl -X PUT -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
    -d '{"mode":"HANG_BEFORE_PROCESSING","hang_ms":8000}' http://127.0.0.1:8090/admin/behavior`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runInstitution(cmd, opts) },
	}
	f := cmd.Flags()
	f.StringVar(&opts.http, "http", "127.0.0.1:8090", "address to listen on for HTTP")
	f.StringVar(&opts.adminToken, "admin-token", "", fmt.Sprintf("bearer token for /admin, at least %d bytes (required)", instapi.MinAdminTokenLen))
	f.DurationVar(&opts.notFoundWindow, "not-found-window", defaults.NotFoundWindow,
		"declared window after a request's arrival past which an unrecorded external key is definitively not found (1ms to 24h)")
	f.IntVar(&opts.maxHung, "max-hung", defaults.MaxHung, "most requests held at once by the hang modes; beyond it answer 503 busy")
	f.StringVar(&opts.protocol, "protocol", instapi.ProtocolSimulator, "the payment API spoken: simulator (its own) or toss (a subset of Toss Payments' v1 API)")
	f.StringVar(&opts.tossSecretKey, "toss-secret-key", "", "with --protocol toss: the secret key clients must send (test_sk_... or live_sk_...)")
	f.DurationVar(&opts.server.ReadHeaderTimeout, "read-header-timeout", opts.server.ReadHeaderTimeout, "longest time to read a request's headers")
	f.DurationVar(&opts.server.ReadTimeout, "read-timeout", opts.server.ReadTimeout, "longest time to read a whole request, body included (at least --read-header-timeout)")
	f.DurationVar(&opts.server.IdleTimeout, "idle-timeout", opts.server.IdleTimeout, "close keep-alive connections idle this long")
	f.DurationVar(&opts.server.ShutdownTimeout, "shutdown-timeout", opts.server.ShutdownTimeout, "on SIGINT or SIGTERM, cut requests still running after this long")
	return cmd
}

// config checks the options, naming the flag, and returns the server's
// configuration.
// config returns the server's configuration, every bad flag named.
func (o *institutionOptions) config(log *slog.Logger) (instapi.Config, error) {
	cfg := instapi.DefaultConfig()
	cfg.AdminToken, cfg.NotFoundWindow, cfg.MaxHung, cfg.Logger, cfg.HTTP = o.adminToken, o.notFoundWindow, o.maxHung, log, o.server
	cfg.Protocol, cfg.TossSecretKey = o.protocol, o.tossSecretKey
	var f stampede.Fields
	if o.http == "" {
		f.Add("http", "must not be empty")
	}
	for _, e := range stampede.FieldErrors(cfg.Validate()) {
		if e.Field == "admin_token" && o.adminToken == "" {
			e = stampede.InvalidField("admin_token", "(or %s) is required: the token that authorizes /admin", envAdminToken)
		}
		f.Check("", e)
	}
	return cfg, flagErrors("", f.Err())
}

func runInstitution(cmd *cobra.Command, opts *institutionOptions) error {
	log := loggerOf(cmd)
	cfg, err := opts.config(log)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cfg.Registry = reg
	ln, err := net.Listen("tcp", opts.http)
	if err != nil {
		return fmt.Errorf("--http: %w", err)
	}
	cfg.Listener = ln
	srv, err := instapi.New(cfg)
	if err != nil {
		ln.Close()
		return flagErrors("", err)
	}
	defer srv.Close()

	log.Info("institution simulator listening", "addr", ln.Addr().String(), "protocol", cfg.Protocol,
		"not_found_window", cfg.NotFoundWindow, "max_hung", cfg.MaxHung,
		"read_header_timeout", cfg.HTTP.ReadHeaderTimeout, "read_timeout", cfg.HTTP.ReadTimeout,
		"write_timeout", cfg.HTTP.WriteTimeout, "idle_timeout", cfg.HTTP.IdleTimeout)
	if err := srv.Run(cmd.Context()); err != nil {
		return fmt.Errorf("http server: %w", err)
	}
	log.Info("stopped")
	return nil
}
