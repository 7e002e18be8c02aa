package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/checkout"
	"github.com/stampede-lab/stampede/checkout/api"
	"github.com/stampede-lab/stampede/checkout/payclient"
	"github.com/stampede-lab/stampede/checkout/sqlstore"
	"github.com/stampede-lab/stampede/internal/httpapi"
	"github.com/stampede-lab/stampede/lab/unsafeinventory"
	"github.com/stampede-lab/stampede/waitroom"
)

// checkoutOptions are the flags of `stampede serve checkout`.
type checkoutOptions struct {
	http            string
	pay             string
	payKey          string
	payTimeout      time.Duration
	adminToken      string
	postgres        string
	sqlite          string
	dataDir         string
	dbTimeout       time.Duration
	maxHold         time.Duration
	capture         string
	maxSeats        int
	unsafeInventory bool
	unsafeGap       time.Duration
	waitroom        string
	room            string
	onlineCheck     bool
	checkoutKey     string
	admissionTO     time.Duration
	server          httpapi.ServerConfig
}

func newServeCheckoutCmd() *cobra.Command {
	defaults := checkout.DefaultConfig()
	opts := &checkoutOptions{server: httpapi.DefaultServerConfig()}
	cmd := &cobra.Command{
		Use:   "checkout",
		Short: "Run the checkout behind the gate: seat holds paid through pay, never oversold",
		Long: `Run the minimal checkout, the upstream behind the gate:

  POST /v1/events/{event}         create an event {"seats","price","currency"} (Bearer admin token)
  GET  /v1/events/{event}         seats, seats_left, held, sold
  POST /v1/events/{event}/holds   hold {"seats": n} for the gate's Stampede-User; the hold
                                  expires with the admission (Stampede-Admission), at most --max-hold
  GET  /v1/holds/{id}             the buyer's hold
  POST /v1/holds/{id}/purchase    pay for the hold through pay (an idempotency key per order);
                                  200 paid or failed with Stampede-Release: done, 202 pending
  GET  /v1/orders/{id}            the buyer's order (admin: any); a pending one is asked about at pay
  GET  /healthz, /readyz, /metrics, /openapi.json

No seat is sold twice and no more seats are sold than exist: the hold's
transaction takes seats only WHERE seats_left >= n, and gives each seat to
one hold. A DECLINED or FAILED payment gives the seats back; an UNKNOWN one
keeps them until pay settles it (a sweeper asks every few seconds, and
releases holds that expired unpaid). With --capture manual the purchase only
authorises: the checkout captures while the order is pending, confirms the
order at pay (POST /v1/payments/{id}/confirm, as in automatic mode) and only
then sells the seats; an order that ends another way voids its authorisation.

Deploy it behind the gate. It does not take the gate's headers on trust:
before it holds seats or pays for a hold it verifies the Stampede-Admission
token against the waiting room's public keys (--waitroom: the waiting
room's, or its gates', base URLs; the keys are fetched from
<url>/.well-known/jwks.json, cached, and fetched again when a token names a
key the cache lacks), for --room, with its subject equal to Stampede-User;
a forged, expired, other-room or other-user token is refused (401/403
naming the header). --online-check (with --checkout-key) also asks the
waiting room whether the admission still holds its slot (403 when it does
not, 503 when the waiting room cannot say).

Storage: --postgres (or $STAMPEDE_POSTGRES_URL), else SQLite (--sqlite,
default <data-dir>/checkout.db).

--unsafe-inventory is FOR THE LAB ONLY: holds read the inventory and then
write it without the guard, and oversell under load.`,
		Example: `  stampede serve checkout --pay http://127.0.0.1:8081 --pay-key "$PAY_KEY" --admin-token "$(openssl rand -hex 16)" \
      --waitroom http://127.0.0.1:8080 --room concert`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runCheckout(cmd, opts) },
	}
	f := cmd.Flags()
	f.StringVar(&opts.http, "http", "127.0.0.1:8083", "address to listen on")
	f.StringVar(&opts.pay, "pay", "", "base URL of the payment service, e.g. http://127.0.0.1:8081 (required)")
	f.StringVar(&opts.payKey, "pay-key", "", "the merchant API key the checkout pays with (stampede pay merchant add) (required)")
	f.DurationVar(&opts.payTimeout, "pay-timeout", defaults.PayTimeout, "deadline of one call to pay; past it the order stays pending and is asked about later")
	f.StringVar(&opts.adminToken, "admin-token", "", "bearer token for creating events and reading any order, at least 16 bytes (required)")
	f.StringVar(&opts.postgres, "postgres", "", "PostgreSQL URL (empty: SQLite)")
	f.StringVar(&opts.sqlite, "sqlite", "", "SQLite database file, used when no PostgreSQL URL is given (default: <data-dir>/checkout.db)")
	f.StringVar(&opts.dataDir, "data-dir", defaultDataDir, "directory of the default SQLite file")
	f.DurationVar(&opts.dbTimeout, "db-timeout", 2*time.Second, "deadline of every database call; past it the request answers 503")
	f.StringVar(&opts.capture, "capture", string(checkout.CaptureAutomatic), "how the money is taken: automatic (approved at the purchase) or manual (authorised at the purchase, captured while the order is pending, voided when it ends another way: no buyer charged without a sold seat)")
	f.DurationVar(&opts.maxHold, "max-hold", defaults.MaxHold, "longest life of a hold, whatever its admission says")
	f.IntVar(&opts.maxSeats, "max-seats-per-hold", defaults.MaxSeatsPerHold, "most seats one hold may take")
	f.StringVar(&opts.waitroom, "waitroom", "", "base URL of the waiting room (or of its gates; several comma-separated) whose keys verify admissions (required)")
	f.StringVar(&opts.room, "room", "", "the waiting room's room whose admissions the checkout accepts (required)")
	f.BoolVar(&opts.onlineCheck, "online-check", false, "also ask the waiting room online whether each admission still holds its slot (needs --checkout-key)")
	f.StringVar(&opts.checkoutKey, "checkout-key", "", "with --online-check: the waiting room's --checkout-key")
	f.DurationVar(&opts.admissionTO, "admission-timeout", 2*time.Second, "deadline of one fetch of the waiting room's keys, and of one online check")
	f.BoolVar(&opts.unsafeInventory, "unsafe-inventory", false, "LAB ONLY: hold seats by a read then a write without the guard; oversells under concurrency")
	f.DurationVar(&opts.unsafeGap, "unsafe-gap", 0, "LAB ONLY, with --unsafe-inventory: a pause between the read and the write of a hold, widening the race")
	f.DurationVar(&opts.server.ReadHeaderTimeout, "read-header-timeout", opts.server.ReadHeaderTimeout, "close a connection whose request headers take longer")
	f.DurationVar(&opts.server.ReadTimeout, "read-timeout", opts.server.ReadTimeout, "close a connection whose request, body included, takes longer to read")
	f.DurationVar(&opts.server.WriteTimeout, "write-timeout", 0, "longest time from a request's headers to the end of its answer (0: --pay-timeout plus "+writeTimeoutMargin.String()+"); must exceed --pay-timeout")
	f.DurationVar(&opts.server.IdleTimeout, "idle-timeout", opts.server.IdleTimeout, "close keep-alive connections idle this long")
	f.DurationVar(&opts.server.ShutdownTimeout, "shutdown-timeout", shutdownTimeout, "on SIGINT or SIGTERM, how long running requests may finish")
	return cmd
}

