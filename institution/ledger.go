package institution

import (
	"slices"
	"time"
)

// The statuses of an approval.
const (
	StatusApproved = "APPROVED"
	StatusDeclined = "DECLINED"
	// StatusAuthorized: a manual-capture approval, held until captured
	// (then APPROVED) or voided (then VOIDED).
	StatusAuthorized = "AUTHORIZED"
	StatusVoided     = "VOIDED"
)

// ApprovalResult is the answer to an approval request.
type ApprovalResult struct {
	ExternalKey string `json:"external_key"`
	// Status is StatusApproved or StatusDeclined.
	Status string `json:"status"`
	// ApprovalID identifies the charge this request made or, for a
	// replayed result, the first one. Empty when declined.
	ApprovalID string `json:"approval_id,omitempty"`
	// Replayed is true when an idempotent institution answered a repeated
	// external key with its first result, charging nothing.
	Replayed bool `json:"replayed"`
}

// Record is what the institution's ledger knows about one external key:
// the answer of GET /v1/approvals/{external_key}.
type Record struct {
	ExternalKey string `json:"external_key"`
	// Status is StatusApproved once any request for the key was charged,
	// StatusDeclined otherwise.
	Status string `json:"status"`
	// ApprovalID is the first charge's id; empty when declined.
	ApprovalID string `json:"approval_id,omitempty"`
	// Amount and Currency are those of the first request processed.
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
	// ApprovedAt is when the key was first charged (UTC); zero if never.
	ApprovedAt time.Time `json:"approved_at,omitzero"`
	// DeclinedAt is when the key was first declined (UTC); zero if never.
	DeclinedAt time.Time `json:"declined_at,omitzero"`
	// Charges counts the times the key was charged: more than 1 is a
	// double charge (possible only with idempotent off).
	Charges int `json:"charges"`
	// Requests counts the requests for the key that reached processing,
	// replays included.
	Requests int `json:"requests"`
	// Manual is set for an authorisation (capture "manual"); Captured is
	// the amount its capture took.
	Manual   bool  `json:"manual,omitempty"`
	Captured int64 `json:"captured,omitempty"`
}

// Ledger is the answer of GET /admin/approvals: every record in the order
// the keys were first processed, and the totals.
type Ledger struct {
	Records []Record `json:"records"`
	// ChargesByKey maps every external key to its charge count.
	ChargesByKey map[string]int `json:"charges_by_key"`
	// Keys counts the records; ApprovedKeys and DeclinedKeys split them.
	Keys         int `json:"keys"`
	ApprovedKeys int `json:"approved_keys"`
	DeclinedKeys int `json:"declined_keys"`
	// ChargesTotal counts every charge.
	ChargesTotal int `json:"charges_total"`
	// DoubleChargedKeys counts the keys charged more than once.
	DoubleChargedKeys int `json:"double_charged_keys"`
	// ExtraCharges counts the charges beyond the first of each key.
	ExtraCharges int `json:"extra_charges"`
}

// Held returns what the institution still holds of each approved key:
// its charges (an authorisation's capture, for a manual one) less what
// refunds gave back, in the ledger's order. A key that holds nothing is
// listed with 0 or less.
func (l Ledger) Held(refunds RefundLedger) []KeyAmount {
	out := make([]KeyAmount, 0, len(l.Records))
	for _, rec := range l.Records {
		if rec.Status != StatusApproved {
			continue
		}
		held := rec.Amount * int64(rec.Charges)
		if rec.Manual {
			held = rec.Captured
		}
		out = append(out, KeyAmount{ExternalKey: rec.ExternalKey, Amount: held - refunds.RefundedByApproval[rec.ExternalKey]})
	}
	return out
}

// KeyAmount is an amount an external key holds.
type KeyAmount struct {
	ExternalKey string
	Amount      int64
}

