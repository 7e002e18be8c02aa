package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"time"
)

// CheckpointInterval is how often a file database's WAL is checkpointed.
const CheckpointInterval = 200 * time.Millisecond

// checkpointer copies a file database's WAL into the main file, every
// CheckpointInterval, on a connection of its own. The write connection
// has automatic checkpoints turned off (wal_autocheckpoint(0)): with them
// on, the commit that takes the WAL past 1,000 pages runs the checkpoint
// itself, on the writer, and every write queued behind it waits. A
// PASSIVE checkpoint takes no write lock: the writer goes on while it
// runs, and the writer restarts the WAL from its start once a checkpoint
// has copied all of it.
type checkpointer struct {
	db   *sql.DB
	stop context.CancelFunc
	done chan struct{}
}

// startCheckpointer opens its connection to path and starts it.
func startCheckpointer(path string, busy time.Duration) (*checkpointer, error) {
	q := url.Values{"_pragma": {fmt.Sprintf("busy_timeout(%d)", busy.Milliseconds())}}
	db, err := sql.Open("sqlite", path+"?"+q.Encode())
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	ctx, stop := context.WithCancel(context.Background())
	c := &checkpointer{db: db, stop: stop, done: make(chan struct{})}
	go c.run(ctx)
	return c, nil
}

func (c *checkpointer) run(ctx context.Context) {
	defer close(c.done)
	t := time.NewTicker(CheckpointInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			// A failed checkpoint (the database busy, closing) is tried
			// again at the next tick; the WAL only grows meanwhile.
			_, _ = c.db.ExecContext(ctx, `PRAGMA wal_checkpoint(PASSIVE)`)
		}
	}
}

// close stops the checkpointer and closes its connection, the last one
// to the file when the store's are closed first: SQLite checkpoints the
// WAL into the main file when its last connection closes.
func (c *checkpointer) close() error {
	c.stop()
	<-c.done
	return c.db.Close()
}
