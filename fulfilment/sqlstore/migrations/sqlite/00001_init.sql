-- Fulfilment: the inbox of processed payment events and their effects.
-- Times are INTEGER microseconds since the Unix epoch (pay/sqlite's
-- Dialect). Table names do not clash with pay's, so both may share one
-- database file.

-- +goose Up

-- One row per processed event: its presence is what makes a redelivery a
-- no-op. Written in the same transaction as the effect.
CREATE TABLE inbox (
    event_id     TEXT PRIMARY KEY,       -- <payment id>-<seq>
    payment_id   TEXT NOT NULL,
    seq          INTEGER NOT NULL,
    outcome      TEXT NOT NULL,
    processed_at INTEGER NOT NULL
);

-- The last applied event of each payment: an event at or below last_seq
-- is stale.
CREATE TABLE payment_progress (
    payment_id TEXT PRIMARY KEY,
    last_seq   INTEGER NOT NULL,
    status     TEXT NOT NULL,
    updated_at INTEGER NOT NULL
);

CREATE TABLE order_states (
    merchant_id TEXT NOT NULL,
    order_id    TEXT NOT NULL,
    state       TEXT NOT NULL CHECK (state IN ('open', 'released', 'ticketed')),
    payment_id  TEXT NOT NULL,         -- the payment that set state; '' when open
    updated_at  INTEGER NOT NULL,
    PRIMARY KEY (merchant_id, order_id)
);

-- One ticket per order, and per payment.
CREATE TABLE tickets (
    ticket_id   TEXT PRIMARY KEY,
    merchant_id TEXT NOT NULL,
    order_id    TEXT NOT NULL,
    payment_id  TEXT NOT NULL UNIQUE,
    event_id    TEXT NOT NULL,
    amount      INTEGER NOT NULL,
    currency    TEXT NOT NULL,
    issued_at   INTEGER NOT NULL,
    UNIQUE (merchant_id, order_id)
);

-- One release per DECLINED or FAILED payment.
CREATE TABLE order_releases (
    payment_id  TEXT PRIMARY KEY,
    merchant_id TEXT NOT NULL,
    order_id    TEXT NOT NULL,
    event_id    TEXT NOT NULL,
    status      TEXT NOT NULL CHECK (status IN ('DECLINED', 'FAILED')),
    released_at INTEGER NOT NULL
);

CREATE INDEX order_releases_order ON order_releases (merchant_id, order_id, released_at);

-- +goose Down

DROP TABLE order_releases;
DROP TABLE tickets;
DROP TABLE order_states;
DROP TABLE payment_progress;
DROP TABLE inbox;
