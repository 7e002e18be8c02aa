-- Fulfilment: the inbox of processed payment events and their effects.
-- Times are timestamptz (pay/postgres's Dialect); ids that are paged
-- through are COLLATE "C", so they sort as in SQLite. Table names do not
-- clash with pay's, so both may share one database (or schema).

-- +goose Up

-- One row per processed event: its presence is what makes a redelivery a
-- no-op. Written in the same transaction as the effect.
CREATE TABLE inbox (
    event_id     text PRIMARY KEY,       -- <payment id>-<seq>
    payment_id   text NOT NULL,
    seq          bigint NOT NULL,
    outcome      text NOT NULL,
    processed_at timestamptz NOT NULL
);

-- The last applied event of each payment: an event at or below last_seq
-- is stale.
CREATE TABLE payment_progress (
    payment_id text PRIMARY KEY,
    last_seq   bigint NOT NULL,
    status     text NOT NULL,
    updated_at timestamptz NOT NULL
);

CREATE TABLE order_states (
    merchant_id text NOT NULL,
    order_id    text NOT NULL,
    state       text NOT NULL CHECK (state IN ('open', 'released', 'ticketed')),
    payment_id  text NOT NULL,         -- the payment that set state; '' when open
    updated_at  timestamptz NOT NULL,
    PRIMARY KEY (merchant_id, order_id)
);

-- One ticket per order, and per payment.
CREATE TABLE tickets (
    ticket_id   text PRIMARY KEY,
    merchant_id text NOT NULL,
    order_id    text NOT NULL,
    payment_id  text COLLATE "C" NOT NULL UNIQUE,
    event_id    text NOT NULL,
    amount      bigint NOT NULL,
    currency    text NOT NULL,
    issued_at   timestamptz NOT NULL,
    UNIQUE (merchant_id, order_id)
);

-- One release per DECLINED or FAILED payment.
CREATE TABLE order_releases (
    payment_id  text PRIMARY KEY,
    merchant_id text NOT NULL,
    order_id    text NOT NULL,
    event_id    text NOT NULL,
    status      text NOT NULL CHECK (status IN ('DECLINED', 'FAILED')),
    released_at timestamptz NOT NULL
);

CREATE INDEX order_releases_order ON order_releases (merchant_id, order_id, released_at);

-- +goose Down

DROP TABLE order_releases;
DROP TABLE tickets;
DROP TABLE order_states;
DROP TABLE payment_progress;
DROP TABLE inbox;
