package events

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	dispatchjs "github.com/stampede-lab/stampede/dispatch/natskeyed"
)

// openLedger creates a ledger and opens it as the workers do.
func openLedger(t *testing.T) *sql.DB {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ledger.db")
	if err := createLedger(path); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	return db
}

func count(t *testing.T, db *sql.DB, query string) int {
	t.Helper()
	var n int
	if err := db.QueryRow(query).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestApplyFences plays a worker paused past the ack deadline: worker A
// (epoch 5) applies key-001's event 0 on partition 1 and is stopped; B
// takes the partition over (epoch 9) and applies event 1. When A wakes,
// its late effects are refused, whether new (event 2) or already applied
// (event 1): a stale epoch applies nothing. B's redelivery of event 1 is
// skipped by the inbox without an error, and an event whose key sequence
// would go backwards is refused even at the current epoch. Another
// partition has its own epoch.
func TestApplyFences(t *testing.T) {
	db := openLedger(t)
	ctx := context.Background()
	ev := func(id string, part int, epoch uint64) dispatchjs.Event {
		return dispatchjs.Event{ID: id, Key: "key-001", Partition: part, Epoch: epoch, Delivery: 1}
	}
	body := func(key string, seq uint64) labEvent { return labEvent{Key: key, Seq: seq, At: time.Now().UnixNano()} }
	steps := []struct {
		what    string
		worker  string
		e       dispatchjs.Event
		b       labEvent
		fenced  bool
		effects int
	}{
		{"A applies event 0", "A", ev("key-001-0", 1, 5), body("key-001", 0), false, 1},
		{"B, the new owner, applies event 1", "B", ev("key-001-1", 1, 9), body("key-001", 1), false, 2},
		{"A wakes and runs event 2", "A", ev("key-001-2", 1, 5), body("key-001", 2), true, 2},
		{"A wakes and finishes event 1", "A", ev("key-001-1", 1, 5), body("key-001", 1), true, 2},
		{"B runs event 1 again (redelivery)", "B", ev("key-001-1", 1, 9), body("key-001", 1), false, 2},
		{"B runs an event whose sequence goes backwards", "B", ev("key-001-0b", 1, 9), body("key-001", 0), true, 2},
		{"B applies event 2", "B", ev("key-001-2", 1, 9), body("key-001", 2), false, 3},
		{"C, epoch 3, on partition 2", "C", dispatchjs.Event{ID: "key-002-0", Key: "key-002", Partition: 2, Epoch: 3, Delivery: 1}, body("key-002", 0), false, 4},
	}
	for _, s := range steps {
		err := apply(ctx, db, s.worker, s.e, s.b, time.Now())
		if got := errors.Is(err, dispatchjs.ErrFenced); got != s.fenced || err != nil && !got {
			t.Errorf("%s: apply = %v, want fenced %v", s.what, err, s.fenced)
		}
		if n := count(t, db, `SELECT COUNT(*) FROM effects`); n != s.effects {
			t.Errorf("%s: %d effects, want %d", s.what, n, s.effects)
		}
	}
	if n := count(t, db, `SELECT COUNT(*) FROM attempts WHERE fenced = 1`); n != 3 {
		t.Errorf("%d fenced attempts, want 3", n)
	}
	if n := count(t, db, `SELECT COUNT(*) FROM attempts`); n != len(steps) {
		t.Errorf("%d attempts, want %d", n, len(steps))
	}
	if n := count(t, db, `SELECT COUNT(*) FROM effects WHERE worker = 'A'`); n != 1 {
		t.Errorf("A applied %d effects, want 1 (before its pause)", n)
	}
}
