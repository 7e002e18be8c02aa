-- Fewer index pages written per payment. A status change completes the
-- idempotency record through its primary key (the payment's
-- idempotency_key, checked against the record's payment_id) instead of
-- looking the record up by payment_id, so the index on payment_id is no
-- longer read, only written on every payment: it goes.

-- +goose Up

DROP INDEX IF EXISTS idempotency_keys_payment;

-- +goose Down

CREATE INDEX IF NOT EXISTS idempotency_keys_payment ON idempotency_keys (payment_id);
