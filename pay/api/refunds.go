package api

import (
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/stampede-lab/stampede/internal/httpapi"
	"github.com/stampede-lab/stampede/pay"
)

// RefundView is a refund as the API shows it.
type RefundView struct {
	ID        string             `json:"id"`
	PaymentID string             `json:"payment_id"`
	Amount    int64              `json:"amount"`
	Currency  string             `json:"currency"`
	Reason    string             `json:"reason,omitempty"`
	Status    pay.RefundStatus   `json:"status"`
	CreatedAt time.Time          `json:"created_at"`
	UpdatedAt time.Time          `json:"updated_at"`
	History   []RefundChangeView `json:"history,omitempty"`
}

// RefundChangeView is one change of a refund's status.
type RefundChangeView struct {
	From   pay.RefundStatus `json:"from,omitempty"`
	To     pay.RefundStatus `json:"to"`
	Code   string           `json:"code"`
	Reason string           `json:"reason"`
	At     time.Time        `json:"at"`
}

// RefundViewOf renders r for the API; reasons pass through
// pay.SafeReason.
func RefundViewOf(r pay.Refund) RefundView {
	v := RefundView{ID: r.ID, PaymentID: r.PaymentID, Amount: r.Amount, Currency: r.Currency, Reason: r.Reason,
		Status: r.Status, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
	for _, h := range r.History {
		s := pay.SafeReason(h.Reason)
		v.History = append(v.History, RefundChangeView{From: h.From, To: h.To, Code: pay.ReasonCode(s), Reason: s, At: h.At})
	}
	return v
}

// refundBody is POST /v1/payments/{id}/refunds's body.
type refundBody struct {
	Amount *int64  `json:"amount"`
	Reason *string `json:"reason"`
}

const refundFields = `"amount", "reason"`

// refund answers POST /v1/payments/{id}/refunds: 201 SUCCEEDED or
// FAILED, 202 while UNKNOWN.
func (h *handler) refund(w http.ResponseWriter, r *http.Request) error {
	m, err := h.authenticate(r)
	if err != nil {
		return err
	}
	key := r.Header.Get("Idempotency-Key")
	if key == "" {
		return pay.Invalid("Idempotency-Key", "header is required: a unique key per refund, reused only to retry the same request")
	}
	if err := pay.ValidateIdempotencyKey(key); err != nil {
		return err
	}
	if _, err := pay.ParseUUID(r.PathValue("id")); err != nil {
		return pay.Invalid("id", "must be a UUID")
	}
	var b refundBody
	if err := httpapi.DecodeJSON(w, r, &b, h.cfg.MaxBody, refundFields); err != nil {
		return err
	}
	body := pay.RefundBody{}
	if b.Amount != nil {
		if *b.Amount <= 0 {
			return pay.Invalid("amount", "must be positive (or left out to refund what is left)")
		}
		body.Amount = *b.Amount
	}
	if b.Reason != nil {
		if *b.Reason == "" {
			return pay.Invalid("reason", "must not be empty (leave it out instead)")
		}
		body.Reason = *b.Reason
	}
	ref, replayed, err := h.svc.Refund(r.Context(), m.ID, r.PathValue("id"), key, body)
	if err != nil {
		return err
	}
	code := http.StatusCreated
	if !ref.Status.Terminal() {
		code = http.StatusAccepted
	}
	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	ref.History = nil
	httpapi.WriteJSON(w, code, RefundViewOf(ref))
	return nil
}

// RefundList is GET /v1/payments/{id}/refunds's answer.
type RefundList struct {
	Refunds []RefundView `json:"refunds"`
	// Refunded sums the SUCCEEDED refunds; Held every refund but the
	// FAILED ones (what may have moved).
	Refunded int64 `json:"refunded"`
	Held     int64 `json:"held"`
}

// listRefunds answers GET /v1/payments/{id}/refunds.
func (h *handler) listRefunds(w http.ResponseWriter, r *http.Request) error {
	m, err := h.authenticate(r)
	if err != nil {
		return err
	}
	rs, err := h.svc.RefundsFor(r.Context(), m.ID, r.PathValue("id"))
	if err != nil {
		return err
	}
	out := RefundList{Refunds: make([]RefundView, 0, len(rs))}
	for _, x := range rs {
		out.Refunds = append(out.Refunds, RefundViewOf(x))
	}
	out.Held, out.Refunded = pay.Refunded(rs)
	httpapi.WriteJSON(w, http.StatusOK, out)
	return nil
}

// PaymentList is GET /v1/payments's answer.
type PaymentList struct {
	Payments []View `json:"payments"`
	// NextCursor, when set, is the cursor of the next page.
	NextCursor string `json:"next_cursor,omitempty"`
}

// listParams are the query parameters of GET /v1/payments.
var listParams = map[string]bool{"order_id": true, "status": true, "created_after": true, "created_before": true, "cursor": true, "limit": true}

// defaultPageSize is the page size when limit is left out.
const defaultPageSize = 20

// listPayments answers GET /v1/payments: the key's merchant's payments,
// filtered, by creation time, a page at a time.
func (h *handler) listPayments(w http.ResponseWriter, r *http.Request) error {
	m, err := h.authenticate(r)
	if err != nil {
		return err
	}
	v, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return pay.Invalid("query", "is not a valid query string")
	}
	q, err := parseListQuery(v)
	if err != nil {
		return err
	}
	q.MerchantID = m.ID
	ps, next, err := h.svc.ListPayments(r.Context(), q)
	if err != nil {
		return err
	}
	out := PaymentList{Payments: make([]View, 0, len(ps)), NextCursor: next}
	for _, p := range ps {
		out.Payments = append(out.Payments, ViewOf(p))
	}
	httpapi.WriteJSON(w, http.StatusOK, out)
	return nil
}

// parseListQuery reads GET /v1/payments's parameters, naming the one at
// fault: an unknown or repeated parameter is refused.
func parseListQuery(v url.Values) (pay.PaymentQuery, error) {
	q := pay.PaymentQuery{Limit: defaultPageSize}
	for name, vals := range v {
		if !listParams[name] {
			return q, pay.Invalid(name, "is not a parameter of this listing (order_id, status, created_after, created_before, cursor, limit)")
		}
		if len(vals) != 1 {
			return q, pay.Invalid(name, "must be given once")
		}
	}
	q.OrderID = v.Get("order_id")
	if s := v.Get("status"); s != "" {
		q.Status = pay.Status(s)
	}
	for _, t := range []struct {
		name string
		dst  *time.Time
	}{{"created_after", &q.CreatedFrom}, {"created_before", &q.CreatedTo}} {
		if s := v.Get(t.name); s != "" {
			at, err := time.Parse(time.RFC3339Nano, s)
			if err != nil {
				return q, pay.Invalid(t.name, "must be an RFC 3339 time, such as 2026-01-02T15:04:05Z")
			}
			*t.dst = at
		}
	}
	if s := v.Get("cursor"); s != "" {
		c, err := pay.ParseCursor(s)
		if err != nil {
			return q, err
		}
		q.After = c
	}
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > pay.MaxPageSize {
			return q, pay.Invalid("limit", "must be a whole number between 1 and %d", pay.MaxPageSize)
		}
		q.Limit = n
	}
	return q, nil
}
