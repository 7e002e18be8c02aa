package events

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	dispatchjs "github.com/stampede-lab/stampede/dispatch/jetstream"
)

// WorkerConfig configures one worker process of the lab (RunWorker).
type WorkerConfig struct {
	// NATS is the server's URL.
	NATS string
	// Ledger is the shared SQLite ledger file.
	Ledger string
	// Name names the worker in the ledger.
	Name string
	// Consumer configures the keyed consumer (stream, subject,
	// partitions, pinning or Serve, concurrency, AckWait).
	Consumer dispatchjs.Config
	// Cost is how long one event's handler works before it commits.
	Cost time.Duration
}

// Validate reports the first unusable field.
func (c WorkerConfig) Validate() error {
	switch {
	case c.NATS == "":
		return fmt.Errorf("events: NATS: must not be empty")
	case c.Ledger == "":
		return fmt.Errorf("events: Ledger: must not be empty")
	case c.Cost <= 0:
		return fmt.Errorf("events: Cost: must be positive, got %s", c.Cost)
	}
	return c.Consumer.Validate()
}

// RunWorker consumes the lab's stream until ctx ends. Each event's handler
// records an attempt, works for Cost, then, in one transaction, claims the
// event id in the inbox and, if it was not there, records the effect with
// its start and commit times. A redelivered event finds its id claimed and
// applies nothing.
func RunWorker(ctx context.Context, cfg WorkerConfig) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	nc, err := nats.Connect(cfg.NATS, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		return err
	}
	db, err := sql.Open("sqlite", "file:"+cfg.Ledger+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if cfg.Consumer.Pinned && !dispatchjs.PinningSupported(nc.ConnectedServerVersion()) {
		cfg.Consumer.Pinned = false
	}
	handle := func(ctx context.Context, e dispatchjs.Event) error {
		start := time.Now()
		var body struct {
			Key string `json:"key"`
			Seq uint64 `json:"seq"`
			At  int64  `json:"at"`
		}
		if err := json.Unmarshal(e.Data, &body); err != nil {
			return nil // not a lab event: set aside
		}
		time.Sleep(cfg.Cost)
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, `INSERT INTO attempts (id, worker, delivery) VALUES (?, ?, ?)`, e.ID, cfg.Name, e.Delivery); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO inbox (id) VALUES (?)`, e.ID)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 1 {
			if _, err := tx.ExecContext(ctx, `INSERT INTO effects (id, key, seq, worker, start_ns, done_ns, at_ns) VALUES (?, ?, ?, ?, ?, ?, ?)`,
				e.ID, body.Key, body.Seq, cfg.Name, start.UnixNano(), time.Now().UnixNano(), body.At); err != nil {
				return err
			}
		}
		return tx.Commit()
	}
	// Creating the consumers can time out while a cluster elects leaders
	// (a node just died): retry until it works or ctx ends, as a
	// supervisor restarting the process would.
	var c *dispatchjs.Consumer
	for {
		if c, err = dispatchjs.New(ctx, js, cfg.Consumer, handle); err == nil {
			break
		}
		cfg.Consumer.Logger.Warn("starting the consumer failed; retrying", "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(500 * time.Millisecond):
		}
	}
	<-ctx.Done()
	c.Close()
	return nil
}

// createLedger creates the ledger's tables. effects has no unique key, so
// that an effect applied twice despite the inbox would show.
func createLedger(path string) error {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)")
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.Exec(`CREATE TABLE inbox (id TEXT PRIMARY KEY);
CREATE TABLE attempts (id TEXT NOT NULL, worker TEXT NOT NULL, delivery INTEGER NOT NULL);
CREATE TABLE effects (id TEXT NOT NULL, key TEXT NOT NULL, seq INTEGER NOT NULL, worker TEXT NOT NULL,
	start_ns INTEGER NOT NULL, done_ns INTEGER NOT NULL, at_ns INTEGER NOT NULL);`)
	return err
}

func tempDir() (string, error) { return os.MkdirTemp("", "stampede-events-") }

func removeAll(dir string) { _ = os.RemoveAll(dir) }

// freePort returns a free loopback port for the embedded server, so that
// a restarted server comes back where the clients reconnect.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func joinComma(s []string) string { return strings.Join(s, ",") }
