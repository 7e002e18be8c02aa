package institution

import (
	"context"
	"fmt"
	"time"

	"github.com/stampede-lab/stampede"
)

// The statuses of a refund.
const (
	RefundSucceeded = "SUCCEEDED"
	RefundDeclined  = "DECLINED"
)

// RefundRequest is the body of POST /v1/refunds: a refund of the
// approval of ApprovalKey, under the refund's own key.
type RefundRequest struct {
	// ExternalKey is the caller's key for this refund.
	ExternalKey string `json:"external_key"`
	// ApprovalKey is the external key of the approval refunded.
	ApprovalKey string `json:"approval_key"`
	// Amount is in minor units, 1 to the approval's amount less what was
	// already refunded.
	Amount int64 `json:"amount"`
	// Reason is the caller's reason, optional, at most MaxRefundReasonLen
	// bytes; the record keeps the first request's.
	Reason string `json:"reason,omitempty"`
}

// MaxRefundReasonLen is the longest refund reason accepted, in bytes.
const MaxRefundReasonLen = 512

// Validate reports every unusable field at once, each by its JSON name.
func (r RefundRequest) Validate() error {
	var f stampede.Fields
	f.Check("", ValidateExternalKey(r.ExternalKey))
	if err := ValidateExternalKey(r.ApprovalKey); err != nil {
		f.Add("approval_key", "%s", stampede.As(err).Message)
	}
	if r.Amount < 1 || r.Amount > MaxAmount {
		f.Add("amount", "must be a whole number of minor units between 1 and %d, got %d", int64(MaxAmount), r.Amount)
	}
	if len(r.Reason) > MaxRefundReasonLen {
		f.Add("reason", "must be at most %d bytes, got %d", MaxRefundReasonLen, len(r.Reason))
	}
	return f.Err()
}

// RefundRecord is what the institution knows about one refund key: the
// answer of GET /v1/refunds/{external_key}.
type RefundRecord struct {
	ExternalKey string `json:"external_key"`
	ApprovalKey string `json:"approval_key"`
	// Status is RefundSucceeded once any request for the key refunded,
	// RefundDeclined otherwise.
	Status string `json:"status"`
	// Amount is the first request's amount.
	Amount int64 `json:"amount"`
	// Refunds counts the times the key moved money back: more than 1 is
	// a double refund (possible only with idempotent off).
	Refunds int `json:"refunds"`
	// Requests counts the requests for the key that reached processing.
	Requests   int       `json:"requests"`
	RefundedAt time.Time `json:"refunded_at,omitzero"`
	// Reason is the first request's reason.
	Reason string `json:"reason,omitempty"`
}

// RefundResult is the answer to a refund request.
type RefundResult struct {
	ExternalKey string `json:"external_key"`
	Status      string `json:"status"`
	// Replayed is true when an idempotent institution answered a
	// repeated key with its first result, refunding nothing.
	Replayed bool `json:"replayed"`
}

// RefundLedger is the answer of GET /admin/refunds.
type RefundLedger struct {
	Records []RefundRecord `json:"records"`
	// RefundedByApproval maps an approval key to the amount refunded.
	RefundedByApproval map[string]int64 `json:"refunded_by_approval"`
	// DoubleRefundedKeys counts the refund keys that moved money more
	// than once; OverRefunded the approvals refunded beyond their amount
	// (never: the institution refuses it).
	DoubleRefundedKeys int `json:"double_refunded_keys"`
	OverRefunded       int `json:"over_refunded"`
}

// Refund handles a refund attempt under the current behaviour, with the
// approval's fault modes: NORMAL refunds; DECLINE declines; ERROR fails
// recording nothing; HANG_BEFORE_PROCESSING holds and fails recording
// nothing; HANG_AFTER_PROCESSING refunds and then holds the answer. The
// arrival is logged (path /v1/refunds). A refund of an approval the
// institution does not have as APPROVED, or beyond what is left of its
// amount, is refused (Conflict, nothing recorded); a repeated key is
// answered from its record when Behavior.Idempotent, and refunds again
// otherwise.
func (s *Simulator) Refund(ctx context.Context, req RefundRequest, path string) (RefundResult, error) {
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
		s.state.noteRefundAttempt(req.ExternalKey, at)
	}
	s.mu.Unlock()
	if err != nil {
		return RefundResult{}, err
	}
	if closed {
		return RefundResult{}, &Error{Code: CodeShuttingDown, Kind: stampede.Unavailable, Message: "the institution is shutting down; nothing was recorded"}
	}
	switch b.Mode {
	case ModeError:
		return RefundResult{}, &Error{Code: CodeInstitution, Kind: stampede.Internal, Message: "the institution failed (mode ERROR); nothing was recorded"}
	case ModeHangBefore:
		if !s.acquireHung() {
			return RefundResult{}, s.busy()
		}
		defer s.releaseHung()
		if err := s.hold(ctx, b.Hang(), release); err != nil {
			return RefundResult{}, err
		}
		return RefundResult{}, &Error{Code: stampede.Timeout, Message: fmt.Sprintf("held for %d ms before processing (mode HANG_BEFORE_PROCESSING); nothing was recorded", b.HangMS)}
	case ModeHangAfter:
		if !s.acquireHung() {
			return RefundResult{}, s.busy()
		}
		defer s.releaseHung()
		res, err := s.processRefund(req, b)
		if err != nil {
			return RefundResult{}, err
		}
		if err := s.hold(ctx, b.Hang(), release); err != nil {
			return RefundResult{}, err
		}
		return res, nil
	default:
		return s.processRefund(req, b)
	}
}

