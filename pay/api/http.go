// Package api is the payment service's HTTP adapter: the merchant API
// (POST and GET /v1/payments, GET /v1/payments/{id}, POST and GET
// /v1/payments/{id}/refunds), the operator's read-only
// /v1/admin endpoints, the admission requirement of a new payment, and
// the OpenAPI description (openapi.yaml). It renders a pay.Payment as the
// client sees it, the first time and on every idempotent replay alike.
package api

import (
	_ "embed"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/internal/httpapi"
	"github.com/stampede-lab/stampede/pay"
	"github.com/stampede-lab/stampede/protocol"
)

//go:embed openapi.yaml
var openapiYAML []byte

// openAPI loads the embedded description once.
var openAPI = sync.OnceValue(func() *httpapi.Spec { return httpapi.MustLoadSpec(openapiYAML) })

// OpenAPI returns the payment API's OpenAPI 3 description (openapi.yaml,
// embedded), as served on /openapi.json.
func OpenAPI() *httpapi.Spec { return openAPI() }

// Config configures the payment API.
type Config struct {
	// MaxBody is the request body limit in bytes.
	MaxBody int64
	// Logger receives the request log and the causes of 5xx answers.
	Logger *slog.Logger
	// AdminToken, when set (at least 16 bytes), opens the operator's
	// read-only endpoints under /v1/admin (admin.go) to
	// "Authorization: Bearer <AdminToken>"; empty leaves them out.
	AdminToken string
	// Merchants authenticates the API keys. Nil uses the store given to
	// New, which must then implement pay.MerchantStore. There is no way
	// to turn authentication off.
	Merchants pay.MerchantStore
	// Admission, when set, makes a new payment require the buyer's
	// admission (header Stampede-Admission), verified against the waiting
	// room's keys and, with its online check, still holding its slot
	// (serve pay --require-admission). Nil: no admission needed.
	Admission *protocol.AdmissionVerifier
}

// DefaultConfig returns a 4 KiB body limit and the default logger.
func DefaultConfig() Config {
	return Config{MaxBody: 4096, Logger: slog.Default()}
}

// Validate reports every unusable field at once, each named in
// snake_case.
func (c Config) Validate() error {
	var f stampede.Fields
	if c.MaxBody < 256 {
		f.Add("max_body", "must be at least 256 bytes, got %d", c.MaxBody)
	}
	if c.Logger == nil {
		f.Add("logger", "must not be nil")
	}
	if c.AdminToken != "" && len(c.AdminToken) < minAdminToken {
		f.Add("admin_token", "must be empty (no admin API) or at least %d bytes, got %d", minAdminToken, len(c.AdminToken))
	}
	if c.Admission != nil {
		f.Check("admission", c.Admission.Validate())
	}
	return f.Err()
}

// handler serves the merchant endpoints.
type handler struct {
	svc   *pay.Service
	store pay.Store
	cfg   Config
}

// New returns the merchant payment API on httpapi over svc and its
// store: POST /v1/payments, GET /v1/payments/{id} (both for a merchant
// authenticated by "Authorization: Bearer <API key>"), the operator's
// /v1/admin endpoints when Config.AdminToken is set, /healthz, /readyz
// (with the store's Ping as check "store"; add more with AddCheck),
// /metrics (from reg; nil: a new registry; with the store gauges of
// pay.NewStoreGauges) and /openapi.json. Errors are problem+json.
func New(svc *pay.Service, store pay.Store, cfg Config, reg *prometheus.Registry) (*httpapi.API, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Merchants == nil {
		ms, ok := store.(pay.MerchantStore)
		if !ok {
			return nil, pay.Invalid("merchants", "must be set: the store %T does not implement MerchantStore", store)
		}
		cfg.Merchants = ms
	}
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	if err := reg.Register(pay.NewStoreGauges(store, svc.Now, cfg.Logger)); err != nil {
		return nil, err
	}
	api, err := httpapi.New(httpapi.Config{
		Name:     "pay",
		Logger:   cfg.Logger,
		Registry: reg,
		MapError: func(_ *http.Request, err error) error { return pay.MapError(err) },
		Spec:     OpenAPI().JSON,
	})
	if err != nil {
		return nil, err
	}
	h := &handler{svc: svc, store: store, cfg: cfg}
	api.Handle("/v1/payments", httpapi.Methods{http.MethodPost: h.create, http.MethodGet: h.listPayments})
	api.Handle("/v1/payments/{id}", httpapi.Methods{http.MethodGet: h.get})
	api.Handle("/v1/payments/{id}/refunds", httpapi.Methods{http.MethodPost: h.refund, http.MethodGet: h.listRefunds})
	api.Handle("/v1/payments/{id}/capture", httpapi.Methods{http.MethodPost: h.capture})
	api.Handle("/v1/payments/{id}/void", httpapi.Methods{http.MethodPost: h.void})
	api.Handle("/v1/payments/{id}/cancel", httpapi.Methods{http.MethodPost: h.cancel})
	api.Handle("/v1/payments/{id}/confirm", httpapi.Methods{http.MethodPost: h.confirm})
	api.Handle("/v1/payments/{id}/operations", httpapi.Methods{http.MethodGet: h.listOperations})
	api.Handle("/v1/events", httpapi.Methods{http.MethodGet: h.events})
	api.AddCheck(httpapi.Check{Name: "store", Ping: store.Ping})
	if err := registerAdmin(api, svc, store, cfg); err != nil {
		return nil, err
	}
	return api, nil
}

