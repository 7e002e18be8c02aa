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
	// (EventStatusChanged) and, when resp != nil, completes the payment's
	// idempotency record with the response to replay (if the record still
	// exists). It returns the payment with its history.
	Transition(ctx context.Context, id string, from, to Status, reason string, resp *StoredResponse) (Payment, error)

	// CompleteIdempotency stores the response for key without a status
	// change (e.g. a FAILED-before-sending answer already transitioned).
	// Completing a completed record replaces its response. ErrNotFound if
	// there is no such key.
	CompleteIdempotency(ctx context.Context, key string, resp StoredResponse) error

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

	// Ping checks that the database can be reached.
	Ping(ctx context.Context) error

	// Close releases the store; every later call fails with
	// CodeUnavailable.
	Close() error
}

// StoredResponse is the response stored with a completed idempotency
// record, replayed to a client that repeats the request.
type StoredResponse struct {
	Code int    // HTTP status
	Body []byte // response body
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
