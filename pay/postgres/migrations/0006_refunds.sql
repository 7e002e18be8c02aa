-- Refunds of payments, with their append-only history. A refund's events
-- go to the outbox of its payment (the payment's event_seq), so that a
-- payment's events and its refunds' are delivered in one order.
--
-- The idempotency key (scoped to the merchant) is unique: a refund is its
-- own idempotency record, kept as long as the refund.

-- +goose Up

CREATE TABLE refunds (
    id              text COLLATE "C" PRIMARY KEY,          -- canonical lower-case UUID; also the external key
    payment_id      text COLLATE "C" NOT NULL REFERENCES payments (id),
    merchant_id     text NOT NULL,
    amount          bigint NOT NULL CHECK (amount > 0),
    currency        text NOT NULL,
    reason          text NOT NULL DEFAULT '',
    status          text NOT NULL CHECK (status IN ('PENDING', 'SUCCEEDED', 'FAILED', 'UNKNOWN')),
    external_key    text NOT NULL UNIQUE,
    idempotency_key text NOT NULL UNIQUE,
    request_hash    text NOT NULL,
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL,
    next_inquiry_at timestamptz,
    inquiries       integer NOT NULL DEFAULT 0
);

CREATE INDEX refunds_payment ON refunds (payment_id, created_at, id);
CREATE INDEX refunds_due ON refunds (next_inquiry_at, id) WHERE status IN ('PENDING', 'UNKNOWN');

CREATE TABLE refund_history (
    id          bigserial PRIMARY KEY,
    refund_id   text COLLATE "C" NOT NULL REFERENCES refunds (id),
    from_status text NOT NULL,                  -- '' for the first entry
    to_status   text NOT NULL,
    reason      text NOT NULL,
    at          timestamptz NOT NULL
);

CREATE INDEX refund_history_refund ON refund_history (refund_id, id);

-- The merchant's listing: its payments by creation time.
CREATE INDEX payments_merchant_created ON payments (merchant_id, created_at, id);

-- +goose Down

DROP INDEX payments_merchant_created;
DROP TABLE refund_history;
DROP TABLE refunds;
