package institution

import "github.com/stampede-lab/stampede"

// Error is the error type of the simulator's API and of Config and
// Behavior validation: the ground floor's stampede.Error, so that the
// institution answers the same codes, statuses and problem+json bodies as
// every Stampede service. The client (institution/client) returns it (wrapped in one of the
// sentinel errors) with Status set to the HTTP status received.
//
// Besides the generic codes (Conflict for an external key repeated with
// another amount or currency, NotFound for a status inquiry about a key
// with no record), the institution answers its own codes below.
type Error = stampede.Error

// Code is the code of an Error.
type Code = stampede.Code

// The institution's own codes, each of a generic class.
const (
	CodeInstitution  Code = "institution_error"  // Internal: the ERROR mode; nothing was recorded
	CodeBusy         Code = "busy"               // Unavailable: MaxHung requests are held; nothing was recorded
	CodeShuttingDown Code = "shutting_down"      // Unavailable: the server is closing; nothing was recorded
	CodeStatusDown   Code = "status_unavailable" // Unavailable: status_api DOWN
	CodeReleased     Code = "released"           // Timeout: a held request released by a reset or shutdown
)
