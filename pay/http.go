package pay

import (
	"errors"
	"log/slog"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/stampede-lab/stampede/internal/jsonbody"
)

// HandlerConfig configures the payment API.
type HandlerConfig struct {
	// MaxBody is the request body limit in bytes.
	MaxBody int64
	// Logger receives request logs.
	Logger *slog.Logger
}

// DefaultHandlerConfig returns a 4 KiB body limit and the default logger.
func DefaultHandlerConfig() HandlerConfig {
	return HandlerConfig{MaxBody: 4096, Logger: slog.Default()}
}

// Validate reports the first unusable field.
func (c HandlerConfig) Validate() error {
	if c.MaxBody < 256 {
		return Invalid("MaxBody", "must be at least 256 bytes, got %d", c.MaxBody)
	}
	if c.Logger == nil {
		return Invalid("Logger", "must not be nil")
	}
	return nil
}

type handler struct {
	svc   *Service
	store Store
	cfg   HandlerConfig
}

// NewHandler returns the payment API of DESIGN.md: POST /v1/payments,
// GET /v1/payments/{id}, /healthz and /metrics (from reg; nil: a new
// registry).
func NewHandler(svc *Service, store Store, cfg HandlerConfig, reg *prometheus.Registry) (http.Handler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	h := &handler{svc: svc, store: store, cfg: cfg}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/payments", h.api(h.create))
	mux.HandleFunc("GET /v1/payments/{id}", h.api(h.get))
	mux.HandleFunc("/v1/", h.api(func(w http.ResponseWriter, r *http.Request) error {
		return &Error{Code: CodeNotFound, Message: "no such endpoint: " + r.Method + " " + r.URL.Path}
	}))
	mux.HandleFunc("GET /healthz", h.api(h.healthz))
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return mux, nil
}

// api turns a handler's error into the JSON error answer.
func (h *handler) api(fn func(http.ResponseWriter, *http.Request) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		if err := fn(w, r); err != nil {
			h.fail(w, r, err)
		}
	}
}

type errorDetail struct {
	Code    Code   `json:"code"`
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
}

func (h *handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	status := HTTPStatus(err)
	d := errorDetail{Code: ErrorCode(err), Message: "internal error"}
	var e *Error
	switch {
	case errors.As(err, &e):
		d.Field, d.Message = e.Field, e.Message
	case errors.Is(err, ErrNotFound):
		d.Message = "no such payment"
	}
	if status >= 500 {
		h.cfg.Logger.Error("pay: http request failed", "method", r.Method, "path", r.URL.Path, "status", status, "err", err)
	}
	jsonbody.Write(w, status, map[string]errorDetail{"error": d})
}

// createBody is POST /v1/payments's body; pointers tell missing from zero.
type createBody struct {
	MerchantID *string `json:"merchant_id"`
	OrderID    *string `json:"order_id"`
	Amount     *int64  `json:"amount"`
	Currency   *string `json:"currency"`
}

const createFields = `"merchant_id", "order_id", "amount", "currency"`

func (h *handler) create(w http.ResponseWriter, r *http.Request) error {
	key := r.Header.Get("Idempotency-Key")
	if key == "" {
		return Invalid("Idempotency-Key", "header is required: a unique key per payment, reused only to retry the same request")
	}
	if err := ValidateIdempotencyKey(key); err != nil {
		return err
	}
	var b createBody
	if err := jsonbody.Decode(w, r, &b, h.cfg.MaxBody, createFields); err != nil {
		return decodeError(err)
	}
	switch {
	case b.MerchantID == nil:
		return Invalid("merchant_id", "is required")
	case b.OrderID == nil:
		return Invalid("order_id", "is required")
	case b.Amount == nil:
		return Invalid("amount", "is required")
	case b.Currency == nil:
		return Invalid("currency", "is required")
	}
	resp, err := h.svc.Create(r.Context(), key, CreateRequest{MerchantID: *b.MerchantID, OrderID: *b.OrderID, Amount: *b.Amount, Currency: *b.Currency})
	if err != nil {
		return err
	}
	jsonbody.WriteRaw(w, resp.Code, resp.Body)
	return nil
}

// decodeError maps a body decoding error to this package's error.
func decodeError(err error) error {
	e, ok := errors.AsType[*jsonbody.Error](err)
	if !ok {
		return err
	}
	return &Error{Code: Code(e.Kind.Code()), Field: e.Field, Message: e.Message, Err: e.Err}
}

func (h *handler) get(w http.ResponseWriter, r *http.Request) error {
	p, err := h.svc.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	jsonbody.Write(w, http.StatusOK, ViewOf(p))
	return nil
}

func (h *handler) healthz(w http.ResponseWriter, r *http.Request) error {
	if err := h.store.Ping(r.Context()); err != nil {
		return Unavailable(err)
	}
	jsonbody.Write(w, http.StatusOK, map[string]string{"status": "ok"})
	return nil
}