// authenticate returns the merchant whose API key the request carries:
// 401 unauthorized without a valid, unrevoked key. The key is looked up
// by its SHA-256 (pay.HashAPIKey), never compared as stored text.
func (h *handler) authenticate(r *http.Request) (pay.Merchant, error) {
	scheme, key, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	key = strings.TrimSpace(key)
	if !ok || !strings.EqualFold(scheme, "Bearer") || key == "" {
		return pay.Merchant{}, &pay.Error{Code: pay.CodeUnauthorized, Message: "an API key is required: Authorization: Bearer <key>"}
	}
	m, err := h.cfg.Merchants.MerchantByKeyHash(r.Context(), pay.HashAPIKey(key))
	if errors.Is(err, pay.ErrNotFound) {
		return pay.Merchant{}, &pay.Error{Code: pay.CodeUnauthorized, Message: "the API key is not valid (unknown or revoked)"}
	}
	return m, err
}

// createBody is POST /v1/payments's body; pointers tell missing from zero.
type createBody struct {
	MerchantID *string `json:"merchant_id"`
	OrderID    *string `json:"order_id"`
	Amount     *int64  `json:"amount"`
	Currency   *string `json:"currency"`
	// PaymentKey is the key the institution's widget gave the buyer's
	// browser (Toss Payments' paymentKey); required by such a connector.
	PaymentKey *string `json:"payment_key"`
	// Capture is "automatic" (the default) or "manual".
	Capture *string `json:"capture"`
}

const createFields = `"merchant_id", "order_id", "amount", "currency", "payment_key", "capture"`

// create answers POST /v1/payments. merchant_id may be left out: it is
// the key's merchant; when given it must be that merchant (403
// otherwise).
func (h *handler) create(w http.ResponseWriter, r *http.Request) error {
	m, err := h.authenticate(r)
	if err != nil {
		return err
	}
	key := r.Header.Get("Idempotency-Key")
	if key == "" {
		return pay.Invalid("Idempotency-Key", "header is required: a unique key per payment, reused only to retry the same request")
	}
	if err := pay.ValidateIdempotencyKey(key); err != nil {
		return err
	}
	if err := h.requireAdmission(r, m.ID, key); err != nil {
		return err
	}
	var b createBody
	if err := httpapi.DecodeJSON(w, r, &b, h.cfg.MaxBody, createFields); err != nil {
		return err
	}
	if b.MerchantID == nil {
		b.MerchantID = &m.ID
	} else if id, err := pay.ParseUUID(*b.MerchantID); err != nil {
		return pay.Invalid("merchant_id", "must be a UUID")
	} else if id.String() != m.ID {
		return &pay.Error{Code: pay.CodeForbidden, Field: "merchant_id", Message: "the API key belongs to another merchant"}
	}
	switch {
	case b.OrderID == nil:
		return pay.Invalid("order_id", "is required")
	case b.Amount == nil:
		return pay.Invalid("amount", "is required")
	case b.Currency == nil:
		return pay.Invalid("currency", "is required")
	}
	req := pay.CreateRequest{MerchantID: *b.MerchantID, OrderID: *b.OrderID, Amount: *b.Amount, Currency: *b.Currency}
	if b.PaymentKey != nil {
		req.PaymentKey = *b.PaymentKey
	}
	if b.Capture != nil {
		if !pay.CaptureMode(*b.Capture).Valid() {
			return pay.Invalid("capture", "must be one of %v", pay.CaptureModes())
		}
		req.Capture = pay.CaptureMode(*b.Capture)
	}
	p, replayed, err := h.svc.Create(r.Context(), key, req)
	if err != nil {
		return err
	}
	code, body, err := CreatedResponse(p)
	if err != nil {
		return err
	}
	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	httpapi.WriteRawJSON(w, code, body)
	return nil
}

// CreatedResponse is the answer to a create request whose payment stands
// as p, the first time and on every replay alike: 202 while UNKNOWN (or
// PENDING), 201 once final; the body is the payment without its history
// (GET shows it).
func CreatedResponse(p pay.Payment) (int, []byte, error) {
	code := http.StatusCreated
	if !p.Status.Settled() {
		code = http.StatusAccepted
	}
	p.History = nil
	body, err := json.Marshal(ViewOf(p))
	if err != nil {
		return 0, nil, pay.Internal(err)
	}
	return code, body, nil
}

// get answers GET /v1/payments/{id}: the key's merchant's payment only;
// another merchant's is 404, as if it did not exist.
func (h *handler) get(w http.ResponseWriter, r *http.Request) error {
	m, err := h.authenticate(r)
	if err != nil {
		return err
	}
	p, err := h.svc.GetFor(r.Context(), m.ID, r.PathValue("id"))
	if err != nil {
		return err
	}
	v := ViewOf(p)
	c, ok, err := h.svc.CancellationOf(r.Context(), p.ID)
	if err != nil {
		return err
	}
	if ok {
		v.Cancellation = CancellationViewOf(c)
	}
	httpapi.WriteJSON(w, http.StatusOK, v)
	return nil
}
