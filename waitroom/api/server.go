package api

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/internal/httpapi"
	"github.com/stampede-lab/stampede/waitroom"
)

// Config configures a Server: one waiting-room instance on a store. Its
// Validate names each field in snake_case, in the words of the `serve
// waitroom` flag that sets it.
type Config struct {
	// Store holds the rooms; several Servers on one store behave as
	// several instances of the service. Required.
	Store waitroom.Store
	// Instance names this instance in leader elections; empty means
	// host-pid (waitroom.DefaultServiceConfig). In-process instances
	// sharing a store need distinct names.
	Instance string
	// Immediate admits right after a release and when the earliest lease
	// runs out, besides the tick (waitroom.ServiceConfig.Immediate). The
	// zero value turns it off; DefaultConfig turns it on.
	Immediate bool
	// Secret keys ticket and admission tokens: at least 32 bytes, the same
	// for every instance behind one address.
	Secret []byte
	// AdminToken authorizes room configuration (HandlerConfig.AdminToken).
	AdminToken string
	// MetricsToken also reads /metrics, and nothing else
	// (HandlerConfig.MetricsToken); empty: only the admin token does.
	MetricsToken string
	// Logger receives the service's and the handler's logs; nil means
	// slog.Default().
	Logger *slog.Logger
	// Registry receives the metrics and is served on /metrics (to the
	// admin or metrics token). Nil means
	// a new registry with the Go runtime and process collectors. Each
	// Server needs its own registry.
	Registry *prometheus.Registry
	// RoomRefresh is how often the service looks for rooms configured
	// elsewhere (waitroom.ServiceConfig.RoomRefresh); 0 means the default.
	RoomRefresh time.Duration
	// ViewRefresh is how often the service reads each room's view, from
	// which polls of buyers behind the frontier are answered without the
	// store (waitroom.ServiceConfig.ViewRefresh); 0 means the default
	// (200 ms), a negative value turns it off.
	ViewRefresh time.Duration
	// PresenceFlush is how often the polls answered from a view are
	// written to the store (waitroom.ServiceConfig.PresenceFlush); 0
	// means the default (1 s).
	PresenceFlush time.Duration
	// TicketTTL is the ticket tokens' lifetime; 0 means the default.
	TicketTTL time.Duration
	// JoinLimit limits joins per client address
	// (HandlerConfig.JoinLimit); a zero Rate turns it off, a zero
	// MaxClients means the default.
	JoinLimit JoinLimitConfig
	// OnAdmit is the waiting page's admission hook
	// (HandlerConfig.OnAdmit); empty means none.
	OnAdmit string
	// KeyEpoch picks the admission signing key derived from Secret (see
	// waitroom.KeySpec); empty means waitroom.DefaultKeyEpoch.
	KeyEpoch string
	// PreviousKeys still verify (and are served in the JWKS) after a
	// rotation, until the tokens they signed have expired.
	PreviousKeys []waitroom.KeySpec
	// SiteSecret enables trusted joins (HandlerConfig.SiteSecret).
	SiteSecret []byte
	// AllowUnsignedUsers accepts bare user_id joins
	// (HandlerConfig.AllowUnsignedUsers); off by default.
	AllowUnsignedUsers bool
	// CheckoutKey authorizes the online admission check and done
	// endpoints (HandlerConfig.CheckoutKey); empty turns them off.
	CheckoutKey string
	// Listener, when set, is where Run serves the API; nil serves no
	// HTTP (a gate embeds the instance and serves it itself).
	Listener net.Listener
	// HTTP bounds the server's reads, writes and shutdown when Listener
	// is set; the zero value means httpapi.DefaultServerConfig().
	HTTP httpapi.ServerConfig
	// OnPass, if set, is called after every admission pass, after the
	// metrics have recorded it (for example by the lab, to count store
	// round trips).
	OnPass func(room string, mode waitroom.Mode, took time.Duration, res waitroom.AdmitResult, err error)
	// Outflow, when set, adapts the outflow of rooms with an outflow
	// limit to the checkout's health (waitroom.ServiceConfig.Outflow).
	Outflow *waitroom.OutflowConfig
}

// DefaultConfig returns a configuration with immediate admission on and
// slog.Default(); Store, Secret and AdminToken must still be set.
func DefaultConfig() Config {
	return Config{Immediate: true, Logger: slog.Default()}
}

// serviceConfig is the service's configuration from c.
func (c Config) serviceConfig(log *slog.Logger) waitroom.ServiceConfig {
	scfg := waitroom.DefaultServiceConfig()
	if c.Instance != "" {
		scfg.Instance = c.Instance
	}
	if c.RoomRefresh > 0 {
		scfg.RoomRefresh = c.RoomRefresh
		scfg.RateWindow = max(scfg.RateWindow, c.RoomRefresh)
	}
	switch {
	case c.ViewRefresh > 0:
		scfg.ViewRefresh = c.ViewRefresh
	case c.ViewRefresh < 0:
		scfg.ViewRefresh = 0
	}
	if c.PresenceFlush > 0 {
		scfg.PresenceFlush = c.PresenceFlush
	}
	scfg.Immediate = c.Immediate
	scfg.Logger = log
	return scfg
}

// handlerConfig is the handler's configuration from c (without the
// admission signer).
func (c Config) handlerConfig(log *slog.Logger) HandlerConfig {
	hcfg := DefaultHandlerConfig()
	hcfg.AdminToken, hcfg.MetricsToken = c.AdminToken, c.MetricsToken
	hcfg.SiteSecret, hcfg.AllowUnsignedUsers, hcfg.CheckoutKey = c.SiteSecret, c.AllowUnsignedUsers, c.CheckoutKey
	hcfg.Logger = log
	if c.TicketTTL > 0 {
		hcfg.TicketTTL = c.TicketTTL
	}
	hcfg.JoinLimit = c.JoinLimit
	if hcfg.JoinLimit.MaxClients == 0 {
		hcfg.JoinLimit.MaxClients = DefaultJoinLimitConfig().MaxClients
	}
	hcfg.OnAdmit = c.OnAdmit
	return hcfg
}

