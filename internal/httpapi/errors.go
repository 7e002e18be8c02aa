// Package httpapi is the one HTTP layer of Stampede's services: every
// service answers through it, so that the same client mistake gets the
// same status and the same body everywhere.
//
// It maps the generic codes of stampede.Error (its Class) to HTTP statuses
// in one table, renders errors as RFC 9457 problem+json, and reads them
// back for clients. It knows no domain: a domain's own codes (pay's
// "order_exists", the institution's "status_unavailable") reach the wire
// as they are, with the status of their class. It also holds an API mux
// whose handlers return errors, with JSON 404 and 405 (with Allow)
// answers; one request log, panic guard and Prometheus request metrics;
// /healthz, /readyz, /metrics and /openapi.json; and one http.Server
// constructor that sets every timeout.
package httpapi

import (
	"net/http"
	"time"

	"github.com/stampede-lab/stampede"
)

// statuses is the one table from a generic code to an HTTP status.
var statuses = map[stampede.Code]int{
	stampede.Invalid:          http.StatusBadRequest,
	stampede.Unauthorized:     http.StatusUnauthorized,
	stampede.Forbidden:        http.StatusForbidden,
	stampede.NotFound:         http.StatusNotFound,
	stampede.MethodNotAllowed: http.StatusMethodNotAllowed,
	stampede.Conflict:         http.StatusConflict,
	stampede.Mismatch:         http.StatusUnprocessableEntity,
	stampede.TooLarge:         http.StatusRequestEntityTooLarge,
	stampede.Unsupported:      http.StatusUnsupportedMediaType,
	stampede.RateLimited:      http.StatusTooManyRequests,
	stampede.Internal:         http.StatusInternalServerError,
	stampede.Unavailable:      http.StatusServiceUnavailable,
	stampede.Timeout:          http.StatusGatewayTimeout,
}

// StatusOfCode returns the HTTP status of a generic code; 500 for any
// other.
func StatusOfCode(c stampede.Code) int {
	if s, ok := statuses[c]; ok {
		return s
	}
	return http.StatusInternalServerError
}

// ErrorStatus returns the status e answers with: Status when a client
// received it, otherwise its class's.
func ErrorStatus(e *stampede.Error) int {
	if e.Status != 0 {
		return e.Status
	}
	return StatusOfCode(e.Class())
}

// DefaultRetryAfter is the Retry-After of a 503 or 429 answer whose error
// does not set its own.
const DefaultRetryAfter = time.Second

// StatusOf returns the HTTP status err answers with (see stampede.As);
// 200 for nil.
func StatusOf(err error) int {
	if err == nil {
		return http.StatusOK
	}
	return ErrorStatus(stampede.As(err))
}

// classOfStatus is the generic code a client reads from a status when the
// body names none.
func classOfStatus(status int) stampede.Code {
	for c, s := range statuses {
		if s == status && c != stampede.Internal {
			return c
		}
	}
	return stampede.Internal
}