// storeConfig returns the store the flags name.
func (o *checkoutOptions) storeConfig() (sqlstore.Config, string, error) {
	cfg := sqlstore.DefaultConfig()
	cfg.OpTimeout = o.dbTimeout
	if o.postgres != "" {
		cfg.PostgresURL, cfg.SQLitePath, cfg.MaxConns = o.postgres, "", 16
		return cfg, "postgres", flagErrors("", cfg.Validate())
	}
	if o.dbTimeout <= 0 {
		return cfg, "", flagErrors("", cfg.Validate())
	}
	path := o.sqlite
	if path == "" {
		if o.dataDir == "" {
			return cfg, "", errors.New("--data-dir must not be empty when neither --sqlite nor a PostgreSQL URL is given")
		}
		if err := os.MkdirAll(o.dataDir, 0o700); err != nil {
			return cfg, "", fmt.Errorf("--data-dir: %w", err)
		}
		path = filepath.Join(o.dataDir, "checkout.db")
	}
	cfg.SQLitePath = path
	return cfg, "sqlite " + path, flagErrors("", cfg.Validate())
}

// serverConfig checks the server flags, naming the flag.
func (o *checkoutOptions) serverConfig() (httpapi.ServerConfig, error) {
	cfg := o.server
	if cfg.WriteTimeout == 0 {
		cfg.WriteTimeout = o.payTimeout + writeTimeoutMargin
	}
	if cfg.WriteTimeout <= o.payTimeout {
		return cfg, fmt.Errorf("--write-timeout must exceed --pay-timeout (%s), got %s", o.payTimeout, cfg.WriteTimeout)
	}
	if err := cfg.Validate(); err != nil {
		return cfg, flagErrors("", err)
	}
	return cfg, nil
}

// admissions returns the admission verifier the flags ask for.
func (o *checkoutOptions) admissions(hc *http.Client) (checkout.Admissions, error) {
	var f stampede.Fields
	if o.room != "" {
		f.Check("room", waitroom.ValidateRoom(o.room))
	}
	if !o.onlineCheck && o.checkoutKey != "" {
		f.Add("checkout_key", "needs --online-check")
	}
	a := admissionFlags{waitroom: o.waitroom, room: o.room, roomFlag: "room", checkoutKey: o.checkoutKey, online: o.onlineCheck, timeout: o.admissionTO}
	v, err := a.verifier(hc)
	f.Check("", err)
	if err := f.Err(); err != nil {
		return nil, err
	}
	return v, nil
}

