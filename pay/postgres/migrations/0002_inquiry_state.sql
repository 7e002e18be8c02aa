-- Inquiry state persisted on the payment, so that every instance (and a
-- restarted one) knows when a PENDING or UNKNOWN payment is next due for a
-- status inquiry, and how many inquiries it has had.
--
-- next_inquiry_at is NULL once a payment is final. For a PENDING payment
-- it is when its approval must have ended (the approval timeout plus a
-- margin after creation); for an UNKNOWN one, when it may next be asked
-- about. A reconciler claims due payments with FOR UPDATE SKIP LOCKED,
-- moving next_inquiry_at forward (a lease) in the same statement, so
-- instances share the work and never ask about one payment at once.

-- +goose Up

ALTER TABLE payments ADD COLUMN IF NOT EXISTS next_inquiry_at timestamptz;
ALTER TABLE payments ADD COLUMN IF NOT EXISTS inquiries integer NOT NULL DEFAULT 0;

UPDATE payments SET next_inquiry_at = updated_at WHERE status = 'UNKNOWN' AND next_inquiry_at IS NULL;
-- A PENDING payment written before this migration may belong to a live
-- instance of the previous version: give it a minute.
UPDATE payments SET next_inquiry_at = updated_at + interval '1 minute' WHERE status = 'PENDING' AND next_inquiry_at IS NULL;

CREATE INDEX IF NOT EXISTS payments_due ON payments (next_inquiry_at, id) WHERE status IN ('PENDING', 'UNKNOWN');
CREATE INDEX IF NOT EXISTS payments_flagged ON payments (id) WHERE manual_review;

-- +goose Down

DROP INDEX IF EXISTS payments_flagged;
DROP INDEX IF EXISTS payments_due;
ALTER TABLE payments DROP COLUMN IF EXISTS inquiries;
ALTER TABLE payments DROP COLUMN IF EXISTS next_inquiry_at;
