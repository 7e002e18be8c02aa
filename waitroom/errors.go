package waitroom

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/stampede-lab/stampede/internal/httpapi"
)

// Error is the waiting room's error: the one error type of every Stampede
// API (package httpapi), with a code, the field it concerns (if any) and a
// message safe to show clients.
type Error = httpapi.Error

// Code classifies an Error for clients; Code.Status maps each code to its
// one HTTP status.
type Code = httpapi.Code

// The error codes the waiting room returns.
const (
	CodeInvalid      = httpapi.CodeInvalid      // 400: a field of the request is wrong
	CodeUnauthorized = httpapi.CodeUnauthorized // 401: missing or bad token
	CodeForbidden    = httpapi.CodeForbidden    // 403: a token for someone else
	CodeNotFound     = httpapi.CodeNotFound     // 404: no such room, ticket or path
	CodeConflict     = httpapi.CodeConflict     // 409: the user holds a ticket the request cannot prove
	CodeMethod       = httpapi.CodeMethod       // 405: wrong HTTP method
	CodeTooLarge     = httpapi.CodeTooLarge     // 413: request body over the limit
	CodeRateLimited  = httpapi.CodeRateLimited  // 429: too many joins from one client address
	CodeBusy         = httpapi.CodeBusy         // 503: too many challenges in flight
	CodeUnsupported  = httpapi.CodeUnsupported  // 415: wrong media type
	CodeInternal     = httpapi.CodeInternal     // 500: a bug
	CodeUnavailable  = httpapi.CodeUnavailable  // 503: the store cannot be reached in time
)

// fieldError is an invalid-input error naming field.
func fieldError(field, format string, args ...any) error {
	return httpapi.Invalid(field, format, args...)
}

// Unavailable wraps a store failure (unreachable, frozen, too slow): 503
// with Retry-After; the cause is logged, never shown.
func Unavailable(err error) error {
	return httpapi.Unavailable("the waiting room's store", err)
}

// ErrorCode returns err's code: an *Error's own, not_found for ErrNoRoom
// and ErrNoTicket, unavailable for a context deadline or cancellation,
// internal otherwise.
func ErrorCode(err error) Code {
	switch {
	case errors.Is(err, ErrNoRoom), errors.Is(err, ErrNoTicket):
		if _, ok := errors.AsType[*Error](err); !ok {
			return CodeNotFound
		}
	}
	return httpapi.CodeOf(err)
}

// mapError is the API's httpapi.Config.MapError: the store's sentinel
// errors become not-found problems naming the room or user of the path.
func mapError(r *http.Request, err error) error {
	switch {
	case errors.Is(err, ErrNoRoom):
		return &Error{Code: CodeNotFound, Err: err,
			Message: fmt.Sprintf("room %q does not exist; an admin creates it with PUT /v1/rooms/{room}", r.PathValue("room"))}
	case errors.Is(err, ErrNoTicket):
		return &Error{Code: CodeNotFound, Err: err,
			Message: fmt.Sprintf("user %q has no ticket in room %q; join first", r.PathValue("user"), r.PathValue("room"))}
	}
	return err
}
