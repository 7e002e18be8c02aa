package institution

import "github.com/stampede-lab/stampede/internal/httpapi"

// Error is the error type of the simulator's API and of Config and
// Behavior validation: httpapi's, so that the institution answers the
// same codes, statuses and problem+json bodies as every Stampede service.
// The server answers it as an RFC 9457 problem; the Client returns it
// (wrapped in one of the sentinel errors) with Status set to the HTTP
// status received.
//
// The institution's own codes are httpapi.CodeInstitution (500, mode
// ERROR), httpapi.CodeBusy and httpapi.CodeShuttingDown (503, nothing
// recorded), httpapi.CodeStatusDown (503, status_api DOWN),
// httpapi.CodeTimeout (504, held and not processed, or the caller left)
// and httpapi.CodeReleased (504, a held request released by a reset or a
// shutdown). httpapi.CodeConflict (409) is an external key repeated with
// another amount or currency, and httpapi.CodeNotFound (404) a status
// inquiry for a key with no record, or an unknown path.
type Error = httpapi.Error

// Code is the code of an Error: httpapi's, whose one table maps each code
// to its HTTP status.
type Code = httpapi.Code
