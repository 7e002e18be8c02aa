package sale

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/stampede-lab/stampede/fulfilment"
	"github.com/stampede-lab/stampede/institution"
	"github.com/stampede-lab/stampede/lab"
	"github.com/stampede-lab/stampede/pay"
	"github.com/stampede-lab/stampede/pay/postgres"
	"github.com/stampede-lab/stampede/pay/sqlite"
)

// Experiment is the sale lab.
type Experiment struct {
	cfg Config
	// series of the last run, for Render.
	mu     sync.Mutex
	series map[string]runSeries // by run-<repeat>[-<outflow>]
	// logMu serializes Config.Log: the sale's goroutines (the sampler,
	// the institution's schedule, the faults) log at once.
	logMu sync.Mutex
}

// runSeries is one run's time series and fault marks.
type runSeries struct {
	Points []Point `json:"points"`
	Marks  []Mark  `json:"marks"`
}

// New returns the experiment for cfg.
func New(cfg Config) (*Experiment, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Experiment{cfg: cfg, series: map[string]runSeries{}}, nil
}

// Name implements lab.Experiment.
func (e *Experiment) Name() string { return "sale" }

// Params implements lab.Experiment.
func (e *Experiment) Params() any {
	c := e.cfg
	return map[string]any{
		"buyers": c.Buyers, "surge_share": c.SurgeShare, "surge_s": c.Surge.Seconds(), "tail_s": c.Tail.Seconds(),
		"seats": c.Seats, "capacity": c.Capacity, "lease_s": c.Lease.Seconds(),
		"queue_abandon": c.QueueAbandon, "checkout_abandon": c.CheckoutAbandon, "reload": c.Reload,
		"bots": c.Bots, "bot_rate": c.BotRate, "faults": c.Faults,
		"timeline_s": c.Timeline.Seconds(), "institution_hang": c.InstitutionHang, "status_down": c.StatusDown, "decline": c.Decline, "hang_ms": c.HangMS, "hang_before": c.HangBefore,
		"redis": redact(c.Redis), "postgres": redact(c.Postgres), "nats": redact(c.NATS),
		"unsafe_inventory": c.UnsafeInventory, "repeat": c.Repeat, "seed": c.Seed,
		"capture": c.Capture, "close_unconfirmed_after_s": c.CloseAfter.Seconds(),
		"outflow": c.Outflow, "adaptive": c.Adaptive, "compare_adaptive": c.CompareAdaptive,
	}
}

// redact names a real service without its credentials, or "embedded".
func redact(u string) string {
	if u == "" {
		return "embedded"
	}
	if i := strings.Index(u, "@"); i >= 0 {
		if j := strings.Index(u, "://"); j >= 0 && j < i {
			return u[:j+3] + "…" + u[i:]
		}
	}
	return u
}

// Conditions implements lab.Experiment: one, the configured sale; with
// CompareAdaptive two, its outflow static and adaptive.
func (e *Experiment) Conditions() []lab.Condition {
	inv := "safe"
	if e.cfg.UnsafeInventory {
		inv = "unsafe"
	}
	faults := strings.Join(e.cfg.Faults, "+")
	if faults == "" {
		faults = "none"
	}
	outflows := []string{"none"}
	switch {
	case e.cfg.CompareAdaptive:
		outflows = []string{outflowLabel(e.cfg.Outflow, false), outflowLabel(e.cfg.Outflow, true)}
	case e.cfg.Outflow > 0:
		outflows = []string{outflowLabel(e.cfg.Outflow, e.cfg.Adaptive)}
	}
	var out []lab.Condition
	for _, outflow := range outflows {
		out = append(out, lab.Condition{Label: fmt.Sprintf("inventory=%s capture=%s faults=%s outflow=%s", inv, e.cfg.Capture, faults, outflow),
			Values: map[string]any{"inventory": inv, "buyers": e.cfg.Buyers, "capture": e.cfg.Capture, "outflow": outflow}, Keys: []string{"inventory", "buyers", "capture", "outflow"}})
	}
	return out
}

