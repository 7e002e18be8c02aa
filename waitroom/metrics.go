package waitroom

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metricsNamespace prefixes every metric of the waiting room.
const metricsNamespace = "stampede_waitroom"

// Metrics counts what the admitters of one or more Services do. Feed it by
// setting ServiceConfig.OnPass to its OnPass method before NewService. It
// is safe for concurrent use.
//
// The metrics are
//
//	stampede_waitroom_admitted_total{room}                 users admitted
//	stampede_waitroom_expired_total{room}                  leases reclaimed
//	stampede_waitroom_admission_pass_errors_total{room}    failed passes
//	stampede_waitroom_store_round_trips_total{mode}        store requests made by admission passes
//	stampede_waitroom_admission_pass_seconds{mode}         histogram of pass latency
//	stampede_waitroom_outflow_per_minute{room}             the adaptive outflow this process set last
//	stampede_waitroom_polls_total{room,answer}             waiting polls, by how they were answered (PollAnswer)
//
// A room's counters exist, at 0, from its first pass on.
type Metrics struct {
	admitted    *prometheus.CounterVec
	expired     *prometheus.CounterVec
	passErrors  *prometheus.CounterVec
	roundTrips  *prometheus.CounterVec
	passSeconds *prometheus.HistogramVec
	outflow     *prometheus.GaugeVec
	polls       *prometheus.CounterVec
}

// NewMetrics makes the admission metrics and registers them with reg (nil:
// not registered). Registering on a registry that already holds them, for
// instance from a second Service in the same process, shares the existing
// ones; any other registration error panics, as with MustRegister.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		admitted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace, Name: "admitted_total",
			Help: "Users admitted into the room by this process's admission passes.",
		}, []string{"room"}),
		expired: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace, Name: "expired_total",
			Help: "Leases that ran out and were reclaimed by this process's admission passes.",
		}, []string{"room"}),
		passErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace, Name: "admission_pass_errors_total",
			Help: "Admission passes that failed (usually: the store was unreachable).",
		}, []string{"room"}),
		roundTrips: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace, Name: "store_round_trips_total",
			Help: "Requests sent to the store by admission passes, by admission mode.",
		}, []string{"mode"}),
		passSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: metricsNamespace, Name: "admission_pass_seconds",
			Help:    "How long one admission pass took in the store, by admission mode.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 12), // 0.5 ms to about 1 s
		}, []string{"mode"}),
		outflow: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: metricsNamespace, Name: "outflow_per_minute",
			Help: "The adaptive outflow (admissions a minute) this process's controller set last (ServiceConfig.Outflow).",
		}, []string{"room"}),
		polls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace, Name: "polls_total",
			Help: "Polls of tickets by this process, by how they were answered: view (the room view, no store call) or store_<why>.",
		}, []string{"room", "answer"}),
	}
	if reg != nil {
		m.admitted = registerOrReuse(reg, m.admitted)
		m.expired = registerOrReuse(reg, m.expired)
		m.passErrors = registerOrReuse(reg, m.passErrors)
		m.roundTrips = registerOrReuse(reg, m.roundTrips)
		m.passSeconds = registerOrReuse(reg, m.passSeconds)
		m.outflow = registerOrReuse(reg, m.outflow)
		m.polls = registerOrReuse(reg, m.polls)
	}
	return m
}

// registerOrReuse registers c with reg, or returns the equal collector reg
// already holds.
func registerOrReuse[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	err := reg.Register(c)
	if err == nil {
		return c
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing
		}
	}
	panic(fmt.Sprintf("waitroom: registering metrics: %v", err))
}

// OnPass records one admission pass. Its signature is that of
// ServiceConfig.OnPass.
func (m *Metrics) OnPass(room string, mode Mode, took time.Duration, res AdmitResult, err error) {
	m.passSeconds.WithLabelValues(string(mode)).Observe(took.Seconds())
	m.roundTrips.WithLabelValues(string(mode)).Add(float64(res.RoundTrips))
	// Add(0) too: the room's series exist from its first pass.
	errs := 0.0
	if err != nil {
		errs = 1
	}
	m.passErrors.WithLabelValues(room).Add(errs)
	m.admitted.WithLabelValues(room).Add(float64(len(res.Admitted)))
	m.expired.WithLabelValues(room).Add(float64(res.Expired))
}

// OnOutflow records a change of a room's adaptive outflow. Its signature
// is that of ServiceConfig.OnOutflow.
func (m *Metrics) OnOutflow(room string, perMinute int, _ string) {
	m.outflow.WithLabelValues(room).Set(float64(perMinute))
}

// OnPoll records how one poll was answered. Its signature is that of
// ServiceConfig.OnPoll.
func (m *Metrics) OnPoll(room string, answer PollAnswer) {
	m.polls.WithLabelValues(room, string(answer)).Inc()
}

// roomCollector reads every room's gauges from the store at scrape time:
//
//	stampede_waitroom_room_waiting{room}              users waiting in the queue
//	stampede_waitroom_room_active{room}               users admitted and holding a slot
//	stampede_waitroom_room_capacity{room}             the room's capacity
//	stampede_waitroom_room_oldest_wait_seconds{room}  how long the head of the queue has waited
//	stampede_waitroom_admission_rate_per_second{room} admissions per second, all instances
//	stampede_waitroom_room_invites{room,kind}          invites: used (got a place), refused (used again), held (remembered)
//	stampede_waitroom_room_sale_phase{room,phase}      1 for the phase the sale is in (before, open, between, closed), 0 for the others
//	stampede_waitroom_store_up                        1 if the store answered the whole scrape
//
// and, from a store that bounds its calls in flight (LoadReporter):
//
//	stampede_waitroom_store_inflight                  calls in flight now
//	stampede_waitroom_store_inflight_limit            their bound now
//	stampede_waitroom_store_refused_total             calls refused at the bound
type roomCollector struct {
	svc     *Service
	log     *slog.Logger
	timeout time.Duration

	active, waiting, capacity, oldest, rate, up *prometheus.Desc
	invites, phase                              *prometheus.Desc
	inflight, limit, refused                    *prometheus.Desc
}