// Arrival is one approval request as it reached the server.
type Arrival struct {
	// At is when the request reached the handler, before any hang (UTC).
	At time.Time `json:"at"`
	// UnixNano is At in nanoseconds since the Unix epoch.
	UnixNano int64 `json:"unix_nano"`
	// ExternalKey is the request's key; empty if the body did not carry
	// one.
	ExternalKey string `json:"external_key"`
	// Path is the request's path.
	Path string `json:"path"`
	// Mode is the behaviour mode when the request arrived.
	Mode Mode `json:"mode"`
}

// ArrivalLog is the answer of GET /admin/arrivals: the arrivals in time
// order.
type ArrivalLog struct {
	Arrivals []Arrival `json:"arrivals"`
	// Count is len(Arrivals).
	Count int `json:"count"`
	// Dropped counts the oldest arrivals dropped because the log held
	// Config.MaxArrivals; a count over arrivals is incomplete unless it
	// is 0.
	Dropped int64 `json:"dropped"`
}

// attempt is when approval requests for one external key arrived.
type attempt struct {
	first, last time.Time
}

// ledgerState is the simulator's in-memory state; Simulator.mu guards it.
type ledgerState struct {
	records  map[string]*Record
	order    []string // keys in the order first processed
	attempts map[string]attempt
	arrivals []Arrival // a ring once full: next is the oldest
	next     int
	dropped  int64
	charges  int

	refunds        map[string]*RefundRecord
	refundOrder    []string // refund keys in the order first processed
	refundAttempts map[string]attempt
	refunded       map[string]int64 // by approval key

	ops        map[string]*OperationRecord
	opOrder    []string // operation keys in the order first processed
	opAttempts map[string]attempt
}

func newLedgerState() ledgerState {
	return ledgerState{records: map[string]*Record{}, attempts: map[string]attempt{},
		refunds: map[string]*RefundRecord{}, refundAttempts: map[string]attempt{}, refunded: map[string]int64{},
		ops: map[string]*OperationRecord{}, opAttempts: map[string]attempt{}}
}

// addArrival appends a to the arrival log, dropping the oldest beyond max.
func (l *ledgerState) addArrival(a Arrival, max int) {
	if len(l.arrivals) < max {
		l.arrivals = append(l.arrivals, a)
		return
	}
	l.arrivals[l.next] = a
	l.next = (l.next + 1) % max
	l.dropped++
}

// arrivalLog copies the log in time order.
func (l *ledgerState) arrivalLog() ArrivalLog {
	out := make([]Arrival, 0, len(l.arrivals))
	out = append(out, l.arrivals[l.next:]...)
	out = append(out, l.arrivals[:l.next]...)
	// Arrival times are read before the body is decoded and appended
	// after, so concurrent requests may be appended out of order.
	slices.SortStableFunc(out, func(a, b Arrival) int {
		switch {
		case a.UnixNano < b.UnixNano:
			return -1
		case a.UnixNano > b.UnixNano:
			return 1
		}
		return 0
	})
	return ArrivalLog{Arrivals: out, Count: len(out), Dropped: l.dropped}
}

// noteAttempt remembers that a request for key arrived at.
func (l *ledgerState) noteAttempt(key string, at time.Time) {
	a, ok := l.attempts[key]
	if !ok {
		a.first = at
	}
	if at.After(a.last) {
		a.last = at
	}
	l.attempts[key] = a
}

// ledger summarizes the records.
func (l *ledgerState) ledger() Ledger {
	out := Ledger{Records: make([]Record, 0, len(l.order)), ChargesByKey: make(map[string]int, len(l.order))}
	for _, key := range l.order {
		r := *l.records[key]
		out.Records = append(out.Records, r)
		out.ChargesByKey[key] = r.Charges
		out.ChargesTotal += r.Charges
		if r.Status == StatusApproved {
			out.ApprovedKeys++
		} else {
			out.DeclinedKeys++
		}
		if r.Charges > 1 {
			out.DoubleChargedKeys++
			out.ExtraCharges += r.Charges - 1
		}
	}
	out.Keys = len(out.Records)
	return out
}
