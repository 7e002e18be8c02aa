// Package worker consumes the payment events of the pay stream into a
// fulfilment store: a keyed JetStream consumer (dispatch/natskeyed), one
// payment's events one at a time and in order, each decoded
// (fulfilment.DecodeEvent) and applied exactly once by a fulfilment.Handler
// (its inbox and the ticket in one transaction).
//
// With Config.Deliver set (serve worker --deliver, fulfilment/outlet) the
// events go to that handler instead of the fulfilment store, through the
// same consumer, readiness and metrics.
//
// A body that is not a valid payment event (of class stampede.Invalid) will never
// succeed: it is logged, counted (Worker.Invalid) and acknowledged, so it is
// not redelivered for ever. Any other error (the store unavailable) is
// returned to the consumer, which negatively acknowledges the event and
// holds the payment's later events until it is redelivered.
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stampede-lab/stampede"
	dispatchjs "github.com/stampede-lab/stampede/dispatch/natskeyed"
	"github.com/stampede-lab/stampede/fulfilment"
)

// Config configures a Worker.
type Config struct {
	// JetStream is the connection to the server that holds the payment
	// stream. Required.
	JetStream natsjs.JetStream
	// Store is the fulfilment store the events are applied to. Required
	// unless Deliver is set.
	Store fulfilment.Store
	// Deliver, when set, receives every event instead of the fulfilment
	// handler (fulfilment/outlet's Outlet.Deliver POSTs it to another
	// team's endpoint); Store and Fulfilment are then unused. Its errors
	// are treated as the handler's: Invalid ones set aside, others
	// redelivered (or parked, for natskeyed.ErrPermanent).
	Deliver dispatchjs.Handler
	// Consumer configures the keyed consumer: stream, subject,
	// partitions, pinning, concurrency (Workers). Its Logger is the
	// worker's logger too.
	Consumer dispatchjs.Config
	// Fulfilment configures the handler (clock, ticket ids).
	Fulfilment fulfilment.Config
	// AdminToken, when set (at least MinAdminToken bytes), opens the
	// read-only admin endpoint (RegisterAdmin) with this bearer token.
	AdminToken string
}

// MinAdminToken is the shortest admin token accepted.
const MinAdminToken = 16

// DefaultConfig returns dispatch/natskeyed's and fulfilment's defaults:
// stream PAYMENTS, payments.<p>.<id> in 8 pinned partitions, 8 handlers at
// once, a payment parked after 20 failed deliveries. JetStream and Store
// are left for the caller to set.
func DefaultConfig() Config {
	c := Config{Consumer: dispatchjs.DefaultConfig(), Fulfilment: fulfilment.DefaultConfig()}
	// A failing store fails every payment's events alike: 20 deliveries
	// (about eight minutes of doubling delays capped at 30 s) before a
	// payment's events are parked, so that a short outage parks nothing.
	c.Consumer.MaxAttempts = 20
	return c
}

// Validate reports every unusable field at once (see stampede.Fields).
// The consumer's fields keep their own names (those of serve worker's
// flags: "partitions", "concurrency"); the handler's are prefixed
// "fulfilment.".
func (c Config) Validate() error {
	var f stampede.Fields
	if c.JetStream == nil {
		f.Add("jetstream", "is required: the server that holds the payment stream")
	}
	if c.Store == nil && c.Deliver == nil {
		f.Add("store", "is required: the fulfilment store the events are applied to")
	}
	if c.AdminToken != "" && len(c.AdminToken) < MinAdminToken {
		f.Add("admin_token", "must be empty (no admin endpoint) or at least %d bytes, got %d", MinAdminToken, len(c.AdminToken))
	}
	f.Check("", c.Consumer.Validate())
	f.Check("fulfilment", c.Fulfilment.Validate())
	return f.Err()
}

// Worker applies payment events from JetStream to a fulfilment store.
type Worker struct {
	cfg     Config
	h       *fulfilment.Handler
	log     *slog.Logger
	c       atomic.Pointer[dispatchjs.Consumer] // set while Run consumes
	started chan struct{}                       // closed once Run consumes
	invalid atomic.Uint64
	applied atomic.Uint64
	closed  atomic.Bool
}

// New returns a Worker for cfg. It starts nothing: Run consumes.
func New(cfg Config) (*Worker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var h *fulfilment.Handler
	if cfg.Deliver == nil {
		var err error
		if h, err = fulfilment.NewHandler(cfg.Store, cfg.Fulfilment); err != nil {
			return nil, err
		}
	}
	return &Worker{cfg: cfg, h: h, log: cfg.Consumer.Logger, started: make(chan struct{})}, nil
}

