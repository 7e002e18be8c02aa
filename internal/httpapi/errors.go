// Package httpapi is the one HTTP layer of Stampede's services: the waiting
// room, the payment API and the institution simulator all answer through
// it, so that the same client mistake gets the same status and the same
// body everywhere.
//
// It holds the error type and the single table from error code to HTTP
// status; RFC 9457 problem+json error bodies; an API mux whose handlers
// return errors, with JSON 404 and 405 (with Allow) answers; one request
// log, panic guard and Prometheus request metrics; /healthz, /readyz,
// /metrics and /openapi.json; and one http.Server constructor that sets
// every timeout.
package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Code classifies an Error for clients. Every code maps to exactly one
// HTTP status, in Status; codes are stable wire strings.
type Code string

// The error codes of every Stampede API.
const (
	CodeInvalid      Code = "invalid"            // 400: a field, header or parameter of the request is wrong
	CodeUnauthorized Code = "unauthorized"       // 401: a missing or invalid credential
	CodeForbidden    Code = "forbidden"          // 403: a valid credential for something else
	CodeNotFound     Code = "not_found"          // 404: no such resource or path
	CodeMethod       Code = "method_not_allowed" // 405: the path exists, the method does not
	CodeConflict     Code = "conflict"           // 409: the resource's state forbids the request now
	CodeOrderExists  Code = "order_exists"       // 409: the order already has a live or approved payment
	CodeTooLarge     Code = "too_large"          // 413: request body over the limit
	CodeUnsupported  Code = "unsupported"        // 415: wrong media type
	CodeMismatch     Code = "mismatch"           // 422: an idempotency key reused with a different request
	CodeRateLimited  Code = "rate_limited"       // 429: too many requests from this client
	CodeInternal     Code = "internal"           // 500: a bug; details are logged, never shown
	CodeInstitution  Code = "institution_error"  // 500: the simulated institution's ERROR mode
	CodeUnavailable  Code = "unavailable"        // 503: a dependency is down, frozen or too slow; retry later
	CodeBusy         Code = "busy"               // 503: too many requests held; nothing was recorded
	CodeShuttingDown Code = "shutting_down"      // 503: the server is closing; nothing was recorded
	CodeStatusDown   Code = "status_unavailable" // 503: the institution's status API is down
	CodeTimeout      Code = "timeout"            // 504: a held request was not processed in time
	CodeReleased     Code = "released"           // 504: a held request was released by a reset or shutdown
)

// statuses is the one table from code to HTTP status.
var statuses = map[Code]int{
	CodeInvalid:      http.StatusBadRequest,
	CodeUnauthorized: http.StatusUnauthorized,
	CodeForbidden:    http.StatusForbidden,
	CodeNotFound:     http.StatusNotFound,
	CodeMethod:       http.StatusMethodNotAllowed,
	CodeConflict:     http.StatusConflict,
	CodeOrderExists:  http.StatusConflict,
	CodeTooLarge:     http.StatusRequestEntityTooLarge,
	CodeUnsupported:  http.StatusUnsupportedMediaType,
	CodeMismatch:     http.StatusUnprocessableEntity,
	CodeRateLimited:  http.StatusTooManyRequests,
	CodeInternal:     http.StatusInternalServerError,
	CodeInstitution:  http.StatusInternalServerError,
	CodeUnavailable:  http.StatusServiceUnavailable,
	CodeBusy:         http.StatusServiceUnavailable,
	CodeShuttingDown: http.StatusServiceUnavailable,
	CodeStatusDown:   http.StatusServiceUnavailable,
	CodeTimeout:      http.StatusGatewayTimeout,
	CodeReleased:     http.StatusGatewayTimeout,
}

// Codes returns every known code (for documentation and tests).
func Codes() []Code {
	out := make([]Code, 0, len(statuses))
	for c := range statuses {
		out = append(out, c)
	}
	return out
}

// Status returns the HTTP status of code: the table's entry, or 500 for a
// code it does not know.
func (c Code) Status() int {
	if s, ok := statuses[c]; ok {
		return s
	}
	return http.StatusInternalServerError
}

// DefaultRetryAfter is the Retry-After of a 503 or 429 answer whose error
// does not set its own.
const DefaultRetryAfter = time.Second

// Error is the error type of every Stampede API: a code, the field at
// fault (if any) and a message safe to show a client. Err, the cause, goes
// to the log only.
type Error struct {
	Code Code
	// Field names the JSON field, header or path parameter at fault.
	Field string
	// Message is for people, safe to show to any client.
	Message string
	// Err is the cause, if any; logged, never shown to clients.
	Err error
	// RetryAfter, when set, is sent as Retry-After (whole seconds, at
	// least 1) on the answer; 503 and 429 answers default to
	// DefaultRetryAfter.
	RetryAfter time.Duration
	// Extra holds extension members added to the problem body, such as
	// the id of an existing payment or a queue position. Keys must not
	// clash with the standard members.
	Extra map[string]any
	// Status is the HTTP status a client received (see ReadProblem); zero
	// on the server side, where Code decides the status.
	Status int
}

// Error formats the error as "[HTTP status: ]code: field: message[: cause]".
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
		return msg + ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// HTTPStatus returns the status the error answers with: Status when a
// client received it, otherwise its code's.
func (e *Error) HTTPStatus() int {
	if e.Status != 0 {
		return e.Status
	}
	return e.Code.Status()
}

// Invalid returns a CodeInvalid error naming field.
func Invalid(field, format string, args ...any) *Error {
	return &Error{Code: CodeInvalid, Field: field, Message: fmt.Sprintf(format, args...)}
}

// Errorf returns an error with code and a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Unavailable wraps the failure of a dependency (what, such as "redis")
// that a later retry may cure: 503 with Retry-After.
func Unavailable(what string, err error) *Error {
	return &Error{Code: CodeUnavailable, Message: what + " is unavailable, try again shortly", Err: err}
}

// Internal wraps an unexpected failure: 500, the cause logged only.
func Internal(err error) *Error {
	return &Error{Code: CodeInternal, Message: "internal error; the server logged the details", Err: err}
}

// As returns err as an *Error: its own when it wraps one; a context
// deadline or cancellation as CodeUnavailable (a dependency did not
// answer in time); anything else as CodeInternal. nil gives nil.
func As(err error) *Error {
	if err == nil {
		return nil
	}
	if e, ok := errors.AsType[*Error](err); ok {
		return e
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return Unavailable("a dependency", err)
	}
	return Internal(err)
}

// CodeOf returns the code of err (see As); the empty code for nil.
func CodeOf(err error) Code {
	if err == nil {
		return ""
	}
	return As(err).Code
}

// StatusOf returns the HTTP status err answers with (see As); 200 for nil.
func StatusOf(err error) int {
	if err == nil {
		return http.StatusOK
	}
	return As(err).HTTPStatus()
}
