// Package institution simulates a payment institution (a card acquirer or
// PG) that the payment service calls to approve payments, with the faults
// that make payments hard: declines, errors, and hangs before or after the
// money moves.
//
// The Server answers
//
//	POST /v1/approvals                  {"external_key","amount","currency"} → APPROVED or DECLINED
//	GET  /v1/approvals/{external_key}   the record, or 404 with the not-found window
//	PUT  /admin/behavior                set the fault mode (Bearer admin token)
//	GET  /admin/behavior                the current behaviour
//	GET  /admin/arrivals                every approval request received, with its arrival time
//	GET  /admin/approvals               the ledger: records, charges per key, totals
//	POST /admin/reset                   clear everything, back to NORMAL, release hung requests
//	GET  /healthz, /readyz, /metrics, /openapi.json
//
// It answers through package internal/httpapi, like every Stampede
// service: errors are RFC 9457 application/problem+json bodies whose code
// decides the status (see Error), an unknown path is a 404, a wrong
// method a 405 with Allow, and /openapi.json serves the description in
// openapi.yaml (see OpenAPI).
//
// Its behaviour (see Behavior) decides what an approval does: NORMAL
// approves and charges, DECLINE declines, ERROR answers 500,
// HANG_BEFORE_PROCESSING holds the request for hang_ms without recording
// anything and then answers 504, HANG_AFTER_PROCESSING charges first and
// then holds the answer. With idempotent on (the default) a repeated
// external key returns the first result and is not charged again; with it
// off every repeat that reaches processing charges again, so the double
// charges a retrying client causes become countable.
//
// The Client calls the server and classifies every failure the way a
// payment service must: ErrNotSent (the request never left, safe to
// report as failed), ErrUnknownOutcome (it may have been processed: settle
// by status inquiry, never by retrying), ErrInstitution (the institution
// answered an error and processed nothing), ErrRejected (our request was
// wrong) and ErrStatusUnavailable (the status inquiry cannot answer now).
//
// The not-found window: the simulator records an approval, if at all,
// while it handles the request, so it guarantees that a request is never
// recorded later than Config.NotFoundWindow after it arrived. A 404 for a
// key says whether it is definitive (no attempt for the key arrived within
// the window) and how long the window is, so that a caller can turn "not
// found" into "failed" only after the window since its own request.
package institution
