package sale

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"time"

	instclient "github.com/stampede-lab/stampede/institution/client"
	"github.com/stampede-lab/stampede/lab"
	"github.com/stampede-lab/stampede/waitroom/redisstore"
)

// Rig is the sale's set of processes (3 gates, the checkout, pay, the
// institution, 3 workers, and the embedded Redis and NATS or proxies to
// the real ones), the room and the event, for another lab to play its own
// load on: the soak. Its buyers play the sale's buyer (join, wait, hold,
// pay, watch the order). Start one with StartRig; Close ends it.
type Rig struct {
	r *rig
	d *dbs
	c *crowd
}

// StartRig starts every part of a sale configured by cfg (its crowd, bots,
// faults and institution schedule are not used) in dir, and creates the
// room and the event. On error, what was started is stopped.
func StartRig(ctx context.Context, cfg Config, dir string) (*Rig, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Log == nil {
		cfg.Log = func(string, ...any) {}
	}
	r := &rig{cfg: cfg, dir: dir, logf: cfg.Log}
	if err := r.setUp(ctx); err != nil {
		r.tearDown()
		return nil, err
	}
	d, err := r.openDBs()
	if err != nil {
		r.tearDown()
		return nil, err
	}
	c := newCrowd(r, cfg, cfg.Seed)
	c.opened = time.Now()
	return &Rig{r: r, d: d, c: c}, nil
}

// Close stops every part (SIGTERM, then SIGKILL) and removes what the run
// left on real services.
func (g *Rig) Close() {
	g.d.close()
	g.r.tearDown()
}

// Part is one running process of the rig.
type Part struct {
	Name string
	// PID is its current process ID; 0 when it is not running.
	PID int
	// Metrics is its Prometheus endpoint; empty for a part without one
	// (the embedded Redis and NATS, the proxies).
	Metrics string
	// MetricsAuth is the Authorization header its Metrics need; empty for
	// none (a gate's metrics name rooms: they need the admin token).
	MetricsAuth string
	// Exited reports that the process ended (it was never stopped by the
	// rig: the rig plays no fault).
	Exited bool
}

// Parts lists the rig's processes, each with its current PID.
func (g *Rig) Parts() []Part {
	metrics, auth := map[string]string{}, map[string]string{}
	for i, u := range g.r.gateURLs {
		metrics[fmt.Sprintf("gate-%d", i)] = u + "/.stampede/metrics"
		auth[fmt.Sprintf("gate-%d", i)] = "Bearer " + g.r.adminToken
	}
	for i, u := range g.r.workerMetrics {
		metrics[fmt.Sprintf("worker-%d", i)] = u
	}
	metrics["pay"], metrics["checkout"], metrics["institution"] = g.r.payURL+"/metrics", g.r.checkoutURL+"/metrics", g.r.instURL+"/metrics"
	var out []Part
	for _, p := range g.r.procs {
		p.mu.Lock()
		part := Part{Name: p.name, Metrics: metrics[p.name], MetricsAuth: auth[p.name]}
		if m, ok := g.r.extraMetrics[p.name]; ok {
			part.Metrics = m
		}
		if p.cur != nil {
			part.PID = p.cur.pid
			select {
			case <-p.cur.done:
				part.Exited = true
			default:
			}
		}
		p.mu.Unlock()
		out = append(out, part)
	}
	return out
}

// StartPart starts another process of this binary with args beside the
// rig's, named name, healthy once health (a URL answering 200) answers;
// metrics is its Prometheus endpoint, if any. The rig stops it on Close.
func (g *Rig) StartPart(ctx context.Context, name, health, metrics string, args ...string) error {
	p, err := g.r.newProc(name, health, args...)
	if err != nil {
		return err
	}
	if metrics != "" {
		if g.r.extraMetrics == nil {
			g.r.extraMetrics = map[string]string{}
		}
		g.r.extraMetrics[name] = metrics
	}
	return p.start(ctx)
}

// Dir is the run's directory (data, logs/<part>.log).
func (g *Rig) Dir() string { return g.r.dir }

