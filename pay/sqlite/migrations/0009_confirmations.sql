-- Confirmations: the merchant went on with the order of a payment. The
-- closure pass cancels an APPROVED or AUTHORIZED payment that has none
-- after the closure window; one per payment.

-- +goose Up

CREATE TABLE payment_confirmations (
    payment_id   TEXT PRIMARY KEY REFERENCES payments (id),
    merchant_id  TEXT NOT NULL,
    confirmed_at INTEGER NOT NULL
);

-- +goose Down

DROP TABLE payment_confirmations;
