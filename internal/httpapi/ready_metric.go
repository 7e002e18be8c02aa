package httpapi

import (
	"context"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// readyDesc describes stampede_ready: what /readyz would say of each
// check, asked at scrape time, so that an alert can see a failing
// dependency (deploy/alerts.yaml).
var readyDesc = prometheus.NewDesc("stampede_ready",
	"1 when the readiness check answered within its deadline at scrape time, else 0 (each check of /readyz).",
	[]string{"check"}, nil)

// readyCollector reports stampede_ready{check} for every check of an API.
type readyCollector struct{ a *API }

// Describe sends stampede_ready's description.
func (c readyCollector) Describe(ch chan<- *prometheus.Desc) { ch <- readyDesc }

// Collect asks every check at once, each within the API's ReadyTimeout.
func (c readyCollector) Collect(ch chan<- prometheus.Metric) {
	c.a.mu.Lock()
	checks := append([]Check(nil), c.a.checks...)
	c.a.mu.Unlock()
	var wg sync.WaitGroup
	for _, chk := range checks {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), c.a.cfg.ReadyTimeout)
			defer cancel()
			v := 1.0
			if err := pingWithin(ctx, chk.Ping); err != nil {
				v = 0
			}
			ch <- prometheus.MustNewConstMetric(readyDesc, prometheus.GaugeValue, v, chk.Name)
		})
	}
	wg.Wait()
}
