package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"net/http"
	"time"

	"github.com/stampede-lab/stampede/protocol"
	"github.com/stampede-lab/stampede/waitroom"
)

// admissionToken signs the admission token (a JWT) of admitted ticket t,
// or returns "" when its lease ends within the current second (tokens
// count whole seconds; it is over for any checkout that would see it).
// The admission began one room lease before the lease's end (before any
// sliding by a gate).
func (h *handler) admissionToken(ctx context.Context, t waitroom.Ticket) (string, error) {
	return h.svc.SignAdmission(ctx, h.admissions, t, h.signer.Now())
}

// authCheckout checks the checkout key in constant time (hashing first).
func (h *handler) authCheckout(r *http.Request) error {
	if h.cfg.CheckoutKey == "" {
		return &waitroom.Error{Code: waitroom.CodeForbidden, Message: "online admission checks are off: the server has no checkout key (--checkout-key)"}
	}
	key, err := bearer(r, "checkout key")
	if err != nil {
		return err
	}
	got := sha256.Sum256([]byte(key))
	if subtle.ConstantTimeCompare(got[:], h.checkoutHash[:]) != 1 {
		return &waitroom.Error{Code: waitroom.CodeUnauthorized, Message: "checkout key invalid"}
	}
	return nil
}

// admissionBody is the body of POST .../admissions/check and /done.
type admissionBody struct {
	AdmissionToken *string `json:"admission_token"`
}

// admissionJSON answers POST .../admissions/check and /done.
type admissionJSON struct {
	// Held is true while the slot is held (after done: false).
	Held bool `json:"held"`
	// Released is set by done only: this call released the slot.
	Released *bool  `json:"released,omitempty"`
	Reason   string `json:"reason"`
	UserID   string `json:"user_id,omitempty"`
	Seq      int64  `json:"seq,omitempty"`
	// ExpiresAt is the lease's end while held (it may have slid past the
	// token's exp).
	ExpiresAt string `json:"expires_at,omitempty"`
}

// Reasons only the HTTP check gives: the token itself is unusable.
const (
	// ReasonInvalidToken: malformed, tampered or signed by an unknown key.
	ReasonInvalidToken = "invalid_token"
	// ReasonOtherRoom: a genuine token for another room.
	ReasonOtherRoom = "other_room"
)

// readAdmission authorizes the checkout, decodes the body and verifies
// the token offline. A token that does not verify is not an error: it
// yields a reason and zero claims.
func (h *handler) readAdmission(w http.ResponseWriter, r *http.Request) (string, waitroom.AdmissionClaims, string, error) {
	if err := h.authCheckout(r); err != nil {
		return "", waitroom.AdmissionClaims{}, "", err
	}
	room, err := roomParam(r)
	if err != nil {
		return "", waitroom.AdmissionClaims{}, "", err
	}
	var body admissionBody
	if err := h.decodeJSON(w, r, &body, `"admission_token"`); err != nil {
		return "", waitroom.AdmissionClaims{}, "", err
	}
	if body.AdmissionToken == nil || *body.AdmissionToken == "" {
		return "", waitroom.AdmissionClaims{}, "", fieldError("admission_token", "is required")
	}
	c, err := h.admissions.Verify(*body.AdmissionToken, room)
	if err != nil {
		e, ok := errors.AsType[*waitroom.Error](err)
		switch {
		case ok && e.Message == protocol.MsgExpired:
			return room, c, waitroom.ReasonExpired, nil
		case ok && e.Code == waitroom.CodeForbidden:
			return room, c, ReasonOtherRoom, nil
		case ok && e.Code == waitroom.CodeUnauthorized:
			return room, c, ReasonInvalidToken, nil
		}
		return "", waitroom.AdmissionClaims{}, "", err
	}
	return room, c, "", nil
}

// admissionView shows st for claims c.
func admissionView(c waitroom.AdmissionClaims, st waitroom.AdmissionStatus) admissionJSON {
	v := admissionJSON{Held: st.Held, Reason: st.Reason, UserID: c.User, Seq: c.Seq}
	if st.Held && !st.Ticket.LeaseExpires.IsZero() {
		v.ExpiresAt = st.Ticket.LeaseExpires.UTC().Format(time.RFC3339Nano)
	}
	return v
}

func (h *handler) checkAdmission(w http.ResponseWriter, r *http.Request) error {
	room, c, reason, err := h.readAdmission(w, r)
	if err != nil {
		return err
	}
	if reason != "" {
		writeJSON(w, http.StatusOK, admissionJSON{Reason: reason, UserID: c.User, Seq: c.Seq})
		return nil
	}
	st, err := h.svc.CheckAdmission(r.Context(), room, c.User, c.Seq)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, admissionView(c, st))
	return nil
}

func (h *handler) doneAdmission(w http.ResponseWriter, r *http.Request) error {
	room, c, reason, err := h.readAdmission(w, r)
	if err != nil {
		return err
	}
	if reason != "" {
		no := false
		writeJSON(w, http.StatusOK, admissionJSON{Reason: reason, UserID: c.User, Seq: c.Seq, Released: &no})
		return nil
	}
	st, err := h.svc.ReleaseAdmission(r.Context(), room, c.User, c.Seq)
	if err != nil {
		return err
	}
	released := st.Held
	v := admissionView(c, st)
	v.Held, v.ExpiresAt, v.Released = false, "", &released
	if released {
		v.Reason = waitroom.ReasonReleased
	}
	writeJSON(w, http.StatusOK, v)
	return nil
}
