package institution

import (
	"context"
	"fmt"
	"time"

	"github.com/stampede-lab/stampede"
)

// The kinds of operation on an authorisation.
const (
	OpCapture = "capture"
	OpVoid    = "void"
)

// The statuses of an operation.
const (
	OpSucceeded = "SUCCEEDED"
	OpDeclined  = "DECLINED"
)

// OperationRequest is the body of POST /v1/captures and POST /v1/voids:
// a capture or void of the authorisation ApprovalKey, under the
// operation's own key.
type OperationRequest struct {
	// Kind is OpCapture or OpVoid, from the path.
	Kind string `json:"-"`
	// ExternalKey is the caller's key for this operation.
	ExternalKey string `json:"external_key"`
	// ApprovalKey is the external key of the authorisation.
	ApprovalKey string `json:"approval_key"`
	// Amount is a capture's amount, 1 to the authorised amount; a void
	// has none (0).
	Amount int64 `json:"amount,omitempty"`
}

// Validate reports every unusable field at once, each by its JSON name.
func (r OperationRequest) Validate() error {
	var f stampede.Fields
	f.Check("", ValidateExternalKey(r.ExternalKey))
	if err := ValidateExternalKey(r.ApprovalKey); err != nil {
		f.Add("approval_key", "%s", stampede.As(err).Message)
	}
	switch {
	case r.Kind == OpCapture && (r.Amount < 1 || r.Amount > MaxAmount):
		f.Add("amount", "must be a whole number of minor units between 1 and %d, got %d", int64(MaxAmount), r.Amount)
	case r.Kind == OpVoid && r.Amount != 0:
		f.Add("amount", "a void has no amount")
	case r.Kind != OpCapture && r.Kind != OpVoid:
		f.Add("kind", "must be capture or void, got %q", r.Kind)
	}
	return f.Err()
}

// OperationRecord is what the institution knows about one operation
// key: the answer of GET /v1/captures/{key} or /v1/voids/{key}.
type OperationRecord struct {
	ExternalKey string `json:"external_key"`
	ApprovalKey string `json:"approval_key"`
	Kind        string `json:"kind"`
	// Status is OpSucceeded once any request for the key was carried
	// out, OpDeclined otherwise.
	Status string `json:"status"`
	Amount int64  `json:"amount,omitempty"`
	// Applied counts the times the key was carried out (never more than
	// 1: an authorisation is captured or voided once).
	Applied int `json:"applied"`
	// Requests counts the requests for the key that reached processing.
	Requests int       `json:"requests"`
	DoneAt   time.Time `json:"done_at,omitzero"`
}

// OperationResult is the answer to a capture or void.
type OperationResult struct {
	ExternalKey string `json:"external_key"`
	Status      string `json:"status"`
	Replayed    bool   `json:"replayed"`
}

// Operate handles a capture or void attempt under the current behaviour,
// with the approval's fault modes: NORMAL carries it out; DECLINE
// declines; ERROR fails recording nothing; HANG_BEFORE_PROCESSING holds
// and fails recording nothing; HANG_AFTER_PROCESSING carries it out and
// then holds the answer. An approval that is not AUTHORIZED (never
// authorised, already captured or voided) is refused (Conflict, nothing
// recorded), as is a capture over the authorised amount; a repeated key
// is answered from its record when Behavior.Idempotent (and refused as
// a conflict otherwise, the authorisation having moved on).
func (s *Simulator) Operate(ctx context.Context, req OperationRequest, path string) (OperationResult, error) {
	at := s.now().UTC()
	s.metrics.arrivals.Inc()
	s.mu.Lock()
	b, release, closed := s.behavior, s.release, s.closed
	key := req.ExternalKey
	if len(key) > MaxExternalKeyLen {
		key = key[:MaxExternalKeyLen]
	}
	s.state.addArrival(Arrival{At: at, UnixNano: at.UnixNano(), ExternalKey: key, Path: path, Mode: b.Mode}, s.cfg.MaxArrivals)
	err := req.Validate()
	if err == nil {
		a, ok := s.state.opAttempts[req.ExternalKey]
		if !ok {
			a.first = at
		}
		a.last = at
		s.state.opAttempts[req.ExternalKey] = a
	}
	s.mu.Unlock()
	if err != nil {
		return OperationResult{}, err
	}
	if closed {
		return OperationResult{}, &Error{Code: CodeShuttingDown, Kind: stampede.Unavailable, Message: "the institution is shutting down; nothing was recorded"}
	}
	switch b.Mode {
	case ModeError:
		return OperationResult{}, &Error{Code: CodeInstitution, Kind: stampede.Internal, Message: "the institution failed (mode ERROR); nothing was recorded"}
	case ModeHangBefore:
		if !s.acquireHung() {
			return OperationResult{}, s.busy()
		}
		defer s.releaseHung()
		if err := s.hold(ctx, b.Hang(), release); err != nil {
			return OperationResult{}, err
		}
		return OperationResult{}, &Error{Code: stampede.Timeout, Message: fmt.Sprintf("held for %d ms before processing (mode HANG_BEFORE_PROCESSING); nothing was recorded", b.HangMS)}
	case ModeHangAfter:
		if !s.acquireHung() {
			return OperationResult{}, s.busy()
		}
		defer s.releaseHung()
		res, err := s.processOperation(req, b)
		if err != nil {
			return OperationResult{}, err
		}
		if err := s.hold(ctx, b.Hang(), release); err != nil {
			return OperationResult{}, err
		}
		return res, nil
	default:
		return s.processOperation(req, b)
	}
}