// outflowLabel is a condition's outflow value: static-N or adaptive-N.
func outflowLabel(n int, adaptive bool) string {
	if adaptive {
		return fmt.Sprintf("adaptive-%d", n)
	}
	return fmt.Sprintf("static-%d", n)
}

// Repeats implements lab.Experiment.
func (e *Experiment) Repeats() int { return e.cfg.Repeat }

// Columns implements lab.Experiment.
func (e *Experiment) Columns() []string {
	return []string{"tickets", "seats_sold", "oversold", "double_charges", "charged_without_ticket", "closures", "parity_mismatches", "over_capacity_samples",
		"order_violations", "fairness_failures", "unaccounted_buyers", "unknown_payments", "abandoned_holds", "buyers_failed", "join_to_ticket_p50_ms", "join_to_ticket_p95_ms", "join_to_ticket_p99_ms"}
}

// logf calls Config.Log, one call at a time.
func (e *Experiment) logf(format string, args ...any) {
	if e.cfg.Log != nil {
		e.logMu.Lock()
		defer e.logMu.Unlock()
		e.cfg.Log(format, args...)
	}
}

// Run implements lab.Experiment: one whole sale.
func (e *Experiment) Run(ctx context.Context, cond lab.Condition, repeat int) (lab.RunResult, error) {
	cfg := e.cfg
	run := fmt.Sprintf("run-%d", repeat)
	if cfg.CompareAdaptive {
		cfg.Adaptive = cond.Values["outflow"] == outflowLabel(cfg.Outflow, true)
		run = fmt.Sprintf("run-%d-%s", repeat, cond.Values["outflow"])
	}
	dir := cfg.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "stampede-sale-")
		if err != nil {
			return lab.RunResult{}, err
		}
		dir = d
	}
	dir = filepath.Join(dir, run)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return lab.RunResult{}, err
	}
	r := &rig{cfg: cfg, dir: dir, logf: e.logf}
	defer func() {
		r.tearDown()
		if !cfg.Keep {
			os.RemoveAll(dir)
		}
	}()
	e.logf("sale: starting the parts in %s", dir)
	if err := r.setUp(ctx); err != nil {
		return lab.RunResult{Valid: false, Reason: err.Error()}, nil
	}
	d, err := r.openDBs()
	if err != nil {
		return lab.RunResult{}, err
	}
	defer d.close()

	c := newCrowd(r, cfg, cfg.Seed+uint64(repeat))
	c.opened = time.Now().Add(500 * time.Millisecond)
	smp := &sampler{r: r, d: d, opened: c.opened}
	sctx, stopSampling := context.WithCancel(ctx)
	var bg sync.WaitGroup
	bg.Go(func() { smp.run(sctx, 250*time.Millisecond) })

	saleCtx, endSale := context.WithTimeout(ctx, cfg.MaxSale)
	defer endSale()
	e.logf("sale: open: %d buyers, %d seats, room of %d, faults %v", cfg.Buyers, cfg.Seats, cfg.Capacity, cfg.Faults)
	cpu := startCPU(r)
	var buyers sync.WaitGroup
	for _, b := range c.buyers {
		buyers.Go(func() { c.run(saleCtx, b) })
	}
	botCtx, stopBots := context.WithTimeout(saleCtx, cfg.Surge+cfg.Tail)
	defer stopBots()
	for i := range cfg.Bots {
		bg.Go(func() { c.bot(botCtx, i) })
	}
	// The institution's schedule and the faults.
	var marks []Mark
	var marksMu sync.Mutex
	mark := func(f string, from time.Time) {
		marksMu.Lock()
		marks = append(marks, Mark{Fault: f, From: from.Sub(c.opened).Seconds(), To: time.Since(c.opened).Seconds()})
		marksMu.Unlock()
	}
	var faults sync.WaitGroup
	faults.Go(func() { e.institution(saleCtx, r, c.opened, mark) })
	faultErrs := make(chan error, len(cfg.Faults))
	window := cfg.Timeline
	for i, f := range cfg.Faults {
		at := c.opened.Add(time.Duration(float64(window) * (0.15 + 0.6*float64(i)/float64(max(1, len(cfg.Faults)-1)))))
		if len(cfg.Faults) == 1 {
			at = c.opened.Add(window / 3)
		}
		faults.Go(func() {
			if !sleep(saleCtx, time.Until(at)) {
				return
			}
			start := time.Now()
			e.logf("sale: fault %s at %.1fs", f, start.Sub(c.opened).Seconds())
			if err := r.fault(saleCtx, f, d); err != nil {
				faultErrs <- fmt.Errorf("%s: %w", f, err)
			}
			mark(f, start)
		})
	}
	// Close the room once the seats are gone and nothing is on hold, so
	// that the rest of the queue hears it is over.
	bg.Go(func() { e.closeWhenSoldOut(saleCtx, r, c) })

	done := make(chan struct{})
	go func() { buyers.Wait(); close(done) }()
	progress := time.NewTicker(5 * time.Second)
	defer progress.Stop()
