-- Tickets taken back: a cancellation's refund (the merchant's
-- cancellation, or pay's closure of an unconfirmed approval) moves the
-- payment's ticket here, and its order becomes 'revoked'.

-- +goose Up
CREATE TABLE ticket_revocations (
    ticket_id       text PRIMARY KEY,
    merchant_id     text NOT NULL,
    order_id        text NOT NULL,
    payment_id      text COLLATE "C" NOT NULL UNIQUE,
    event_id        text NOT NULL,          -- the event that issued the ticket
    amount          bigint NOT NULL,
    currency        text NOT NULL,
    issued_at       timestamptz NOT NULL,
    revoke_event_id text NOT NULL,          -- the event that revoked it
    revoked_at      timestamptz NOT NULL,
    UNIQUE (merchant_id, order_id)
);

ALTER TABLE order_states DROP CONSTRAINT order_states_state_check;
ALTER TABLE order_states ADD CONSTRAINT order_states_state_check
    CHECK (state IN ('open', 'released', 'ticketed', 'revoked'));

-- +goose Down
UPDATE order_states SET state = 'ticketed' WHERE state = 'revoked';
ALTER TABLE order_states DROP CONSTRAINT order_states_state_check;
ALTER TABLE order_states ADD CONSTRAINT order_states_state_check
    CHECK (state IN ('open', 'released', 'ticketed'));
INSERT INTO tickets (ticket_id, merchant_id, order_id, payment_id, event_id, amount, currency, issued_at)
    SELECT ticket_id, merchant_id, order_id, payment_id, event_id, amount, currency, issued_at FROM ticket_revocations;
DROP TABLE ticket_revocations;
