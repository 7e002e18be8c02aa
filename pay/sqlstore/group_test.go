package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	_ "modernc.org/sqlite" // the "sqlite" driver
)

// groupDB opens a SQLite file as pay/sqlite opens its writer, with a
// table t and a table c whose rows must name a row of t, checked at
// commit (a deferred foreign key).
func groupDB(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "g.db")+
		"?_pragma=journal_mode(WAL)&_pragma=foreign_keys(1)&_pragma=temp_store(MEMORY)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	for _, q := range []string{
		`CREATE TABLE t (id INTEGER PRIMARY KEY)`,
		`CREATE TABLE c (id INTEGER PRIMARY KEY, t INTEGER NOT NULL REFERENCES t (id) DEFERRABLE INITIALLY DEFERRED)`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	return db
}

func insert(q string, args ...any) func(ctx context.Context, tx *sql.Tx) error {
	return func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, q, args...)
		return err
	}
}

func count(t *testing.T, db *sql.DB, table string) int {
	t.Helper()
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM ` + table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// insertThenDuplicate inserts t 2, then t 1 again, which fails: a unit
// whose first statement must be rolled back with it.
func insertThenDuplicate(ctx context.Context, tx *sql.Tx) error {
	if _, err := tx.ExecContext(ctx, `INSERT INTO t (id) VALUES (2)`); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO t (id) VALUES (1)`) // duplicate: fails
	return err
}

// runBatch runs fns as one batch of the committer and returns their
// answers.
func runBatch(c *committer, fns ...func(ctx context.Context, tx *sql.Tx) error) []error {
	units := make([]*unit, len(fns))
	for i, fn := range fns {
		units[i] = &unit{ctx: context.Background(), fn: fn, done: make(chan error, 1)}
	}
	c.run(units)
	errs := make([]error, len(units))
	for i, u := range units {
		errs[i] = <-u.done
	}
	return errs
}

