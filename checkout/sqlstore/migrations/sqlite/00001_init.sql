-- Checkout: events with their seats, holds and orders. Times are INTEGER
-- microseconds since the Unix epoch (pay/sqlite's Dialect). Table names
-- start with checkout_, so checkout may share a file with pay.

-- +goose Up

-- seats_left is the guard: a hold takes n only WHERE seats_left >= n.
CREATE TABLE checkout_events (
    id         TEXT PRIMARY KEY,
    seats      INTEGER NOT NULL CHECK (seats > 0),
    seats_left INTEGER NOT NULL CHECK (seats_left >= 0),
    sold       INTEGER NOT NULL CHECK (sold >= 0),
    price      INTEGER NOT NULL CHECK (price > 0),
    currency   TEXT NOT NULL,
    created_at INTEGER NOT NULL
);

-- One row per seat: a seat has at most one hold at a time.
CREATE TABLE checkout_seats (
    event_id TEXT NOT NULL,
    seat_no  INTEGER NOT NULL,
    hold_id  TEXT,                -- NULL while free
    PRIMARY KEY (event_id, seat_no)
);

CREATE INDEX checkout_seats_hold ON checkout_seats (hold_id);

CREATE TABLE checkout_holds (
    id         TEXT PRIMARY KEY,
    event_id   TEXT NOT NULL,
    user_id    TEXT NOT NULL,
    seats      TEXT NOT NULL,     -- seat numbers, comma-separated, ascending
    amount     INTEGER NOT NULL,
    currency   TEXT NOT NULL,
    state      TEXT NOT NULL CHECK (state IN ('held', 'paying', 'sold', 'released')),
    reason     TEXT NOT NULL,
    expires_at INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);

CREATE INDEX checkout_holds_expiry ON checkout_holds (state, expires_at);

-- One order per hold.
CREATE TABLE checkout_orders (
    id              TEXT PRIMARY KEY,
    hold_id         TEXT NOT NULL UNIQUE,
    event_id        TEXT NOT NULL,
    user_id         TEXT NOT NULL,
    seats           TEXT NOT NULL,
    amount          INTEGER NOT NULL,
    currency        TEXT NOT NULL,
    status          TEXT NOT NULL CHECK (status IN ('pending', 'paid', 'failed')),
    idempotency_key TEXT NOT NULL UNIQUE,
    payment_id      TEXT NOT NULL,
    payment_status  TEXT NOT NULL,
    reason          TEXT NOT NULL,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL
);

CREATE INDEX checkout_orders_pending ON checkout_orders (status, updated_at);

-- +goose Down

DROP TABLE checkout_orders;
DROP TABLE checkout_holds;
DROP TABLE checkout_seats;
DROP TABLE checkout_events;
