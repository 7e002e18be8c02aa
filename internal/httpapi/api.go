package httpapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/internal/jsonbody"
)

// HandlerFunc is an API handler: it writes a success answer itself and
// returns an error for everything else, which the API answers as a
// problem.
type HandlerFunc func(w http.ResponseWriter, r *http.Request) error

// Config configures an API.
type Config struct {
	// Name names the service in logs and in the WWW-Authenticate realm,
	// such as "waitroom".
	Name string
	// Logger receives one line per request (Debug; Error for 5xx answers,
	// with the cause) and handler panics. Nil means slog.Default().
	Logger *slog.Logger
	// Registry receives the request metrics and is served on /metrics.
	// Nil means a new registry. One registry serves one API.
	Registry *prometheus.Registry
	// MapError, if set, turns errors a handler returned that are not
	// *stampede.Error (a package's sentinel errors, say) into *stampede.Error before they
	// are answered. It may return its argument unchanged.
	MapError func(r *http.Request, err error) error
	// Spec is the API's OpenAPI description as JSON, served on
	// /openapi.json; nil serves none.
	Spec []byte
	// ReadyTimeout bounds each readiness check of /readyz; 0 means 1 s.
	ReadyTimeout time.Duration
	// MetricsAuth, if set, decides who may read /metrics: a request it
	// returns an error for is answered that error as a problem (an
	// Unauthorized one, say) and sees no metric. Nil serves /metrics to
	// anyone. /healthz and /readyz stay open either way.
	MetricsAuth func(r *http.Request) error
}

// Validate reports every unusable field at once.
func (c Config) Validate() error {
	var f stampede.Fields
	if c.Name == "" {
		f.Add("name", "must name the service")
	}
	if c.ReadyTimeout < 0 {
		f.Add("ready_timeout", "must not be negative, got %s", c.ReadyTimeout)
	}
	return f.Err()
}

// Check is one dependency that /readyz asks: Ping must answer within the
// API's ReadyTimeout (its context carries that deadline).
type Check struct {
	Name string
	Ping func(ctx context.Context) error
}

// API is a service's HTTP surface: routes whose handlers return errors,
// JSON 404 and 405 answers, request logs and metrics, /healthz, /readyz,
// /metrics and /openapi.json.
type API struct {
	cfg     Config
	log     *slog.Logger
	mux     *http.ServeMux
	metrics *requestMetrics

	mu     sync.Mutex
	checks []Check
}

// New returns an API with /healthz, /readyz (no checks yet: see
// AddCheck), /metrics (to the requests cfg.MetricsAuth accepts, when it
// is set) and, when cfg.Spec is set, /openapi.json.
func New(cfg Config) (*API, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = time.Second
	}
	m, err := newRequestMetrics(cfg.Registry)
	if err != nil {
		return nil, fmt.Errorf("httpapi: registering the request metrics: %w (use one registry per API)", err)
	}
	a := &API{cfg: cfg, log: cfg.Logger, mux: http.NewServeMux(), metrics: m}
	if err := cfg.Registry.Register(readyCollector{a}); err != nil {
		return nil, fmt.Errorf("httpapi: registering stampede_ready: %w (use one registry per API)", err)
	}
	a.Handle("/healthz", Methods{http.MethodGet: a.healthz})
	a.Handle("/readyz", Methods{http.MethodGet: a.readyz})
	var metrics http.Handler = promhttp.HandlerFor(cfg.Registry, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelError)})
	if auth := cfg.MetricsAuth; auth != nil {
		open := metrics
		metrics = a.adapt(func(w http.ResponseWriter, r *http.Request) error {
			if err := auth(r); err != nil {
				return err
			}
			open.ServeHTTP(w, r)
			return nil
		})
	}
	a.HandleHTTP("/metrics", map[string]http.Handler{http.MethodGet: metrics})
	if cfg.Spec != nil {
		spec := cfg.Spec
		a.Handle("/openapi.json", Methods{http.MethodGet: func(w http.ResponseWriter, r *http.Request) error {
			w.Header().Set("Cache-Control", "public, max-age=300")
			WriteRawJSON(w, http.StatusOK, spec)
			return nil
		}})
	}
	a.mux.HandleFunc("/", a.adapt(func(w http.ResponseWriter, r *http.Request) error {
		return &stampede.Error{Code: stampede.NotFound, Message: fmt.Sprintf("no such path: %s", r.URL.Path)}
	}))
	return a, nil
}

// Methods maps HTTP methods to the handlers of one path.
type Methods map[string]HandlerFunc

// Handle registers the handlers of path, one per method (a GET handler
// also serves HEAD). Any other method on path answers 405 with Allow.
// path is a ServeMux pattern without a method, such as
// "/v1/rooms/{room}".
func (a *API) Handle(path string, methods Methods) {
	hs := make(map[string]http.Handler, len(methods))
	for m, fn := range methods {
		hs[m] = a.adapt(fn)
	}
	a.HandleHTTP(path, hs)
}

// HandleHTTP is Handle for plain http.Handlers (pages, streams, metrics).
func (a *API) HandleHTTP(path string, methods map[string]http.Handler) {
	allowed := make([]string, 0, len(methods)+1)
	for m, h := range methods {
		a.mux.Handle(m+" "+path, h)
		allowed = append(allowed, m)
		if m == http.MethodGet {
			allowed = append(allowed, http.MethodHead)
		}
	}
	slices.Sort(allowed)
	allow := strings.Join(allowed, ", ")
	a.mux.HandleFunc(path, a.adapt(func(w http.ResponseWriter, r *http.Request) error {
		w.Header().Set("Allow", allow)
		return &stampede.Error{Code: stampede.MethodNotAllowed, Message: fmt.Sprintf("method %s is not allowed on %s; use %s", r.Method, r.URL.Path, allow)}
	}))
}

