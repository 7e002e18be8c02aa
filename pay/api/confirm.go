package api

import (
	"net/http"

	"github.com/stampede-lab/stampede/internal/httpapi"
)

// confirm answers POST /v1/payments/{id}/confirm: the merchant goes on
// with the payment's order, so the closure pass leaves the payment alone.
// It takes no body (or {}) and no Idempotency-Key: confirming again
// answers the first confirmation.
func (h *handler) confirm(w http.ResponseWriter, r *http.Request) error {
	m, err := h.authenticate(r)
	if err != nil {
		return err
	}
	if r.ContentLength != 0 {
		var b struct{}
		if err := httpapi.DecodeJSON(w, r, &b, h.cfg.MaxBody, "none"); err != nil {
			return err
		}
	}
	c, _, err := h.svc.ConfirmOrder(r.Context(), m.ID, r.PathValue("id"))
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, c)
	return nil
}
