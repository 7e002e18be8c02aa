package api

import (
	"net/http"
	"time"

	"github.com/stampede-lab/stampede/internal/httpapi"
	"github.com/stampede-lab/stampede/pay"
)

// CancellationView is a payment's cancellation as the API shows it.
type CancellationView struct {
	Status pay.CancellationStatus `json:"status"`
	// Action is what carried it out (void, refund or none); ActionID the
	// void's or the refund's id. Both are left out while REQUESTED.
	Action   pay.CancelAction `json:"action,omitempty"`
	ActionID string           `json:"action_id,omitempty"`
	// Reason is the merchant's reason; Code and Outcome say why it
	// stands as it does.
	Reason    string    `json:"reason,omitempty"`
	Code      string    `json:"code"`
	Outcome   string    `json:"outcome"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// CancellationViewOf renders c for the API; its outcome passes through
// pay.SafeReason.
func CancellationViewOf(c pay.Cancellation) *CancellationView {
	o := pay.SafeReason(c.Outcome)
	return &CancellationView{Status: c.Status, Action: c.Action, ActionID: c.ActionID, Reason: c.Reason,
		Code: pay.ReasonCode(o), Outcome: o, CreatedAt: c.CreatedAt, UpdatedAt: c.UpdatedAt}
}

// cancelBody is POST /v1/payments/{id}/cancel's body.
type cancelBody struct {
	Reason *string `json:"reason"`
}

// cancel answers POST /v1/payments/{id}/cancel with the payment and its
// cancellation: 202 while the cancellation waits (REQUESTED: the payment
// is still PENDING or UNKNOWN), 200 once it is carried out or closed. The
// body may be left out.
func (h *handler) cancel(w http.ResponseWriter, r *http.Request) error {
	m, err := h.authenticate(r)
	if err != nil {
		return err
	}
	key, err := operationKey(r, "cancellation")
	if err != nil {
		return err
	}
	var b cancelBody
	if r.ContentLength != 0 {
		if err := httpapi.DecodeJSON(w, r, &b, h.cfg.MaxBody, `"reason"`); err != nil {
			return err
		}
	}
	body := pay.CancelBody{}
	if b.Reason != nil {
		if *b.Reason == "" {
			return pay.Invalid("reason", "must not be empty (leave it out instead)")
		}
		body.Reason = *b.Reason
	}
	c, p, replayed, err := h.svc.Cancel(r.Context(), m.ID, r.PathValue("id"), key, body)
	if err != nil {
		return err
	}
	code := http.StatusOK
	if c.Status == pay.CancelRequested {
		code = http.StatusAccepted
	}
	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	v := ViewOf(p)
	v.Cancellation = CancellationViewOf(c)
	httpapi.WriteJSON(w, code, v)
	return nil
}
