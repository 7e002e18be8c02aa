package pay

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the payment service's Prometheus metrics. Set
// Config.Metrics to have the Service record them.
type Metrics struct {
	outcomes  *prometheus.CounterVec
	approvals prometheus.Histogram
	settled   *prometheus.CounterVec
	flagged   prometheus.Counter
	recovered prometheus.Counter
	ops       *prometheus.CounterVec
	closures  *prometheus.CounterVec
}

// NewMetrics registers the metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stampede_pay_payments_total", Help: "Payments created, by the status the first call left them in.",
		}, []string{"status"}),
		approvals: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "stampede_pay_approval_seconds", Help: "Time spent on the approval call(s) of a payment, retries included.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
		}),
		settled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stampede_pay_settled_total", Help: "UNKNOWN payments settled by a status inquiry, by the status they reached.",
		}, []string{"status"}),
		flagged: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stampede_pay_review_flagged_total", Help: "Payments flagged for manual review.",
		}),
		recovered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stampede_pay_recovered_total", Help: "PENDING payments whose approval call ended unrecorded (a crash, a failed write), taken over as UNKNOWN.",
		}),
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stampede_pay_operations_total",
			Help: "Captures and voids written to a final or unknown status, by kind, status and origin (merchant, or auth_window: the service voiding an authorisation left uncaptured past the window).",
		}, []string{"kind", "status", "origin"}),
		closures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stampede_pay_closures_total",
			Help: "Payments no confirmed order held past the closure window, cancelled by the closure pass, by action (void, refund).",
		}, []string{"action"}),
	}
	reg.MustRegister(m.outcomes, m.approvals, m.settled, m.flagged, m.recovered, m.ops, m.closures)
	m.closures.WithLabelValues("void")
	m.closures.WithLabelValues("refund")
	// Every status a first call or a settlement can reach is there from the
	// start, at 0: a dashboard's rate() and an alert see "none yet", not
	// "no data", before the first payment.
	for _, s := range []Status{StatusApproved, StatusDeclined, StatusUnknown, StatusFailed, StatusAuthorized} {
		m.outcomes.WithLabelValues(string(s))
		if s != StatusUnknown {
			m.settled.WithLabelValues(string(s))
		}
	}
	return m
}

func (m *Metrics) outcome(s Status, took time.Duration) {
	if m != nil {
		m.outcomes.WithLabelValues(string(s)).Inc()
		m.approvals.Observe(took.Seconds())
	}
}

func (m *Metrics) settle(s Status) {
	if m != nil {
		m.settled.WithLabelValues(string(s)).Inc()
	}
}

func (m *Metrics) operation(k OperationKind, s RefundStatus, origin string) {
	if m != nil {
		m.ops.WithLabelValues(string(k), string(s), origin).Inc()
	}
}

func (m *Metrics) closure(action string) {
	if m != nil {
		m.closures.WithLabelValues(action).Inc()
	}
}

func (m *Metrics) flag() {
	if m != nil {
		m.flagged.Inc()
	}
}

func (m *Metrics) recover(n int) {
	if m != nil {
		m.recovered.Add(float64(n))
	}
}

// StatsTimeout bounds the store read behind one scrape of the store
// gauges.
const StatsTimeout = time.Second

// storeGauges is a Prometheus collector that reads Store.Stats at scrape
// time: stampede_pay_payments_unsettled{status} (PENDING and UNKNOWN
// counts), stampede_pay_payments_flagged and
// stampede_pay_outbox_lag_seconds. A dashboard uses these names.
type storeGauges struct {
	store                   Store
	now                     func() time.Time
	log                     *slog.Logger
	unsettled, flagged, lag *prometheus.Desc
}

// NewStoreGauges returns a collector of the store gauges over store,
// measuring the outbox lag with now. A scrape whose store read fails
// (within StatsTimeout) leaves the gauges out and logs why, so that the
// other metrics are still served.
func NewStoreGauges(store Store, now func() time.Time, log *slog.Logger) prometheus.Collector {
	return &storeGauges{
		store: store, now: now, log: log,
		unsettled: prometheus.NewDesc("stampede_pay_payments_unsettled",
			"Payments awaiting an outcome, by status (PENDING, UNKNOWN), read from the store at scrape time.", []string{"status"}, nil),
		flagged: prometheus.NewDesc("stampede_pay_payments_flagged",
			"Payments flagged for manual review, read from the store at scrape time.", nil, nil),
		lag: prometheus.NewDesc("stampede_pay_outbox_lag_seconds",
			"Age of the oldest unpublished outbox row (0 if none), read from the store at scrape time.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (g *storeGauges) Describe(ch chan<- *prometheus.Desc) {
	ch <- g.unsettled
	ch <- g.flagged
	ch <- g.lag
}

// Collect implements prometheus.Collector.
func (g *storeGauges) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), StatsTimeout)
	defer cancel()
	st, err := g.store.Stats(ctx)
	if err != nil {
		g.log.Warn("pay: reading the store gauges failed", "err", err)
		return
	}
	ch <- prometheus.MustNewConstMetric(g.unsettled, prometheus.GaugeValue, float64(st.Pending), string(StatusPending))
	ch <- prometheus.MustNewConstMetric(g.unsettled, prometheus.GaugeValue, float64(st.Unknown), string(StatusUnknown))
	ch <- prometheus.MustNewConstMetric(g.flagged, prometheus.GaugeValue, float64(st.Flagged))
	ch <- prometheus.MustNewConstMetric(g.lag, prometheus.GaugeValue, st.OutboxLag(g.now()).Seconds())
}
