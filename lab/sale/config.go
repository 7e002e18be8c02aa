// Package sale is the end-to-end lab of a ticket sale (`stampede lab
// sale`): every part of Stampede as a real child process of the same
// binary — 3 gates with their waiting-room instances on one Redis, the
// checkout, pay (with --require-admission), the institution simulator and
// 3 event workers, on one embedded Redis-protocol server and one embedded
// nats-server (each its own process) or on real Redis, PostgreSQL and
// NATS — under a flash crowd of buyers and bots, an institution that hangs
// and whose status API goes down, and faults: kill -9 of a waiting-room
// instance, of pay and of a worker, a Redis restart and a 3 s database
// cut.
//
// The report accounts for every buyer (ticket, declined, failed,
// abandoned, sold out, not admitted), checks the invariants across the
// parts (no seat sold twice or beyond the seats, no double charge, parity
// between the institution, the payments and the tickets, the room never
// over capacity at the checkout's view, no event applied out of order),
// and draws the sale's time series with each fault marked.
package sale

import (
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The faults, each at its own time of the sale.
const (
	FaultWaitroomKill = "waitroom-kill" // kill -9 of gate 2 (its waiting-room instance), restarted 2 s later
	FaultRedisRestart = "redis-restart" // the Redis-protocol server stopped and started again (embedded: with its snapshot; real: its connections cut for 1 s)
	FaultPayKill      = "pay-kill"      // kill -9 of pay, restarted 1 s later
	FaultDBCut        = "db-cut"        // 3 s without the databases (SQLite: an exclusive lock on every file; PostgreSQL: a TCP proxy cutting every connection)
	FaultWorkerKill   = "worker-kill"   // kill -9 of worker 0, restarted 2 s later
	// FaultWorkerGone is kill -9 of worker 1, never restarted: the other
	// workers must take its partitions over (pinned consumers on
	// nats-server 2.11+, partition leases on an older one). Not in
	// AllFaults: ask for it with Faults.
	FaultWorkerGone = "worker-kill-for-good"
)

// AllFaults lists every fault of the default sale in the order they
// strike.
var AllFaults = []string{FaultWaitroomKill, FaultRedisRestart, FaultPayKill, FaultDBCut, FaultWorkerKill}

// KnownFaults lists every fault a sale accepts: AllFaults and
// FaultWorkerGone.
var KnownFaults = append(slices.Clone(AllFaults), FaultWorkerGone)

// WorkerLease is each worker's partition lease (serve worker --lease) on
// a nats-server without pinned consumers: a dead worker's partitions move
// to a live one within WorkerLease plus a third of it.
const WorkerLease = 3 * time.Second

// WorkerAckWait is each worker's ack deadline (serve worker --ack-wait) on
// a nats-server without pinned consumers: the events a dead worker held
// come back to the worker that took its partitions over after it, and the
// partition waits for them (its barrier), so the default 30 s would stall
// a dead worker's partition for half a minute.
const WorkerAckWait = 5 * time.Second

// Config configures the sale.
type Config struct {
	// Buyers is the crowd; SurgeShare of them arrive within Surge of the
	// opening, the rest uniformly over the following Tail.
	Buyers     int
	SurgeShare float64
	Surge      time.Duration
	Tail       time.Duration
	// Seats of the event and Capacity of the room.
	Seats    int
	Capacity int
	// Lease is the room's admission lease (a buyer who walks away from a
	// hold gives its seat back after it).
	Lease time.Duration
	// Retention is the room's retention_seconds: how long it keeps a
	// finished ticket; 0: an hour.
	Retention time.Duration
	// QueueAbandon and CheckoutAbandon are the shares of buyers who give
	// up in the queue and after their hold; Reload the share who reload
	// the waiting page (re-join with their ticket) while waiting.
	QueueAbandon    float64
	CheckoutAbandon float64
	Reload          float64
	// Bots hammer join, each at BotRate joins per second, from a few
	// addresses.
	Bots    int
	BotRate float64
	// Faults to inject (AllFaults by default); none is allowed.
	Faults []string
	// Timeline is the stretch of the sale over which the faults and the
	// institution's schedule are spread: the faults strike from 15 % to
	// 75 % of it.
	Timeline time.Duration
	// InstitutionHang says when, as shares of Timeline, the institution hangs after processing
	// (HANG_AFTER_PROCESSING for HangMS; see HangBefore), and StatusDown when its status
	// API is down; Decline when it declines everything.
	InstitutionHang [2]float64
	StatusDown      [2]float64
	Decline         [2]float64
	HangMS          int64
	// HangBefore makes the institution hang before processing
	// (HANG_BEFORE_PROCESSING: nothing is charged, the payments fail)
	// instead of after (the charge is made, the answer held).
	HangBefore bool
	// MaxSale bounds the whole sale; Drain bounds the wait for pending
	// payments, the outbox and the workers afterwards.
	MaxSale time.Duration
	Drain   time.Duration
	// Redis, Postgres and NATS name real services; empty: embedded.
	Redis, Postgres, NATS string
	// UnsafeInventory runs the checkout without its inventory rule
	// (serve checkout --unsafe-inventory with --unsafe-gap UnsafeGap).
	UnsafeInventory bool
	UnsafeGap       time.Duration
	// Capture is the checkout's capture mode (serve checkout --capture):
	// "automatic" or "manual".
	Capture string
	// CloseAfter is pay's closure window (serve pay
	// --close-unconfirmed-after): an approval or authorisation whose order
	// the checkout did not confirm that long after it was made is
	// refunded or voided.
	CloseAfter time.Duration
	// Outflow is the room's max_admissions_per_minute (0: no limit).
	// Adaptive runs the gates' waiting-room instances with
	// --adaptive-outflow (reading pay's metrics for its UNKNOWN share),
	// so that the room slows below Outflow while the checkout is unwell;
	// it needs an Outflow.
	Outflow  int
	Adaptive bool
	// CompareAdaptive runs two conditions, interleaved: the room's
	// outflow static at Outflow and adaptive below it (Adaptive is then
	// ignored); the report sets their medians side by side and checks the
	// adaptive outflow's claim against the static one (see
	// Experiment.Expectations). It needs an Outflow.
	CompareAdaptive bool
	// Repeat is how many times the sale runs; Seed seeds the crowd.
	Repeat int
	Seed   uint64
	// Dir holds the runs' data and process logs; Keep keeps them.
	Dir  string
	Keep bool
	// Cmd returns the command that runs this binary with args (the
	// command line sets it); every part of the sale is started with it.
	Cmd func(args []string) *exec.Cmd
	// Log receives progress lines; nil: none.
	Log func(format string, args ...any)
}

// DefaultConfig returns the sale: 20,000 buyers, 80 % within the
// first 10 s, 2,000 seats, a room of 200, every fault.
func DefaultConfig() Config {
	return Config{
		Buyers: 20_000, SurgeShare: 0.8, Surge: 10 * time.Second, Tail: 20 * time.Second,
		Seats: 2000, Capacity: 200, Lease: 20 * time.Second,
		QueueAbandon: 0.05, CheckoutAbandon: 0.05, Reload: 0.1,
		Bots: 4, BotRate: 50,
		Faults:          slices.Clone(AllFaults),
		InstitutionHang: [2]float64{0.25, 0.45}, StatusDown: [2]float64{0.35, 0.55}, Decline: [2]float64{0.6, 0.7},
		HangMS: 5000, Timeline: time.Minute,
		MaxSale: 10 * time.Minute, Drain: 90 * time.Second,
		UnsafeGap: 30 * time.Millisecond,
		Capture:   "automatic", CloseAfter: 20 * time.Second,
		Repeat: 1, Seed: 1,
		Dir: "",
	}
}

// QuickConfig is a small, fast sale for tests: 300 buyers over 6 s, 60
// seats, a room of 20, every fault.
func QuickConfig() Config {
	c := DefaultConfig()
	c.Buyers, c.Surge, c.Tail, c.Seats, c.Capacity = 300, 3*time.Second, 3*time.Second, 60, 20
	c.Lease, c.Bots, c.BotRate, c.Timeline = 10*time.Second, 2, 20, 14*time.Second
	c.MaxSale, c.Drain = 3*time.Minute, 60*time.Second
	return c
}

// Validate reports the first unusable field by name.
func (c Config) Validate() error {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("sale: %s %s", field, fmt.Sprintf(format, args...))
	}
	share := func(x float64) bool { return x >= 0 && x <= 1 }
	window := func(w [2]float64) bool { return share(w[0]) && share(w[1]) && w[0] <= w[1] }
	switch {
	case c.Buyers < 1:
		return bad("Buyers", "must be at least 1, got %d", c.Buyers)
	case c.Seats < 1 || c.Seats > 100_000:
		return bad("Seats", "must be between 1 and 100000, got %d", c.Seats)
	case c.Capacity < 1:
		return bad("Capacity", "must be at least 1, got %d", c.Capacity)
	case !share(c.SurgeShare):
		return bad("SurgeShare", "must be between 0 and 1, got %v", c.SurgeShare)
	case c.Surge <= 0 || c.Tail < 0:
		return bad("Surge", "must be positive (and Tail not negative), got %s and %s", c.Surge, c.Tail)
	case c.Lease < time.Second:
		return bad("Lease", "must be at least 1s, got %s", c.Lease)
	case c.Retention != 0 && c.Retention < time.Second:
		return bad("Retention", "must be at least 1s (or 0: an hour), got %s", c.Retention)
	case !share(c.QueueAbandon) || !share(c.CheckoutAbandon) || !share(c.Reload):
		return bad("QueueAbandon", "and CheckoutAbandon and Reload must be shares between 0 and 1")
	case c.Bots < 0 || (c.Bots > 0 && c.BotRate <= 0):
		return bad("Bots", "must not be negative, with a positive BotRate")
	case !window(c.InstitutionHang) || !window(c.StatusDown) || !window(c.Decline):
		return bad("InstitutionHang", "and StatusDown and Decline must be [from, to] shares of the arrival window")
	case c.HangMS < 0:
		return bad("HangMS", "must not be negative")
	case c.MaxSale <= c.Surge+c.Tail:
		return bad("MaxSale", "must exceed the arrival window %s, got %s", c.Surge+c.Tail, c.MaxSale)
	case c.Timeline <= 0 || c.Timeline >= c.MaxSale:
		return bad("Timeline", "must be positive and shorter than MaxSale, got %s", c.Timeline)
	case c.Drain <= 0:
		return bad("Drain", "must be positive, got %s", c.Drain)
	case c.Repeat < 1:
		return bad("Repeat", "must be at least 1, got %d", c.Repeat)
	case c.UnsafeInventory && c.UnsafeGap < 0:
		return bad("UnsafeGap", "must not be negative")
	case c.Capture != "automatic" && c.Capture != "manual":
		return bad("Capture", "must be automatic or manual, got %q", c.Capture)
	case c.CloseAfter <= 0:
		return bad("CloseAfter", "must be positive, got %s", c.CloseAfter)
	case c.Outflow < 0 || ((c.Adaptive || c.CompareAdaptive) && c.Outflow == 0):
		return bad("Outflow", "must be positive with Adaptive or CompareAdaptive (the limit it adapts below), and never negative, got %d", c.Outflow)
	case c.Cmd == nil:
		return bad("Cmd", "must be set: it starts the parts of the sale")
	}
	for _, f := range c.Faults {
		if !slices.Contains(KnownFaults, f) {
			return bad("Faults", "has %q; want some of %s (or none)", f, strings.Join(KnownFaults, ", "))
		}
	}
	return nil
}

// ParseWindow reads a window of the institution's schedule as shares of
// the timeline, "FROM-TO" (for example "0.2-0.6"), or "none" (never).
func ParseWindow(s string) ([2]float64, error) {
	if s == "none" || s == "" {
		return [2]float64{}, nil
	}
	from, to, ok := strings.Cut(s, "-")
	a, errA := strconv.ParseFloat(from, 64)
	b, errB := strconv.ParseFloat(to, 64)
	if !ok || errA != nil || errB != nil || a < 0 || b > 1 || a > b {
		return [2]float64{}, fmt.Errorf("want FROM-TO, two shares of the timeline with 0 <= FROM <= TO <= 1 (for example 0.2-0.6), or none; got %q", s)
	}
	return [2]float64{a, b}, nil
}

// FormatWindow writes w as ParseWindow reads it.
func FormatWindow(w [2]float64) string {
	if w[1] <= w[0] {
		return "none"
	}
	return strconv.FormatFloat(w[0], 'g', -1, 64) + "-" + strconv.FormatFloat(w[1], 'g', -1, 64)
}

// retention is the room's retention.
func (c Config) retention() time.Duration {
	if c.Retention == 0 {
		return time.Hour
	}
	return c.Retention
}
