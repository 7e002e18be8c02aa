package events

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/stampede-lab/stampede"
	dispatchjs "github.com/stampede-lab/stampede/dispatch/natskeyed"
	"github.com/stampede-lab/stampede/internal/freeport"
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
	// HotCost, when positive, is the hot key's (key-000) handler time.
	HotCost time.Duration
	// Jitter spreads every handler time uniformly over ±Jitter of its
	// mean.
	Jitter float64
}

// Validate reports every unusable field at once, each named in snake_case
// as the events-worker flag that sets it, then the consumer's.
func (c WorkerConfig) Validate() error {
	var f stampede.Fields
	if c.NATS == "" {
		f.Add("nats", "must not be empty")
	}
	if c.Ledger == "" {
		f.Add("ledger", "must not be empty")
	}
	if c.Cost <= 0 {
		f.Add("cost", "must be positive, got %s", c.Cost)
	}
	if c.HotCost < 0 {
		f.Add("hot_cost", "must not be negative, got %s", c.HotCost)
	}
	if c.Jitter < 0 || c.Jitter >= 1 {
		f.Add("jitter", "must be in [0, 1), got %g", c.Jitter)
	}
	f.Check("", c.Consumer.Validate())
	return f.Err()
}

// RunWorker consumes the lab's stream until ctx ends. Each event's handler
// works for Cost (HotCost for the hot key, ± Jitter), then records the
// attempt and, unless fenced, the effect in one transaction (apply): a
// redelivered event finds its id claimed in the inbox and applies nothing,
// and a write from a process that lost the partition (a stale
// Event.Epoch) or that would take a key's sequence backwards is refused
// with ErrFenced, which hands the event back to the partition's owner.
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
	// WAL with synchronous NORMAL: a commit survives the process (a kill
	// -9), not the machine; the ledger is the lab's observer, and an fsync
	// per commit under one write lock shared by every worker would make
	// the disk, not the consumer, the victims' latency.
	db, err := sql.Open("sqlite", "file:"+cfg.Ledger+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate")
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if cfg.Consumer.Pinned && !dispatchjs.PinningSupported(nc.ConnectedServerVersion()) {
		cfg.Consumer.Pinned = false
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(os.Getpid())))
	var rmu sync.Mutex
	cost := func(key string) time.Duration {
		mean := cfg.Cost
		if key == keyName(0) && cfg.HotCost > 0 {
			mean = cfg.HotCost
		}
		if cfg.Jitter == 0 {
			return mean
		}
		rmu.Lock()
		defer rmu.Unlock()
		return time.Duration(float64(mean) * (1 + cfg.Jitter*(2*rng.Float64()-1)))
	}
	handle := func(ctx context.Context, e dispatchjs.Event) error {
		start := time.Now()
		var body labEvent
		if err := json.Unmarshal(e.Data, &body); err != nil {
			return nil // not a lab event: set aside
		}
		if body.Poison {
			var healed int
			if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM healed`).Scan(&healed); err != nil {
				return err
			}
			if healed == 0 {
				return errors.New("poison event: the handler fails until the run heals it")
			}
		}
		time.Sleep(cost(body.Key))
		return apply(ctx, db, cfg.Name, e, body, start)
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
CREATE TABLE attempts (id TEXT NOT NULL, worker TEXT NOT NULL, delivery INTEGER NOT NULL,
	epoch INTEGER NOT NULL DEFAULT 0, fenced INTEGER NOT NULL DEFAULT 0);
CREATE TABLE fences (part INTEGER PRIMARY KEY, epoch INTEGER NOT NULL);
CREATE TABLE healed (at INTEGER NOT NULL);
CREATE TABLE keyseqs (key TEXT PRIMARY KEY, seq INTEGER NOT NULL);
CREATE TABLE effects (id TEXT NOT NULL, key TEXT NOT NULL, seq INTEGER NOT NULL, worker TEXT NOT NULL,
	start_ns INTEGER NOT NULL, done_ns INTEGER NOT NULL, at_ns INTEGER NOT NULL);`)
	return err
}

func tempDir() (string, error) { return os.MkdirTemp("", "stampede-events-") }

func removeAll(dir string) { _ = os.RemoveAll(dir) }

// freePort returns a free loopback port for the embedded server, so that
// a restarted server comes back where the clients reconnect; it is drawn
// outside the ephemeral range (freeport.Restartable).
func freePort() (int, error) { return freeport.Restartable() }

func joinComma(s []string) string { return strings.Join(s, ",") }
