-- Authorise then capture. A payment made with manual capture is
-- AUTHORIZED when the institution approves it, and then captured (it
-- becomes APPROVED, with the captured amount) or voided (VOIDED).
-- Captures and voids are operations of a payment: recorded PENDING
-- before the institution is asked, settled by inquiry when the answer is
-- lost, as refunds are. At most one operation of a payment holds it at a
-- time (every one but FAILED): the partial unique index makes a capture
-- and a void of one authorisation exclude each other in the database
-- itself.
--
-- The outbox rows carry their merchant, so that the merchant's events
-- feed reads them by (merchant_id, id); they are never deleted.
--
-- SQLite cannot change a CHECK constraint in place: the payments table is
-- rebuilt (the documented twelve-step procedure), with foreign keys off,
-- which needs its own transaction.

-- +goose NO TRANSACTION
-- +goose Up

PRAGMA foreign_keys = OFF;

BEGIN IMMEDIATE;

CREATE TABLE payments_new (
    id              TEXT PRIMARY KEY,           -- canonical lower-case UUID
    merchant_id     TEXT NOT NULL,
    order_id        TEXT NOT NULL,
    amount          INTEGER NOT NULL CHECK (amount > 0),
    currency        TEXT NOT NULL,
    status          TEXT NOT NULL CHECK (status IN ('PENDING', 'APPROVED', 'DECLINED', 'UNKNOWN', 'FAILED', 'AUTHORIZED', 'VOIDED')),
    external_key    TEXT NOT NULL UNIQUE,
    idempotency_key TEXT NOT NULL,
    manual_review   INTEGER NOT NULL DEFAULT 0,
    review_reason   TEXT NOT NULL DEFAULT '',
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    event_seq       INTEGER NOT NULL DEFAULT 0, -- seq of the payment's last outbox row
    next_inquiry_at INTEGER,
    inquiries       INTEGER NOT NULL DEFAULT 0,
    capture_mode    TEXT NOT NULL DEFAULT 'automatic' CHECK (capture_mode IN ('automatic', 'manual')),
    captured        INTEGER NOT NULL DEFAULT 0  -- the captured amount of a manual-capture payment
);

INSERT INTO payments_new (id, merchant_id, order_id, amount, currency, status, external_key, idempotency_key,
        manual_review, review_reason, created_at, updated_at, event_seq, next_inquiry_at, inquiries)
    SELECT id, merchant_id, order_id, amount, currency, status, external_key, idempotency_key,
        manual_review, review_reason, created_at, updated_at, event_seq, next_inquiry_at, inquiries
    FROM payments;

DROP TABLE payments;

ALTER TABLE payments_new RENAME TO payments;

CREATE INDEX payments_status_created ON payments (status, created_at, id);
CREATE INDEX payments_due ON payments (next_inquiry_at, id) WHERE status IN ('PENDING', 'UNKNOWN');
CREATE INDEX payments_flagged ON payments (id) WHERE manual_review = 1;
CREATE UNIQUE INDEX payments_live_order ON payments (merchant_id, order_id)
    WHERE status IN ('PENDING', 'UNKNOWN', 'APPROVED', 'AUTHORIZED');
CREATE INDEX payments_merchant_created ON payments (merchant_id, created_at, id);
-- The authorisation window's pass: the oldest authorisations first.
CREATE INDEX payments_authorized ON payments (created_at, id) WHERE status = 'AUTHORIZED';

CREATE TABLE payment_operations (
    id              TEXT PRIMARY KEY,           -- canonical lower-case UUID; also the external key
    payment_id      TEXT NOT NULL REFERENCES payments (id),
    merchant_id     TEXT NOT NULL,
    kind            TEXT NOT NULL CHECK (kind IN ('capture', 'void')),
    amount          INTEGER NOT NULL CHECK (amount >= 0),
    currency        TEXT NOT NULL,
    status          TEXT NOT NULL CHECK (status IN ('PENDING', 'SUCCEEDED', 'FAILED', 'UNKNOWN')),
    reason          TEXT NOT NULL DEFAULT '',   -- why it is in its status
    external_key    TEXT NOT NULL UNIQUE,
    idempotency_key TEXT NOT NULL UNIQUE,
    request_hash    TEXT NOT NULL,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    next_inquiry_at INTEGER,
    inquiries       INTEGER NOT NULL DEFAULT 0
);

CREATE UNIQUE INDEX payment_operations_live ON payment_operations (payment_id) WHERE status <> 'FAILED';
CREATE INDEX payment_operations_payment ON payment_operations (payment_id, created_at, id);
CREATE INDEX payment_operations_due ON payment_operations (next_inquiry_at, id) WHERE status IN ('PENDING', 'UNKNOWN');

ALTER TABLE outbox ADD COLUMN merchant_id TEXT NOT NULL DEFAULT '';
UPDATE outbox SET merchant_id = (SELECT p.merchant_id FROM payments p WHERE p.id = outbox.payment_id);
CREATE INDEX outbox_merchant ON outbox (merchant_id, id);

PRAGMA foreign_key_check;

COMMIT;

PRAGMA foreign_keys = ON;

-- +goose Down

DROP INDEX outbox_merchant;
ALTER TABLE outbox DROP COLUMN merchant_id;
DROP TABLE payment_operations;
DROP INDEX payments_authorized;
