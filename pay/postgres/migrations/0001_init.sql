-- Payments, their append-only status history, idempotency records and the
-- transactional outbox. IDs are text (canonical lower-case UUIDs) with the
-- "C" collation, so that List orders them exactly as the SQLite adapter.
--
-- Every statement creates only what is missing: a schema created before
-- migrations ran through goose already has all of it.

-- +goose Up

CREATE TABLE IF NOT EXISTS payments (
    id              text COLLATE "C" PRIMARY KEY,
    merchant_id     text NOT NULL,
    order_id        text NOT NULL,
    amount          bigint NOT NULL CHECK (amount > 0),
    currency        text NOT NULL,
    status          text NOT NULL CHECK (status IN ('PENDING', 'APPROVED', 'DECLINED', 'UNKNOWN', 'FAILED')),
    external_key    text NOT NULL UNIQUE,
    idempotency_key text NOT NULL,
    manual_review   boolean NOT NULL DEFAULT false,
    review_reason   text NOT NULL DEFAULT '',
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL,
    event_seq       bigint NOT NULL DEFAULT 0   -- seq of the payment's last outbox row
);

CREATE INDEX IF NOT EXISTS payments_status_created ON payments (status, created_at, id);

CREATE TABLE IF NOT EXISTS payment_history (
    id          bigserial PRIMARY KEY,
    payment_id  text COLLATE "C" NOT NULL REFERENCES payments (id),
    from_status text NOT NULL,                  -- '' for the first entry
    to_status   text NOT NULL,
    reason      text NOT NULL,
    at          timestamptz NOT NULL
);

CREATE INDEX IF NOT EXISTS payment_history_payment ON payment_history (payment_id, id);

CREATE TABLE IF NOT EXISTS idempotency_keys (
    key           text PRIMARY KEY,
    request_hash  text NOT NULL,
    -- Deferred: the record is written before its payment, so that a
    -- conflict is found before anything else is written.
    payment_id    text COLLATE "C" NOT NULL REFERENCES payments (id) DEFERRABLE INITIALLY DEFERRED,
    state         text NOT NULL CHECK (state IN ('in_flight', 'completed')),
    response_code integer NOT NULL DEFAULT 0,
    response_body bytea,
    created_at    timestamptz NOT NULL,
    expires_at    timestamptz NOT NULL
);

CREATE INDEX IF NOT EXISTS idempotency_keys_payment ON idempotency_keys (payment_id);
CREATE INDEX IF NOT EXISTS idempotency_keys_expires ON idempotency_keys (expires_at);

CREATE TABLE IF NOT EXISTS outbox (
    id           bigserial PRIMARY KEY,         -- global, increasing
    payment_id   text COLLATE "C" NOT NULL REFERENCES payments (id),
    seq          bigint NOT NULL,               -- per payment, from 1
    type         text NOT NULL,
    payload      json NOT NULL,                 -- json, not jsonb: kept byte for byte
    created_at   timestamptz NOT NULL,
    published_at timestamptz,
    UNIQUE (payment_id, seq)
);

CREATE INDEX IF NOT EXISTS outbox_unpublished ON outbox (id) WHERE published_at IS NULL;
