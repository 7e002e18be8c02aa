package pay

import (
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
			Name: "stampede_pay_recovered_total", Help: "PENDING payments found at start-up and turned UNKNOWN.",
		}),
	}
	reg.MustRegister(m.outcomes, m.approvals, m.settled, m.flagged, m.recovered)
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
