package pay

import (
	"errors"
	"fmt"
	"net/http"
)

// Code classifies an Error for clients; each code maps to one HTTP status
// (see HTTPStatus).
type Code string

// The error codes the payment service returns.
const (
	CodeInvalid     Code = "invalid"     // a field of the request is wrong
	CodeNotFound    Code = "not_found"   // no such payment or idempotency key
	CodeConflict    Code = "conflict"    // the idempotency key is in flight, or the status moved on
	CodeMismatch    Code = "mismatch"    // the idempotency key was used with a different request
	CodeUnavailable Code = "unavailable" // the store cannot be reached
	CodeInternal    Code = "internal"    // a bug

	CodeTooLarge         Code = "too_large"   // request body over the limit
	CodeUnsupportedMedia Code = "unsupported" // wrong media type
)

// Error is the payment service's error: a code, the field it concerns (if
// any) and a message for people.
type Error struct {
	Code    Code
	Field   string // the JSON field (or header) at fault, for CodeInvalid
	Message string
	Err     error // the cause, if any; never shown to clients
}

// Error implements error.
func (e *Error) Error() string {
	msg := e.Message
	if e.Field != "" {
		msg = e.Field + ": " + msg
	}
	if e.Err != nil {
		return fmt.Sprintf("pay: %s: %v", msg, e.Err)
	}
	return "pay: " + msg
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Sentinel errors of the Store. Test for them with errors.Is.
var (
	// ErrNotFound: no payment with that ID, or no idempotency record with
	// that key.
	ErrNotFound = errors.New("pay: not found")
	// ErrStaleStatus: a compare-and-set Transition found the payment in a
	// status other than the expected one; nothing was written.
	ErrStaleStatus = errors.New("pay: payment status changed concurrently")
)

// IdempotencyConflict is returned by Store.CreatePending (use errors.As)
// when the idempotency key already names a payment. Record is the stored
// record: in flight (answer 409), completed with the same request hash
// (replay the stored response) or with a different one (answer 422).
type IdempotencyConflict struct {
	Record IdempotencyRecord
}

// Error implements error.
func (e *IdempotencyConflict) Error() string {
	return fmt.Sprintf("pay: idempotency key %q already used by payment %s (%s)", e.Record.Key, e.Record.PaymentID, e.Record.State)
}

// Invalid returns a CodeInvalid error naming field.
func Invalid(field, format string, args ...any) error {
	return &Error{Code: CodeInvalid, Field: field, Message: fmt.Sprintf(format, args...)}
}

// Unavailable wraps a storage failure that a retry may cure (connection
// refused or lost, database busy, store closed).
func Unavailable(err error) error {
	return &Error{Code: CodeUnavailable, Message: "the payment store is unavailable, try again shortly", Err: err}
}

// Internal wraps an unexpected failure.
func Internal(err error) error {
	return &Error{Code: CodeInternal, Message: "internal error", Err: err}
}

// ErrorCode returns err's code: an *Error's own; not_found for
// ErrNotFound; conflict for ErrStaleStatus and *IdempotencyConflict; the
// empty code for nil; internal otherwise.
func ErrorCode(err error) Code {
	var (
		e *Error
		c *IdempotencyConflict
	)
	switch {
	case err == nil:
		return ""
	case errors.As(err, &e):
		return e.Code
	case errors.Is(err, ErrNotFound):
		return CodeNotFound
	case errors.Is(err, ErrStaleStatus), errors.As(err, &c):
		return CodeConflict
	default:
		return CodeInternal
	}
}

// HTTPStatus maps an error to its HTTP status. It is the only place that
// does.
func HTTPStatus(err error) int {
	if err == nil {
		return http.StatusOK
	}
	switch ErrorCode(err) {
	case CodeInvalid:
		return http.StatusBadRequest
	case CodeNotFound:
		return http.StatusNotFound
	case CodeConflict:
		return http.StatusConflict
	case CodeMismatch:
		return http.StatusUnprocessableEntity
	case CodeUnavailable:
		return http.StatusServiceUnavailable
	case CodeTooLarge:
		return http.StatusRequestEntityTooLarge
	case CodeUnsupportedMedia:
		return http.StatusUnsupportedMediaType
	default:
		return http.StatusInternalServerError
	}
}
