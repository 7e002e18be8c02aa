// Package stampede is the ground floor every part of Stampede stands on:
// the transport-neutral error every domain returns. It imports no part of
// Stampede and no transport; the cross-service protocol (headers,
// admission tokens, payment statuses and events) is its sibling package
// protocol.
//
// An Error has a Class, one of the generic codes below, which says what
// kind of failure it is (a bad field, a conflict, a dependency that did
// not answer); a transport maps the class to its own vocabulary, as
// internal/httpapi maps it to an HTTP status. A domain may add a finer
// Code of its own (pay's "order_exists" is a Conflict), which clients see
// beside the class's meaning.
//
// Validation follows one convention everywhere, for configurations and
// request bodies alike: every bad field is reported at once, as a Join of
// Invalid errors each naming its field (a JSON member for a body, the
// flag for a command's configuration).
package stampede

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Code names a kind of failure on the wire: one of the generic codes
// below, or a domain's own finer code (its Error then also sets Class).
// Codes are stable strings.
type Code string

// The generic codes: every Error belongs to one of them.
const (
	Invalid          Code = "invalid"            // a field, header or parameter of the request is wrong
	Unauthorized     Code = "unauthorized"       // a missing or invalid credential
	Forbidden        Code = "forbidden"          // a valid credential for something else
	NotFound         Code = "not_found"          // no such resource
	MethodNotAllowed Code = "method_not_allowed" // the resource exists, the operation does not
	Conflict         Code = "conflict"           // the resource's state forbids the request now
	Mismatch         Code = "mismatch"           // the request contradicts an earlier one with the same key
	TooLarge         Code = "too_large"          // the request is over a size limit
	Unsupported      Code = "unsupported"        // the request's format is not one that is read
	RateLimited      Code = "rate_limited"       // too many requests from this client
	Internal         Code = "internal"           // a bug; the cause is logged, never shown
	Unavailable      Code = "unavailable"        // a dependency is down, frozen or too slow: retry later
	Timeout          Code = "timeout"            // the work did not finish in time
)

// Classes returns every generic code.
func Classes() []Code {
	return []Code{Invalid, Unauthorized, Forbidden, NotFound, MethodNotAllowed, Conflict, Mismatch,
		TooLarge, Unsupported, RateLimited, Internal, Unavailable, Timeout}
}

// IsClass reports whether c is one of the generic codes.
func (c Code) IsClass() bool {
	switch c {
	case Invalid, Unauthorized, Forbidden, NotFound, MethodNotAllowed, Conflict, Mismatch,
		TooLarge, Unsupported, RateLimited, Internal, Unavailable, Timeout:
		return true
	}
	return false
}

// Error is the error every domain of Stampede returns: a code, the field at
// fault (if any) and a message safe to show to anyone. Err, the cause, is
// for logs only.
type Error struct {
	// Code is the wire code: a generic one, or a domain's own.
	Code Code
	// Kind is the generic code of a domain Code (pay's "order_exists" is
	// a Conflict); empty when Code is itself generic. Use Class to read
	// it.
	Kind Code
	// Field names the member, header, parameter or flag at fault.
	Field string
	// Message is for people, safe to show to any client.
	Message string
	// Err is the cause, if any; logged, never shown to clients.
	Err error
	// RetryAfter, when set, tells the client when to try again.
	RetryAfter time.Duration
	// Extra holds further members for the client, such as the id of an
	// existing payment or a queue position.
	Extra map[string]any
	// Status is the HTTP status a client received (internal/httpapi's
	// ReadProblem sets it); zero where the error was made.
	Status int
}

// Class returns the generic code of e: Kind when set, else Code when it is
// generic, else Internal (a domain code without its class is a bug).
func (e *Error) Class() Code {
	switch {
	case e.Kind != "":
		return e.Kind
	case e.Code.IsClass():
		return e.Code
	}
	return Internal
}

// Error formats e as "[HTTP status: ]code: field: message[: cause]".
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

// Errorf returns an error with code and a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Domain returns an error with a domain's own code, of class kind.
func Domain(code, kind Code, format string, args ...any) *Error {
	return &Error{Code: code, Kind: kind, Message: fmt.Sprintf(format, args...)}
}

// InvalidField returns an Invalid error naming field: a JSON member for a
// request body, the flag for a configuration set by flags.
func InvalidField(field, format string, args ...any) *Error {
	return &Error{Code: Invalid, Field: field, Message: fmt.Sprintf(format, args...)}
}

// UnavailableErr wraps the failure of a dependency (what, such as
// "redis") that a later retry may cure.
func UnavailableErr(what string, err error) *Error {
	return &Error{Code: Unavailable, Message: what + " is unavailable, try again shortly", Err: err}
}

// InternalErr wraps an unexpected failure; the cause is logged only.
func InternalErr(err error) *Error {
	return &Error{Code: Internal, Message: "internal error; the server logged the details", Err: err}
}

// As returns err as an *Error: the first one it wraps (for a Join, the
// first joined); a context deadline or cancellation as Unavailable (a
// dependency did not answer in time); anything else as Internal. nil gives
// nil.
func As(err error) *Error {
	if err == nil {
		return nil
	}
	if e, ok := errors.AsType[*Error](err); ok {
		return e
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return UnavailableErr("a dependency", err)
	}
	return InternalErr(err)
}

// CodeOf returns the code of err (see As); the empty code for nil.
func CodeOf(err error) Code {
	if err == nil {
		return ""
	}
	return As(err).Code
}

// ClassOf returns the generic code of err (see As and Error.Class); the
// empty code for nil.
func ClassOf(err error) Code {
	if err == nil {
		return ""
	}
	return As(err).Class()
}

// Fields collects the bad fields of a validation, so that every one of
// them is reported at once. The zero value is ready to use.
type Fields struct {
	errs []error
}

// Add records that field is wrong.
func (f *Fields) Add(field, format string, args ...any) {
	f.errs = append(f.errs, InvalidField(field, format, args...))
}

// Check records err, when it is not nil, as field's: an *Error keeps its
// code and gets field when it names none (a nested Join keeps each of its
// fields, prefixed with field and a dot); anything else becomes an Invalid
// error naming field.
func (f *Fields) Check(field string, err error) {
	if err == nil {
		return
	}
	for _, e := range FieldErrors(err) {
		c := *e
		switch {
		case field == "":
		case c.Field == "":
			c.Field = field
		default:
			c.Field = field + "." + c.Field
		}
		f.errs = append(f.errs, &c)
	}
}

// Err returns every recorded error joined (see Join), or nil.
func (f *Fields) Err() error { return Join(f.errs...) }

// Join joins errs, dropping nils: nil when none is left, the error itself
// when one is. errors.As on the result finds the first.
func Join(errs ...error) error {
	var kept []error
	for _, e := range errs {
		if e != nil {
			kept = append(kept, e)
		}
	}
	switch len(kept) {
	case 0:
		return nil
	case 1:
		return kept[0]
	}
	return errors.Join(kept...)
}

// FieldErrors flattens err, a single error or a Join of them (nested to
// any depth), into *Error values in order; an error that is not an *Error
// is converted by As. nil gives none.
func FieldErrors(err error) []*Error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []*Error
		for _, e := range j.Unwrap() {
			out = append(out, FieldErrors(e)...)
		}
		return out
	}
	return []*Error{As(err)}
}
