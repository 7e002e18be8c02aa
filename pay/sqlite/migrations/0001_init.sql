-- Payments, their append-only status history, idempotency records and the
-- transactional outbox. Times are INTEGER microseconds since the Unix
-- epoch (UTC).
--
-- Every statement creates only what is missing: a database created before
-- migrations ran through goose already has all of it.

-- +goose Up

CREATE TABLE IF NOT EXISTS payments (
    id              TEXT PRIMARY KEY,           -- canonical lower-case UUID
    merchant_id     TEXT NOT NULL,
    order_id        TEXT NOT NULL,
    amount          INTEGER NOT NULL CHECK (amount > 0),
    currency        TEXT NOT NULL,
    status          TEXT NOT NULL CHECK (status IN ('PENDING', 'APPROVED', 'DECLINED', 'UNKNOWN', 'FAILED')),
    external_key    TEXT NOT NULL UNIQUE,
    idempotency_key TEXT NOT NULL,
    manual_review   INTEGER NOT NULL DEFAULT 0,
    review_reason   TEXT NOT NULL DEFAULT '',
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    event_seq       INTEGER NOT NULL DEFAULT 0  -- seq of the payment's last outbox row
);

CREATE INDEX IF NOT EXISTS payments_status_created ON payments (status, created_at, id);

CREATE TABLE IF NOT EXISTS payment_history (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    payment_id  TEXT NOT NULL REFERENCES payments (id),
    from_status TEXT NOT NULL,                  -- '' for the first entry
    to_status   TEXT NOT NULL,
    reason      TEXT NOT NULL,
    at          INTEGER NOT NULL
);

CREATE INDEX IF NOT EXISTS payment_history_payment ON payment_history (payment_id, id);

CREATE TABLE IF NOT EXISTS idempotency_keys (
    key           TEXT PRIMARY KEY,
    request_hash  TEXT NOT NULL,
    -- Deferred: the record is written before its payment, so that a
    -- conflict is found before anything else is written.
    payment_id    TEXT NOT NULL REFERENCES payments (id) DEFERRABLE INITIALLY DEFERRED,
    state         TEXT NOT NULL CHECK (state IN ('in_flight', 'completed')),
    response_code INTEGER NOT NULL DEFAULT 0,
    response_body BLOB,
    created_at    INTEGER NOT NULL,
    expires_at    INTEGER NOT NULL
);

CREATE INDEX IF NOT EXISTS idempotency_keys_payment ON idempotency_keys (payment_id);
CREATE INDEX IF NOT EXISTS idempotency_keys_expires ON idempotency_keys (expires_at);

CREATE TABLE IF NOT EXISTS outbox (
    id           INTEGER PRIMARY KEY AUTOINCREMENT, -- global, never reused
    payment_id   TEXT NOT NULL REFERENCES payments (id),
    seq          INTEGER NOT NULL,                  -- per payment, from 1
    type         TEXT NOT NULL,
    payload      TEXT NOT NULL,                     -- JSON
    created_at   INTEGER NOT NULL,
    published_at INTEGER,
    UNIQUE (payment_id, seq)
);

CREATE INDEX IF NOT EXISTS outbox_unpublished ON outbox (id) WHERE published_at IS NULL;