wait:
	for {
		select {
		case <-done:
			break wait
		case <-saleCtx.Done():
			e.logf("sale: MaxSale %s reached; waiting for the buyers to stop (%s)", cfg.MaxSale, c.unfinished())
			<-done
			break wait
		case <-progress.C:
			smp.mu.Lock()
			if n := len(smp.points); n > 0 {
				p := smp.points[n-1]
				left := ""
				if c.closed.Load() {
					left = "; buyers not done: " + c.unfinished()
				}
				e.logf("sale: t=%.0fs waiting=%.0f active=%.0f admitted=%.0f sold=%.0f seats_left=%.0f outbox=%.0f lag=%.0f%s",
					p.T, p.Waiting, p.Active, p.AdmittedTotal, p.Sold, p.SeatsLeft, p.Outbox, p.ConsumerLag, left)
			}
			smp.mu.Unlock()
		}
	}
	saleEnd := time.Now()
	cpu.stop()
	e.logf("sale: %s", cpu)
	stopBots()
	faults.Wait()
	endSale()
	// The institution back to normal, so that pending payments settle.
	_ = r.call(ctx, http.MethodPut, r.instURL+"/admin/behavior", r.adminToken, institution.DefaultBehavior(), nil)
	e.logf("sale: buyers done after %.1fs; draining (at most %s)", saleEnd.Sub(c.opened).Seconds(), cfg.Drain)
	drained := e.drain(ctx, r, d)
	stopSampling()
	bg.Wait()
	close(faultErrs)

	res, err := e.account(ctx, r, d, c, smp)
	if err != nil {
		return lab.RunResult{}, err
	}
	for fe := range faultErrs {
		res.Valid = false
		res.Reason = joinReason(res.Reason, "fault "+fe.Error())
	}
	if !drained {
		res.Reason = joinReason(res.Reason, "the drain did not finish within "+cfg.Drain.String())
	}
	smp.mu.Lock()
	points := slices.Clone(smp.points)
	smp.mu.Unlock()
	slices.SortFunc(marks, func(a, b Mark) int { return int(math.Copysign(1, a.From-b.From)) })
	e.mu.Lock()
	e.series[run] = runSeries{Points: points, Marks: marks}
	e.mu.Unlock()
	if res.Metrics != nil {
		// The lab's own share of the CPU during the sale: near or above
		// one half, the crowd competed with the system under test for the
		// machine, and the figures are the rig's as much as the product's.
		res.Metrics["lab_cpu_share"] = cpu.share()
		res.Metrics["lab_cpu_cores"] = cpu.self.Seconds() / cpu.wall.Seconds()
		// How far the room had gone through the queue 5 s after the
		// institution's hang: the admissions an adaptive outflow withheld
		// during the hang and not made up by then show against a static
		// run of the same crowd.
		if n, ok := admittedAfterHang(points, marks, 5); ok {
			res.Metrics["admitted_5s_after_hang"] = n
		}
	}
	if ex, ok := res.Extra.(map[string]any); ok {
		ex["cpu"] = cpu.String()
		ex["marks"] = marks
		ex["sale_seconds"] = saleEnd.Sub(c.opened).Seconds()
		ex["dir"] = dir
		ex["sampler_errors"] = smp.errors
		ex["samples"] = len(points)
		ex["kills"] = r.kills()
	}
	return res, nil
}

