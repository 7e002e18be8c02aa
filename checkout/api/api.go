// Package api is the checkout's HTTP API, over the checkout domain
// (checkout.Service): its handlers, its OpenAPI description
// (openapi.yaml, embedded and served on /openapi.json), and the mapping of
// the buyer's headers (Stampede-User, Stampede-Admission) to a
// checkout.Buyer, whose admission the service verifies.
package api

import (
	"crypto/sha256"
	"crypto/subtle"
	_ "embed"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/checkout"
	"github.com/stampede-lab/stampede/internal/httpapi"
	"github.com/stampede-lab/stampede/protocol"
)

//go:embed openapi.yaml
var openapiYAML []byte

var openAPI = sync.OnceValue(func() *httpapi.Spec { return httpapi.MustLoadSpec(openapiYAML) })

// OpenAPI returns the checkout API's OpenAPI 3 description (openapi.yaml,
// embedded), as served on /openapi.json.
func OpenAPI() *httpapi.Spec { return openAPI() }

// Config configures the checkout API. Validate names its fields in
// snake_case, the words of `stampede serve checkout`'s flags.
type Config struct {
	// AdminToken authorizes POST /v1/events/{event} and reading any
	// order ("Authorization: Bearer <AdminToken>"); at least 16 bytes.
	AdminToken string
	// MaxBody is the request body limit in bytes.
	MaxBody int64
	// Logger receives the request log and the causes of 5xx answers.
	Logger *slog.Logger
}

// DefaultConfig returns a 4 KiB body limit and the default logger;
// AdminToken must be set.
func DefaultConfig() Config {
	return Config{MaxBody: 4096, Logger: slog.Default()}
}

// Validate reports every unusable field at once.
func (c Config) Validate() error {
	var f stampede.Fields
	if len(c.AdminToken) < 16 {
		f.Add("admin_token", "must be at least 16 bytes, got %d", len(c.AdminToken))
	}
	if c.MaxBody < 256 {
		f.Add("max_body", "must be at least 256 bytes, got %d", c.MaxBody)
	}
	if c.Logger == nil {
		f.Add("logger", "must not be nil")
	}
	return f.Err()
}

type handler struct {
	svc       *checkout.Service
	cfg       Config
	adminHash [32]byte
}

// New returns the checkout API on httpapi:
//
//	POST /v1/events/{event}           admin: create an event {"seats","price","currency"}
//	GET  /v1/events/{event}           seats, seats_left, held, sold
//	POST /v1/events/{event}/holds     buyer: hold {"seats": n}
//	GET  /v1/holds/{id}               buyer: the hold
//	POST /v1/holds/{id}/purchase      buyer: pay for the hold; the order
//	GET  /v1/orders/{id}              buyer (or admin): the order
//
// and /healthz, /readyz (the store's Ping as "store"), /metrics (reg; nil:
// a new registry) and /openapi.json. A buyer is the gate's Stampede-User
// (and Stampede-Admission, verified by the service before it holds seats
// or pays). An answer about an order whose payment ended
// carries "Stampede-Release: done", so that the gate frees the slot.
func New(svc *checkout.Service, cfg Config, reg *prometheus.Registry) (*httpapi.API, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	api, err := httpapi.New(httpapi.Config{
		Name:     "checkout",
		Logger:   cfg.Logger,
		Registry: reg,
		MapError: func(_ *http.Request, err error) error { return checkout.MapError(err) },
		Spec:     OpenAPI().JSON,
	})
	if err != nil {
		return nil, err
	}
	h := &handler{svc: svc, cfg: cfg, adminHash: sha256.Sum256([]byte(cfg.AdminToken))}
	api.Handle("/v1/events/{event}", httpapi.Methods{http.MethodPost: h.createEvent, http.MethodGet: h.getEvent})
	api.Handle("/v1/events/{event}/holds", httpapi.Methods{http.MethodPost: h.hold})
	api.Handle("/v1/holds/{id}", httpapi.Methods{http.MethodGet: h.getHold})
	api.Handle("/v1/holds/{id}/purchase", httpapi.Methods{http.MethodPost: h.purchase})
	api.Handle("/v1/orders/{id}", httpapi.Methods{http.MethodGet: h.getOrder})
	api.AddCheck(httpapi.Check{Name: "store", Ping: svc.Store().Ping})
	return api, nil
}

