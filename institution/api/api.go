// Package api is the institution simulator's HTTP server, over the
// simulator (institution.Simulator). With Config.Protocol
// ProtocolSimulator (the default) it speaks its own protocol:
//
//	POST /v1/approvals                  {"external_key","amount","currency"} → APPROVED or DECLINED
//	GET  /v1/approvals/{external_key}   the record, or 404 with the not-found window
//	POST /v1/refunds                    {"external_key","approval_key","amount"} → SUCCEEDED or DECLINED
//	GET  /v1/refunds/{external_key}     the refund's record, or 404 with the not-found window
//	GET  /admin/refunds                 the refund ledger: records, refunded per approval
//	PUT  /admin/behavior                set the fault mode (Bearer admin token)
//	GET  /admin/behavior                the current behaviour
//	GET  /admin/arrivals                every approval request received, with its arrival time
//	GET  /admin/approvals               the ledger: records, charges per key, totals
//	POST /admin/reset                   clear everything, back to NORMAL, release hung requests
//	GET  /healthz, /readyz, /metrics, /openapi.json
//
// With ProtocolToss it speaks a subset of Toss Payments' v1 API instead
// of the /v1 routes above (see toss.go), over the same simulator, fault
// modes and admin API.
//
// It answers through package internal/httpapi, like every Stampede
// service: errors are RFC 9457 application/problem+json bodies whose code
// decides the status (see institution.Error), an unknown path is a 404, a
// wrong method a 405 with Allow, and /openapi.json serves the description
// in openapi.yaml (see OpenAPI).
package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/institution"
	"github.com/stampede-lab/stampede/internal/httpapi"
)

// MinAdminTokenLen is the shortest admin token accepted.
const MinAdminTokenLen = 16

// Config configures a Server: the simulator's configuration and the
// HTTP side. Validate names every bad field in snake_case, the words of
// `stampede serve institution`'s flags.
type Config struct {
	// Config is the simulator's configuration (its Metrics is set from
	// Registry).
	institution.Config
	// AdminToken authorizes the /admin endpoints ("Authorization: Bearer
	// <AdminToken>"). Required, at least MinAdminTokenLen bytes; compared
	// in constant time.
	AdminToken string
	// MaxBody is the largest request body accepted, in bytes.
	MaxBody int64
	// Registry receives the simulator's metrics and httpapi's request
	// metrics, and is served on /metrics. Nil means a new registry. A
	// registry serves at most one Server.
	Registry *prometheus.Registry
	// HTTP are the limits Run serves with (ServerConfig).
	HTTP httpapi.ServerConfig
	// Listener is where Run serves; needed by Run only (a test may serve
	// the Server as an http.Handler instead).
	Listener net.Listener
	// Protocol is the payment API the simulator speaks: ProtocolSimulator
	// (its own, /v1/approvals and /v1/refunds) or ProtocolToss (a subset
	// of Toss Payments' v1 API, see toss.go). The admin API is the same.
	Protocol string
	// TossSecretKey is the secret key the Toss protocol's Basic
	// authentication checks (test_sk_... or live_sk_...); required with
	// ProtocolToss, unused otherwise.
	TossSecretKey string
}

// The protocols a Server speaks.
const (
	ProtocolSimulator = "simulator"
	ProtocolToss      = "toss"
)

// ServerConfig returns the limits to serve the simulator with:
// httpapi.DefaultServerConfig, except that WriteTimeout is
// institution.MaxHang plus the default WriteTimeout, so that a request
// held for the longest hang a behaviour may ask for is still answered,
// never cut off.
func ServerConfig() httpapi.ServerConfig {
	c := httpapi.DefaultServerConfig()
	c.WriteTimeout += institution.MaxHang
	return c
}

// DefaultConfig returns institution.DefaultConfig, a 4096-byte body limit
// and ServerConfig. AdminToken is empty and must be set.
func DefaultConfig() Config {
	return Config{Config: institution.DefaultConfig(), MaxBody: 4096, HTTP: ServerConfig(), Protocol: ProtocolSimulator}
}

// Validate reports every unusable field at once.
func (c Config) Validate() error {
	var f stampede.Fields
	if len(c.AdminToken) < MinAdminTokenLen {
		f.Add("admin_token", "must be at least %d bytes, got %d", MinAdminTokenLen, len(c.AdminToken))
	}
	if c.MaxBody < 64 || c.MaxBody > 1<<20 {
		f.Add("max_body", "must be between 64 and 1048576 bytes, got %d", c.MaxBody)
	}
	switch c.Protocol {
	case ProtocolSimulator:
	case ProtocolToss:
		f.Check("", validateTossSecretKey(c.TossSecretKey))
	default:
		f.Add("protocol", "must be %q or %q, got %q", ProtocolSimulator, ProtocolToss, c.Protocol)
	}
	f.Check("", c.Config.Validate())
	f.Check("", c.HTTP.Validate())
	return f.Err()
}

