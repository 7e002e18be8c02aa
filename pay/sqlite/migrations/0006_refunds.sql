-- Refunds of payments, with their append-only history. A refund's events
-- go to the outbox of its payment (the payment's event_seq), so that a
-- payment's events and its refunds' are delivered in one order.
--
-- The idempotency key (scoped to the merchant) is unique: a refund is its
-- own idempotency record, kept as long as the refund.

-- +goose Up

CREATE TABLE refunds (
    id              TEXT PRIMARY KEY,           -- canonical lower-case UUID; also the external key
    payment_id      TEXT NOT NULL REFERENCES payments (id),
    merchant_id     TEXT NOT NULL,
    amount          INTEGER NOT NULL CHECK (amount > 0),
    currency        TEXT NOT NULL,
    reason          TEXT NOT NULL DEFAULT '',
    status          TEXT NOT NULL CHECK (status IN ('PENDING', 'SUCCEEDED', 'FAILED', 'UNKNOWN')),
    external_key    TEXT NOT NULL UNIQUE,
    idempotency_key TEXT NOT NULL UNIQUE,
    request_hash    TEXT NOT NULL,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    next_inquiry_at INTEGER,
    inquiries       INTEGER NOT NULL DEFAULT 0
);

CREATE INDEX refunds_payment ON refunds (payment_id, created_at, id);
CREATE INDEX refunds_due ON refunds (next_inquiry_at, id) WHERE status IN ('PENDING', 'UNKNOWN');

CREATE TABLE refund_history (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    refund_id   TEXT NOT NULL REFERENCES refunds (id),
    from_status TEXT NOT NULL,                  -- '' for the first entry
    to_status   TEXT NOT NULL,
    reason      TEXT NOT NULL,
    at          INTEGER NOT NULL
);

CREATE INDEX refund_history_refund ON refund_history (refund_id, id);

-- The merchant's listing: its payments by creation time.
CREATE INDEX payments_merchant_created ON payments (merchant_id, created_at, id);

-- +goose Down

DROP INDEX payments_merchant_created;
DROP TABLE refund_history;
DROP TABLE refunds;
