-- Cancellations of payments: one per payment, recorded whatever the
-- payment's status and carried out once it has settled (a void of an
-- authorisation, a refund of an approved payment, or nothing). The void
-- or refund is its own row (payment_operations, refunds) under the key
-- cancel:<payment id>; action_id names it.

-- +goose Up

CREATE TABLE payment_cancellations (
    payment_id      text COLLATE "C" PRIMARY KEY REFERENCES payments (id),
    merchant_id     text NOT NULL,
    idempotency_key text NOT NULL UNIQUE,
    request_hash    text NOT NULL,
    reason          text NOT NULL DEFAULT '',
    status          text NOT NULL CHECK (status IN ('REQUESTED', 'CARRIED_OUT', 'CLOSED')),
    action          text NOT NULL DEFAULT '' CHECK (action IN ('', 'none', 'void', 'refund')),
    action_id       text NOT NULL DEFAULT '',
    outcome         text NOT NULL DEFAULT '',
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL
);

CREATE INDEX payment_cancellations_requested ON payment_cancellations (created_at, payment_id) WHERE status = 'REQUESTED';

-- +goose Down

DROP TABLE payment_cancellations;
