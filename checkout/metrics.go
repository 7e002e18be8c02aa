package checkout

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the checkout's domain counters, beside httpapi's request
// metrics on /metrics.
type Metrics struct {
	holds    *prometheus.CounterVec // by result: held, sold_out
	orders   *prometheus.CounterVec // by status an order ended with: paid, failed
	released prometheus.Counter     // holds released by the sweeper on expiry
}

// NewMetrics registers the checkout's metrics with reg:
// stampede_checkout_holds_total{result}, stampede_checkout_orders_total{status}
// and stampede_checkout_expired_holds_total.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		holds: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stampede_checkout_holds_total",
			Help: "Hold requests by result: held, or sold_out."}, []string{"result"}),
		orders: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stampede_checkout_orders_total",
			Help: "Orders whose payment ended, by status: paid or failed."}, []string{"status"}),
		released: prometheus.NewCounter(prometheus.CounterOpts{Name: "stampede_checkout_expired_holds_total",
			Help: "Holds released by the sweeper because their admission expired unpaid."}),
	}
	reg.MustRegister(m.holds, m.orders, m.released)
	return m
}

// hold counts a hold request's result.
func (m *Metrics) hold(result string) {
	if m != nil {
		m.holds.WithLabelValues(result).Inc()
	}
}

// ended counts an order that just ended.
func (m *Metrics) ended(o Order) {
	if m != nil && o.Status.Ended() {
		m.orders.WithLabelValues(string(o.Status)).Inc()
	}
}

// expired counts holds released on expiry.
func (m *Metrics) expired(n int) {
	if m != nil {
		m.released.Add(float64(n))
	}
}