// admin reports whether r carries the admin token; a wrong bearer token
// is 401.
func (h *handler) admin(r *http.Request) (bool, error) {
	auth := r.Header.Get("Authorization")
	if auth == "" {
		return false, nil
	}
	scheme, token, ok := strings.Cut(auth, " ")
	got := sha256.Sum256([]byte(strings.TrimSpace(token)))
	if !ok || !strings.EqualFold(scheme, "Bearer") || subtle.ConstantTimeCompare(got[:], h.adminHash[:]) != 1 {
		return false, &checkout.Error{Code: stampede.Unauthorized, Message: "the admin token is not valid"}
	}
	return true, nil
}

// requireAdmin fails unless r carries the admin token.
func (h *handler) requireAdmin(r *http.Request) error {
	ok, err := h.admin(r)
	if err == nil && !ok {
		err = &checkout.Error{Code: stampede.Unauthorized, Message: "the admin token is required: Authorization: Bearer <token>"}
	}
	return err
}

func buyerOf(r *http.Request) checkout.Buyer {
	return checkout.Buyer{User: r.Header.Get(protocol.HeaderUser), Admission: r.Header.Get(protocol.HeaderAdmission)}
}

// eventJSON is an event as the API shows it.
type eventJSON struct {
	ID        string    `json:"id"`
	Seats     int       `json:"seats"`
	SeatsLeft int       `json:"seats_left"`
	Held      int       `json:"held"`
	Sold      int       `json:"sold"`
	Price     int64     `json:"price"`
	Currency  string    `json:"currency"`
	CreatedAt time.Time `json:"created_at"`
}

func eventView(e checkout.Event) eventJSON {
	return eventJSON{ID: e.ID, Seats: e.Seats, SeatsLeft: e.SeatsLeft, Held: e.Held(), Sold: e.Sold, Price: e.Price,
		Currency: e.Currency, CreatedAt: e.CreatedAt.UTC()}
}

// holdJSON is a hold as the API shows it.
type holdJSON struct {
	ID        string             `json:"id"`
	EventID   string             `json:"event_id"`
	UserID    string             `json:"user_id"`
	Seats     []int              `json:"seats"`
	Amount    int64              `json:"amount"`
	Currency  string             `json:"currency"`
	State     checkout.HoldState `json:"state"`
	Reason    string             `json:"reason,omitempty"`
	ExpiresAt time.Time          `json:"expires_at"`
	CreatedAt time.Time          `json:"created_at"`
}

func holdView(h checkout.Hold) holdJSON {
	return holdJSON{ID: h.ID, EventID: h.EventID, UserID: h.User, Seats: h.Seats, Amount: h.Amount, Currency: h.Currency,
		State: h.State, Reason: h.Reason, ExpiresAt: h.ExpiresAt.UTC(), CreatedAt: h.CreatedAt.UTC()}
}

// orderJSON is an order as the API shows it.
type orderJSON struct {
	ID            string               `json:"id"`
	HoldID        string               `json:"hold_id"`
	EventID       string               `json:"event_id"`
	UserID        string               `json:"user_id"`
	Seats         []int                `json:"seats"`
	Amount        int64                `json:"amount"`
	Currency      string               `json:"currency"`
	Status        checkout.OrderStatus `json:"status"`
	PaymentID     string               `json:"payment_id,omitempty"`
	PaymentStatus string               `json:"payment_status,omitempty"`
	Reason        string               `json:"reason,omitempty"`
	CreatedAt     time.Time            `json:"created_at"`
	UpdatedAt     time.Time            `json:"updated_at"`
}

