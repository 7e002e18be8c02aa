-- Fewer pages written per payment. Each commit appends to the WAL every
-- page it changes, one frame per page of each table and index it touches,
-- and those frames are most of what a payment costs the writer. So:
--
-- * The history of a payment is kept in its outbox rows: the created and
--   status_changed events carry the entry (from_status, to_status,
--   reason; at is created_at), and payment_history, which held the same
--   entries again in two more B-trees, is dropped. Its rows are moved to
--   the events they were written with: the n-th entry of a payment to its
--   n-th created or status_changed event.
-- * outbox drops AUTOINCREMENT: its rows are never deleted, so the next id
--   (the largest + 1) is the one AUTOINCREMENT would give, and an insert
--   no longer reads and rewrites sqlite_sequence.
-- * idempotency_keys becomes WITHOUT ROWID: a record lives in the B-tree
--   of its key instead of in a rowid table plus an index on the key. Its
--   state is its payment's (in flight while the payment is PENDING), so
--   the second commit of a payment no longer updates it, and the response
--   columns, never written, go.
-- * One payment per order is kept by a partial unique index on a column
--   of its own, live_order (the order id while the payment keeps its order,
--   NULL after), instead of one whose condition names the status: a
--   status change that keeps the order (PENDING to APPROVED) then leaves
--   the index alone.
--
-- The tables are rebuilt (the documented procedure), with foreign keys
-- off, in a transaction of their own.

-- +goose NO TRANSACTION
-- +goose Up

PRAGMA foreign_keys = OFF;

BEGIN IMMEDIATE;

CREATE TABLE outbox_new (
    id           INTEGER PRIMARY KEY,               -- global; rows are never deleted, so never reused
    payment_id   TEXT NOT NULL REFERENCES payments (id),
    seq          INTEGER NOT NULL,                  -- per payment, from 1
    type         TEXT NOT NULL,
    payload      TEXT NOT NULL,                     -- JSON
    created_at   INTEGER NOT NULL,
    published_at INTEGER,
    merchant_id  TEXT NOT NULL DEFAULT '',
    from_status  TEXT,                              -- the history entry of a status change:
    to_status    TEXT,                              -- NULL on every other event; from_status
    reason       TEXT,                              -- '' on the first entry
    UNIQUE (payment_id, seq)
);

WITH ev AS (
    SELECT id, payment_id, ROW_NUMBER() OVER (PARTITION BY payment_id ORDER BY seq) AS n
    FROM outbox WHERE type IN ('payment.created', 'payment.status_changed')
), hi AS (
    SELECT payment_id, from_status, to_status, reason, ROW_NUMBER() OVER (PARTITION BY payment_id ORDER BY id) AS n
    FROM payment_history
)
INSERT INTO outbox_new (id, payment_id, seq, type, payload, created_at, published_at, merchant_id, from_status, to_status, reason)
    SELECT o.id, o.payment_id, o.seq, o.type, o.payload, o.created_at, o.published_at, o.merchant_id,
        hi.from_status, hi.to_status, hi.reason
    FROM outbox o
    LEFT JOIN ev ON ev.id = o.id
    LEFT JOIN hi ON hi.payment_id = ev.payment_id AND hi.n = ev.n;

-- Every history entry found its event, or the migration fails here.
CREATE TEMP TABLE migration_check (ok INTEGER NOT NULL CHECK (ok = 1));
INSERT INTO migration_check
    SELECT CASE WHEN (SELECT COUNT(*) FROM payment_history) = (SELECT COUNT(*) FROM outbox_new WHERE to_status IS NOT NULL)
        THEN 1 ELSE 0 END;
DROP TABLE migration_check;

DROP TABLE outbox;
ALTER TABLE outbox_new RENAME TO outbox;
CREATE INDEX outbox_unpublished ON outbox (id) WHERE published_at IS NULL;
CREATE INDEX outbox_merchant ON outbox (merchant_id, id);

DROP TABLE payment_history;