// serviceConfig returns the service's configuration but its store, every
// bad flag named.
func (o *checkoutOptions) serviceConfig() (checkout.Config, error) {
	cfg := checkout.DefaultConfig()
	cfg.MaxHold, cfg.MaxSeatsPerHold, cfg.PayTimeout = o.maxHold, o.maxSeats, o.payTimeout
	cfg.Capture = checkout.CaptureMode(o.capture)
	var f stampede.Fields
	if o.pay == "" {
		f.Add("pay", "is required: the base URL of the payment service")
	}
	if o.payKey == "" {
		f.Add("pay_key", "is required: a merchant API key of the payment service (stampede pay merchant add)")
	}
	if o.pay != "" && o.payKey != "" {
		// Keep connections to pay open for bursts of purchases.
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = 256
		payer, err := payclient.New(o.pay, o.payKey, &http.Client{Transport: tr})
		f.Check("", err)
		if err == nil {
			cfg.Payer = payer
		}
	}
	adm, err := o.admissions(&http.Client{})
	f.Check("", err)
	cfg.Admissions = adm
	if o.unsafeGap != 0 && (!o.unsafeInventory || o.unsafeGap < 0) {
		f.Add("unsafe_gap", "needs --unsafe-inventory and a positive duration, got %s", o.unsafeGap)
	}
	for _, e := range stampede.FieldErrors(cfg.Validate()) {
		switch {
		case e.Field == "store": // opened later
		case e.Field == "pay" && cfg.Payer == nil: // reported above
		case e.Field == "waitroom" && cfg.Admissions == nil: // reported above
		default:
			f.Check("", e)
		}
	}
	return cfg, f.Err()
}

func runCheckout(cmd *cobra.Command, opts *checkoutOptions) error {
	var f stampede.Fields
	ccfg, err := opts.serviceConfig()
	f.Check("", err)
	acfg := api.DefaultConfig()
	acfg.AdminToken = opts.adminToken
	if opts.adminToken == "" {
		f.Add("admin_token", "(or %s) is required: the token that authorizes creating events", envAdminToken)
	} else {
		f.Check("", acfg.Validate())
	}
	if opts.http == "" {
		f.Add("http", "must not be empty")
	}
	if err := f.Err(); err != nil {
		return flagErrors("", err)
	}
	scfg, err := opts.serverConfig()
	if err != nil {
		return err
	}
	stcfg, where, err := opts.storeConfig()
	if err != nil {
		return err
	}
	log := loggerOf(cmd)
	ctx := cmd.Context()
	store, err := sqlstore.Open(ctx, stcfg)
	if err != nil {
		if opts.postgres != "" {
			return fmt.Errorf("--postgres: cannot open the PostgreSQL database (does it exist, and is the server reachable?): %w", err)
		}
		return fmt.Errorf("--sqlite: %w", err)
	}
	defer store.Close()
	var cstore checkout.Store = store
	if opts.unsafeInventory {
		cstore = unsafeinventory.New(store, pause(opts.unsafeGap))
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	ccfg.Store, ccfg.Logger, ccfg.Metrics = cstore, log, checkout.NewMetrics(reg)
	svc, err := checkout.New(ccfg)
	if err != nil {
		return flagErrors("", err)
	}
	acfg.Logger = log
	h, err := api.New(svc, acfg, reg)
	if err != nil {
		return flagErrors("", err)
	}
	ln, err := net.Listen("tcp", opts.http)
	if err != nil {
		return fmt.Errorf("--http: %w", err)
	}
	if opts.unsafeInventory {
		log.Warn("--unsafe-inventory: holds skip the inventory guard and WILL oversell under load; for the lab only")
	}
	log.Info("checkout listening", "addr", ln.Addr().String(), "store", where, "pay", opts.pay,
		"waitroom", opts.waitroom, "room", opts.room, "online_check", opts.onlineCheck,
		"unsafe_inventory", opts.unsafeInventory, "max_hold", ccfg.MaxHold, "capture", ccfg.Capture,
		"read_timeout", scfg.ReadTimeout, "write_timeout", scfg.WriteTimeout, "idle_timeout", scfg.IdleTimeout)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return httpapi.Serve(gctx, ln, h, scfg, log) })
	g.Go(func() error { return svc.Run(gctx) })
	if err := g.Wait(); err != nil {
		return fmt.Errorf("http server: %w", err)
	}
	log.Info("stopped")
	return nil
}

// pause returns a wait of gap that ends early with its context; nil for
// no gap.
func pause(gap time.Duration) func(context.Context) {
	if gap <= 0 {
		return nil
	}
	return func(ctx context.Context) {
		t := time.NewTimer(gap)
		defer t.Stop()
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
}
