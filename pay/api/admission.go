package api

import (
	"errors"
	"net/http"

	"github.com/stampede-lab/stampede/pay"
	"github.com/stampede-lab/stampede/protocol"
)

// requireAdmission is POST /v1/payments's admission rule when
// Config.Admission is set: a request whose idempotency key is already
// known passes (a retry replays the payment whatever became of the
// admission since); a new one must carry an admission token (header
// Stampede-Admission) that verifies against the waiting room's keys and,
// with an online check, still holds its slot. A missing or bad token is
// 401 naming the header, another room's or a released one 403, and 503
// when the waiting room (its keys or its online check) cannot say. When
// the request names a user (Stampede-User), the admission must be that
// user's.
func (h *handler) requireAdmission(r *http.Request, merchantID, key string) error {
	if h.cfg.Admission == nil {
		return nil
	}
	if _, err := h.store.Idempotency(r.Context(), pay.ScopedKey(merchantID, key)); err == nil {
		return nil
	} else if !errors.Is(err, pay.ErrNotFound) {
		return err
	}
	_, err := h.cfg.Admission.Verify(r.Context(), r.Header.Get(protocol.HeaderAdmission), r.Header.Get(protocol.HeaderUser))
	return err
}
