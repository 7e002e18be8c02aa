package pay

import (
	"context"
	"time"
)

// Store persists payments, their history, idempotency records and the
// outbox. Every write that changes a payment writes its history entry (for
// a status change) and an outbox row in the same transaction, so an event
// is published if and only if the change happened.
//
// Errors: ErrNotFound and ErrStaleStatus (errors.Is), *IdempotencyConflict
// and *OrderExistsError (errors.As), *Error with CodeInvalid for bad arguments, CodeUnavailable
// when the database cannot be reached (or the store is closed) and
// CodeInternal otherwise. Implementations are safe for concurrent use, also
// by several processes sharing one database.
type Store interface {
	// CreatePending inserts a PENDING payment, its first history entry, an
	// in-flight idempotency record and an outbox row (EventCreated, seq 1),
	// atomically, after completing them with PrepareCreate. If the
	// idempotency key exists and has not expired at idem.CreatedAt, it
	// returns *IdempotencyConflict{Record} and writes nothing; an expired
	// record is replaced. If the order (MerchantID, OrderID) already has a
	// PENDING, UNKNOWN or APPROVED payment, it returns *OrderExistsError
	// and writes nothing (the databases enforce it with a partial unique
	// index, so concurrent creates cannot both win).
	CreatePending(ctx context.Context, p Payment, idem IdempotencyRecord) (Payment, error)

	// Transition moves payment id from `from` to `to` (compare-and-set:
	// ErrStaleStatus if the current status is not `from`, ErrNotFound if
	// there is no such payment, CodeInvalid if !CanTransition(from, to)),
	// appends history with reason, writes an outbox row
	// (EventStatusChanged) and completes the payment's idempotency record
	// (if it still names the payment): a repeated request is answered from
	// the payment from then on. A move to UNKNOWN makes the payment due for an inquiry at
	// once (NextInquiryAt = now); a move to a final status clears
	// NextInquiryAt. It returns the payment with its history.
	Transition(ctx context.Context, id string, from, to Status, reason string) (Payment, error)

	// Get returns the payment with its history, or ErrNotFound.
	Get(ctx context.Context, id string) (Payment, error)

	// Idempotency returns the record of key (expired or not), or
	// ErrNotFound.
	Idempotency(ctx context.Context, key string) (IdempotencyRecord, error)

	// ListByStatus returns up to limit payments in status s, oldest first
	// (by CreatedAt, then ID), without history.
	ListByStatus(ctx context.Context, s Status, limit int) ([]Payment, error)

	// List returns up to limit payments with IDs greater than afterID
	// ("" for the first page), ordered by ID, without history.
	List(ctx context.Context, afterID string, limit int) ([]Payment, error)

	// FlagReview marks the payment for manual review with reason and
	// writes an outbox row (EventReviewFlagged); the status and history are
	// unchanged. ErrNotFound if there is no such payment.
	FlagReview(ctx context.Context, id, reason string) error

	// PendingOutbox returns up to limit unpublished outbox rows ordered by
	// ID. A payment's rows appear in Seq order: a later row of a payment
	// is never visible before an earlier one.
	PendingOutbox(ctx context.Context, limit int) ([]OutboxEvent, error)

	// MarkPublished records that the outbox rows ids were published at at.
	// Rows already published, and unknown IDs, are left alone.
	MarkPublished(ctx context.Context, ids []int64, at time.Time) error

	// DeleteExpiredIdempotency deletes the idempotency records that have
	// expired at now (ExpiresAt <= now) and returns how many.
	DeleteExpiredIdempotency(ctx context.Context, now time.Time) (int, error)

	// ClaimDue claims up to limit PENDING or UNKNOWN payments whose
	// NextInquiryAt is at or before now, oldest due first, by setting
	// their NextInquiryAt to until (a lease: nobody else claims them
	// before then) in the statement that selects them. Payments another
	// caller is claiming at the same moment are skipped, not waited for.
	// It returns them, without history, with NextInquiryAt = until.
	ClaimDue(ctx context.Context, now, until time.Time, limit int) ([]Payment, error)

	// ClaimOne claims payment id as ClaimDue would, if it is UNKNOWN and
	// due at now; ok is false (and err nil) when it is not, e.g. because
	// another caller holds it. ErrNotFound if there is no such payment.
	ClaimOne(ctx context.Context, id string, now, until time.Time) (p Payment, ok bool, err error)

	// DeferInquiry records an inconclusive status inquiry of payment id,
	// if it is still in status: Inquiries grows by one and NextInquiryAt
	// becomes next. It returns the payment without history; ErrStaleStatus
	// if the status is no longer status (nothing written), ErrNotFound if
	// there is no such payment.
	DeferInquiry(ctx context.Context, id string, status Status, next time.Time) (Payment, error)

	// Stats counts what the monitoring gauges show.
	Stats(ctx context.Context) (Stats, error)

	// Ping checks that the database can be reached.
	Ping(ctx context.Context) error

	// Close releases the store; every later call fails with
	// CodeUnavailable.
	Close() error
}