// Room and Event name the sale's room and event; Stream its payment event
// stream.
func (g *Rig) Room() string   { return g.r.room }
func (g *Rig) Event() string  { return g.r.event }
func (g *Rig) Stream() string { return g.r.stream }

// NATSStoreDir is the JetStream directory of the rig's own nats-server
// (part "nats"), or "" when the parts use a real server.
func (g *Rig) NATSStoreDir() string {
	if g.r.cfg.NATS != "" {
		return ""
	}
	return filepath.Join(g.r.dir, "nats")
}

// NATSURL is the NATS server the parts use.
func (g *Rig) NATSURL() string { return g.r.natsURL }

// RedisURL is the Redis the parts use, reached directly (not through the
// rig's proxy), and RoomKeys the room's keys on it.
func (g *Rig) RedisURL() string {
	if g.r.cfg.Redis != "" {
		return g.r.cfg.Redis
	}
	return "redis://" + g.r.redisAddr + "/0"
}

// RoomKeys are the room's keys on the Redis, and RoomLogKey the one of
// them that holds the room's admission log (it keeps every admission).
func (g *Rig) RoomKeys() []string { return redisstore.KeysFor(g.r.room).All() }

// RoomLogKey is the key of the room's admission log (see RoomKeys).
func (g *Rig) RoomLogKey() string { return redisstore.KeysFor(g.r.room).Log }

// Store is one part's database: a SQLite file or a PostgreSQL database.
type Store struct {
	Part string
	// SQLite is the file's path (its WAL is SQLite+"-wal"); empty on
	// PostgreSQL.
	SQLite string
	// Postgres is the database's URL (reached directly), and Database its
	// name; empty on SQLite.
	Postgres, Database string
}

// Stores lists the parts' databases: pay, checkout, fulfilment.
func (g *Rig) Stores() []Store {
	var out []Store
	for _, part := range []string{"pay", "checkout", "fulfilment"} {
		if !g.d.pg {
			out = append(out, Store{Part: part, SQLite: filepath.Join(g.r.dir, part+".db")})
			continue
		}
		u, _ := url.Parse(g.r.pgDBs[part])
		base, _ := url.Parse(g.r.cfg.Postgres)
		u.Host = base.Host
		out = append(out, Store{Part: part, Postgres: u.String(), Database: "stampede_sale_" + g.r.id + "_" + part})
	}
	return out
}

// Payments counts pay's payments.
func (g *Rig) Payments(ctx context.Context) (int64, error) {
	var n int64
	err := g.d.pay.QueryRowContext(ctx, "SELECT COUNT(*) FROM payments").Scan(&n)
	return n, err
}

// Trip is one buyer's way through the sale.
type Trip struct {
	// End is how it ended as the buyer saw it: one of Outcomes, or
	// "order_pending" (an order whose end the buyer did not see).
	End string
	// Joined, Admitted, Purchased and Settled are when the buyer joined,
	// saw its admission, first asked to pay, and saw its order paid or
	// failed; zero when it did not get there.
	Joined, Admitted, Purchased, Settled time.Time
	HoldID, OrderID, PaymentID           string
}

// Buy plays buyer n (its own address, see buyerIP) through the sale:
// join through a gate, wait, hold a seat, pay, watch the order. patience
// is how long it waits in the queue before walking away (0: for ever);
// leaveAtHold walks away with the seat on hold.
func (g *Rig) Buy(ctx context.Context, n int, patience time.Duration, leaveAtHold bool) Trip {
	b := &buyer{n: n, ip: buyerIP(n), queuePatience: patience, leaveAtHold: leaveAtHold}
	g.c.run(ctx, b)
	b.mu.Lock()
	defer b.mu.Unlock()
	return Trip{End: b.end, Joined: b.joinedAt, Admitted: b.admittedAt, Purchased: b.purchasedAt, Settled: b.settledAt,
		HoldID: b.holdID, OrderID: b.orderID, PaymentID: b.paymentID}
}