// Run creates or updates the partitions' durable consumers and consumes
// into the store until ctx ends; then it stops consuming (queued events
// go back to the stream, running ones finish and are acknowledged, pinned
// partitions are released) and returns nil. The stream must exist (serve
// pay creates it): if it does not, or the consumers cannot be created,
// Run returns that error at once. A Worker runs once.
func (w *Worker) Run(ctx context.Context) error {
	if w.closed.Load() {
		return errors.New("worker: already run")
	}
	c, err := dispatchjs.New(ctx, w.cfg.JetStream, w.cfg.Consumer, w.handle)
	if err != nil {
		w.closed.Store(true)
		return err
	}
	w.c.Store(c)
	close(w.started)
	<-ctx.Done()
	w.closed.Store(true)
	c.Close()
	return nil
}

// Started is closed once Run consumes: the partitions' consumers exist.
func (w *Worker) Started() <-chan struct{} { return w.started }

// handle is the consumer's handler: decode, apply; an invalid event is
// acknowledged and counted, a retryable error returned.
func (w *Worker) handle(ctx context.Context, e dispatchjs.Event) error {
	if w.cfg.Deliver != nil {
		err := w.cfg.Deliver(ctx, e)
		if err == nil {
			w.applied.Add(1)
		}
		return w.setAside(e, err)
	}
	ev, err := fulfilment.DecodeEvent(e.Data)
	if err == nil {
		ev.Partition, ev.Epoch = e.Partition, e.Epoch
		var applied bool
		applied, err = w.h.Handle(ctx, ev)
		if applied {
			w.applied.Add(1)
		}
	}
	if errors.Is(err, fulfilment.ErrFenced) {
		return fmt.Errorf("%w: %w", dispatchjs.ErrFenced, err)
	}
	return w.setAside(e, err)
}

// setAside acknowledges (returns nil for) an event whose error is of class
// Invalid, logged and counted: it would never succeed. Other errors are
// returned for the consumer to redeliver or park.
func (w *Worker) setAside(e dispatchjs.Event, err error) error {
	if err == nil {
		return nil
	}
	if stampede.ClassOf(err) == stampede.Invalid {
		w.invalid.Add(1)
		w.log.Error("invalid payment event set aside (acknowledged, not retried)", "event_id", e.ID, "subject", e.Subject,
			"sequence", e.Sequence, "err", err)
		return nil
	}
	return err
}

// Stats returns the consumer's counters; zero before Run consumes.
func (w *Worker) Stats() dispatchjs.Stats {
	if c := w.c.Load(); c != nil {
		return c.Stats()
	}
	return dispatchjs.Stats{}
}

// Invalid counts events set aside as invalid.
func (w *Worker) Invalid() uint64 { return w.invalid.Load() }

// Applied counts events that changed an order (a ticket issued or a
// release recorded), or with Config.Deliver, events it accepted.
func (w *Worker) Applied() uint64 { return w.applied.Load() }

// Alive reports whether the worker consumes: Run has started and not
// ended, and every served partition's durable consumer exists on the
// server.
func (w *Worker) Alive(ctx context.Context) error {
	c := w.c.Load()
	switch {
	case w.closed.Load():
		return errors.New("worker: stopped")
	case c == nil:
		return errors.New("worker: not consuming yet")
	}
	cfg := c.Config()
	for _, p := range c.Stats().Partitions {
		if _, err := w.cfg.JetStream.Consumer(ctx, cfg.Stream, cfg.ConsumerName(p.Partition)); err != nil {
			return fmt.Errorf("worker: consumer %s: %w", cfg.ConsumerName(p.Partition), err)
		}
	}
	return nil
}

// Collector returns Prometheus metrics read from Stats at every scrape:
// per-partition lag, held messages, deepest key queue and ownership;
// handlers in flight; and the delivery counters.
func (w *Worker) Collector() prometheus.Collector { return collector{w} }