func orderView(o checkout.Order) orderJSON {
	return orderJSON{ID: o.ID, HoldID: o.HoldID, EventID: o.EventID, UserID: o.User, Seats: o.Seats, Amount: o.Amount,
		Currency: o.Currency, Status: o.Status, PaymentID: o.PaymentID, PaymentStatus: string(o.PaymentStatus),
		Reason: o.Reason, CreatedAt: o.CreatedAt.UTC(), UpdatedAt: o.UpdatedAt.UTC()}
}

// createEventBody is POST /v1/events/{event}'s body.
type createEventBody struct {
	Seats    *int    `json:"seats"`
	Price    *int64  `json:"price"`
	Currency *string `json:"currency"`
}

func (h *handler) createEvent(w http.ResponseWriter, r *http.Request) error {
	if err := h.requireAdmin(r); err != nil {
		return err
	}
	var b createEventBody
	if err := httpapi.DecodeJSON(w, r, &b, h.cfg.MaxBody, `"seats", "price", "currency"`); err != nil {
		return err
	}
	switch {
	case b.Seats == nil:
		return stampede.InvalidField("seats", "is required")
	case b.Price == nil:
		return stampede.InvalidField("price", "is required")
	case b.Currency == nil:
		return stampede.InvalidField("currency", "is required")
	}
	e, err := h.svc.CreateEvent(r.Context(), r.PathValue("event"), *b.Seats, *b.Price, *b.Currency)
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusCreated, eventView(e))
	return nil
}

func (h *handler) getEvent(w http.ResponseWriter, r *http.Request) error {
	e, err := h.svc.Event(r.Context(), r.PathValue("event"))
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, eventView(e))
	return nil
}

// holdBody is POST /v1/events/{event}/holds's body.
type holdBody struct {
	Seats *int `json:"seats"`
}

func (h *handler) hold(w http.ResponseWriter, r *http.Request) error {
	b := buyerOf(r)
	if err := b.Validate(); err != nil {
		return err
	}
	var body holdBody
	if err := httpapi.DecodeJSON(w, r, &body, h.cfg.MaxBody, `"seats"`); err != nil {
		return err
	}
	if body.Seats == nil {
		return stampede.InvalidField("seats", "is required")
	}
	hold, err := h.svc.Hold(r.Context(), r.PathValue("event"), b, *body.Seats)
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusCreated, holdView(hold))
	return nil
}

func (h *handler) getHold(w http.ResponseWriter, r *http.Request) error {
	b := buyerOf(r)
	if err := b.Validate(); err != nil {
		return err
	}
	hold, err := h.svc.GetHold(r.Context(), r.PathValue("id"), b)
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, holdView(hold))
	return nil
}

// writeOrder answers o: 200 when its payment ended (with Stampede-Release:
// done), 202 while it is pending.
func writeOrder(w http.ResponseWriter, o checkout.Order) {
	status := http.StatusAccepted
	if o.Status.Ended() {
		status = http.StatusOK
		w.Header().Set(protocol.HeaderRelease, protocol.ReleaseDone)
	}
	httpapi.WriteJSON(w, status, orderView(o))
}

func (h *handler) purchase(w http.ResponseWriter, r *http.Request) error {
	if r.ContentLength > 0 {
		var none struct{}
		if err := httpapi.DecodeJSON(w, r, &none, h.cfg.MaxBody, "no fields"); err != nil {
			return err
		}
	}
	o, err := h.svc.Purchase(r.Context(), r.PathValue("id"), buyerOf(r))
	if err != nil {
		return err
	}
	writeOrder(w, o)
	return nil
}

func (h *handler) getOrder(w http.ResponseWriter, r *http.Request) error {
	admin, err := h.admin(r)
	if err != nil {
		return err
	}
	b := buyerOf(r)
	if !admin {
		if err := b.Validate(); err != nil {
			return err
		}
	}
	o, err := h.svc.Order(r.Context(), r.PathValue("id"), b, admin)
	if errors.Is(err, checkout.ErrNotFound) {
		return &checkout.Error{Code: stampede.NotFound, Message: "no such order", Err: err}
	}
	if err != nil {
		return err
	}
	writeOrder(w, o)
	return nil
}
