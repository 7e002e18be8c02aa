// Package server is the payment service's composition root: it wires
// the pay.Service, its HTTP API (pay/api), the reconciler and the outbox
// relay, and runs them together.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/internal/httpapi"
	"github.com/stampede-lab/stampede/pay"
	"github.com/stampede-lab/stampede/pay/api"
)

// Config configures a Server: the payment service with its HTTP API,
// its reconciler and its outbox relay.
type Config struct {
	// Store holds the payments.
	Store pay.Store
	// Institution is the payment institution (pay/institutionclient).
	Institution pay.Institution
	// Events receives the outbox rows (pay/natspub).
	Events pay.Publisher
	// Listener is where the HTTP API is served.
	Listener net.Listener
	// Service configures the payment logic and the reconciler. New sets
	// its Logger to Logger when it is nil or slog.Default(), and its
	// Metrics (on Registry) when nil.
	Service pay.Config
	// API configures the HTTP API; New sets its Logger as Service's.
	API api.Config
	// Relay configures the outbox relay; New sets its Logger as
	// Service's.
	Relay pay.RelayConfig
	// HTTP holds the HTTP server's limits; WriteTimeout must exceed
	// Service.ApprovalTimeout.
	HTTP httpapi.ServerConfig
	// Checks are further readiness checks of /readyz (the NATS
	// connection, say); the store's is always there.
	Checks []httpapi.Check
	// Background are further components run beside the reconciler and
	// the relay (the webhook deliverer, say), each with a readiness check
	// of its name, under the same rules.
	Background []Component
	// DrainDelay is how long /readyz reports a dead background component
	// before the server shuts down, so that a load balancer stops
	// sending traffic first.
	DrainDelay time.Duration
	// Registry receives the metrics and is served on /metrics; nil means
	// a new registry.
	Registry *prometheus.Registry
	// Logger receives every component's logs.
	Logger *slog.Logger
}

// DefaultConfig returns the default service, API, relay and HTTP
// settings (the HTTP write timeout is the approval timeout plus 10 s) and
// a 2-second drain delay; Store, Institution, Events and Listener must be
// set.
func DefaultConfig() Config {
	cfg := Config{
		Service:    pay.DefaultConfig(),
		API:        api.DefaultConfig(),
		Relay:      pay.DefaultRelayConfig(),
		HTTP:       httpapi.DefaultServerConfig(),
		DrainDelay: 2 * time.Second,
		Logger:     slog.Default(),
	}
	cfg.HTTP.WriteTimeout = cfg.Service.ApprovalTimeout + 10*time.Second
	return cfg
}

// Validate reports every unusable field at once; a field of a nested
// config is named with its path, such as "relay.batch".
func (c Config) Validate() error {
	var f stampede.Fields
	if c.Store == nil {
		f.Add("store", "must not be nil")
	}
	if c.Institution == nil {
		f.Add("institution", "must not be nil")
	}
	if c.Events == nil {
		f.Add("events", "must not be nil")
	}
	if c.Listener == nil {
		f.Add("listener", "must not be nil")
	}
	if c.Logger == nil {
		f.Add("logger", "must not be nil")
	}
	if c.DrainDelay < 0 {
		f.Add("drain_delay", "must not be negative, got %s", c.DrainDelay)
	}
	f.Check("service", c.Service.Validate())
	f.Check("api", c.API.Validate())
	f.Check("relay", c.Relay.Validate())
	f.Check("http", c.HTTP.Validate())
	if c.HTTP.WriteTimeout <= c.Service.ApprovalTimeout {
		f.Add("http.write_timeout", "must exceed the approval timeout, service.timeout (%s), the longest approval call, got %s",
			c.Service.ApprovalTimeout, c.HTTP.WriteTimeout)
	}
	for i, ch := range c.Checks {
		if ch.Name == "" || ch.Ping == nil {
			f.Add(fmt.Sprintf("checks[%d]", i), "needs a Name and a Ping")
		}
	}
	for i, b := range c.Background {
		if b.Name == "" || b.Run == nil {
			f.Add(fmt.Sprintf("background[%d]", i), "needs a Name and a Run")
		}
	}
	return f.Err()
}

// Component is a background part of the server: Run works until ctx
// ends. Returning while ctx is live, with or without an error, is a
// failure for good (transient errors are the component's to retry).
type Component struct {
	Name string
	Run  func(ctx context.Context) error
}