// processRefund records req under behaviour b.
func (s *Simulator) processRefund(req RefundRequest, b Behavior) (RefundResult, error) {
	now := s.now().UTC()
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, seen := s.state.refunds[req.ExternalKey]
	if seen && b.Idempotent {
		if rec.ApprovalKey != req.ApprovalKey || rec.Amount != req.Amount {
			return RefundResult{}, &Error{Code: stampede.Conflict, Field: "external_key",
				Message: fmt.Sprintf("already used to refund %d of %q; a repeat must carry the same approval and amount", rec.Amount, rec.ApprovalKey)}
		}
		rec.Requests++
		s.metrics.replays.Inc()
		return RefundResult{ExternalKey: req.ExternalKey, Status: rec.Status, Replayed: true}, nil
	}
	appr, ok := s.state.records[req.ApprovalKey]
	if !ok || appr.Status != StatusApproved {
		return RefundResult{}, &Error{Code: stampede.Conflict, Field: "approval_key", Message: fmt.Sprintf("no approved payment %q to refund", req.ApprovalKey)}
	}
	if left := appr.Amount - s.state.refunded[req.ApprovalKey]; req.Amount > left {
		return RefundResult{}, &Error{Code: stampede.Conflict, Field: "amount",
			Message: fmt.Sprintf("only %d of %d is left to refund", left, appr.Amount)}
	}
	if !seen {
		rec = &RefundRecord{ExternalKey: req.ExternalKey, ApprovalKey: req.ApprovalKey, Amount: req.Amount, Status: RefundDeclined, Reason: req.Reason}
		s.state.refunds[req.ExternalKey] = rec
		s.state.refundOrder = append(s.state.refundOrder, req.ExternalKey)
	}
	rec.Requests++
	if b.Mode == ModeDecline {
		return RefundResult{ExternalKey: req.ExternalKey, Status: RefundDeclined}, nil
	}
	if rec.Refunds == 0 {
		rec.Status, rec.RefundedAt = RefundSucceeded, now
	}
	rec.Refunds++
	s.state.refunded[req.ApprovalKey] += req.Amount
	return RefundResult{ExternalKey: req.ExternalKey, Status: RefundSucceeded}, nil
}

// RefundStatus answers the refund inquiry about an external key as Status
// answers the approval inquiry: the record, a NotFound error whose Extra
// members say whether not-found is definitive, or CodeStatusDown.
func (s *Simulator) RefundStatus(key string) (RefundRecord, error) {
	if err := ValidateExternalKey(key); err != nil {
		return RefundRecord{}, err
	}
	now := s.now()
	s.mu.Lock()
	down := s.behavior.StatusAPI == StatusAPIDown
	var rec RefundRecord
	p, found := s.state.refunds[key]
	if found {
		rec = *p
	}
	a, attempted := s.state.refundAttempts[key]
	s.mu.Unlock()
	switch {
	case down:
		return RefundRecord{}, &Error{Code: CodeStatusDown, Kind: stampede.Unavailable, Message: "the status API is down (status_api DOWN); try again later and do not read this as not found"}
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
	return RefundRecord{}, &Error{Code: stampede.NotFound, Message: fmt.Sprintf("no refund for external key %q", key), Extra: extra}
}

// Approval returns the record of an approval's external key and its
// refund records in the order first processed (declined ones included),
// whatever the status API's state: a protocol adapter answering with the
// payment as it stands (after a refund, say) reads it here, and checks
// the status API itself where it serves an inquiry. ok is false when the
// key has no record.
func (s *Simulator) Approval(key string) (rec Record, refunds []RefundRecord, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.state.records[key]
	if !ok {
		return Record{}, nil, false
	}
	for _, k := range s.state.refundOrder {
		if r := s.state.refunds[k]; r.ApprovalKey == key {
			refunds = append(refunds, *r)
		}
	}
	return *p, refunds, true
}

// Refunds returns the refund ledger.
func (s *Simulator) Refunds() RefundLedger {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := RefundLedger{Records: make([]RefundRecord, 0, len(s.state.refundOrder)), RefundedByApproval: map[string]int64{}}
	for _, k := range s.state.refundOrder {
		r := *s.state.refunds[k]
		out.Records = append(out.Records, r)
		if r.Refunds > 1 {
			out.DoubleRefundedKeys++
		}
	}
	for k, v := range s.state.refunded {
		out.RefundedByApproval[k] = v
		if a, ok := s.state.records[k]; ok && v > a.Amount {
			out.OverRefunded++
		}
	}
	return out
}

// noteRefundAttempt remembers that a refund request for key arrived at.
func (l *ledgerState) noteRefundAttempt(key string, at time.Time) {
	a, ok := l.refundAttempts[key]
	if !ok {
		a.first = at
	}
	if at.After(a.last) {
		a.last = at
	}
	l.refundAttempts[key] = a
}