// AddCheck adds a dependency to /readyz.
func (a *API) AddCheck(c Check) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.checks = append(a.checks, c)
}

// Fail answers err as a problem (mapped by Config.MapError), logging the
// cause of a 5xx answer. Handlers that do not return their errors, such
// as pages, call it.
func (a *API) Fail(w http.ResponseWriter, r *http.Request, err error) {
	if a.cfg.MapError != nil {
		if _, ok := errors.AsType[*stampede.Error](err); !ok {
			err = a.cfg.MapError(r, err)
		}
	}
	e := stampede.As(err)
	if status := ErrorStatus(e); status >= 500 {
		a.log.LogAttrs(r.Context(), slog.LevelError, a.cfg.Name+": request failed",
			slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.Int("status", status),
			slog.String("code", string(e.Code)), slog.Any("err", err))
	}
	WriteProblem(w, err, "stampede-"+a.cfg.Name)
}

// adapt turns a HandlerFunc into an http.Handler: no caching of API
// answers, and a returned error answered by Fail.
func (a *API) adapt(fn HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Cache-Control"] = noStore
		if err := fn(w, r); err != nil {
			a.Fail(w, r, err)
		}
	}
}

// ServeHTTP serves the API: request log, panic guard and metrics around
// the routes.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rec := &recorder{ResponseWriter: w}
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			err := fmt.Errorf("panic: %v", p)
			if rec.status == 0 {
				a.Fail(rec, r, stampede.InternalErr(err))
			} else {
				a.log.Error(a.cfg.Name+": handler panicked after answering", "method", r.Method, "path", r.URL.Path, "err", err)
			}
		}
		took := time.Since(start)
		route := r.Pattern
		if i := strings.IndexByte(route, ' '); i >= 0 {
			route = route[i+1:]
		}
		if route == "/" || route == "" {
			route = "unmatched"
		}
		status := rec.status
		if status == 0 {
			status = http.StatusOK
		}
		a.metrics.observe(route, r.Method, status, took)
		if status < 500 && a.log.Enabled(r.Context(), slog.LevelDebug) {
			a.log.LogAttrs(r.Context(), slog.LevelDebug, a.cfg.Name+": request",
				slog.String("method", r.Method), slog.String("route", route), slog.String("path", r.URL.Path),
				slog.Int("status", status), slog.Duration("took", took), slog.String("remote", r.RemoteAddr))
		}
	}()
	a.mux.ServeHTTP(rec, r)
}

func (a *API) healthz(w http.ResponseWriter, r *http.Request) error {
	WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	return nil
}

// checkResult is one dependency's line in /readyz.
type checkResult struct {
	Status string  `json:"status"`
	TookMS float64 `json:"took_ms"`
	Error  string  `json:"error,omitempty"`
}

// readyz asks every check at once, each within ReadyTimeout, and answers
// 200 when all answered, else 503 naming the failed ones.
func (a *API) readyz(w http.ResponseWriter, r *http.Request) error {
	a.mu.Lock()
	checks := slices.Clone(a.checks)
	a.mu.Unlock()
	results := make(map[string]checkResult, len(checks))
	var (
		mu     sync.Mutex
		wg     sync.WaitGroup
		failed []string
	)
	for _, c := range checks {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(r.Context(), a.cfg.ReadyTimeout)
			defer cancel()
			start := time.Now()
			err := pingWithin(ctx, c.Ping)
			res := checkResult{Status: "ok", TookMS: float64(time.Since(start).Microseconds()) / 1000}
			if err != nil {
				res.Status, res.Error = "failed", safeReason(err)
				a.log.Warn(a.cfg.Name+": readiness check failed", "check", c.Name, "err", err)
			}
			mu.Lock()
			results[c.Name] = res
			if err != nil {
				failed = append(failed, c.Name)
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	if len(failed) > 0 {
		slices.Sort(failed)
		return &stampede.Error{Code: stampede.Unavailable, Message: "not ready: " + strings.Join(failed, ", "), Extra: map[string]any{"checks": results}}
	}
	WriteJSON(w, http.StatusOK, map[string]any{"status": "ready", "checks": results})
	return nil
}

// pingWithin runs ping and gives up when ctx ends, even if ping ignores
// its context (a dependency frozen mid-call must not hang /readyz).
func pingWithin(ctx context.Context, ping func(context.Context) error) error {
	done := make(chan error, 1)
	go func() { done <- ping(ctx) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// safeReason says why a check failed without internals: a timeout, or
// the code of an *stampede.Error, or "unreachable".
func safeReason(err error) string {
	switch e, ok := errors.AsType[*stampede.Error](err); {
	case errors.Is(err, context.DeadlineExceeded):
		return "no answer within the deadline"
	case ok:
		return string(e.Code)
	default:
		return "unreachable"
	}
}

// WriteRawJSON answers an encoded JSON body with status.
func WriteRawJSON(w http.ResponseWriter, status int, body []byte) {
	jsonbody.SetHeaders(w.Header())
	w.WriteHeader(status)
	w.Write(body)
}

// noStore is the Cache-Control value of every API answer, shared by all
// of them without an allocation (see jsonbody.SetHeaders).
var noStore = []string{"no-store"}

// recorder remembers the status a handler wrote.
type recorder struct {
	http.ResponseWriter
	status int
}

// WriteHeader remembers the first status.
func (s *recorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

// Write remembers 200 if no status was written.
func (s *recorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer (for
// Flush in server-sent events, and deadlines).
func (s *recorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }
