package api

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/stampede-lab/stampede/waitroom"
)

// ServerOptions configure NewServer.
type ServerOptions struct {
	// Instance names this instance in leader elections; empty means
	// host-pid (DefaultServiceConfig). In-process instances sharing a
	// store need distinct names.
	Instance string
	// Immediate admits right after a release and when the earliest lease
	// runs out, besides the tick (ServiceConfig.Immediate). Note that the
	// zero value turns it off; DefaultServerOptions turns it on.
	Immediate bool
	// Secret keys ticket and admission tokens: at least 32 bytes, the same
	// for every instance behind one address.
	Secret []byte
	// AdminToken authorizes room configuration (HandlerConfig.AdminToken).
	AdminToken string
	// Logger receives the service's and the handler's logs; nil means
	// slog.Default().
	Logger *slog.Logger
	// Registry receives the metrics and is served on /metrics. Nil means
	// a new registry with the Go runtime and process collectors. Each
	// Server needs its own registry.
	Registry *prometheus.Registry
	// RoomRefresh is how often the service looks for rooms configured
	// elsewhere (ServiceConfig.RoomRefresh); 0 means the default.
	RoomRefresh time.Duration
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
	// jwt.go); empty means DefaultKeyEpoch.
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
	// OnPass, if set, is called after every admission pass, after the
	// metrics have recorded it (for example by the lab, to count store
	// round trips).
	OnPass func(room string, mode waitroom.Mode, took time.Duration, res waitroom.AdmitResult, err error)
}

// DefaultServerOptions returns options with immediate admission on and
// slog.Default(); Secret and AdminToken must still be set.
func DefaultServerOptions() ServerOptions {
	return ServerOptions{Immediate: true, Logger: slog.Default()}
}

// Server is one waiting-room instance: a Service admitting in the
// background and its HTTP handler.
type Server struct {
	svc        *waitroom.Service
	handler    http.Handler
	signer     *waitroom.Signer
	admissions *waitroom.AdmissionSigner
	registry   *prometheus.Registry

	cancel context.CancelFunc
	done   chan struct{}
}

// NewServer builds a Service on store with metrics and an HTTP handler,
// and starts the service's admission (Service.Run) in a goroutine that
// runs until ctx ends or Close is called. Several Servers on one store
// behave as several instances of the service.
func NewServer(ctx context.Context, store waitroom.Store, opts ServerOptions) (*Server, error) {
	if store == nil {
		return nil, fieldError("store", "must not be nil")
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	reg := opts.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	signer, err := waitroom.NewSigner(opts.Secret, nil)
	if err != nil {
		return nil, err
	}

	metrics := waitroom.NewMetrics(reg)
	scfg := waitroom.DefaultServiceConfig()
	if opts.Instance != "" {
		scfg.Instance = opts.Instance
	}
	if opts.RoomRefresh > 0 {
		scfg.RoomRefresh = opts.RoomRefresh
		scfg.RateWindow = max(scfg.RateWindow, opts.RoomRefresh)
	}
	scfg.Immediate = opts.Immediate
	scfg.Logger = log
	scfg.OnPass = metrics.OnPass
	if extra := opts.OnPass; extra != nil {
		scfg.OnPass = func(room string, mode waitroom.Mode, took time.Duration, res waitroom.AdmitResult, err error) {
			metrics.OnPass(room, mode, took, res, err)
			extra(room, mode, took, res, err)
		}
	}
	svc, err := waitroom.NewService(store, scfg)
	if err != nil {
		return nil, err
	}

	epoch := opts.KeyEpoch
	if epoch == "" {
		epoch = waitroom.DefaultKeyEpoch
	}
	admissions, err := waitroom.NewAdmissionSigner(waitroom.KeySpec{Secret: opts.Secret, Epoch: epoch}, opts.PreviousKeys, nil)
	if err != nil {
		return nil, err
	}

	hcfg := DefaultHandlerConfig()
	hcfg.AdminToken = opts.AdminToken
	hcfg.SiteSecret, hcfg.AllowUnsignedUsers, hcfg.CheckoutKey = opts.SiteSecret, opts.AllowUnsignedUsers, opts.CheckoutKey
	hcfg.Admissions = admissions
	hcfg.Logger = log
	if opts.TicketTTL > 0 {
		hcfg.TicketTTL = opts.TicketTTL
	}
	hcfg.JoinLimit = opts.JoinLimit
	if hcfg.JoinLimit.MaxClients == 0 {
		hcfg.JoinLimit.MaxClients = DefaultJoinLimitConfig().MaxClients
	}
	hcfg.OnAdmit = opts.OnAdmit
	handler, err := NewHandler(svc, signer, hcfg, reg)
	if err != nil {
		return nil, err
	}

	runCtx, cancel := context.WithCancel(ctx)
	s := &Server{svc: svc, handler: handler, signer: signer, admissions: admissions, registry: reg, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		svc.Run(runCtx)
	}()
	return s, nil
}

// Handler returns the HTTP handler (see NewHandler).
func (s *Server) Handler() http.Handler { return s.handler }

// Service returns the running service.
func (s *Server) Service() *waitroom.Service { return s.svc }

// Signer returns the ticket token signer.
func (s *Server) Signer() *waitroom.Signer { return s.signer }

// Admissions returns the admission token signer.
func (s *Server) Admissions() *waitroom.AdmissionSigner { return s.admissions }

// Registry returns the registry served on /metrics.
func (s *Server) Registry() *prometheus.Registry { return s.registry }

// Close stops admission and waits for the service's goroutines to end. It
// does not close the store. Calling it again does nothing.
func (s *Server) Close() {
	s.cancel()
	<-s.done
}