// Refund asks pay for a full refund of payment id under key and returns
// the refund's status as pay answered it (SUCCEEDED, FAILED, or UNKNOWN
// while it settles).
func (g *Rig) Refund(ctx context.Context, paymentID, key string) (string, error) {
	var out struct {
		Status string `json:"status"`
	}
	err := g.r.callKey(ctx, http.MethodPost, g.r.payURL+"/v1/payments/"+paymentID+"/refunds", g.r.merchantKey, key, map[string]any{}, &out)
	return out.Status, err
}

// Refunded is what pay says was refunded of payment id (its SUCCEEDED
// refunds), and whether a refund is still unsettled.
func (g *Rig) Refunded(ctx context.Context, paymentID string) (refunded int64, unsettled bool, err error) {
	var out struct {
		Refunds []struct {
			Status string `json:"status"`
		} `json:"refunds"`
		Refunded int64 `json:"refunded"`
	}
	if err := g.r.call(ctx, http.MethodGet, g.r.payURL+"/v1/payments/"+paymentID+"/refunds", g.r.merchantKey, nil, &out); err != nil {
		return 0, false, err
	}
	for _, r := range out.Refunds {
		if r.Status != "SUCCEEDED" && r.Status != "FAILED" {
			unsettled = true
		}
	}
	return out.Refunded, unsettled, nil
}

// Drain waits up to max until no payment is pending or unknown, no order
// is pending, the outbox is empty, every APPROVED payment has its ticket
// and the workers have no event left; false when it did not.
func (g *Rig) Drain(ctx context.Context, max time.Duration) bool {
	e := &Experiment{cfg: g.r.cfg}
	e.cfg.Drain = max
	return e.drain(ctx, g.r, g.d)
}

// Check reads every part's record once the sale drained and checks the
// invariants across them: no seat sold twice or beyond the seats, seats
// sold = tickets, no double charge, parity between the institution, the
// payments, the orders and the tickets; and of the refunds of refunded
// (payment IDs): no refund beyond one per payment or beyond its amount at
// the institution, and what pay says was refunded equal to what the
// institution refunded. It writes the figures into m and extra and
// returns the broken invariants.
func (g *Rig) Check(ctx context.Context, refunded []string, m lab.Metrics, extra map[string]any) ([]string, error) {
	rec, err := readRecords(ctx, g.r, g.d, g.r.cfg.Seats)
	if err != nil {
		return nil, err
	}
	broken := rec.put(m, extra)
	refundedSet := map[string]bool{}
	for _, id := range refunded {
		refundedSet[id] = true
	}
	broken = append(broken, rec.putCloseOut(m, extra, refundedSet)...)
	ledger, err := instclient.NewClient(g.r.instURL, adminClient).WithAdminToken(g.r.adminToken).Refunds(ctx)
	if err != nil {
		return nil, fmt.Errorf("sale: the institution's refund ledger: %w", err)
	}
	moves := map[string]int{}
	for _, rc := range ledger.Records {
		moves[rc.ApprovalKey] += rc.Refunds
	}
	doubles := ledger.OverRefunded
	for id, n := range moves {
		if n > 1 {
			doubles += n - 1
			extra["double_refund_example"] = id
		}
	}
	mismatches, unsettled := 0, 0
	for _, id := range refunded {
		got, open, err := g.Refunded(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("sale: pay's refunds of %s: %w", id, err)
		}
		if open {
			unsettled++
		}
		if got != ledger.RefundedByApproval[id] {
			mismatches++
			extra["refund_mismatch_example"] = fmt.Sprintf("payment %s: pay says %d refunded, the institution %d", id, got, ledger.RefundedByApproval[id])
		}
	}
	m["double_refunds"] = float64(doubles)
	m["refund_parity_mismatches"] = float64(mismatches)
	m["refunds_unsettled"] = float64(unsettled)
	m["institution_refunds"] = float64(len(ledger.Records))
	if doubles > 0 {
		broken = append(broken, fmt.Sprintf("%d double refunds (refunds beyond one per payment or beyond its amount at the institution)", doubles))
	}
	if mismatches > 0 {
		broken = append(broken, fmt.Sprintf("refund parity: %d payments whose refunded sum differs between pay and the institution", mismatches))
	}
	return broken, nil
}
