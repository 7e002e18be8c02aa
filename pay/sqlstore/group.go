package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Group commit: with Config.GroupCommit, one writer goroutine runs every
// write transaction of the store. Requests that arrive while it commits
// queue up; it then takes up to Config.MaxBatch of them and runs them in
// one transaction (on SQLite, one BEGIN IMMEDIATE ... COMMIT, so one WAL
// append and one commit for the lot instead of one each), and the
// requests that arrive while those run join the same transaction before
// its commit. Each unit that shares a transaction runs inside its own
// SAVEPOINT: a unit that fails is rolled back to it alone and answered
// with its error, and the others commit. A unit is answered
// only after the COMMIT that holds it has returned, so what a caller is
// told has committed has committed exactly as with a transaction of its
// own. When the batch as a whole cannot commit (a deferred constraint
// violated, the database failing under it), it is rolled back and its
// units are run again one transaction each, so that every caller gets its
// own outcome; none of them has been answered yet.

// unitCtx is the context a unit's statements run under: the batch's
// values without its deadline. BEGIN IMMEDIATE, the only statement that
// waits for another process (for the write lock, up to the busy
// timeout), and COMMIT keep the deadline; once the lock is held the
// statements wait for nothing, and a context that can be done costs
// modernc.org/sqlite a goroutine per statement, to interrupt it. The
// batch's deadline still ends the transaction: database/sql rolls it back
// when it passes.
func unitCtx(ctx context.Context) context.Context { return context.WithoutCancel(ctx) }

// Unit states.
const (
	unitQueued int32 = iota
	unitTaken
	unitAbandoned
)

// unit is one write transaction's work, queued for the writer.
type unit struct {
	ctx   context.Context
	fn    func(ctx context.Context, tx *sql.Tx) error
	state atomic.Int32
	done  chan error // buffered: the writer never blocks on an answer
}

// committer is the writer goroutine of a group-committing store.
type committer struct {
	db      *sql.DB
	timeout time.Duration
	max     int
	queue   chan *unit // unbuffered: a unit is either taken or still its sender's
	stop    chan struct{}
	stopped chan struct{}
	once    sync.Once
}

func newCommitter(db *sql.DB, timeout time.Duration, max int) *committer {
	c := &committer{
		db:      db,
		timeout: timeout,
		max:     max,
		queue:   make(chan *unit),
		stop:    make(chan struct{}),
		stopped: make(chan struct{}),
	}
	go c.loop()
	return c
}

// close stops the writer after the batch it is running, if any.
func (c *committer) close() {
	c.once.Do(func() { close(c.stop) })
	<-c.stopped
}

// do queues fn and returns its outcome once its transaction has committed
// or failed. While fn waits in the queue, ctx bounds the wait; once the
// writer has taken it, do waits for its answer (the batch runs under its
// own deadline, Config.OpTimeout), so that no caller is told a write failed
// when it may yet commit.
func (c *committer) do(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error {
	u := &unit{ctx: ctx, fn: fn, done: make(chan error, 1)}
	select {
	case c.queue <- u:
	case <-ctx.Done():
		return ctx.Err()
	case <-c.stopped:
		return errClosed
	}
	select {
	case err := <-u.done:
		return err
	case <-ctx.Done():
		if u.state.CompareAndSwap(unitQueued, unitAbandoned) {
			return ctx.Err()
		}
		return <-u.done
	}
}

// loop runs the writer: each unit it receives starts a batch, and the
// units queued behind it join that batch (committer.late).
func (c *committer) loop() {
	defer close(c.stopped)
	for {
		select {
		case <-c.stop:
			return
		case u := <-c.queue:
			c.run([]*unit{u})
		}
	}
}

// run takes the units of batch that are still wanted and commits them.
func (c *committer) run(batch []*unit) {
	live := batch[:0]
	for _, u := range batch {
		if c.take(u) {
			live = append(live, u)
		}
	}
	if len(live) == 0 {
		return
	}
	if all, ok := c.group(live); !ok {
		for _, u := range all {
			u.done <- c.solo(u)
		}
	}
}

// take claims u for the writer: false (u answered, if need be) when its
// caller has given up.
func (c *committer) take(u *unit) bool {
	if !u.state.CompareAndSwap(unitQueued, unitTaken) {
		return false // its caller gave up waiting
	}
	if err := u.ctx.Err(); err != nil {
		u.done <- err
		return false
	}
	return true
}

// late takes a unit that has arrived while the batch ran, if any: it
// joins the batch before the commit instead of waiting for the next one.
// Units arrive while the statements of the batch run; each that joins
// shares the commit's pages (the tables' and indexes' last leaves, the
// payments' and outbox's) instead of writing them again.
func (c *committer) late() *unit {
	for {
		select {
		case u := <-c.queue:
			if c.take(u) {
				return u
			}
		default:
			return nil
		}
	}
}

// solo runs u in a transaction of its own.
func (c *committer) solo(u *unit) error {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	tx, err := c.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := u.fn(unitCtx(ctx), tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// group runs units, and the units that arrive meanwhile (up to
// Config.MaxBatch in all), in one transaction, and answers each of them
// after the commit. A unit that runs alone runs as solo does, without a
// savepoint, and its failure is answered at once; when units share the
// transaction each runs inside a savepoint of its own. It returns every
// unit it ran and reports false, having answered none, when the batch as
// a whole failed and was rolled back: the caller then runs them alone.
func (c *committer) group(units []*unit) ([]*unit, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	tx, err := c.db.BeginTx(ctx, nil)
	if err != nil {
		for _, u := range units {
			u.done <- err
		}
		return units, true
	}
	errs := make([]error, len(units), max(len(units), c.max))
	uctx := unitCtx(ctx)
	for i := 0; ; i++ {
		if i == len(units) {
			if len(units) >= c.max {
				break
			}
			u := c.late()
			if u == nil {
				break
			}
			units, errs = append(units, u), append(errs, nil)
		}
		u := units[i]
		if i == 0 && len(units) == 1 {
			// Alone so far: no savepoint. Had it failed, nothing else is
			// in the transaction.
			if err := u.fn(uctx, tx); err != nil {
				_ = tx.Rollback()
				u.done <- err
				return units, true
			}
			continue
		}
		if _, err := tx.ExecContext(uctx, `SAVEPOINT unit`); err != nil {
			_ = tx.Rollback()
			return units, false
		}
		if errs[i] = u.fn(uctx, tx); errs[i] != nil {
			// A failed statement may have ended the whole transaction
			// (SQLite does on I/O errors, SQLITE_FULL, an interrupt): the
			// savepoint is then gone and the batch falls back.
			if _, err := tx.ExecContext(uctx, `ROLLBACK TO unit`); err != nil {
				_ = tx.Rollback()
				return units, false
			}
		}
		if _, err := tx.ExecContext(uctx, `RELEASE unit`); err != nil {
			_ = tx.Rollback()
			return units, false
		}
	}
	if err := tx.Commit(); err != nil {
		if len(units) == 1 {
			units[0].done <- err // as solo would have
			return units, true
		}
		if ctx.Err() != nil {
			// Out of time: answer rather than run everything again.
			for i, u := range units {
				u.done <- errors.Join(errs[i], fmt.Errorf("group commit: %w", err))
			}
			return units, true
		}
		return units, false
	}
	for i, u := range units {
		u.done <- errs[i]
	}
	return units, true
}
