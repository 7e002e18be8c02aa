package events

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	dispatchjs "github.com/stampede-lab/stampede/dispatch/natskeyed"
)

// labEvent is the body of one lab event.
type labEvent struct {
	Key string `json:"key"`
	Seq uint64 `json:"seq"`
	At  int64  `json:"at"`
	// Poison makes the handler fail until the run heals it.
	Poison bool `json:"poison,omitempty"`
}

// apply records one handler run in the ledger in one transaction, the
// fulfilment pattern with a fence:
//
//   - the attempt, always (with its delivery count and whether it was
//     fenced);
//   - the fence: a write whose epoch is below the largest epoch the ledger
//     has seen for the partition comes from a process that lost the
//     partition (stopped past the ack deadline while another took over):
//     refused with dispatchjs.ErrFenced, nothing applied;
//   - the inbox: an event id already claimed is a redelivery, applied
//     once already: nothing applied, no error;
//   - the key's sequence: an event whose per-key sequence is not above the
//     key's last applied one would apply out of order: refused with
//     ErrFenced;
//   - else the inbox row, the effect with its start and commit times, the
//     key's new sequence and the partition's epoch.
//
// db must open its transactions with BEGIN IMMEDIATE (the workers' DSN),
// so that the reads and writes of one run are serialised with every other
// process's.
func apply(ctx context.Context, db *sql.DB, worker string, e dispatchjs.Event, body labEvent, start time.Time) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var reason string
	var epoch uint64
	switch err := tx.QueryRowContext(ctx, `SELECT epoch FROM fences WHERE part = ?`, e.Partition).Scan(&epoch); {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return err
	case e.Epoch < epoch:
		reason = fmt.Sprintf("epoch %d of partition %d is below %d", e.Epoch, e.Partition, epoch)
	}
	var claimed int
	if reason == "" {
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM inbox WHERE id = ?`, e.ID).Scan(&claimed); err != nil {
			return err
		}
	}
	if reason == "" && claimed == 0 {
		var last int64 = -1
		switch err := tx.QueryRowContext(ctx, `SELECT seq FROM keyseqs WHERE key = ?`, body.Key).Scan(&last); {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return err
		case int64(body.Seq) <= last:
			reason = fmt.Sprintf("sequence %d of key %s is not above the applied %d", body.Seq, body.Key, last)
		}
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO attempts (id, worker, delivery, epoch, fenced) VALUES (?, ?, ?, ?, ?)`,
		e.ID, worker, e.Delivery, e.Epoch, reason != ""); err != nil {
		return err
	}
	if reason != "" {
		if err := tx.Commit(); err != nil {
			return err
		}
		return fmt.Errorf("events: %s: %s: %w", e.ID, reason, dispatchjs.ErrFenced)
	}
	if e.Epoch > epoch {
		if _, err := tx.ExecContext(ctx, `INSERT INTO fences (part, epoch) VALUES (?, ?) ON CONFLICT (part) DO UPDATE SET epoch = excluded.epoch`,
			e.Partition, e.Epoch); err != nil {
			return err
		}
	}
	if claimed > 0 {
		return tx.Commit() // a redelivery: applied once already
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO inbox (id) VALUES (?)`, e.ID); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO keyseqs (key, seq) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET seq = excluded.seq`,
		body.Key, body.Seq); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO effects (id, key, seq, worker, start_ns, done_ns, at_ns) VALUES (?, ?, ?, ?, ?, ?, ?)`,
		e.ID, body.Key, body.Seq, worker, start.UnixNano(), time.Now().UnixNano(), body.At); err != nil {
		return err
	}
	return tx.Commit()
}
