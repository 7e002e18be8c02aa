// Package institution simulates a payment institution (a card acquirer or
// PG) that the payment service calls to approve payments, with the faults
// that make payments hard: declines, errors, and hangs before or after the
// money moves. It is the simulator's domain: its behaviour modes, its
// ledger and arrival log, and its state machine (Simulator), with no
// transport. Its HTTP server is institution/api and its Go client
// institution/client.
//
// Its behaviour (see Behavior) decides what an approval does: NORMAL
// approves and charges, DECLINE declines, ERROR fails (500 over HTTP),
// HANG_BEFORE_PROCESSING holds the request for hang_ms without recording
// anything and then fails with a timeout (504), HANG_AFTER_PROCESSING
// charges first and then holds the answer. With idempotent on (the
// default) a repeated external key returns the first result and is not
// charged again; with it off every repeat that reaches processing charges
// again, so the double charges a retrying client causes become countable.
//
// The not-found window: the simulator records an approval, if at all,
// while it handles the request, so it guarantees that a request is never
// recorded later than Config.NotFoundWindow after it arrived. A not-found
// answer for a key says whether it is definitive (no attempt for the key
// arrived within the window) and how long the window is, so that a caller
// can turn "not found" into "failed" only after the window since its own
// request.
package institution
