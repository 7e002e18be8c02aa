-- Tickets taken back: a cancellation's refund (the merchant's
-- cancellation, or pay's closure of an unconfirmed approval) moves the
-- payment's ticket here, and its order becomes 'revoked'. SQLite cannot
-- change a CHECK constraint in place: order_states is rebuilt.

-- +goose Up
CREATE TABLE ticket_revocations (
    ticket_id       TEXT PRIMARY KEY,
    merchant_id     TEXT NOT NULL,
    order_id        TEXT NOT NULL,
    payment_id      TEXT NOT NULL UNIQUE,
    event_id        TEXT NOT NULL,          -- the event that issued the ticket
    amount          INTEGER NOT NULL,
    currency        TEXT NOT NULL,
    issued_at       INTEGER NOT NULL,
    revoke_event_id TEXT NOT NULL,          -- the event that revoked it
    revoked_at      INTEGER NOT NULL,
    UNIQUE (merchant_id, order_id)
);

CREATE TABLE order_states_new (
    merchant_id TEXT NOT NULL,
    order_id    TEXT NOT NULL,
    state       TEXT NOT NULL CHECK (state IN ('open', 'released', 'ticketed', 'revoked')),
    payment_id  TEXT NOT NULL,
    updated_at  INTEGER NOT NULL,
    PRIMARY KEY (merchant_id, order_id)
);
INSERT INTO order_states_new SELECT merchant_id, order_id, state, payment_id, updated_at FROM order_states;
DROP TABLE order_states;
ALTER TABLE order_states_new RENAME TO order_states;

-- +goose Down
CREATE TABLE order_states_old (
    merchant_id TEXT NOT NULL,
    order_id    TEXT NOT NULL,
    state       TEXT NOT NULL CHECK (state IN ('open', 'released', 'ticketed')),
    payment_id  TEXT NOT NULL,
    updated_at  INTEGER NOT NULL,
    PRIMARY KEY (merchant_id, order_id)
);
INSERT INTO order_states_old
    SELECT merchant_id, order_id, CASE state WHEN 'revoked' THEN 'ticketed' ELSE state END, payment_id, updated_at FROM order_states;
DROP TABLE order_states;
ALTER TABLE order_states_old RENAME TO order_states;
INSERT INTO tickets (ticket_id, merchant_id, order_id, payment_id, event_id, amount, currency, issued_at)
    SELECT ticket_id, merchant_id, order_id, payment_id, event_id, amount, currency, issued_at FROM ticket_revocations;
DROP TABLE ticket_revocations;
