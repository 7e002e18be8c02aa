-- Cancellations of payments: one per payment, recorded whatever the
-- payment's status and carried out once it has settled (a void of an
-- authorisation, a refund of an approved payment, or nothing). The void
-- or refund is its own row (payment_operations, refunds) under the key
-- cancel:<payment id>; action_id names it.

-- +goose Up

CREATE TABLE payment_cancellations (
    payment_id      TEXT PRIMARY KEY REFERENCES payments (id),
    merchant_id     TEXT NOT NULL,
    idempotency_key TEXT NOT NULL UNIQUE,
    request_hash    TEXT NOT NULL,
    reason          TEXT NOT NULL DEFAULT '',
    status          TEXT NOT NULL CHECK (status IN ('REQUESTED', 'CARRIED_OUT', 'CLOSED')),
    action          TEXT NOT NULL DEFAULT '' CHECK (action IN ('', 'none', 'void', 'refund')),
    action_id       TEXT NOT NULL DEFAULT '',
    outcome         TEXT NOT NULL DEFAULT '',
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL
);

CREATE INDEX payment_cancellations_requested ON payment_cancellations (created_at, payment_id) WHERE status = 'REQUESTED';

-- +goose Down

DROP TABLE payment_cancellations;
