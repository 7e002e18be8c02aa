-- The free seats of each event, in seat order. A hold claims the lowest
-- free seats (ORDER BY seat_no LIMIT n); through the primary key that
-- read stepped over every seat already held or sold, so a hold cost more
-- with every seat sold (on PostgreSQL, 5.6 ms and 70,000 rows filtered
-- out with 70,000 of 100,000 seats taken, against 0.03 ms through this
-- index). The index keeps only free seats: a claimed seat leaves it, a
-- released one comes back.

-- +goose Up
CREATE INDEX checkout_seats_free ON checkout_seats (event_id, seat_no) WHERE hold_id IS NULL;

-- +goose Down
DROP INDEX checkout_seats_free;