// salePhases are the values of room_sale_phase's phase label.
var salePhases = []Phase{PhaseBefore, PhaseOpen, PhaseBetween, PhaseClosed}

// NewRoomCollector returns a collector that reads every room's gauges
// from svc's store at scrape time; log receives its failures.
func NewRoomCollector(svc *Service, log *slog.Logger) prometheus.Collector {
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(metricsNamespace, "", name), help, labels, nil)
	}
	return &roomCollector{
		svc: svc, log: log, timeout: 2 * time.Second,
		active:   desc("room_active", "Users admitted and holding a slot now.", "room"),
		waiting:  desc("room_waiting", "Users waiting in the queue now.", "room"),
		capacity: desc("room_capacity", "The room's capacity.", "room"),
		oldest:   desc("room_oldest_wait_seconds", "How long the user at the head of the queue has waited, by the store's clock; 0 when nobody waits.", "room"),
		rate:     desc("admission_rate_per_second", "Admissions per second over the rate window, all instances together.", "room"),
		up:       desc("store_up", "1 if the store answered every request of this scrape, else 0."),
		invites: desc("room_invites", "The room's invites: used (got a place, total), refused (joins with an invite used already, total), held (used invites the store remembers now).",
			"room", "kind"),
		phase: desc("room_sale_phase", "1 for the phase the room's sale is in now (before: not open yet; open: admitting, unless paused; between: between two windows of its schedule; closed), 0 for the others.",
			"room", "phase"),
		inflight: desc("store_inflight", "Per-user store calls (joins, polls, leaves) this instance has queued or running on the store now."),
		limit:    desc("store_inflight_limit", "The bound on this instance's per-user store calls in flight now (it adapts to the store's answer times)."),
		refused:  desc("store_refused_total", "Per-user store calls refused at once (503) because the bound was reached."),
	}
}

// Describe implements prometheus.Collector.
func (c *roomCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.active, c.waiting, c.capacity, c.oldest, c.rate, c.up, c.invites, c.phase, c.inflight, c.limit, c.refused} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: one Stats call (one round trip)
// per room the service admits for, or, with none, one listing of the
// store's rooms; all within the collector's timeout, so that a frozen
// store cannot hold a scrape. A room whose state cannot be read is left
// out and store_up is 0.
func (c *roomCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	up := 1.0
	rooms := c.svc.Rooms()
	if len(rooms) == 0 {
		// Nothing to read: still find out whether the store answers.
		if _, err := c.svc.store.Rooms(ctx); err != nil {
			up = 0
			c.log.Warn("waitroom: metrics: the store does not answer", "err", err)
		}
	}
	for _, room := range rooms {
		st, err := c.svc.store.Stats(ctx, room)
		if errors.Is(err, ErrNoRoom) {
			continue // deleted since the last room refresh
		}
		if err != nil {
			up = 0
			c.log.Warn("waitroom: metrics: reading room failed", "room", room, "err", err)
			continue
		}
		ch <- prometheus.MustNewConstMetric(c.active, prometheus.GaugeValue, float64(st.Active), room)
		ch <- prometheus.MustNewConstMetric(c.waiting, prometheus.GaugeValue, float64(st.Waiting), room)
		capacity := float64(st.Capacity)
		if cfg, err := c.svc.RoomConfig(ctx, room); err == nil {
			sale := cfg.SaleAt(time.Now())
			capacity = float64(sale.Capacity) // the window's in force
			// Where the sale stands: a room before its opening or between
			// two windows has buyers waiting and free slots, and is not
			// stuck (deploy/alerts.yaml).
			for _, p := range salePhases {
				v := 0.0
				if sale.Phase == p {
					v = 1
				}
				ch <- prometheus.MustNewConstMetric(c.phase, prometheus.GaugeValue, v, room, string(p))
			}
		}
		ch <- prometheus.MustNewConstMetric(c.capacity, prometheus.GaugeValue, capacity, room)
		ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, st.OldestWait.Seconds(), room)
		ch <- prometheus.MustNewConstMetric(c.rate, prometheus.GaugeValue, c.svc.rate(room).perSecond(), room)
		// Every room's, zeros too: a panel shows 0 rather than no data.
		for kind, n := range map[string]int64{"used": st.InvitesUsed, "refused": st.InvitesRefused, "held": st.InvitesHeld} {
			ch <- prometheus.MustNewConstMetric(c.invites, prometheus.GaugeValue, float64(n), room, kind)
		}
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, up)
	if lr, ok := c.svc.store.(LoadReporter); ok {
		if n, limit, refused, bounded := lr.Load(); bounded {
			ch <- prometheus.MustNewConstMetric(c.inflight, prometheus.GaugeValue, float64(n))
			ch <- prometheus.MustNewConstMetric(c.limit, prometheus.GaugeValue, float64(limit))
			ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(refused))
		}
	}
}
