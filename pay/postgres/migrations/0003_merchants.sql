-- Merchants (API keys stored as SHA-256 hashes, an optional webhook), one
-- live payment per order, and webhook deliveries.
--
-- The partial unique index allows one PENDING, UNKNOWN or APPROVED
-- payment per (merchant_id, order_id); an order may be paid again once
-- its payment is DECLINED or FAILED. A database that already holds two
-- live payments for one order (the double charge this prevents) fails
-- this migration: settle them by hand first.

-- +goose Up

CREATE TABLE merchants (
    id             text COLLATE "C" PRIMARY KEY,            -- canonical lower-case UUID
    name           text NOT NULL,
    key_hash       text NOT NULL UNIQUE,        -- hex SHA-256 of the API key
    webhook_url    text NOT NULL DEFAULT '',    -- '' without a webhook
    webhook_secret text NOT NULL DEFAULT '',
    created_at     timestamptz NOT NULL,
    revoked_at     timestamptz                      -- NULL while the key is valid
);

CREATE UNIQUE INDEX payments_live_order ON payments (merchant_id, order_id)
    WHERE status IN ('PENDING', 'UNKNOWN', 'APPROVED');

CREATE TABLE webhook_deliveries (
    id          text COLLATE "C" PRIMARY KEY,               -- the event id, a UUID
    payment_id  text COLLATE "C" NOT NULL REFERENCES payments (id),
    seq         bigint NOT NULL,               -- the outbox row's seq
    merchant_id text COLLATE "C" NOT NULL REFERENCES merchants (id),
    type        text NOT NULL,
    body        text NOT NULL,                  -- JSON, sent byte for byte
    status      text NOT NULL CHECK (status IN ('pending', 'delivered', 'failed')),
    attempts    bigint NOT NULL DEFAULT 0,
    last_error  text NOT NULL DEFAULT '',
    next_at     timestamptz NOT NULL,
    since       timestamptz NOT NULL,               -- start of the retry period
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL,
    UNIQUE (payment_id, seq)
);

CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_at) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_pending ON webhook_deliveries (payment_id, seq) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_created ON webhook_deliveries (created_at);
