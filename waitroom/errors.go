package waitroom

import (
	"errors"

	"github.com/stampede-lab/stampede"
)

// Error is the waiting room's error: the one error type of every Stampede
// API (package httpapi), with a code, the field it concerns (if any) and a
// message safe to show clients.
type Error = stampede.Error

// Code classifies an Error for clients; Code.Status maps each code to its
// one HTTP status.
type Code = stampede.Code

// The error codes the waiting room returns.
const (
	CodeInvalid             = stampede.Invalid          // 400: a field of the request is wrong
	CodeUnauthorized        = stampede.Unauthorized     // 401: missing or bad token
	CodeForbidden           = stampede.Forbidden        // 403: a token for someone else
	CodeNotFound            = stampede.NotFound         // 404: no such room, ticket or path
	CodeConflict            = stampede.Conflict         // 409: the user holds a ticket the request cannot prove
	CodeMethod              = stampede.MethodNotAllowed // 405: wrong HTTP method
	CodeTooLarge            = stampede.TooLarge         // 413: request body over the limit
	CodeRateLimited         = stampede.RateLimited      // 429: too many joins from one client address
	CodeBusy           Code = "busy"                    // 503: too many challenges in flight
	CodeLineFull       Code = "line_full"               // 503: the room's line holds max_waiting users
	CodeJoinsThrottled Code = "joins_throttled"         // 503: the room's joins passed max_joins_per_second
	CodeInviteRequired Code = "invite_required"         // 403: the sale takes invited buyers only now
	CodeInviteUsed     Code = "invite_used"             // 409: the invite's place was used and is finished
	CodeUnsupported         = stampede.Unsupported      // 415: wrong media type
	CodeInternal            = stampede.Internal         // 500: a bug
	CodeUnavailable         = stampede.Unavailable      // 503: the store cannot be reached in time
)

// fieldError is an invalid-input error naming field.
func fieldError(field, format string, args ...any) error {
	return stampede.InvalidField(field, format, args...)
}

// Unavailable wraps a store failure (unreachable, frozen, too slow): 503
// with Retry-After; the cause is logged, never shown.
func Unavailable(err error) error {
	return stampede.UnavailableErr("the waiting room's store", err)
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
	return stampede.CodeOf(err)
}
