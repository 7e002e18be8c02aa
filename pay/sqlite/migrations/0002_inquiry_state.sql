-- Inquiry state persisted on the payment, so that every instance (and a
-- restarted one) knows when a PENDING or UNKNOWN payment is next due for a
-- status inquiry, and how many inquiries it has had.
--
-- next_inquiry_at (microseconds, UTC) is NULL once a payment is final. For
-- a PENDING payment it is when its approval must have ended (the approval
-- timeout plus a margin after creation); for an UNKNOWN one, when it may
-- next be asked about. A reconciler claims a due payment by moving it
-- forward (a lease), in the statement that selects it.

-- +goose Up

ALTER TABLE payments ADD COLUMN next_inquiry_at INTEGER;
ALTER TABLE payments ADD COLUMN inquiries INTEGER NOT NULL DEFAULT 0;

UPDATE payments SET next_inquiry_at = updated_at WHERE status = 'UNKNOWN';
-- A PENDING payment written before this migration may belong to a live
-- instance of the previous version: give it a minute.
UPDATE payments SET next_inquiry_at = updated_at + 60000000 WHERE status = 'PENDING';

CREATE INDEX payments_due ON payments (next_inquiry_at, id) WHERE status IN ('PENDING', 'UNKNOWN');
CREATE INDEX payments_flagged ON payments (id) WHERE manual_review = 1;

-- +goose Down

DROP INDEX payments_flagged;
DROP INDEX payments_due;
ALTER TABLE payments DROP COLUMN inquiries;
ALTER TABLE payments DROP COLUMN next_inquiry_at;
