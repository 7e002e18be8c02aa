package institution

import (
	"errors"
	"fmt"
	"net/http"
)

// Code classifies an Error; each code maps to one HTTP status (see
// HTTPStatus).
type Code string

// The error codes of the institution's API.
const (
	CodeInvalid           Code = "invalid"            // 400: a field of the request is wrong
	CodeUnauthorized      Code = "unauthorized"       // 401: missing or wrong admin token
	CodeNotFound          Code = "not_found"          // 404: no record for the external key
	CodeNoRoute           Code = "no_route"           // 404: no such path
	CodeMethod            Code = "method"             // 405: wrong HTTP method
	CodeConflict          Code = "conflict"           // 409: the external key was used with another amount or currency
	CodeTooLarge          Code = "too_large"          // 413: request body over the limit
	CodeUnsupported       Code = "unsupported"        // 415: not application/json
	CodeInstitution       Code = "institution_error"  // 500: mode ERROR; nothing was recorded
	CodeInternal          Code = "internal"           // 500: a bug
	CodeBusy              Code = "busy"               // 503: too many requests held; nothing was recorded
	CodeShuttingDown      Code = "shutting_down"      // 503: the server is closing; nothing was recorded
	CodeStatusUnavailable Code = "status_unavailable" // 503: status_api is DOWN
	CodeTimeout           Code = "timeout"            // 504: the request was held and not processed, or the caller left
	CodeReleased          Code = "released"           // 504: a held request was released by a reset or shutdown
)

// Error is an error of the institution's API: a code, the field it
// concerns (if any) and a message for people. The server answers it as
// {"error":{"code","message","field"}}; the Client returns it (wrapped in
// one of the sentinel errors) with Status set to the HTTP status received.
type Error struct {
	Code    Code
	Field   string
	Message string
	// Status is the HTTP status the Client received; 0 on the server side.
	Status int
	// Err is the cause, if any; never shown to clients.
	Err error
}

// Error formats the error as "institution: [HTTP status: ]code: field: message".
func (e *Error) Error() string {
	msg := e.Message
	if e.Field != "" {
		msg = e.Field + ": " + msg
	}
	if e.Code != "" {
		msg = string(e.Code) + ": " + msg
	}
	if e.Status != 0 {
		msg = fmt.Sprintf("HTTP %d: %s", e.Status, msg)
	}
	if e.Err != nil {
		return fmt.Sprintf("institution: %s: %v", msg, e.Err)
	}
	return "institution: " + msg
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// fieldError is an invalid-input error naming field.
func fieldError(field, format string, args ...any) *Error {
	return &Error{Code: CodeInvalid, Field: field, Message: fmt.Sprintf(format, args...)}
}

// ErrorCode returns err's code: an *Error's own, internal otherwise.
func ErrorCode(err error) Code {
	if e, ok := errors.AsType[*Error](err); ok {
		return e.Code
	}
	return CodeInternal
}

// HTTPStatus maps an error to its HTTP status. It is the only place that
// does.
func HTTPStatus(err error) int {
	switch ErrorCode(err) {
	case CodeInvalid:
		return http.StatusBadRequest
	case CodeUnauthorized:
		return http.StatusUnauthorized
	case CodeNotFound, CodeNoRoute:
		return http.StatusNotFound
	case CodeMethod:
		return http.StatusMethodNotAllowed
	case CodeConflict:
		return http.StatusConflict
	case CodeTooLarge:
		return http.StatusRequestEntityTooLarge
	case CodeUnsupported:
		return http.StatusUnsupportedMediaType
	case CodeBusy, CodeShuttingDown, CodeStatusUnavailable:
		return http.StatusServiceUnavailable
	case CodeTimeout, CodeReleased:
		return http.StatusGatewayTimeout
	default: // CodeInstitution, CodeInternal
		return http.StatusInternalServerError
	}
}