// Server is the simulator served over HTTP. It implements http.Handler
// and is safe for concurrent use; the simulator's methods (SetBehavior,
// Reset, Ledger, Close, ...) are its own. Call Close when done: it
// releases every held request.
type Server struct {
	*institution.Simulator
	cfg       Config
	adminHash [sha256.Size]byte
	api       *httpapi.API
	toss      *tossState // the Toss protocol's state; nil with the simulator's
}

// New makes a server with a new simulator. Nil cfg.Now, cfg.Logger and
// cfg.Registry mean time.Now, slog.Default() and a new registry; a zero
// cfg.HTTP means ServerConfig; the rest of cfg must pass Validate. It
// starts nothing (Run serves).
func New(cfg Config) (*Server, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.HTTP == (httpapi.ServerConfig{}) {
		cfg.HTTP = ServerConfig()
	}
	if cfg.Protocol == "" {
		cfg.Protocol = ProtocolSimulator
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	cfg.Metrics = cfg.Registry
	sim, err := institution.New(cfg.Config)
	if err != nil {
		return nil, err
	}
	s := &Server{Simulator: sim, cfg: cfg, adminHash: sha256.Sum256([]byte(cfg.AdminToken))}
	a, err := httpapi.New(httpapi.Config{Name: "institution", Logger: cfg.Logger, Registry: cfg.Registry, Spec: OpenAPI().JSON})
	if err != nil {
		return nil, err
	}
	if cfg.Protocol == ProtocolToss {
		s.handleToss(a)
	} else {
		a.Handle("/v1/approvals", httpapi.Methods{http.MethodPost: s.approve})
		a.Handle("/v1/approvals/{external_key}", httpapi.Methods{http.MethodGet: s.status})
		a.Handle("/v1/refunds", httpapi.Methods{http.MethodPost: s.refund})
		a.Handle("/v1/refunds/{external_key}", httpapi.Methods{http.MethodGet: s.refundStatus})
		a.Handle("/v1/captures", httpapi.Methods{http.MethodPost: s.operate(institution.OpCapture)})
		a.Handle("/v1/captures/{external_key}", httpapi.Methods{http.MethodGet: s.operationStatus})
		a.Handle("/v1/voids", httpapi.Methods{http.MethodPost: s.operate(institution.OpVoid)})
		a.Handle("/v1/voids/{external_key}", httpapi.Methods{http.MethodGet: s.operationStatus})
	}
	a.Handle("/admin/refunds", httpapi.Methods{http.MethodGet: s.admin(s.getRefunds)})
	a.Handle("/admin/operations", httpapi.Methods{http.MethodGet: s.admin(s.getOperations)})
	a.Handle("/admin/behavior", httpapi.Methods{
		http.MethodGet: s.admin(s.getBehavior),
		http.MethodPut: s.admin(s.putBehavior),
	})
	a.Handle("/admin/arrivals", httpapi.Methods{http.MethodGet: s.admin(s.getArrivals)})
	a.Handle("/admin/approvals", httpapi.Methods{http.MethodGet: s.admin(s.getApprovals)})
	a.Handle("/admin/reset", httpapi.Methods{http.MethodPost: s.admin(s.postReset)})
	s.api = a
	return s, nil
}

// ServeHTTP serves the simulator's API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.api.ServeHTTP(w, r) }

// Run serves on Config.Listener until ctx ends. Then it closes the simulator first,
// releasing every held request (each answers 504 released), and shuts the
// HTTP server down within cfg.HTTP.ShutdownTimeout.
func (s *Server) Run(ctx context.Context) error {
	ln := s.cfg.Listener
	if ln == nil {
		return stampede.InvalidField("listener", "is required to run: where to serve")
	}
	serveCtx, stopServing := context.WithCancel(context.WithoutCancel(ctx))
	defer stopServing()
	defer context.AfterFunc(ctx, func() {
		s.cfg.Logger.Info("shutting down", "held_requests_released", s.Hung())
		s.Close()
		stopServing()
	})()
	return httpapi.Serve(serveCtx, ln, s, s.cfg.HTTP, s.cfg.Logger)
}

// decodeJSON reads a request body holding exactly one JSON object of at
// most Config.MaxBody bytes into dst strictly; its errors are 400, 413 or
// 415 problems naming the field at fault.
func (s *Server) decodeJSON(w http.ResponseWriter, r *http.Request, dst any, allowed string) error {
	return httpapi.DecodeJSON(w, r, dst, s.cfg.MaxBody, allowed)
}

// authAdmin checks the admin bearer token in constant time (hashing first,
// so that not even the length leaks).
func (s *Server) authAdmin(r *http.Request) error {
	h := r.Header.Get("Authorization")
	scheme, token, ok := strings.Cut(h, " ")
	token = strings.TrimSpace(token)
	if h == "" || !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return &institution.Error{Code: stampede.Unauthorized, Message: "missing Authorization: Bearer <admin token>"}
	}
	got := sha256.Sum256([]byte(token))
	if subtle.ConstantTimeCompare(got[:], s.adminHash[:]) != 1 {
		return &institution.Error{Code: stampede.Unauthorized, Message: "admin token invalid"}
	}
	return nil
}

