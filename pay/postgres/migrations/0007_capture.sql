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

-- +goose Up

ALTER TABLE payments DROP CONSTRAINT payments_status_check;
ALTER TABLE payments ADD CONSTRAINT payments_status_check
    CHECK (status IN ('PENDING', 'APPROVED', 'DECLINED', 'UNKNOWN', 'FAILED', 'AUTHORIZED', 'VOIDED'));
ALTER TABLE payments ADD COLUMN capture_mode text NOT NULL DEFAULT 'automatic'
    CHECK (capture_mode IN ('automatic', 'manual'));
ALTER TABLE payments ADD COLUMN captured bigint NOT NULL DEFAULT 0;

DROP INDEX payments_live_order;
CREATE UNIQUE INDEX payments_live_order ON payments (merchant_id, order_id)
    WHERE status IN ('PENDING', 'UNKNOWN', 'APPROVED', 'AUTHORIZED');
-- The authorisation window's pass: the oldest authorisations first.
CREATE INDEX payments_authorized ON payments (created_at, id) WHERE status = 'AUTHORIZED';

CREATE TABLE payment_operations (
    id              text COLLATE "C" PRIMARY KEY,          -- canonical lower-case UUID; also the external key
    payment_id      text COLLATE "C" NOT NULL REFERENCES payments (id),
    merchant_id     text NOT NULL,
    kind            text NOT NULL CHECK (kind IN ('capture', 'void')),
    amount          bigint NOT NULL CHECK (amount >= 0),
    currency        text NOT NULL,
    status          text NOT NULL CHECK (status IN ('PENDING', 'SUCCEEDED', 'FAILED', 'UNKNOWN')),
    reason          text NOT NULL DEFAULT '',
    external_key    text NOT NULL UNIQUE,
    idempotency_key text NOT NULL UNIQUE,
    request_hash    text NOT NULL,
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL,
    next_inquiry_at timestamptz,
    inquiries       integer NOT NULL DEFAULT 0
);

CREATE UNIQUE INDEX payment_operations_live ON payment_operations (payment_id) WHERE status <> 'FAILED';
CREATE INDEX payment_operations_payment ON payment_operations (payment_id, created_at, id);
CREATE INDEX payment_operations_due ON payment_operations (next_inquiry_at, id) WHERE status IN ('PENDING', 'UNKNOWN');

ALTER TABLE outbox ADD COLUMN merchant_id text NOT NULL DEFAULT '';
UPDATE outbox o SET merchant_id = p.merchant_id FROM payments p WHERE p.id = o.payment_id;
CREATE INDEX outbox_merchant ON outbox (merchant_id, id);

-- +goose Down

DROP INDEX outbox_merchant;
ALTER TABLE outbox DROP COLUMN merchant_id;
DROP TABLE payment_operations;
DROP INDEX payments_authorized;
DROP INDEX payments_live_order;
CREATE UNIQUE INDEX payments_live_order ON payments (merchant_id, order_id)
    WHERE status IN ('PENDING', 'UNKNOWN', 'APPROVED');
ALTER TABLE payments DROP COLUMN captured;
ALTER TABLE payments DROP COLUMN capture_mode;
ALTER TABLE payments DROP CONSTRAINT payments_status_check;
ALTER TABLE payments ADD CONSTRAINT payments_status_check
    CHECK (status IN ('PENDING', 'APPROVED', 'DECLINED', 'UNKNOWN', 'FAILED'));
