package pay

import (
	"errors"
	"fmt"

	"github.com/stampede-lab/stampede"
)

// Error is the payment service's error: the error type every Stampede
// domain shares (stampede.Error), with a code, the field at fault and a
// message safe to show a client. Its cause, Err, is logged only.
type Error = stampede.Error

// Code classifies an Error for clients; a domain code names its generic
// class in Error.Kind, and the HTTP adapters map each class to a status.
type Code = stampede.Code

// The error codes the payment service returns.
const (
	CodeInvalid               = stampede.Invalid      // a field or header of the request is wrong
	CodeNotFound              = stampede.NotFound     // no such payment, idempotency key or path
	CodeConflict              = stampede.Conflict     // the idempotency key is in flight, or the status moved on
	CodeOrderExists      Code = "order_exists"        // the order already has a live or approved payment
	CodeNotRefundable    Code = "not_refundable"      // the payment is not APPROVED: there is nothing to refund
	CodeRefundExceeds    Code = "refund_exceeds"      // the refunds would add up to more than the payment's amount
	CodeNotSupported     Code = "not_supported"       // the institution's connector cannot do this
	CodeNotAuthorized    Code = "not_authorized"      // capture or void of a payment that is not AUTHORIZED
	CodeOperationExists  Code = "operation_exists"    // the authorisation already has a capture or void holding it
	CodeCaptureExceeds   Code = "capture_exceeds"     // a capture of more than the authorised amount
	CodeCancelExists     Code = "cancellation_exists" // the payment already has a cancellation, under another key
	CodeUnauthorized          = stampede.Unauthorized // no valid merchant API key
	CodeForbidden             = stampede.Forbidden    // the key's merchant is not the body's merchant_id
	CodeMismatch              = stampede.Mismatch     // the idempotency key was used with a different request
	CodeUnavailable           = stampede.Unavailable  // the store cannot be reached or did not answer in time
	CodeInternal              = stampede.Internal     // a bug
	CodeTooLarge              = stampede.TooLarge     // request body over the limit
	CodeUnsupportedMedia      = stampede.Unsupported  // wrong media type
)

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
// record: in flight (a conflict), completed with the same request hash
// (a replay: the payment it names) or with a different one (a mismatch).
type IdempotencyConflict struct {
	Record IdempotencyRecord
}

// Error implements error.
func (e *IdempotencyConflict) Error() string {
	return fmt.Sprintf("pay: idempotency key %q already used by payment %s (%s)", e.Record.Key, e.Record.PaymentID, e.Record.State)
}

// OrderExistsError is returned by Store.CreatePending (use errors.As)
// when the order (merchant_id, order_id) already has a live (PENDING,
// UNKNOWN) or APPROVED payment: an order is paid at most once, and tried
// again only after its payment ended DECLINED or FAILED. Nothing was
// written.
type OrderExistsError struct {
	PaymentID string // the order's existing payment
}

// Error implements error.
func (e *OrderExistsError) Error() string {
	return fmt.Sprintf("pay: the order already has payment %s", e.PaymentID)
}

// Invalid returns a CodeInvalid error naming field.
func Invalid(field, format string, args ...any) *Error {
	return stampede.InvalidField(field, format, args...)
}

// Unavailable wraps a storage failure that a retry may cure (connection
// refused or lost, database busy, store closed).
func Unavailable(err error) *Error {
	return &Error{Code: CodeUnavailable, Message: "the payment store is unavailable, try again shortly", Err: err}
}

// Internal wraps an unexpected failure; the cause is logged only.
func Internal(err error) *Error { return stampede.InternalErr(err) }

// MapError is the one place that turns the Store's sentinel errors into
// an *Error: ErrNotFound is not_found, ErrStaleStatus and
// *IdempotencyConflict are conflict, *OrderExistsError is order_exists
// with the existing payment's id as the problem member payment_id. An *Error, and nil, pass through;
// anything else is left to stampede.As (a deadline is unavailable, the
// rest internal).
func MapError(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := errors.AsType[*Error](err); ok {
		return err
	}
	if o, ok := errors.AsType[*OrderExistsError](err); ok {
		return &Error{Code: CodeOrderExists, Kind: stampede.Conflict, Field: "order_id", Message: "the order already has a payment that is in progress or approved; it may be paid again only after that payment is declined or failed",
			Extra: map[string]any{"payment_id": o.PaymentID}, Err: o}
	}
	if c, ok := errors.AsType[*RefundConflict](err); ok {
		return &Error{Code: CodeConflict, Field: "Idempotency-Key", Message: "this key already names a refund", Err: c}
	}
	if c, ok := errors.AsType[*IdempotencyConflict](err); ok {
		return &Error{Code: CodeConflict, Field: "Idempotency-Key", Message: "this key already names a payment", Err: c}
	}
	switch {
	case errors.Is(err, ErrNotFound):
		return &Error{Code: CodeNotFound, Message: "no such payment", Err: err}
	case errors.Is(err, ErrStaleStatus):
		return &Error{Code: CodeConflict, Message: "the payment's status changed meanwhile; read it again", Err: err}
	}
	return stampede.As(err)
}

// ErrorCode returns err's code (see MapError); the empty code for nil.
func ErrorCode(err error) Code { return stampede.CodeOf(MapError(err)) }