// TestGroupFailingUnitAlone: a unit whose statement fails is rolled back
// to its savepoint; the units around it commit in the same batch.
func TestGroupFailingUnitAlone(t *testing.T) {
	db := groupDB(t)
	c := &committer{db: db, timeout: 5 * time.Second, max: 64}
	errs := runBatch(c,
		insert(`INSERT INTO t (id) VALUES (1)`),
		insertThenDuplicate,
		insert(`INSERT INTO t (id) VALUES (3)`),
	)
	if errs[0] != nil || errs[1] == nil || errs[2] != nil {
		t.Fatalf("answers = %v, want nil, an error, nil", errs)
	}
	var ids []int
	rows, err := db.Query(`SELECT id FROM t ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if len(ids) != 2 || ids[0] != 1 || ids[1] != 3 {
		t.Fatalf("rows = %v, want [1 3]: the failing unit's first insert must be rolled back too", ids)
	}
}

// TestGroupCommitFailureFallsBack: a unit that leaves a deferred
// constraint violated makes the batch's COMMIT fail; the batch is rolled
// back and each unit runs alone, so that only that unit fails.
func TestGroupCommitFailureFallsBack(t *testing.T) {
	db := groupDB(t)
	c := &committer{db: db, timeout: 5 * time.Second, max: 64}
	errs := runBatch(c,
		insert(`INSERT INTO t (id) VALUES (1)`),
		insert(`INSERT INTO c (id, t) VALUES (1, 99)`), // no t 99: fails at COMMIT
		insert(`INSERT INTO c (id, t) VALUES (2, 1)`),
	)
	if errs[0] != nil || errs[1] == nil || errs[2] != nil {
		t.Fatalf("answers = %v, want nil, an error, nil", errs)
	}
	if n, m := count(t, db, "t"), count(t, db, "c"); n != 1 || m != 1 {
		t.Fatalf("t has %d rows and c %d, want 1 and 1", n, m)
	}
}

// TestGroupAbandonedUnitNotRun: a unit whose caller gave up while it was
// queued is not run.
func TestGroupAbandonedUnitNotRun(t *testing.T) {
	db := groupDB(t)
	c := &committer{db: db, timeout: 5 * time.Second, max: 64}
	gone := &unit{ctx: context.Background(), fn: insert(`INSERT INTO t (id) VALUES (7)`), done: make(chan error, 1)}
	gone.state.Store(unitAbandoned)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	late := &unit{ctx: ctx, fn: insert(`INSERT INTO t (id) VALUES (8)`), done: make(chan error, 1)}
	c.run([]*unit{gone, late})
	if err := <-late.done; !errors.Is(err, context.Canceled) {
		t.Fatalf("a unit whose context ended = %v, want context.Canceled", err)
	}
	if n := count(t, db, "t"); n != 0 {
		t.Fatalf("t has %d rows, want 0", n)
	}
}

// TestGroupDoAfterClose: a write queued on a closed committer fails with
// errClosed instead of hanging.
func TestGroupDoAfterClose(t *testing.T) {
	c := newCommitter(groupDB(t), time.Second, 4)
	c.close()
	if err := c.do(context.Background(), insert(`INSERT INTO t (id) VALUES (1)`)); !errors.Is(err, errClosed) {
		t.Fatalf("do after close = %v, want errClosed", err)
	}
}

// lateBatch runs first as a batch of the committer; first starts each of
// later as a write of its own (committer.do) while it runs and waits
// 200 ms, long enough for each to be waiting in the queue, before it
// goes on. It returns the answers, first's and then later's in order,
// and the transaction each unit ran in.
func lateBatch(t *testing.T, c *committer, first func(ctx context.Context, tx *sql.Tx) error,
	later ...func(ctx context.Context, tx *sql.Tx) error) ([]error, []*sql.Tx) {
	t.Helper()
	txs := make([]*sql.Tx, 1+len(later))
	errs := make([]error, 1+len(later))
	var (
		wg   sync.WaitGroup
		once sync.Once
	)
	u := &unit{ctx: context.Background(), done: make(chan error, 1), fn: func(ctx context.Context, tx *sql.Tx) error {
		txs[0] = tx
		once.Do(func() { // not again when the batch falls back
			for i, fn := range later {
				wg.Go(func() {
					errs[1+i] = c.do(context.Background(), func(ctx context.Context, tx *sql.Tx) error {
						txs[1+i] = tx
						return fn(ctx, tx)
					})
				})
			}
			time.Sleep(200 * time.Millisecond)
		})
		return first(ctx, tx)
	}}
	c.run([]*unit{u})
	errs[0] = <-u.done
	// Units the batch left in the queue run after it, as the writer's
	// loop would run them.
	c.stop, c.stopped = make(chan struct{}), make(chan struct{})
	go c.loop()
	wg.Wait()
	c.close()
	return errs, txs
}

// TestGroupLateUnitsJoinTheCommit: units that arrive while a batch runs
// join it before its commit: one transaction for all.
func TestGroupLateUnitsJoinTheCommit(t *testing.T) {
	db := groupDB(t)
	c := &committer{db: db, timeout: 5 * time.Second, max: 64, queue: make(chan *unit)}
	errs, txs := lateBatch(t, c, insert(`INSERT INTO t (id) VALUES (1)`),
		insert(`INSERT INTO t (id) VALUES (2)`), insert(`INSERT INTO t (id) VALUES (3)`))
	if errs[0] != nil || errs[1] != nil || errs[2] != nil {
		t.Fatalf("answers = %v, want none failed", errs)
	}
	if txs[1] != txs[0] || txs[2] != txs[0] {
		t.Fatalf("the late units ran in transactions %p and %p, the first in %p: want one", txs[1], txs[2], txs[0])
	}
	if n := count(t, db, "t"); n != 3 {
		t.Fatalf("t has %d rows, want 3", n)
	}
}

// TestGroupLateUnitFailsAlone: a late unit whose statement fails is
// rolled back to its savepoint; the unit that ran first, without one,
// commits.
func TestGroupLateUnitFailsAlone(t *testing.T) {
	db := groupDB(t)
	c := &committer{db: db, timeout: 5 * time.Second, max: 64, queue: make(chan *unit)}
	errs, _ := lateBatch(t, c, insert(`INSERT INTO t (id) VALUES (1)`),
		insertThenDuplicate)
	if errs[0] != nil || errs[1] == nil {
		t.Fatalf("answers = %v, want nil and an error", errs)
	}
	if n := count(t, db, "t"); n != 1 {
		t.Fatalf("t has %d rows, want 1: the late unit's first insert must be rolled back too", n)
	}
}

// TestGroupLateUnitBreakingTheCommitFallsBack: a late unit that leaves a
// deferred constraint violated makes the commit fail; every unit of the
// batch, the first included, then runs alone.
func TestGroupLateUnitBreakingTheCommitFallsBack(t *testing.T) {
	db := groupDB(t)
	c := &committer{db: db, timeout: 5 * time.Second, max: 64, queue: make(chan *unit)}
	errs, _ := lateBatch(t, c, insert(`INSERT INTO t (id) VALUES (1)`),
		insert(`INSERT INTO c (id, t) VALUES (1, 99)`), // no t 99: fails at COMMIT
		insert(`INSERT INTO c (id, t) VALUES (2, 1)`))
	if errs[0] != nil || errs[1] == nil || errs[2] != nil {
		t.Fatalf("answers = %v, want nil, an error, nil", errs)
	}
	if n, m := count(t, db, "t"), count(t, db, "c"); n != 1 || m != 1 {
		t.Fatalf("t has %d rows and c %d, want 1 and 1", n, m)
	}
}

// TestGroupUnitAloneFailingIsAnswered: a unit alone (run without a
// savepoint) that fails is answered with its error and leaves nothing.
func TestGroupUnitAloneFailingIsAnswered(t *testing.T) {
	db := groupDB(t)
	c := &committer{db: db, timeout: 5 * time.Second, max: 64, queue: make(chan *unit)}
	errs := runBatch(c, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO t (id) VALUES (5)`); err != nil {
			return err
		}
		return errors.New("unit failed")
	})
	if errs[0] == nil || errs[0].Error() != "unit failed" {
		t.Fatalf("answer = %v, want the unit's error", errs[0])
	}
	if n := count(t, db, "t"); n != 0 {
		t.Fatalf("t has %d rows, want 0", n)
	}
}