// TransitionRequest is one transition of a BatchTransitioner batch: the
// arguments of Store.Transition.
type TransitionRequest struct {
	ID       string
	From, To Status
	Reason   string
}

// BatchTransitioner is implemented by a Store that can make many
// transitions in one transaction: one commit for a batch of outcomes
// instead of one each. The reconciler uses it when the store has it.
type BatchTransitioner interface {
	// TransitionBatch makes each transition of reqs exactly as Transition
	// would (the same compare-and-set, history entry, outbox row,
	// NextInquiryAt and idempotency completion), all in one transaction.
	// A request whose payment is not in its From status (ErrStaleStatus)
	// or does not exist (ErrNotFound) writes nothing and gets that error
	// in errs[i]; the others commit together, and errs[i] is nil for
	// each of them. When err is not nil, nothing was written and errs is
	// nil: bad arguments (CodeInvalid, also for a payment named twice)
	// or a failed transaction.
	TransitionBatch(ctx context.Context, reqs []TransitionRequest) (errs []error, err error)
}

// CheckLimit validates a list limit; adapters call it.
func CheckLimit(limit int) error {
	if limit <= 0 {
		return Invalid("limit", "must be positive, got %d", limit)
	}
	return nil
}

// CheckTransition validates the arguments of Store.Transition; adapters
// call it.
func CheckTransition(from, to Status) error {
	if !to.Valid() {
		return Invalid("status", "unknown status %q", to)
	}
	if !from.Valid() {
		return Invalid("status", "unknown status %q", from)
	}
	if !CanTransition(from, to) {
		return Invalid("status", "a payment cannot move from %s to %s", from, to)
	}
	return nil
}

// Stats is what Store.Stats counts, read by the monitoring gauges at
// scrape time.
type Stats struct {
	// Pending and Unknown count the payments in those statuses.
	Pending, Unknown int
	// Flagged counts the payments flagged for manual review.
	Flagged int
	// OldestUnpublished is the creation time of the oldest unpublished
	// outbox row; zero when every row is published.
	OldestUnpublished time.Time
}

// OutboxLag is the age at now of the oldest unpublished outbox row; 0
// when there is none.
func (s Stats) OutboxLag(now time.Time) time.Duration {
	if s.OldestUnpublished.IsZero() || now.Before(s.OldestUnpublished) {
		return 0
	}
	return now.Sub(s.OldestUnpublished)
}

// AdminStore is what the operator's endpoints read besides Store: the
// flagged payments and the count of payments in each status. The SQL
// store implements it.
type AdminStore interface {
	// ListFlagged returns up to limit payments flagged for manual review
	// with IDs greater than afterID ("" for the first page), ordered by
	// ID, without history.
	ListFlagged(ctx context.Context, afterID string, limit int) ([]Payment, error)
	// CountByStatus counts the payments in each status; a status with
	// none may be missing.
	CountByStatus(ctx context.Context) (map[Status]int, error)
}
