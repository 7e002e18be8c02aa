package waitroom

import (
	"errors"
	"fmt"
	"net/http"
)

// Code classifies an Error for clients; each code maps to one HTTP status.
type Code string

// The error codes the waiting room returns.
const (
	CodeInvalid      Code = "invalid"      // a field of the request is wrong
	CodeUnauthorized Code = "unauthorized" // missing or bad token
	CodeForbidden    Code = "forbidden"    // a token for someone else
	CodeNotFound     Code = "not_found"    // no such room or ticket
	CodeTooLarge     Code = "too_large"    // request body over the limit
	CodeUnavailable  Code = "unavailable"  // the store cannot be reached
	CodeInternal     Code = "internal"     // a bug
	CodeUnsupported  Code = "unsupported"  // wrong media type
	CodeMethod       Code = "method"       // wrong HTTP method
)

// Error is the waiting room's error: a code, the field it concerns (if any)
// and a message for people.
type Error struct {
	Code    Code
	Field   string
	Message string
	Err     error // the cause, if any; never shown to clients
}

func (e *Error) Error() string {
	msg := e.Message
	if e.Field != "" {
		msg = e.Field + ": " + msg
	}
	if e.Err != nil {
		return fmt.Sprintf("waitroom: %s: %v", msg, e.Err)
	}
	return "waitroom: " + msg
}

func (e *Error) Unwrap() error { return e.Err }

// fieldError is an invalid-input error naming field.
func fieldError(field, format string, args ...any) error {
	return &Error{Code: CodeInvalid, Field: field, Message: fmt.Sprintf(format, args...)}
}

// Unavailable wraps a store failure.
func Unavailable(err error) error {
	return &Error{Code: CodeUnavailable, Message: "the waiting room's store is unavailable, try again shortly", Err: err}
}

// ErrorCode returns err's code: an *Error's own, not_found for ErrNoRoom
// and ErrNoTicket, internal otherwise.
func ErrorCode(err error) Code {
	var e *Error
	switch {
	case errors.As(err, &e):
		return e.Code
	case errors.Is(err, ErrNoRoom), errors.Is(err, ErrNoTicket):
		return CodeNotFound
	default:
		return CodeInternal
	}
}

// HTTPStatus maps an error to its HTTP status. It is the only place that
// does.
func HTTPStatus(err error) int {
	switch ErrorCode(err) {
	case CodeInvalid:
		return http.StatusBadRequest
	case CodeUnauthorized:
		return http.StatusUnauthorized
	case CodeForbidden:
		return http.StatusForbidden
	case CodeNotFound:
		return http.StatusNotFound
	case CodeTooLarge:
		return http.StatusRequestEntityTooLarge
	case CodeUnavailable:
		return http.StatusServiceUnavailable
	case CodeUnsupported:
		return http.StatusUnsupportedMediaType
	case CodeMethod:
		return http.StatusMethodNotAllowed
	default:
		return http.StatusInternalServerError
	}
}