// joinReason joins two reasons.
func joinReason(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// kills counts the kill -9 of each part.
func (r *rig) kills() map[string]int {
	out := map[string]int{}
	for _, p := range r.procs {
		if p.kill > 0 {
			out[p.name] = p.kill
		}
	}
	return out
}

// institution plays the institution's schedule: it hangs after
// processing, its status API goes down, and it declines, each for a share
// of the arrival window.
func (e *Experiment) institution(ctx context.Context, r *rig, opened time.Time, mark func(string, time.Time)) {
	cfg := e.cfg
	window := float64(cfg.Timeline)
	type change struct {
		at   float64
		name string
		b    institution.Behavior
	}
	b := institution.DefaultBehavior()
	b.HangMS = cfg.HangMS
	var changes []change
	// Build the behaviour at every boundary from the windows.
	bounds := map[float64]bool{}
	for _, w := range [][2]float64{cfg.InstitutionHang, cfg.StatusDown, cfg.Decline} {
		if w[1] > w[0] {
			bounds[w[0]], bounds[w[1]] = true, true
		}
	}
	var ats []float64
	for a := range bounds {
		ats = append(ats, a)
	}
	sort.Float64s(ats)
	in := func(w [2]float64, x float64) bool { return w[1] > w[0] && x >= w[0] && x < w[1] }
	for _, at := range ats {
		nb := b
		nb.Mode, nb.StatusAPI = institution.ModeNormal, institution.StatusAPIUp
		var names []string
		if in(cfg.InstitutionHang, at) {
			nb.Mode = institution.ModeHangAfter
			if cfg.HangBefore {
				nb.Mode = institution.ModeHangBefore
			}
			names = append(names, "institution hangs")
		}
		if in(cfg.Decline, at) {
			nb.Mode = institution.ModeDecline
			names = append(names, "institution declines")
		}
		if in(cfg.StatusDown, at) {
			nb.StatusAPI = institution.StatusAPIDown
			names = append(names, "status API down")
		}
		changes = append(changes, change{at: at, name: strings.Join(names, ", "), b: nb})
	}
	var since time.Time
	var current string
	for _, ch := range changes {
		at := opened.Add(time.Duration(window * ch.at))
		if !sleep(ctx, time.Until(at)) {
			return
		}
		if err := r.call(ctx, http.MethodPut, r.instURL+"/admin/behavior", r.adminToken, ch.b, nil); err != nil {
			e.logf("sale: institution behaviour: %v", err)
		}
		if current != "" {
			mark(current, since)
		}
		current, since = ch.name, time.Now()
		if current != "" {
			e.logf("sale: %s at %.1fs", current, time.Since(opened).Seconds())
		}
	}
	if current != "" {
		mark(current, since)
	}
}

// restartFor is how long a fault's restart of a part keeps trying: longer
// than the other faults' cuts (3 s), which may overlap it.
const restartFor = 20 * time.Second

// fault injects one fault and returns once the part is back.
func (r *rig) fault(ctx context.Context, f string, d *dbs) error {
	restart := func(p *proc, after time.Duration) error {
		p.kill9()
		sleep(ctx, after)
		// The parts' ports lie outside the ephemeral range, so no outgoing
		// connection takes one while its part is down; a start can still
		// fail on a starved machine (not healthy in time) or while another
		// fault has cut its database (it exits at start): start it again
		// every second, as a supervisor would, for up to restartFor.
		var err error
		for until := time.Now().Add(restartFor); ; {
			if err = p.start(context.WithoutCancel(ctx)); err == nil {
				return nil
			}
			if time.Now().After(until) || ctx.Err() != nil {
				return err
			}
			r.logf("sale: %v; starting it again", err)
			sleep(ctx, time.Second)
		}
	}
	switch f {
	case FaultWaitroomKill:
		return restart(r.gates[len(r.gates)-1], 2*time.Second)
	case FaultPayKill:
		return restart(r.pay, time.Second)
	case FaultWorkerKill:
		return restart(r.workers[0], 2*time.Second)
	case FaultWorkerGone:
		r.workers[1].kill9()
		return nil
	case FaultRedisRestart:
		if r.redis != nil {
			r.redis.stop() // saves its snapshot on SIGTERM
			return r.redis.start(context.WithoutCancel(ctx))
		}
		if err := r.redisProxy.cut(ctx); err != nil {
			return err
		}
		sleep(ctx, time.Second)
		return r.redisProxy.restore(ctx)
	case FaultDBCut:
		if r.pgProxy != nil {
			if err := r.pgProxy.cut(ctx); err != nil {
				return err
			}
			sleep(ctx, 3*time.Second)
			return r.pgProxy.restore(ctx)
		}
		return cutSQLite(ctx, []string{d.sqlitePay, d.sqliteCo, d.sqliteFul}, 3*time.Second)
	}
	return fmt.Errorf("unknown fault %q", f)
}

// closeWhenSoldOut closes the room once a buyer met a sold-out event and
// no seat is on hold any more (none can come back).
func (e *Experiment) closeWhenSoldOut(ctx context.Context, r *rig, c *crowd) {
	for sleep(ctx, 500*time.Millisecond) {
		if !c.soldOut.Load() {
			continue
		}
		var ev struct {
			SeatsLeft int `json:"seats_left"`
			Held      int `json:"held"`
		}
		if r.call(ctx, http.MethodGet, r.checkoutURL+"/v1/events/"+r.event, r.adminToken, nil, &ev) != nil {
			continue
		}
		if ev.Held > 0 || (ev.SeatsLeft > 0 && !e.cfg.UnsafeInventory) {
			continue
		}
		for _, g := range r.gateURLs {
			if r.call(ctx, http.MethodPatch, g+"/v1/rooms/"+r.room, r.adminToken, map[string]any{"closed": true, "closed_message": "sold out"}, nil) == nil {
				c.closed.Store(true)
				e.logf("sale: sold out; room closed")
				return
			}
		}
	}
}

// drain waits until no payment is pending or unknown, no order is
// pending, the outbox is empty, every APPROVED payment not cancelled has
// its ticket and the workers have no event left.
func (e *Experiment) drain(ctx context.Context, r *rig, d *dbs) bool {
	deadline := time.Now().Add(e.cfg.Drain)
	for time.Now().Before(deadline) {
		var unsettled, pendingOrders, outbox, approved, tickets int64
		qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err1 := d.pay.QueryRowContext(qctx, "SELECT COUNT(*) FROM payments WHERE status IN ('PENDING', 'UNKNOWN')").Scan(&unsettled)
		err2 := d.checkout.QueryRowContext(qctx, "SELECT COUNT(*) FROM checkout_orders WHERE status = 'pending'").Scan(&pendingOrders)
		err3 := d.pay.QueryRowContext(qctx, "SELECT COUNT(*) FROM outbox WHERE published_at IS NULL").Scan(&outbox)
		// A cancelled approval's ticket is revoked: it counts for none.
		err4 := d.pay.QueryRowContext(qctx, `SELECT COUNT(*) FROM payments p WHERE p.status = 'APPROVED'
			AND NOT EXISTS (SELECT 1 FROM payment_cancellations x WHERE x.payment_id = p.id)`).Scan(&approved)
		err5 := d.fulfil.QueryRowContext(qctx, "SELECT COUNT(*) FROM tickets").Scan(&tickets)
		// The money's own work: no refund, capture or void unsettled, no
		// cancellation waiting, no approval left to close.
		var open int64
		err6 := d.pay.QueryRowContext(qctx, `SELECT
			(SELECT COUNT(*) FROM refunds WHERE status IN ('PENDING', 'UNKNOWN')) +
			(SELECT COUNT(*) FROM payment_operations WHERE status IN ('PENDING', 'UNKNOWN')) +
			(SELECT COUNT(*) FROM payment_cancellations WHERE status = 'REQUESTED') +
			(SELECT COUNT(*) FROM payments p WHERE p.status IN ('APPROVED', 'AUTHORIZED')
				AND NOT EXISTS (SELECT 1 FROM payment_confirmations c WHERE c.payment_id = p.id)
				AND NOT EXISTS (SELECT 1 FROM payment_cancellations x WHERE x.payment_id = p.id))`).Scan(&open)
		cancel()
		lag := 0.0
		for _, u := range r.workerMetrics {
			lctx, cancel := context.WithTimeout(ctx, time.Second)
			for _, v := range scrapeLag(lctx, u) {
				lag += v
			}
			cancel()
		}
		if err1 == nil && err2 == nil && err3 == nil && err4 == nil && err5 == nil && err6 == nil && open == 0 &&
			unsettled == 0 && pendingOrders == 0 && outbox == 0 && tickets >= approved && lag == 0 {
			return true
		}
		if !sleep(ctx, time.Second) {
			return false
		}
	}
	return false
}

// account reads every part's record of the sale and checks the
// invariants.
func (e *Experiment) account(ctx context.Context, r *rig, d *dbs, c *crowd, smp *sampler) (lab.RunResult, error) {
	cfg := e.cfg
	m := lab.Metrics{}
	var broken []string
	extra := map[string]any{}

	rec, err := readRecords(ctx, r, d, cfg.Seats)
	if err != nil {
		return lab.RunResult{}, err
	}
	ordersByHold, ticketOf := rec.ordersByHold, rec.ticketOf

	// Every buyer accounted for.
	counts := map[string]int{}
	var joinToTicket []float64
	// The parts of each ticket's join→ticket time, for the tickets whose
	// buyer saw its admission: in the queue (join to admission) and at the
	// checkout (admission to ticket).
	type ticketParts struct{ total, queue, checkout float64 }
	var parts []ticketParts
	whys := map[string]int{}
	for _, b := range c.buyers {
		b.mu.Lock()
		end := b.end
		if b.why != "" {
			whys[b.why]++
		}
		if o, ok := ordersByHold[b.holdID]; ok && b.holdID != "" {
			switch {
			case o.status == "paid":
				end = endTicket
			case o.status == "failed" && o.paymentStatus == "DECLINED":
				end = endDeclined
			case o.status == "failed":
				end = endFailed
			default:
				end = endUnaccounted // still pending after the drain
			}
			if t, ok := ticketOf[o.id]; ok && !b.joinedAt.IsZero() {
				total := float64(t.IssuedAt.Sub(b.joinedAt).Milliseconds())
				joinToTicket = append(joinToTicket, total)
				if !b.admittedAt.IsZero() {
					parts = append(parts, ticketParts{total, float64(b.admittedAt.Sub(b.joinedAt).Milliseconds()), float64(t.IssuedAt.Sub(b.admittedAt).Milliseconds())})
				}
			}
		} else if end == endTicket || end == endDeclined || end == endOrderPending {
			end = endUnaccounted // the buyer saw an order the checkout does not have
		} else if end == "" {
			end = endUnaccounted
		}
		b.mu.Unlock()
		counts[end]++
	}
	sum := 0
	for _, k := range Outcomes {
		m["buyers_"+k] = float64(counts[k])
		sum += counts[k]
	}
	unaccounted := cfg.Buyers - sum
	m["unaccounted_buyers"] = float64(unaccounted)
	extra["buyers"] = counts
	if len(whys) > 0 {
		extra["failures"] = whys
	}
	if unaccounted > 0 {
		broken = append(broken, fmt.Sprintf("%d buyers unaccounted for", unaccounted))
	}
	broken = append(broken, rec.put(m, extra)...)
	broken = append(broken, rec.putCloseOut(m, extra, nil)...)

	// The room at the checkout's view.
	smp.mu.Lock()
	over, unread, maxActive, maxHeld := 0, 0, 0.0, 0.0
	for _, p := range smp.points {
		if p.Active > float64(cfg.Capacity) || p.CheckoutHeld > float64(cfg.Capacity) {
			over++
		}
		if p.CheckoutHeld < 0 {
			unread++
		}
		maxActive, maxHeld = max(maxActive, p.Active), max(maxHeld, p.CheckoutHeld)
	}
	samples := len(smp.points)
	smp.mu.Unlock()
	m["over_capacity_samples"] = float64(over)
	m["max_active"] = maxActive
	m["max_checkout_buyers"] = maxHeld
	if over > 0 {
		broken = append(broken, fmt.Sprintf("room over capacity in %d samples (max active %.0f, max buyers holding at the checkout %.0f, capacity %d)", over, maxActive, maxHeld, cfg.Capacity))
	}

	// Event order.
	violations, err := orderViolations(ctx, d)
	if err != nil {
		return lab.RunResult{}, err
	}
	m["order_violations"] = float64(violations)
	if violations > 0 {
		broken = append(broken, fmt.Sprintf("%d event order violations", violations))
	}

	// What the institution's hang cost: payments it left UNKNOWN (the
	// checkout's timeouts at pay) and holds given back unsold.
	var unknownPayments, releasedHolds int64
	if err := d.pay.QueryRowContext(ctx, "SELECT COUNT(DISTINCT payment_id) FROM outbox WHERE to_status = 'UNKNOWN'").Scan(&unknownPayments); err != nil {
		return lab.RunResult{}, fmt.Errorf("sale: counting UNKNOWN payments: %w", err)
	}
	if err := d.checkout.QueryRowContext(ctx, "SELECT COUNT(*) FROM checkout_holds WHERE state = 'released' AND event_id = "+d.q("?", "$1"), r.event).Scan(&releasedHolds); err != nil {
		return lab.RunResult{}, fmt.Errorf("sale: counting released holds: %w", err)
	}
	m["unknown_payments"] = float64(unknownPayments)
	m["abandoned_holds"] = float64(releasedHolds)

	// The admission log: chain, queue order, capacity.
	fair, err := r.checkFairness(ctx)
	if err != nil {
		return lab.RunResult{}, err
	}
	m["fairness_failures"] = float64(len(fair.Problems))
	m["logged_admissions"] = float64(fair.Admissions)
	if !fair.OK() {
		broken = append(broken, fmt.Sprintf("the admission log fails %d checks: %s", len(fair.Problems), strings.Join(fair.Problems[:min(3, len(fair.Problems))], "; ")))
	}

	// Join to ticket.
	sort.Float64s(joinToTicket)
	for _, q := range []struct {
		name string
		q    float64
	}{{"p50", 0.50}, {"p95", 0.95}, {"p99", 0.99}} {
		if len(joinToTicket) > 0 {
			m["join_to_ticket_"+q.name+"_ms"] = joinToTicket[min(len(joinToTicket)-1, int(math.Ceil(q.q*float64(len(joinToTicket))))-1)]
		}
	}
	// What the p99 ticket's time is made of: the wait for the room (its
	// outflow) or the checkout (a hold taken late, a slow payment).
	if len(parts) > 0 {
		slices.SortFunc(parts, func(a, b ticketParts) int { return cmp.Compare(a.total, b.total) })
		p := parts[min(len(parts)-1, int(math.Ceil(0.99*float64(len(parts))))-1)]
		m["p99_ticket_queue_ms"], m["p99_ticket_checkout_ms"] = p.queue, p.checkout
	}
	m["joins"] = float64(c.joins.Load())
	m["bot_joins"] = float64(c.botJoins.Load())
	m["bot_joins_limited"] = float64(c.botLimited.Load())
	extra["join_errors"] = c.joinErrors.Load()
	extra["gate_retries"] = c.gateRetries.Load()
	extra["rejoins"] = c.rejoins.Load()
	// How the live workers took over the partitions of a dead one: by
	// lease (nats-server before 2.11) or by unpinning a silent owner.
	for _, name := range []string{"takeovers", "handbacks", "unpins"} {
		total := 0.0
		for _, u := range r.workerMetrics {
			sctx, cancel := context.WithTimeout(ctx, time.Second)
			total += scrapeCounter(sctx, u, "stampede_worker_"+name+"_total")
			cancel()
		}
		m["worker_"+name] = total
	}
	e.logf("sale: the live workers took over %.0f partitions by lease, handed %.0f back, unpinned %.0f", m["worker_takeovers"], m["worker_handbacks"], m["worker_unpins"])

	res := lab.RunResult{Metrics: m, Broken: broken, Extra: extra, Valid: true}
	switch {
	case len(rec.tickets) == 0:
		res.Valid, res.Reason = false, "no ticket was issued"
	case samples < 10:
		res.Valid, res.Reason = false, fmt.Sprintf("the sampler took only %d samples", samples)
	case unread > samples/10:
		res.Valid, res.Reason = false, fmt.Sprintf("the checkout's view was not read in %d of %d samples", unread, samples)
	}
	return res, nil
}

// orderViolations counts, per payment, events applied after an event of a
// later seq (in the order the workers processed them).
func orderViolations(ctx context.Context, d *dbs) (int, error) {
	rows, err := d.fulfil.QueryContext(ctx, "SELECT payment_id, seq, outcome FROM inbox ORDER BY processed_at, event_id")
	if err != nil {
		return 0, fmt.Errorf("sale: reading the inbox: %w", err)
	}
	defer rows.Close()
	last := map[string]int64{}
	violations := 0
	for rows.Next() {
		var id, outcome string
		var seq int64
		if err := rows.Scan(&id, &seq, &outcome); err != nil {
			return 0, err
		}
		switch fulfilment.Outcome(outcome) {
		case fulfilment.OutcomeStale, fulfilment.OutcomeDuplicate:
			continue // seen and skipped: no effect
		}
		if seq <= last[id] {
			violations++
		}
		last[id] = max(last[id], seq)
	}
	return violations, rows.Err()
}

// openPay opens pay's store read side for parity.
func openPay(ctx context.Context, d *dbs) (pay.Store, error) {
	if d.pg {
		cfg := postgres.DefaultConfig()
		cfg.URL = d.payURL
		return postgres.OpenConfig(ctx, cfg)
	}
	cfg := sqlite.DefaultConfig()
	cfg.Path = d.sqlitePay
	return sqlite.OpenConfig(ctx, cfg)
}

// admittedAfterHang is the room's admitted total at the last sample
// taken at most after seconds after the end of the institution's hang
// (the latest end of the marks whose fault names it: it may be split by
// another fault's window), and false without such a mark or sample.
func admittedAfterHang(points []Point, marks []Mark, after float64) (float64, bool) {
	end, hung := 0.0, false
	for _, mk := range marks {
		if strings.Contains(mk.Fault, "institution hangs") {
			end, hung = max(end, mk.To), true
		}
	}
	n, ok := 0.0, false
	for _, p := range points {
		if hung && p.T <= end+after {
			n, ok = p.AdmittedTotal, true
		}
	}
	return n, ok
}
