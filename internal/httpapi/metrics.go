package httpapi

import (
	"maps"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// requestMetrics are the request counters and latency histogram of one
// API, labelled by route pattern (never the raw path, so that the label
// set stays bounded) and method.
type requestMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec

	// children caches the series of each label set seen so far, so that
	// a request does not hash its labels into the vectors: a map that is
	// replaced, never changed, when mu's holder adds a label set. Routes,
	// methods and statuses are all bounded, and so is the map.
	mu       sync.Mutex
	children atomic.Pointer[map[seriesKey]series]
}

// seriesKey is the label set of one request's series.
type seriesKey struct {
	route, method string
	status        int
}

// series are the request counter and the latency histogram of one label
// set.
type series struct {
	requests prometheus.Counter
	duration prometheus.Observer
}

func newRequestMetrics(reg prometheus.Registerer) (*requestMetrics, error) {
	m := &requestMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "http_requests_total", Help: "HTTP requests answered, by route pattern, method and status code.",
		}, []string{"route", "method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "http_request_duration_seconds", Help: "Time to answer an HTTP request, by route pattern and method.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"route", "method"}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.duration} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// knownMethod reports whether method is one that the method label names;
// anything else counts as OTHER, so that the label stays bounded.
func knownMethod(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut,
		http.MethodPatch, http.MethodDelete, http.MethodOptions:
		return true
	}
	return false
}

func (m *requestMetrics) observe(route, method string, status int, took time.Duration) {
	if !knownMethod(method) {
		method = "OTHER"
	}
	k := seriesKey{route, method, status}
	var s series
	if cached := m.children.Load(); cached != nil {
		s = (*cached)[k]
	}
	if s.requests == nil {
		s = m.add(k)
	}
	s.requests.Inc()
	s.duration.Observe(took.Seconds())
}

// add looks up the series of k in the vectors and caches them.
func (m *requestMetrics) add(k seriesKey) series {
	m.mu.Lock()
	defer m.mu.Unlock()
	old := m.children.Load()
	if old != nil {
		if s, ok := (*old)[k]; ok {
			return s
		}
	}
	s := series{
		requests: m.requests.WithLabelValues(k.route, k.method, strconv.Itoa(k.status)),
		duration: m.duration.WithLabelValues(k.route, k.method),
	}
	next := map[seriesKey]series{}
	if old != nil {
		next = maps.Clone(*old)
	}
	next[k] = s
	m.children.Store(&next)
	return s
}