// keyEpoch is KeyEpoch or its default.
func (c Config) keyEpoch() string {
	if c.KeyEpoch == "" {
		return waitroom.DefaultKeyEpoch
	}
	return c.KeyEpoch
}

// Validate reports every unusable field by its snake_case name: store,
// secret, admin_token, metrics_token, key_epoch, previous.secret, previous.key_epoch,
// checkout_key, site_secret, join_rate, join_burst, join_clients,
// trusted_proxy, on_admit, ticket_ttl, instance, room_refresh.
func (c Config) Validate() error {
	var f stampede.Fields
	if c.Store == nil {
		f.Add("store", "must not be nil")
	}
	if c.RoomRefresh < 0 {
		f.Add("room_refresh", "must not be negative, got %s", c.RoomRefresh)
	}
	if c.TicketTTL < 0 {
		f.Add("ticket_ttl", "must not be negative, got %s", c.TicketTTL)
	}
	log := c.Logger
	if log == nil {
		log = slog.Default()
	}
	// The key epoch's own checks; the secret is checked once, below.
	f.Check("", waitroom.KeySpec{Secret: c.Secret, Epoch: c.keyEpoch()}.Validate())
	for _, p := range c.PreviousKeys {
		f.Check("previous", p.Validate())
	}
	f.Check("", c.handlerConfig(log).Validate())
	if c.Listener != nil && c.HTTP != (httpapi.ServerConfig{}) {
		f.Check("", c.HTTP.Validate())
	}
	if c.RoomRefresh >= 0 {
		f.Check("", c.serviceConfig(log).Validate())
	}
	return f.Err()
}

// Server is one waiting-room instance: a waitroom.Service admitting in
// the background (Run) and its HTTP handler (ServeHTTP).
type Server struct {
	cfg        Config
	log        *slog.Logger
	svc        *waitroom.Service
	handler    http.Handler
	signer     *waitroom.Signer
	admissions *waitroom.AdmissionSigner
	registry   *prometheus.Registry
}

// New builds the service with metrics and the HTTP handler. It starts
// nothing: Run admits.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	reg := cfg.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	signer, err := waitroom.NewSigner(cfg.Secret, nil)
	if err != nil {
		return nil, err
	}

	metrics := waitroom.NewMetrics(reg)
	scfg := cfg.serviceConfig(log)
	scfg.OnPass = metrics.OnPass
	scfg.Outflow, scfg.OnOutflow = cfg.Outflow, metrics.OnOutflow
	scfg.OnPoll = metrics.OnPoll
	if extra := cfg.OnPass; extra != nil {
		scfg.OnPass = func(room string, mode waitroom.Mode, took time.Duration, res waitroom.AdmitResult, err error) {
			metrics.OnPass(room, mode, took, res, err)
			extra(room, mode, took, res, err)
		}
	}
	svc, err := waitroom.NewService(cfg.Store, scfg)
	if err != nil {
		return nil, err
	}
	admissions, err := waitroom.NewAdmissionSigner(waitroom.KeySpec{Secret: cfg.Secret, Epoch: cfg.keyEpoch()}, cfg.PreviousKeys, nil)
	if err != nil {
		return nil, err
	}
	hcfg := cfg.handlerConfig(log)
	hcfg.Admissions = admissions
	handler, err := NewHandler(svc, signer, hcfg, reg)
	if err != nil {
		return nil, err
	}
	return &Server{cfg: cfg, log: log, svc: svc, handler: handler, signer: signer, admissions: admissions, registry: reg}, nil
}

// Run admits until ctx ends (waitroom.Service.Run: the room refresh and
// one admitter per room) and, with Config.Listener, serves the API on it
// meanwhile; when ctx ends the HTTP server shuts down first, then
// admission stops. It does not close the store.
func (s *Server) Run(ctx context.Context) error {
	if s.cfg.Listener == nil {
		return s.svc.Run(ctx)
	}
	hcfg := s.cfg.HTTP
	if hcfg == (httpapi.ServerConfig{}) {
		hcfg = httpapi.DefaultServerConfig()
	}
	admitCtx, stopAdmitting := context.WithCancel(context.WithoutCancel(ctx))
	admitted := make(chan error, 1)
	go func() { admitted <- s.svc.Run(admitCtx) }()
	err := httpapi.Serve(ctx, s.cfg.Listener, s, hcfg, s.log)
	if err == nil {
		s.log.Info("shutting down: HTTP server closed, stopping admission")
	}
	stopAdmitting()
	if aerr := <-admitted; err == nil && aerr != nil && !errors.Is(aerr, context.Canceled) {
		err = aerr
	}
	return err
}

// ServeHTTP serves the API and the waiting page (see NewHandler).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

// Service is the instance's service, for an application that embeds the
// waiting room (a gate).
func (s *Server) Service() *waitroom.Service { return s.svc }

// Tickets signs and verifies the ticket tokens.
func (s *Server) Tickets() *waitroom.Signer { return s.signer }

// Admissions signs the admission tokens and holds their public keys.
func (s *Server) Admissions() *waitroom.AdmissionSigner { return s.admissions }

// Registry is the registry served on /metrics.
func (s *Server) Registry() *prometheus.Registry { return s.registry }
