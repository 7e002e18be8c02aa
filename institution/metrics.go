package institution

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metricsNamespace prefixes every metric of the simulator.
const metricsNamespace = "stampede_institution"

// metrics are the simulator's Prometheus metrics:
//
//	stampede_institution_arrivals_total           approval requests received
//	stampede_institution_approvals_total{status}  approval requests processed, by result (APPROVED, DECLINED)
//	stampede_institution_replays_total            repeats answered with the first result (idempotent)
//	stampede_institution_charges_total            charges made (more than the approved keys = double charges)
//	stampede_institution_busy_total               requests refused because MaxHung were held
//	stampede_institution_hung_requests            requests held right now
type metrics struct {
	arrivals  prometheus.Counter
	approvals *prometheus.CounterVec
	replays   prometheus.Counter
	charges   prometheus.Counter
	busy      prometheus.Counter
	hung      prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		arrivals: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metricsNamespace, Name: "arrivals_total",
			Help: "Approval requests received, valid or not, before any hang.",
		}),
		approvals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace, Name: "approvals_total",
			Help: "Approval requests processed, by result; replays excluded.",
		}, []string{"status"}),
		replays: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metricsNamespace, Name: "replays_total",
			Help: "Repeated external keys answered with their first result, charging nothing.",
		}),
		charges: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metricsNamespace, Name: "charges_total",
			Help: "Charges made; with idempotent off a repeated external key is charged again.",
		}),
		busy: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metricsNamespace, Name: "busy_total",
			Help: "Approval requests refused with 503 because MaxHung requests were already held.",
		}),
		hung: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: metricsNamespace, Name: "hung_requests",
			Help: "Approval requests held by a hang mode right now.",
		}),
	}
	for _, s := range []string{StatusApproved, StatusDeclined} {
		m.approvals.WithLabelValues(s)
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.arrivals, m.approvals, m.replays, m.charges, m.busy, m.hung} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("institution: registering metrics: %w (use one registry per simulator)", err)
		}
	}
	return m, nil
}
