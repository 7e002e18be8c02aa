-- Checkout: events with their seats, holds and orders. Times are
-- timestamptz (pay/postgres's Dialect). Table names start with checkout_,
-- so checkout may share a database (or schema) with pay.

-- +goose Up

-- seats_left is the guard: a hold takes n only WHERE seats_left >= n.
CREATE TABLE checkout_events (
    id         text PRIMARY KEY,
    seats      bigint NOT NULL CHECK (seats > 0),
    seats_left bigint NOT NULL CHECK (seats_left >= 0),
    sold       bigint NOT NULL CHECK (sold >= 0),
    price      bigint NOT NULL CHECK (price > 0),
    currency   text NOT NULL,
    created_at timestamptz NOT NULL
);

-- One row per seat: a seat has at most one hold at a time.
CREATE TABLE checkout_seats (
    event_id text NOT NULL,
    seat_no  bigint NOT NULL,
    hold_id  text,                -- NULL while free
    PRIMARY KEY (event_id, seat_no)
);

CREATE INDEX checkout_seats_hold ON checkout_seats (hold_id);

CREATE TABLE checkout_holds (
    id         text PRIMARY KEY,
    event_id   text NOT NULL,
    user_id    text NOT NULL,
    seats      text NOT NULL,     -- seat numbers, comma-separated, ascending
    amount     bigint NOT NULL,
    currency   text NOT NULL,
    state      text NOT NULL CHECK (state IN ('held', 'paying', 'sold', 'released')),
    reason     text NOT NULL,
    expires_at timestamptz NOT NULL,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL
);

CREATE INDEX checkout_holds_expiry ON checkout_holds (state, expires_at);

-- One order per hold.
CREATE TABLE checkout_orders (
    id              text PRIMARY KEY,
    hold_id         text NOT NULL UNIQUE,
    event_id        text NOT NULL,
    user_id         text NOT NULL,
    seats           text NOT NULL,
    amount          bigint NOT NULL,
    currency        text NOT NULL,
    status          text NOT NULL CHECK (status IN ('pending', 'paid', 'failed')),
    idempotency_key text NOT NULL UNIQUE,
    payment_id      text NOT NULL,
    payment_status  text NOT NULL,
    reason          text NOT NULL,
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL
);

CREATE INDEX checkout_orders_pending ON checkout_orders (status, updated_at);

-- +goose Down

DROP TABLE checkout_orders;
DROP TABLE checkout_holds;
DROP TABLE checkout_seats;
DROP TABLE checkout_events;
