package api

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/internal/httpapi"
	"github.com/stampede-lab/stampede/waitroom"
)

// fieldError is an invalid-input error naming field.
func fieldError(field, format string, args ...any) error {
	return stampede.InvalidField(field, format, args...)
}

// mapError is the API's httpapi.Config.MapError: the store's sentinel
// errors become not-found problems naming the room or user of the path.
func mapError(r *http.Request, err error) error {
	switch {
	case errors.Is(err, waitroom.ErrNoRoom):
		return &waitroom.Error{Code: waitroom.CodeNotFound, Err: err,
			Message: fmt.Sprintf("room %q does not exist; an admin creates it with PUT /v1/rooms/{room}", r.PathValue("room"))}
	case errors.Is(err, waitroom.ErrNoTicket):
		return &waitroom.Error{Code: waitroom.CodeNotFound, Err: err,
			Message: fmt.Sprintf("user %q has no ticket in room %q; join first", r.PathValue("user"), r.PathValue("room"))}
	}
	return err
}

// serveJWKS answers GET /.well-known/jwks.json with the admission tokens'
// public keys.
func (h *handler) serveJWKS(w http.ResponseWriter, r *http.Request) error {
	w.Header().Set("Cache-Control", "public, max-age=300")
	httpapi.WriteJSON(w, http.StatusOK, h.admissions.JWKS())
	return nil
}
