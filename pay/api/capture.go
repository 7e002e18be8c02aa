package api

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/stampede-lab/stampede/internal/httpapi"
	"github.com/stampede-lab/stampede/pay"
	"github.com/stampede-lab/stampede/protocol"
)

// OperationView is a capture or void as the API shows it.
type OperationView struct {
	ID        string            `json:"id"`
	PaymentID string            `json:"payment_id"`
	Kind      pay.OperationKind `json:"kind"`
	Amount    int64             `json:"amount"`
	Currency  string            `json:"currency"`
	Status    pay.RefundStatus  `json:"status"`
	Code      string            `json:"code"`
	Reason    string            `json:"reason"`
	CreatedAt time.Time         `json:"created_at"`
	UpdatedAt time.Time         `json:"updated_at"`
}

// OperationViewOf renders op for the API; its reason passes through
// pay.SafeReason.
func OperationViewOf(op pay.Operation) OperationView {
	r := pay.SafeReason(op.Reason)
	return OperationView{ID: op.ID, PaymentID: op.PaymentID, Kind: op.Kind, Amount: op.Amount, Currency: op.Currency,
		Status: op.Status, Code: pay.ReasonCode(r), Reason: r, CreatedAt: op.CreatedAt, UpdatedAt: op.UpdatedAt}
}

// captureBody is POST /v1/payments/{id}/capture's body.
type captureBody struct {
	Amount *int64 `json:"amount"`
}

// operationKey reads and checks an operation request's Idempotency-Key
// header and the payment id of its path.
func operationKey(r *http.Request, what string) (string, error) {
	key := r.Header.Get("Idempotency-Key")
	if key == "" {
		return "", pay.Invalid("Idempotency-Key", "header is required: a unique key per %s, reused only to retry the same request", what)
	}
	if err := pay.ValidateIdempotencyKey(key); err != nil {
		return "", err
	}
	if _, err := pay.ParseUUID(r.PathValue("id")); err != nil {
		return "", pay.Invalid("id", "must be a UUID")
	}
	return key, nil
}

// capture answers POST /v1/payments/{id}/capture: 201 SUCCEEDED or
// FAILED, 202 while UNKNOWN; the body may be left out (the whole
// authorisation is captured).
func (h *handler) capture(w http.ResponseWriter, r *http.Request) error {
	m, err := h.authenticate(r)
	if err != nil {
		return err
	}
	key, err := operationKey(r, "capture")
	if err != nil {
		return err
	}
	var b captureBody
	if r.ContentLength != 0 {
		if err := httpapi.DecodeJSON(w, r, &b, h.cfg.MaxBody, `"amount"`); err != nil {
			return err
		}
	}
	body := pay.CaptureBody{}
	if b.Amount != nil {
		if *b.Amount <= 0 {
			return pay.Invalid("amount", "must be positive (or left out to capture the whole authorisation)")
		}
		body.Amount = *b.Amount
	}
	op, replayed, err := h.svc.Capture(r.Context(), m.ID, r.PathValue("id"), key, body)
	return writeOperation(w, op, replayed, err)
}

// void answers POST /v1/payments/{id}/void, as capture does; it takes no
// body.
func (h *handler) void(w http.ResponseWriter, r *http.Request) error {
	m, err := h.authenticate(r)
	if err != nil {
		return err
	}
	key, err := operationKey(r, "void")
	if err != nil {
		return err
	}
	if r.ContentLength != 0 {
		var b struct{}
		if err := httpapi.DecodeJSON(w, r, &b, h.cfg.MaxBody, "none"); err != nil {
			return err
		}
	}
	op, replayed, err := h.svc.Void(r.Context(), m.ID, r.PathValue("id"), key)
	return writeOperation(w, op, replayed, err)
}

// writeOperation writes a capture's or void's answer.
func writeOperation(w http.ResponseWriter, op pay.Operation, replayed bool, err error) error {
	if err != nil {
		return err
	}
	code := http.StatusCreated
	if !op.Status.Terminal() {
		code = http.StatusAccepted
	}
	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	httpapi.WriteJSON(w, code, OperationViewOf(op))
	return nil
}

// OperationList is GET /v1/payments/{id}/operations's answer.
type OperationList struct {
	Operations []OperationView `json:"operations"`
}

// listOperations answers GET /v1/payments/{id}/operations.
func (h *handler) listOperations(w http.ResponseWriter, r *http.Request) error {
	m, err := h.authenticate(r)
	if err != nil {
		return err
	}
	ops, err := h.svc.OperationsFor(r.Context(), m.ID, r.PathValue("id"))
	if err != nil {
		return err
	}
	out := OperationList{Operations: make([]OperationView, 0, len(ops))}
	for _, op := range ops {
		out.Operations = append(out.Operations, OperationViewOf(op))
	}
	httpapi.WriteJSON(w, http.StatusOK, out)
	return nil
}

// EventView is one event of the events feed: the payment event as the
// outbox published it.
type EventView struct {
	ID        string          `json:"id"` // the event's id: protocol.EventID(payment, seq)
	Type      string          `json:"type"`
	CreatedAt time.Time       `json:"created_at"`
	Data      json.RawMessage `json:"data"`
}

// EventList is GET /v1/events's answer.
type EventList struct {
	Events []EventView `json:"events"`
	// NextCursor is the after of the next page (the request's own when
	// there is nothing newer yet): poll with it.
	NextCursor string `json:"next_cursor"`
}

// events answers GET /v1/events?after=CURSOR&limit=N: the key's
// merchant's events in the order they were written.
func (h *handler) events(w http.ResponseWriter, r *http.Request) error {
	m, err := h.authenticate(r)
	if err != nil {
		return err
	}
	v, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return pay.Invalid("query", "is not a valid query string")
	}
	for name, vals := range v {
		if name != "after" && name != "limit" {
			return pay.Invalid(name, "is not a parameter of the events feed (after, limit)")
		}
		if len(vals) != 1 {
			return pay.Invalid(name, "must be given once")
		}
	}
	limit := pay.DefaultEventsLimit
	if s := v.Get("limit"); s != "" || v.Has("limit") {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > pay.MaxEventsLimit {
			return pay.Invalid("limit", "must be a whole number between 1 and %d", pay.MaxEventsLimit)
		}
		limit = n
	}
	page, err := h.svc.Events(r.Context(), m.ID, v.Get("after"), limit)
	if err != nil {
		return err
	}
	out := EventList{Events: make([]EventView, 0, len(page.Events)), NextCursor: page.Next}
	for _, e := range page.Events {
		out.Events = append(out.Events, EventView{ID: protocol.EventID(e.PaymentID, e.Seq), Type: e.Type, CreatedAt: e.CreatedAt, Data: json.RawMessage(e.Payload)})
	}
	httpapi.WriteJSON(w, http.StatusOK, out)
	return nil
}