// processOperation records req under behaviour b.
func (s *Simulator) processOperation(req OperationRequest, b Behavior) (OperationResult, error) {
	now := s.now().UTC()
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, seen := s.state.ops[req.ExternalKey]
	if seen && b.Idempotent {
		if rec.ApprovalKey != req.ApprovalKey || rec.Kind != req.Kind || rec.Amount != req.Amount {
			return OperationResult{}, &Error{Code: stampede.Conflict, Field: "external_key",
				Message: fmt.Sprintf("already used to %s %q; a repeat must carry the same approval and amount", rec.Kind, rec.ApprovalKey)}
		}
		rec.Requests++
		s.metrics.replays.Inc()
		return OperationResult{ExternalKey: req.ExternalKey, Status: rec.Status, Replayed: true}, nil
	}
	appr, ok := s.state.records[req.ApprovalKey]
	if !ok || appr.Status != StatusAuthorized {
		status := "unknown"
		if ok {
			status = appr.Status
		}
		return OperationResult{}, &Error{Code: stampede.Conflict, Field: "approval_key",
			Message: fmt.Sprintf("no authorisation %q to %s (it is %s)", req.ApprovalKey, req.Kind, status)}
	}
	if req.Kind == OpCapture && req.Amount > appr.Amount {
		return OperationResult{}, &Error{Code: stampede.Conflict, Field: "amount",
			Message: fmt.Sprintf("a capture of %d exceeds the authorised %d", req.Amount, appr.Amount)}
	}
	if !seen {
		rec = &OperationRecord{ExternalKey: req.ExternalKey, ApprovalKey: req.ApprovalKey, Kind: req.Kind, Amount: req.Amount, Status: OpDeclined}
		s.state.ops[req.ExternalKey] = rec
		s.state.opOrder = append(s.state.opOrder, req.ExternalKey)
	}
	rec.Requests++
	if b.Mode == ModeDecline {
		return OperationResult{ExternalKey: req.ExternalKey, Status: OpDeclined}, nil
	}
	rec.Status, rec.DoneAt = OpSucceeded, now
	rec.Applied++
	if req.Kind == OpCapture {
		appr.Status, appr.Captured = StatusApproved, req.Amount
		appr.Charges++
		s.state.charges++
		s.metrics.charges.Inc()
	} else {
		appr.Status = StatusVoided
	}
	return OperationResult{ExternalKey: req.ExternalKey, Status: OpSucceeded}, nil
}

// OperationStatus answers the inquiry about a capture's or void's key as
// RefundStatus answers a refund's: the record, a NotFound error whose
// Extra members say whether not-found is definitive, or CodeStatusDown.
func (s *Simulator) OperationStatus(key string) (OperationRecord, error) {
	if err := ValidateExternalKey(key); err != nil {
		return OperationRecord{}, err
	}
	now := s.now()
	s.mu.Lock()
	down := s.behavior.StatusAPI == StatusAPIDown
	var rec OperationRecord
	p, found := s.state.ops[key]
	if found {
		rec = *p
	}
	a, attempted := s.state.opAttempts[key]
	s.mu.Unlock()
	switch {
	case down:
		return OperationRecord{}, &Error{Code: CodeStatusDown, Kind: stampede.Unavailable, Message: "the status API is down (status_api DOWN); try again later and do not read this as not found"}
	case found:
		return rec, nil
	}
	definitive := !attempted || now.Sub(a.last) >= s.cfg.NotFoundWindow
	extra := map[string]any{
		MemberExternalKey:    key,
		MemberDefinitive:     definitive,
		MemberNotFoundWindow: s.cfg.NotFoundWindow.Milliseconds(),
	}
	if attempted {
		extra[MemberFirstAttempt], extra[MemberLastAttempt] = a.first, a.last
	}
	return OperationRecord{}, &Error{Code: stampede.NotFound, Message: fmt.Sprintf("no capture or void for external key %q", key), Extra: extra}
}

// Operations returns every capture and void record in the order first
// processed.
func (s *Simulator) Operations() []OperationRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]OperationRecord, 0, len(s.state.opOrder))
	for _, k := range s.state.opOrder {
		out = append(out, *s.state.ops[k])
	}
	return out
}
