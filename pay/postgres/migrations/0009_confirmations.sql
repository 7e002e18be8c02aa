-- Confirmations: the merchant went on with the order of a payment. The
-- closure pass cancels an APPROVED or AUTHORIZED payment that has none
-- after the closure window; one per payment.

-- +goose Up

CREATE TABLE payment_confirmations (
    payment_id   text COLLATE "C" PRIMARY KEY REFERENCES payments (id),
    merchant_id  text NOT NULL,
    confirmed_at timestamptz NOT NULL
);

-- +goose Down

DROP TABLE payment_confirmations;
