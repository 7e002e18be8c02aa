-- Fewer writes per payment.
--
-- The history of a payment is kept in its outbox rows: the created and
-- status_changed events carry the entry (from_status, to_status, reason;
-- at is created_at), and payment_history, which held the same entries
-- again in two more B-trees and one more statement per change, is
-- dropped. Its rows are moved to the events they were written with: the
-- n-th entry of a payment to its n-th created or status_changed event.
--
-- An idempotency record's state is its payment's (in flight while the
-- payment is PENDING, which no status leads back to), so the second
-- commit of a payment no longer updates the record; the state column and
-- the response columns, never written, go.
--
-- One payment per order is kept by a partial unique index on a column of
-- its own, live_order (the order id while the payment keeps its order,
-- NULL after), instead of one whose condition names the status.

-- +goose Up

ALTER TABLE outbox ADD COLUMN from_status text; -- the history entry of a status change:
ALTER TABLE outbox ADD COLUMN to_status text;   -- NULL on every other event; from_status
ALTER TABLE outbox ADD COLUMN reason text;      -- '' on the first entry

WITH ev AS (
    SELECT id, payment_id, ROW_NUMBER() OVER (PARTITION BY payment_id ORDER BY seq) AS n
    FROM outbox WHERE type IN ('payment.created', 'payment.status_changed')
), hi AS (
    SELECT payment_id, from_status, to_status, reason, ROW_NUMBER() OVER (PARTITION BY payment_id ORDER BY id) AS n
    FROM payment_history
)
UPDATE outbox o SET from_status = hi.from_status, to_status = hi.to_status, reason = hi.reason
    FROM ev JOIN hi ON hi.payment_id = ev.payment_id AND hi.n = ev.n
    WHERE ev.id = o.id;

-- Every history entry found its event, or the migration fails here.
CREATE TEMP TABLE migration_check (ok integer NOT NULL CHECK (ok = 1));
INSERT INTO migration_check
    SELECT CASE WHEN (SELECT COUNT(*) FROM payment_history) = (SELECT COUNT(*) FROM outbox WHERE to_status IS NOT NULL)
        THEN 1 ELSE 0 END;
DROP TABLE migration_check;

DROP TABLE payment_history;

ALTER TABLE idempotency_keys DROP COLUMN state;
ALTER TABLE idempotency_keys DROP COLUMN response_code;
ALTER TABLE idempotency_keys DROP COLUMN response_body;

ALTER TABLE payments ADD COLUMN live_order text;
UPDATE payments SET live_order = order_id WHERE status IN ('PENDING', 'UNKNOWN', 'APPROVED', 'AUTHORIZED');
DROP INDEX payments_live_order;
CREATE UNIQUE INDEX payments_live_order ON payments (merchant_id, live_order) WHERE live_order IS NOT NULL;

-- +goose Down

DROP INDEX payments_live_order;
ALTER TABLE payments DROP COLUMN live_order;
CREATE UNIQUE INDEX payments_live_order ON payments (merchant_id, order_id)
    WHERE status IN ('PENDING', 'UNKNOWN', 'APPROVED', 'AUTHORIZED');

ALTER TABLE idempotency_keys ADD COLUMN response_body bytea;
ALTER TABLE idempotency_keys ADD COLUMN response_code integer NOT NULL DEFAULT 0;
ALTER TABLE idempotency_keys ADD COLUMN state text NOT NULL DEFAULT 'in_flight' CHECK (state IN ('in_flight', 'completed'));
UPDATE idempotency_keys k SET state = 'completed' FROM payments p WHERE p.id = k.payment_id AND p.status <> 'PENDING';

CREATE TABLE payment_history (
    id          bigserial PRIMARY KEY,
    payment_id  text COLLATE "C" NOT NULL REFERENCES payments (id),
    from_status text NOT NULL,                  -- '' for the first entry
    to_status   text NOT NULL,
    reason      text NOT NULL,
    at          timestamptz NOT NULL
);
INSERT INTO payment_history (payment_id, from_status, to_status, reason, at)
    SELECT payment_id, from_status, to_status, reason, created_at FROM outbox WHERE to_status IS NOT NULL ORDER BY id;
CREATE INDEX payment_history_payment ON payment_history (payment_id, id);
ALTER TABLE outbox DROP COLUMN reason;
ALTER TABLE outbox DROP COLUMN to_status;
ALTER TABLE outbox DROP COLUMN from_status;