var (
	descLag      = prometheus.NewDesc("stampede_worker_partition_lag", "Messages of the partition not yet delivered to any worker.", []string{"partition"}, nil)
	descHeld     = prometheus.NewDesc("stampede_worker_partition_held", "Messages of the partition held here, not yet acknowledged.", []string{"partition"}, nil)
	descKeyDepth = prometheus.NewDesc("stampede_worker_partition_max_key_depth", "Largest per-key queue depth (one payment's backlog) in the partition.", []string{"partition"}, nil)
	descKeys     = prometheus.NewDesc("stampede_worker_partition_keys", "Keys with messages held in the partition.", []string{"partition"}, nil)
	descOwned    = prometheus.NewDesc("stampede_worker_partition_owned", "1 when this worker owns the partition.", []string{"partition"}, nil)
	descInFlight = prometheus.NewDesc("stampede_worker_in_flight", "Handlers running.", nil, nil)
	descCounters = map[string]*prometheus.Desc{
		"delivered":    prometheus.NewDesc("stampede_worker_delivered_total", "Deliveries received.", nil, nil),
		"redelivered":  prometheus.NewDesc("stampede_worker_redelivered_total", "Deliveries of a message delivered before.", nil, nil),
		"duplicates":   prometheus.NewDesc("stampede_worker_duplicates_total", "Deliveries of a message already held or completed here, not run again.", nil, nil),
		"acked":        prometheus.NewDesc("stampede_worker_acked_total", "Events whose handler succeeded (invalid ones set aside included).", nil, nil),
		"failed":       prometheus.NewDesc("stampede_worker_failed_total", "Handler errors, each negatively acknowledged for redelivery.", nil, nil),
		"late":         prometheus.NewDesc("stampede_worker_late_total", "Events that arrived after a later event of their key had started: per-key order lost. Alert on it.", nil, nil),
		"invalid":      prometheus.NewDesc("stampede_worker_invalid_events_total", "Events set aside because they are not valid payment events.", nil, nil),
		"applied":      prometheus.NewDesc("stampede_worker_applied_total", "Events that issued a ticket or recorded a release (serve worker --deliver: events the endpoint accepted).", nil, nil),
		"fenced":       prometheus.NewDesc("stampede_worker_fenced_total", "Events the store refused because a later owner of their partition had written (this worker had lost it), handed back.", nil, nil),
		"unpins":       prometheus.NewDesc("stampede_worker_unpins_total", "Partitions this worker unpinned because their owner was silent for --owner-timeout.", nil, nil),
		"takeovers":    prometheus.NewDesc("stampede_worker_takeovers_total", "Partitions this worker took over because their holder had not renewed its --lease.", nil, nil),
		"handbacks":    prometheus.NewDesc("stampede_worker_handbacks_total", "Partitions this worker handed back to the worker whose --serve share they are.", nil, nil),
		"lease_losses": prometheus.NewDesc("stampede_worker_lease_losses_total", "Partition leases this worker lost (not renewed in time, or taken meanwhile).", nil, nil),
	}
)

type collector struct{ w *Worker }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descLag, descHeld, descKeyDepth, descKeys, descOwned, descInFlight} {
		ch <- d
	}
	for _, d := range descCounters {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	s := c.w.Stats()
	for _, p := range s.Partitions {
		l := strconv.Itoa(p.Partition)
		owned := 0.0
		if p.Owned {
			owned = 1
		}
		ch <- prometheus.MustNewConstMetric(descLag, prometheus.GaugeValue, float64(p.Lag), l)
		ch <- prometheus.MustNewConstMetric(descHeld, prometheus.GaugeValue, float64(p.Held), l)
		ch <- prometheus.MustNewConstMetric(descKeyDepth, prometheus.GaugeValue, float64(p.MaxKeyDepth), l)
		ch <- prometheus.MustNewConstMetric(descKeys, prometheus.GaugeValue, float64(p.Keys), l)
		ch <- prometheus.MustNewConstMetric(descOwned, prometheus.GaugeValue, owned, l)
	}
	ch <- prometheus.MustNewConstMetric(descInFlight, prometheus.GaugeValue, float64(s.InFlight))
	for name, v := range map[string]uint64{"delivered": s.Delivered, "redelivered": s.Redelivered, "duplicates": s.Duplicates,
		"acked": s.Acked, "failed": s.Failed, "late": s.Late, "invalid": c.w.Invalid(), "applied": c.w.Applied(),
		"fenced": s.Fenced, "unpins": s.Unpins, "takeovers": s.Takeovers, "handbacks": s.Handbacks, "lease_losses": s.LeaseLosses} {
		ch <- prometheus.MustNewConstMetric(descCounters[name], prometheus.CounterValue, float64(v))
	}
}
