package pay

import (
	_ "embed"
	"log/slog"
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stampede-lab/stampede/internal/httpapi"
)

//go:embed openapi.yaml
var openapiYAML []byte

// openAPI loads the embedded description once.
var openAPI = sync.OnceValue(func() *httpapi.Spec { return httpapi.MustLoadSpec(openapiYAML) })

// OpenAPI returns the payment API's OpenAPI 3 description (openapi.yaml,
// embedded), as served on /openapi.json.
func OpenAPI() *httpapi.Spec { return openAPI() }

// HandlerConfig configures the payment API.
type HandlerConfig struct {
	// MaxBody is the request body limit in bytes.
	MaxBody int64
	// Logger receives the request log and the causes of 5xx answers.
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
	svc *Service
	cfg HandlerConfig
}

// NewHandler returns the payment API of DESIGN.md on httpapi:
// POST /v1/payments, GET /v1/payments/{id}, /healthz, /readyz (with the
// store's Ping as check "store"; add more with AddCheck), /metrics (from
// reg; nil: a new registry; with the store gauges of NewStoreGauges) and
// /openapi.json. Errors are problem+json.
func NewHandler(svc *Service, store Store, cfg HandlerConfig, reg *prometheus.Registry) (*httpapi.API, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	if err := reg.Register(NewStoreGauges(store, svc.cfg.Now, cfg.Logger)); err != nil {
		return nil, err
	}
	api, err := httpapi.New(httpapi.Config{
		Name:     "pay",
		Logger:   cfg.Logger,
		Registry: reg,
		MapError: func(_ *http.Request, err error) error { return MapError(err) },
		Spec:     OpenAPI().JSON,
	})
	if err != nil {
		return nil, err
	}
	h := &handler{svc: svc, cfg: cfg}
	api.Handle("/v1/payments", httpapi.Methods{http.MethodPost: h.create})
	api.Handle("/v1/payments/{id}", httpapi.Methods{http.MethodGet: h.get})
	api.AddCheck(httpapi.Check{Name: "store", Ping: store.Ping})
	return api, nil
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
	if err := httpapi.DecodeJSON(w, r, &b, h.cfg.MaxBody, createFields); err != nil {
		return err
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
	httpapi.WriteRawJSON(w, resp.Code, resp.Body)
	return nil
}

func (h *handler) get(w http.ResponseWriter, r *http.Request) error {
	p, err := h.svc.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, ViewOf(p))
	return nil
}