// Server is the payment service's composition root: it wires the
// Service, its HTTP API, the reconciler, the start-up recovery and the
// outbox relay, and runs them together (Run).
type Server struct {
	cfg   Config
	svc   *pay.Service
	api   *httpapi.API
	relay *pay.Relay

	reconciler, relayLife *lifeCheck
	extra                 []*lifeCheck
}

// New builds a Server from cfg; it starts nothing (Run does).
func New(cfg Config) (*Server, error) {
	if cfg.Service.Logger == nil || cfg.Service.Logger == slog.Default() {
		cfg.Service.Logger = cfg.Logger
	}
	if cfg.API.Logger == nil || cfg.API.Logger == slog.Default() {
		cfg.API.Logger = cfg.Logger
	}
	if cfg.Relay.Logger == nil || cfg.Relay.Logger == slog.Default() {
		cfg.Relay.Logger = cfg.Logger
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	if cfg.Service.Metrics == nil {
		cfg.Service.Metrics = pay.NewMetrics(cfg.Registry)
	}
	svc, err := pay.NewService(cfg.Store, cfg.Institution, cfg.Service)
	if err != nil {
		return nil, err
	}
	handler, err := api.New(svc, cfg.Store, cfg.API, cfg.Registry)
	if err != nil {
		return nil, err
	}
	relay, err := pay.NewRelay(cfg.Store, cfg.Events, cfg.Relay)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, svc: svc, api: handler, relay: relay,
		reconciler: &lifeCheck{name: "reconciler"}, relayLife: &lifeCheck{name: "relay"}}
	for _, c := range cfg.Checks {
		handler.AddCheck(c)
	}
	handler.AddCheck(httpapi.Check{Name: s.reconciler.name, Ping: s.reconciler.ping})
	handler.AddCheck(httpapi.Check{Name: s.relayLife.name, Ping: s.relayLife.ping})
	for _, c := range cfg.Background {
		life := &lifeCheck{name: c.Name}
		s.extra = append(s.extra, life)
		handler.AddCheck(httpapi.Check{Name: life.name, Ping: life.ping})
	}
	return s, nil
}

// Service is the payment logic the server runs.
func (s *Server) Service() *pay.Service { return s.svc }

// Handler is the HTTP API the server serves.
func (s *Server) Handler() *httpapi.API { return s.api }

// Run serves the API on Config.Listener and runs the reconciler (whose first pass, at
// once, takes over the PENDING payments a crash left, once their approval
// call must have ended), the relay and the Background components, under
// one errgroup, until
// ctx ends (then it shuts down gracefully and returns nil) or one of
// them fails. A background component that fails first fails its /readyz
// check ("reconciler" or "relay"), is logged, and after DrainDelay the
// whole server stops and Run returns its error.
func (s *Server) Run(ctx context.Context) error {
	log := s.cfg.Logger
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if err := httpapi.Serve(gctx, s.cfg.Listener, s.api, s.cfg.HTTP, log); err != nil {
			log.Error("pay: the HTTP server failed", "err", err)
			return fmt.Errorf("pay: http server: %w", err)
		}
		return nil
	})
	g.Go(func() error { return s.background(gctx, s.reconciler, s.svc.RunReconciler) })
	g.Go(func() error { return s.background(gctx, s.relayLife, s.relay.Run) })
	for i, c := range s.cfg.Background {
		g.Go(func() error { return s.background(gctx, s.extra[i], c.Run) })
	}
	return g.Wait()
}

// background runs one background component; when it fails (returns an
// error while ctx is live) its readiness check fails, the failure is
// logged, and after DrainDelay the error ends the group.
func (s *Server) background(ctx context.Context, life *lifeCheck, run func(context.Context) error) error {
	err := run(ctx)
	if err == nil && ctx.Err() == nil {
		err = errors.New("stopped unexpectedly")
	}
	if err == nil {
		return nil
	}
	err = fmt.Errorf("%s stopped: %w", life.name, err)
	life.fail(err)
	s.cfg.Logger.Error("pay: a background component failed; the server stops", "component", life.name, "err", err, "drain", s.cfg.DrainDelay)
	t := time.NewTimer(s.cfg.DrainDelay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	return err
}

// lifeCheck is the readiness check of a background component: it passes
// until the component died.
type lifeCheck struct {
	name string
	mu   sync.Mutex
	err  error
}

// fail records that the component died of err.
func (l *lifeCheck) fail(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.err = err
}

// ping fails once the component died.
func (l *lifeCheck) ping(context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return &stampede.Error{Code: stampede.Unavailable, Message: l.name + " stopped", Err: l.err}
	}
	return nil
}
