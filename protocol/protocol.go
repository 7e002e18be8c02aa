// Package protocol is the cross-service protocol of Stampede, written
// once: what one service says to another and every service reads the same
// way. It holds the Stampede-* headers, the admission token's claims and
// their verification (a JWT checked against the waiting room's JWKS, with
// an optional online check), the payment statuses, and the payment event
// with its message id.
//
// It is the ground floor beside package stampede: it imports no part of
// Stampede and no transport, so every part and every adapter may import it.
package protocol

// The headers a gate (or a proxy asking the waiting room) sets on a
// request it lets through, and the one a checkout answers with.
const (
	// HeaderUser names the admitted buyer: the sub of the admission token.
	HeaderUser = "Stampede-User"
	// HeaderAdmission carries the buyer's admission token (a JWT).
	HeaderAdmission = "Stampede-Admission"
	// HeaderRelease, on a checkout's answer, asks the gate to release
	// the buyer's slot; its one value is ReleaseDone.
	HeaderRelease = "Stampede-Release"
	// ReleaseDone is the value of HeaderRelease that releases the slot.
	ReleaseDone = "done"
	// HeaderPrefix starts every Stampede header: a gate removes any a
	// client sent before it sets its own.
	HeaderPrefix = "Stampede-"
)
