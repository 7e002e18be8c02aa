package pay

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/protocol"
)

// Admission is what the waiting room says of an admission token.
type Admission struct {
	// Held is true while the admission holds its slot in the room.
	Held bool
	// Reason says why it is not held: expired, released, invalid_token,
	// other_room, ...
	Reason string
	// User is the admitted user; ExpiresAt the end of the slot's lease.
	User      string
	ExpiresAt time.Time
}

// AdmissionChecker asks the waiting room online whether an admission
// token still holds its slot. A *Error it returns is the token's fault
// (answered as it is, a 4xx); any other error means the waiting room could
// not say (answered 503).
type AdmissionChecker interface {
	CheckAdmission(ctx context.Context, token string) (Admission, error)
}

// requireAdmission is POST /v1/payments's admission rule when
// HandlerConfig.Admissions is set: a request whose idempotency key is
// already known passes (a retry replays the payment whatever became of the
// admission since); a new one must carry an admission that holds its
// slot now.
func (h *handler) requireAdmission(r *http.Request, merchantID, key string) error {
	if h.cfg.Admissions == nil {
		return nil
	}
	if _, err := h.svc.store.Idempotency(r.Context(), ScopedKey(merchantID, key)); err == nil {
		return nil
	} else if !errors.Is(err, ErrNotFound) {
		return err
	}
	token := r.Header.Get(protocol.HeaderAdmission)
	if token == "" {
		return &Error{Code: CodeUnauthorized, Field: protocol.HeaderAdmission,
			Message: "header is required: the buyer's admission token from the waiting room"}
	}
	a, err := h.cfg.Admissions.CheckAdmission(r.Context(), token)
	if err != nil {
		if e, ok := errors.AsType[*Error](err); ok {
			return e
		}
		return stampede.UnavailableErr("the waiting room", err)
	}
	if !a.Held {
		reason := a.Reason
		if reason == "" {
			reason = "not held"
		}
		return &Error{Code: CodeForbidden, Field: protocol.HeaderAdmission,
			Message: "the admission does not hold its slot in the waiting room (" + reason + ")"}
	}
	return nil
}