CREATE TABLE idempotency_keys_new (
    key           TEXT PRIMARY KEY,
    request_hash  TEXT NOT NULL,
    -- Deferred: the record is written before its payment, so that a
    -- conflict is found before anything else is written.
    payment_id    TEXT NOT NULL REFERENCES payments (id) DEFERRABLE INITIALLY DEFERRED,
    created_at    INTEGER NOT NULL,
    expires_at    INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO idempotency_keys_new (key, request_hash, payment_id, created_at, expires_at)
    SELECT key, request_hash, payment_id, created_at, expires_at FROM idempotency_keys;
DROP TABLE idempotency_keys;
ALTER TABLE idempotency_keys_new RENAME TO idempotency_keys;
CREATE INDEX idempotency_keys_payment ON idempotency_keys (payment_id);
CREATE INDEX idempotency_keys_expires ON idempotency_keys (expires_at);

ALTER TABLE payments ADD COLUMN live_order TEXT;
UPDATE payments SET live_order = order_id WHERE status IN ('PENDING', 'UNKNOWN', 'APPROVED', 'AUTHORIZED');
DROP INDEX payments_live_order;
CREATE UNIQUE INDEX payments_live_order ON payments (merchant_id, live_order) WHERE live_order IS NOT NULL;

COMMIT;

PRAGMA foreign_keys = ON;

-- +goose Down

PRAGMA foreign_keys = OFF;

BEGIN IMMEDIATE;

DROP INDEX payments_live_order;
ALTER TABLE payments DROP COLUMN live_order;
CREATE UNIQUE INDEX payments_live_order ON payments (merchant_id, order_id)
    WHERE status IN ('PENDING', 'UNKNOWN', 'APPROVED', 'AUTHORIZED');

CREATE TABLE payment_history (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    payment_id  TEXT NOT NULL REFERENCES payments (id),
    from_status TEXT NOT NULL,                  -- '' for the first entry
    to_status   TEXT NOT NULL,
    reason      TEXT NOT NULL,
    at          INTEGER NOT NULL
);
INSERT INTO payment_history (payment_id, from_status, to_status, reason, at)
    SELECT payment_id, from_status, to_status, reason, created_at FROM outbox WHERE to_status IS NOT NULL ORDER BY id;
CREATE INDEX payment_history_payment ON payment_history (payment_id, id);

CREATE TABLE outbox_old (
    id           INTEGER PRIMARY KEY AUTOINCREMENT, -- global, never reused
    payment_id   TEXT NOT NULL REFERENCES payments (id),
    seq          INTEGER NOT NULL,                  -- per payment, from 1
    type         TEXT NOT NULL,
    payload      TEXT NOT NULL,                     -- JSON
    created_at   INTEGER NOT NULL,
    published_at INTEGER,
    merchant_id  TEXT NOT NULL DEFAULT '',
    UNIQUE (payment_id, seq)
);
INSERT INTO outbox_old (id, payment_id, seq, type, payload, created_at, published_at, merchant_id)
    SELECT id, payment_id, seq, type, payload, created_at, published_at, merchant_id FROM outbox;
DROP TABLE outbox;
ALTER TABLE outbox_old RENAME TO outbox;
CREATE INDEX outbox_unpublished ON outbox (id) WHERE published_at IS NULL;
CREATE INDEX outbox_merchant ON outbox (merchant_id, id);

CREATE TABLE idempotency_keys_old (
    key           TEXT PRIMARY KEY,
    request_hash  TEXT NOT NULL,
    payment_id    TEXT NOT NULL REFERENCES payments (id) DEFERRABLE INITIALLY DEFERRED,
    state         TEXT NOT NULL CHECK (state IN ('in_flight', 'completed')),
    response_code INTEGER NOT NULL DEFAULT 0,
    response_body BLOB,
    created_at    INTEGER NOT NULL,
    expires_at    INTEGER NOT NULL
);
INSERT INTO idempotency_keys_old (key, request_hash, payment_id, state, created_at, expires_at)
    SELECT k.key, k.request_hash, k.payment_id, CASE WHEN p.status = 'PENDING' THEN 'in_flight' ELSE 'completed' END,
        k.created_at, k.expires_at
    FROM idempotency_keys k JOIN payments p ON p.id = k.payment_id;
DROP TABLE idempotency_keys;
ALTER TABLE idempotency_keys_old RENAME TO idempotency_keys;
CREATE INDEX idempotency_keys_payment ON idempotency_keys (payment_id);
CREATE INDEX idempotency_keys_expires ON idempotency_keys (expires_at);

COMMIT;

PRAGMA foreign_keys = ON;
