-- Merchants (API keys stored as SHA-256 hashes, an optional webhook), one
-- live payment per order, and webhook deliveries. Times are INTEGER
-- microseconds since the Unix epoch (UTC).
--
-- The partial unique index allows one PENDING, UNKNOWN or APPROVED
-- payment per (merchant_id, order_id); an order may be paid again once
-- its payment is DECLINED or FAILED. A database that already holds two
-- live payments for one order (the double charge this prevents) fails
-- this migration: settle them by hand first.

-- +goose Up

CREATE TABLE merchants (
    id             TEXT PRIMARY KEY,            -- canonical lower-case UUID
    name           TEXT NOT NULL,
    key_hash       TEXT NOT NULL UNIQUE,        -- hex SHA-256 of the API key
    webhook_url    TEXT NOT NULL DEFAULT '',    -- '' without a webhook
    webhook_secret TEXT NOT NULL DEFAULT '',
    created_at     INTEGER NOT NULL,
    revoked_at     INTEGER                      -- NULL while the key is valid
);

CREATE UNIQUE INDEX payments_live_order ON payments (merchant_id, order_id)
    WHERE status IN ('PENDING', 'UNKNOWN', 'APPROVED');

CREATE TABLE webhook_deliveries (
    id          TEXT PRIMARY KEY,               -- the event id, a UUID
    payment_id  TEXT NOT NULL REFERENCES payments (id),
    seq         INTEGER NOT NULL,               -- the outbox row's seq
    merchant_id TEXT NOT NULL REFERENCES merchants (id),
    type        TEXT NOT NULL,
    body        TEXT NOT NULL,                  -- JSON, sent byte for byte
    status      TEXT NOT NULL CHECK (status IN ('pending', 'delivered', 'failed')),
    attempts    INTEGER NOT NULL DEFAULT 0,
    last_error  TEXT NOT NULL DEFAULT '',
    next_at     INTEGER NOT NULL,
    since       INTEGER NOT NULL,               -- start of the retry period
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    UNIQUE (payment_id, seq)
);

CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_at) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_pending ON webhook_deliveries (payment_id, seq) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_created ON webhook_deliveries (created_at);