// admin wraps an admin endpoint's handler: 401 without the admin token.
func (s *Server) admin(fn httpapi.HandlerFunc) httpapi.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		if err := s.authAdmin(r); err != nil {
			return err
		}
		return fn(w, r)
	}
}

// approveFields lists the fields of POST /v1/approvals.
const approveFields = `"external_key", "amount", "currency", "capture"`

// approve serves POST /v1/approvals: the arrival is taken before the body
// is read, and logged even when the body is invalid.
func (s *Server) approve(w http.ResponseWriter, r *http.Request) error {
	a := institution.Attempt{At: s.Now(), Path: r.URL.Path}
	var body struct {
		ExternalKey *string `json:"external_key"`
		Amount      *int64  `json:"amount"`
		Currency    *string `json:"currency"`
		Capture     *string `json:"capture"`
	}
	a.Invalid = s.decodeJSON(w, r, &body, approveFields)
	if body.ExternalKey != nil {
		a.Request.ExternalKey = *body.ExternalKey
	}
	if a.Invalid == nil {
		a.Invalid = institution.ValidateApproveBody(body.ExternalKey, body.Amount, body.Currency)
	}
	if a.Invalid == nil {
		a.Request.Amount, a.Request.Currency = *body.Amount, *body.Currency
		if body.Capture != nil {
			a.Request.Capture = *body.Capture
			a.Invalid = a.Request.Validate()
		}
	}
	res, err := s.Approve(r.Context(), a)
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, res)
	return nil
}

// status serves GET /v1/approvals/{external_key}.
func (s *Server) status(w http.ResponseWriter, r *http.Request) error {
	rec, err := s.Status(r.PathValue("external_key"))
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, rec)
	return nil
}

// behaviorFields lists the fields of PUT /admin/behavior.
const behaviorFields = `"mode", "hang_ms", "idempotent", "status_api"`

func (s *Server) getBehavior(w http.ResponseWriter, r *http.Request) error {
	httpapi.WriteJSON(w, http.StatusOK, s.Behavior())
	return nil
}

// putBehavior serves PUT /admin/behavior: the fields given replace the
// current ones, the others stay.
func (s *Server) putBehavior(w http.ResponseWriter, r *http.Request) error {
	var p institution.BehaviorPatch
	if err := s.decodeJSON(w, r, &p, behaviorFields); err != nil {
		return err
	}
	b, err := s.PatchBehavior(p)
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, b)
	return nil
}

func (s *Server) getArrivals(w http.ResponseWriter, r *http.Request) error {
	httpapi.WriteJSON(w, http.StatusOK, s.Arrivals())
	return nil
}

func (s *Server) getApprovals(w http.ResponseWriter, r *http.Request) error {
	httpapi.WriteJSON(w, http.StatusOK, s.Ledger())
	return nil
}

func (s *Server) postReset(w http.ResponseWriter, r *http.Request) error {
	n := s.Reset()
	httpapi.WriteJSON(w, http.StatusOK, institution.ResetResult{Released: n, Behavior: s.Behavior()})
	return nil
}

// refundFields lists the fields of POST /v1/refunds.
const refundFields = `"external_key", "approval_key", "amount", "reason"`

// refund serves POST /v1/refunds.
func (s *Server) refund(w http.ResponseWriter, r *http.Request) error {
	var body institution.RefundRequest
	if err := s.decodeJSON(w, r, &body, refundFields); err != nil {
		return err
	}
	res, err := s.Refund(r.Context(), body, r.URL.Path)
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, res)
	return nil
}

// refundStatus serves GET /v1/refunds/{external_key}.
func (s *Server) refundStatus(w http.ResponseWriter, r *http.Request) error {
	rec, err := s.RefundStatus(r.PathValue("external_key"))
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, rec)
	return nil
}

func (s *Server) getRefunds(w http.ResponseWriter, r *http.Request) error {
	httpapi.WriteJSON(w, http.StatusOK, s.Refunds())
	return nil
}

// operationFields lists the fields of POST /v1/captures and /v1/voids.
const operationFields = `"external_key", "approval_key", "amount"`

// operate serves POST /v1/captures and POST /v1/voids.
func (s *Server) operate(kind string) httpapi.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		var body institution.OperationRequest
		if err := s.decodeJSON(w, r, &body, operationFields); err != nil {
			return err
		}
		body.Kind = kind
		res, err := s.Operate(r.Context(), body, r.URL.Path)
		if err != nil {
			return err
		}
		httpapi.WriteJSON(w, http.StatusOK, res)
		return nil
	}
}

// operationStatus serves GET /v1/captures/{external_key} and
// /v1/voids/{external_key}.
func (s *Server) operationStatus(w http.ResponseWriter, r *http.Request) error {
	rec, err := s.OperationStatus(r.PathValue("external_key"))
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, rec)
	return nil
}

func (s *Server) getOperations(w http.ResponseWriter, r *http.Request) error {
	httpapi.WriteJSON(w, http.StatusOK, s.Operations())
	return nil
}
