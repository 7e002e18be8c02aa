-- The index on idempotency_keys(payment_id) back. The column still has a
-- deferred foreign key to payments: while a transaction holds an
-- idempotency record whose payment is not written yet, the insert of
-- that payment looks for the records that name it, and without this
-- index SQLite finds them by scanning the whole table (EXPLAIN QUERY PLAN
-- of the insert: SCAN idempotency_keys), so a payment cost more the more
-- keys were kept. PostgreSQL checks the key from the child's side and
-- does not need it for the insert, but would scan for it on an update or
-- delete of a payment's id; both dialects keep one schema.

-- +goose Up

CREATE INDEX IF NOT EXISTS idempotency_keys_payment ON idempotency_keys (payment_id);

-- +goose Down

DROP INDEX IF EXISTS idempotency_keys_payment;
