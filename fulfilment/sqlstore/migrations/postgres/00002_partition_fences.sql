-- The fence of each stream partition: the largest ownership epoch
-- (dispatch/jetstream Event.Epoch) that has written. A write with a
-- smaller epoch comes from a worker that lost the partition while it was
-- stopped or cut off, and is refused.

-- +goose Up
CREATE TABLE partition_fences (
    part  integer PRIMARY KEY,
    epoch bigint NOT NULL
);

-- +goose Down
DROP TABLE partition_fences;
