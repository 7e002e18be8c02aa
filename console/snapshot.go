package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/internal/httpapi"
)

// Part is the state of one part of the sale as the console last read it.
type Part struct {
	// Configured is false when the console was not told where the part
	// is.
	Configured bool `json:"configured"`
	// Available is true when every read of the part succeeded.
	Available bool `json:"available"`
	// Error says, safely, why the part is unavailable.
	Error string `json:"error,omitempty"`
}

// Room is one room of the waiting room.
type Room struct {
	Name          string  `json:"name"`
	Waiting       int64   `json:"waiting"`
	Active        int64   `json:"active"`
	Capacity      int64   `json:"capacity"`
	AdmittedTotal int64   `json:"admitted_total"`
	RatePerS      float64 `json:"rate_per_s"`
	// ETASeconds is how long the last in line waits at the current rate;
	// null while nobody is admitted (or nobody waits: 0).
	ETASeconds             *float64 `json:"eta_seconds"`
	MaxAdmissionsPerMinute int      `json:"max_admissions_per_minute"`
	Paused                 bool     `json:"paused"`
	Closed                 bool     `json:"closed"`
}

// Rooms is the waiting room's part of a snapshot.
type Rooms struct {
	Part
	Rooms []Room `json:"rooms"`
}

// Flagged is a payment flagged for manual review.
type Flagged struct {
	ID           string `json:"id"`
	MerchantID   string `json:"merchant_id"`
	OrderID      string `json:"order_id"`
	Amount       int64  `json:"amount"`
	Currency     string `json:"currency"`
	Status       string `json:"status"`
	ReviewReason string `json:"review_reason"`
	UpdatedAt    string `json:"updated_at"`
}

// Payments is pay's part of a snapshot.
type Payments struct {
	Part
	ByStatus         map[string]int `json:"by_status"`
	FlaggedTotal     int            `json:"flagged_total"`
	OutboxLagSeconds float64        `json:"outbox_lag_seconds"`
	Flagged          []Flagged      `json:"flagged"`
}

// Event is one checkout event's inventory.
type Event struct {
	Name      string `json:"name"`
	Seats     int    `json:"seats"`
	SeatsLeft int    `json:"seats_left"`
	Held      int    `json:"held"`
	Sold      int    `json:"sold"`
}

// Checkout is the checkout's part of a snapshot.
type Checkout struct {
	Part
	Events []Event `json:"events"`
}

// Worker is one event worker.
type Worker struct {
	URL       string `json:"url"`
	Available bool   `json:"available"`
	Lag       int64  `json:"lag"`
	Held      int64  `json:"held"`
	Acked     int64  `json:"acked"`
}

// ParkedKey is a key the workers parked after its event kept failing:
// its later events wait for a redrive (`stampede events redrive`).
type ParkedKey struct {
	Key       string    `json:"key"`
	Partition int       `json:"partition"`
	FirstID   string    `json:"first_id"`
	Reason    string    `json:"reason"`
	Attempts  uint64    `json:"attempts"`
	ParkedAt  time.Time `json:"parked_at"`
	Events    uint64    `json:"events"`
}

// Workers is the workers' part of a snapshot: ConsumerLag is the messages
// of the stream not yet delivered to any worker, summed over the
// partitions (each partition's largest report). With Config.WorkerToken,
// Parked lists the parked keys (ParkedKnown says the list was read).
type Workers struct {
	Part
	ConsumerLag  int64       `json:"consumer_lag"`
	Workers      []Worker    `json:"workers"`
	ParkedKnown  bool        `json:"parked_known"`
	Parked       []ParkedKey `json:"parked"`
	ParkedEvents uint64      `json:"parked_events"`
}

// Snapshot is everything the page shows at one instant.
type Snapshot struct {
	At       time.Time `json:"at"`
	Rooms    Rooms     `json:"rooms"`
	Payments Payments  `json:"payments"`
	Checkout Checkout  `json:"checkout"`
	Workers  Workers   `json:"workers"`
}

// caller makes the console's calls to the parts.
type caller struct {
	client  *http.Client
	timeout time.Duration
}

// do sends method base+path with the bearer token and body (JSON, when
// not nil) and decodes a 2xx JSON answer into out. A problem answer comes
// back as its *stampede.Error (with Status); a part that cannot be
// reached, or answers late or garbled, as a CodeUnavailable error.
func (c *caller) do(ctx context.Context, ep Endpoint, method, path string, body, out any) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = strings.NewReader(string(b))
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(ep.URL, "/")+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if ep.Token != "" {
		req.Header.Set("Authorization", "Bearer "+ep.Token)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return &stampede.Error{Code: stampede.Unavailable, Message: "not reachable", Err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return httpapi.ReadProblem(resp)
	}
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 4<<20)).Decode(out); err != nil {
		return &stampede.Error{Code: stampede.Unavailable, Message: "gave an answer the console cannot read", Err: err}
	}
	return nil
}

// partError turns a failed read of a part into a safe message.
func partError(err error) string {
	var e *stampede.Error
	if !errors.As(err, &e) {
		return "unavailable"
	}
	switch {
	case e.Status == http.StatusUnauthorized || e.Status == http.StatusForbidden:
		return "refused the console's token"
	case e.Status == http.StatusNotFound:
		return "not found (is its admin API on?)"
	case e.Status >= 500 || e.Code == stampede.Unavailable:
		if e.Message == "not reachable" || strings.HasPrefix(e.Message, "gave an answer") {
			return e.Message
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return "did not answer in time"
		}
		return fmt.Sprintf("answered %d", max(e.Status, http.StatusServiceUnavailable))
	default:
		return fmt.Sprintf("answered %d", e.Status)
	}
}

// gatherer reads the parts.
type gatherer struct {
	cfg Config
	c   caller
}

// snapshot reads every part at once.
func (g *gatherer) snapshot(ctx context.Context) Snapshot {
	s := Snapshot{At: g.cfg.Now().UTC()}
	var wg sync.WaitGroup
	wg.Go(func() { s.Rooms = g.rooms(ctx) })
	wg.Go(func() { s.Payments = g.payments(ctx) })
	wg.Go(func() { s.Checkout = g.checkout(ctx) })
	wg.Go(func() { s.Workers = g.workers(ctx) })
	wg.Wait()
	return s
}

// roomAnswer is what the console reads of GET /v1/rooms/{room}.
type roomAnswer struct {
	Capacity      int64   `json:"capacity"`
	Active        int64   `json:"active"`
	Waiting       int64   `json:"waiting"`
	AdmittedTotal int64   `json:"admitted_total"`
	AdmissionRate float64 `json:"admission_rate_per_s"`
	Paused        bool    `json:"paused"`
	Closed        bool    `json:"closed"`
	Config        struct {
		MaxAdmissionsPerMinute int `json:"max_admissions_per_minute"`
	} `json:"config"`
}

func (g *gatherer) rooms(ctx context.Context) Rooms {
	out := Rooms{Part: Part{Configured: true}, Rooms: []Room{}}
	var list struct {
		Rooms []struct {
			Room string `json:"room"`
		} `json:"rooms"`
	}
	if err := g.c.do(ctx, g.cfg.Waitroom, http.MethodGet, "/v1/rooms", nil, &list); err != nil {
		out.Error = partError(err)
		return out
	}
	rooms := make([]Room, len(list.Rooms))
	errs := make([]error, len(list.Rooms))
	var wg sync.WaitGroup
	for i, r := range list.Rooms {
		wg.Go(func() {
			var a roomAnswer
			if err := g.c.do(ctx, g.cfg.Waitroom, http.MethodGet, "/v1/rooms/"+url.PathEscape(r.Room), nil, &a); err != nil {
				errs[i] = err
				return
			}
			rooms[i] = roomOf(r.Room, a)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if e, ok := errors.AsType[*stampede.Error](err); ok && e.Status == http.StatusNotFound {
			continue // deleted meanwhile
		}
		if err != nil {
			out.Error = partError(err)
			return out
		}
		out.Rooms = append(out.Rooms, rooms[i])
	}
	sort.Slice(out.Rooms, func(i, j int) bool { return out.Rooms[i].Name < out.Rooms[j].Name })
	out.Available = true
	return out
}

// roomOf shows a room, with its ETA: the last in line's wait at the
// measured rate.
func roomOf(name string, a roomAnswer) Room {
	r := Room{Name: name, Waiting: a.Waiting, Active: a.Active, Capacity: a.Capacity, AdmittedTotal: a.AdmittedTotal,
		RatePerS: math.Round(a.AdmissionRate*100) / 100, MaxAdmissionsPerMinute: a.Config.MaxAdmissionsPerMinute,
		Paused: a.Paused, Closed: a.Closed}
	switch {
	case a.Waiting == 0:
		zero := 0.0
		r.ETASeconds = &zero
	case a.AdmissionRate > 0 && !a.Paused && !a.Closed:
		eta := math.Round(float64(a.Waiting)/a.AdmissionRate*10) / 10
		r.ETASeconds = &eta
	}
	return r
}

func (g *gatherer) payments(ctx context.Context) Payments {
	out := Payments{Part: Part{Configured: g.cfg.Pay.configured()}, ByStatus: map[string]int{}, Flagged: []Flagged{}}
	if !out.Configured {
		return out
	}
	var stats struct {
		ByStatus         map[string]int `json:"by_status"`
		Flagged          int            `json:"flagged"`
		OutboxLagSeconds float64        `json:"outbox_lag_seconds"`
	}
	var page struct {
		Payments []Flagged `json:"payments"`
	}
	var errStats, errList error
	var wg sync.WaitGroup
	wg.Go(func() { errStats = g.c.do(ctx, g.cfg.Pay, http.MethodGet, "/v1/admin/stats", nil, &stats) })
	wg.Go(func() {
		errList = g.c.do(ctx, g.cfg.Pay, http.MethodGet, fmt.Sprintf("/v1/admin/payments?flagged=true&limit=%d", g.cfg.FlaggedLimit), nil, &page)
	})
	wg.Wait()
	if err := errors.Join(errStats, errList); err != nil {
		out.Error = partError(err)
		return out
	}
	if stats.ByStatus != nil {
		out.ByStatus = stats.ByStatus
	}
	out.FlaggedTotal, out.OutboxLagSeconds = stats.Flagged, stats.OutboxLagSeconds
	if page.Payments != nil {
		out.Flagged = page.Payments
	}
	out.Available = true
	return out
}

func (g *gatherer) checkout(ctx context.Context) Checkout {
	out := Checkout{Part: Part{Configured: g.cfg.Checkout.configured()}, Events: []Event{}}
	if !out.Configured {
		return out
	}
	events := make([]Event, len(g.cfg.Events))
	errs := make([]error, len(g.cfg.Events))
	var wg sync.WaitGroup
	for i, name := range g.cfg.Events {
		wg.Go(func() {
			var e Event
			errs[i] = g.c.do(ctx, Endpoint{URL: g.cfg.Checkout.URL}, http.MethodGet, "/v1/events/"+url.PathEscape(name), nil, &e)
			e.Name = name
			events[i] = e
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			out.Error = "event " + g.cfg.Events[i] + ": " + partError(err)
			return out
		}
	}
	if len(events) == 0 {
		// No event named: a readiness read says whether it is up.
		if err := g.c.do(ctx, Endpoint{URL: g.cfg.Checkout.URL}, http.MethodGet, "/healthz", nil, nil); err != nil {
			out.Error = partError(err)
			return out
		}
	}
	out.Events, out.Available = events, true
	return out
}

func (g *gatherer) workers(ctx context.Context) (out Workers) {
	out = Workers{Part: Part{Configured: len(g.cfg.Workers) > 0}, Workers: make([]Worker, len(g.cfg.Workers)), Parked: []ParkedKey{}}
	if !out.Configured {
		return out
	}
	defer func() { g.parked(ctx, &out) }()
	lags := make([]map[string]int64, len(g.cfg.Workers))
	var wg sync.WaitGroup
	for i, u := range g.cfg.Workers {
		wg.Go(func() { out.Workers[i], lags[i] = g.worker(ctx, u) })
	}
	wg.Wait()
	byPartition := map[string]int64{}
	down := 0
	for i, w := range out.Workers {
		if !w.Available {
			down++
			continue
		}
		for p, lag := range lags[i] {
			byPartition[p] = max(byPartition[p], lag)
		}
	}
	for _, lag := range byPartition {
		out.ConsumerLag += lag
	}
	out.Available = down == 0
	if down > 0 {
		out.Error = fmt.Sprintf("%d of %d workers not reachable", down, len(out.Workers))
	}
	return out
}

// parked lists the parked keys from the first available worker, when the
// console has the workers' token; a refusal is the part's error.
func (g *gatherer) parked(ctx context.Context, out *Workers) {
	if g.cfg.WorkerToken == "" {
		return
	}
	for i, w := range out.Workers {
		if !w.Available {
			continue
		}
		var p struct {
			Keys   []ParkedKey `json:"keys"`
			Events uint64      `json:"events"`
		}
		if err := g.c.do(ctx, Endpoint{URL: g.cfg.Workers[i], Token: g.cfg.WorkerToken}, http.MethodGet, "/v1/parked", nil, &p); err != nil {
			out.Available = false
			out.Error = "parked keys: " + partError(err)
			return
		}
		if p.Keys != nil {
			out.Parked = p.Keys
		}
		out.ParkedEvents, out.ParkedKnown = p.Events, true
		return
	}
}

// worker reads one worker's /metrics.
func (g *gatherer) worker(ctx context.Context, base string) (Worker, map[string]int64) {
	w := Worker{URL: base}
	ctx, cancel := context.WithTimeout(ctx, g.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(base, "/")+"/metrics", nil)
	if err != nil {
		return w, nil
	}
	req.Header.Set("Accept", "text/plain")
	resp, err := g.c.client.Do(req)
	if err != nil {
		return w, nil
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return w, nil
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		g.cfg.Logger.Warn("console: a worker's metrics cannot be read", "worker", base, "err", err)
		return w, nil
	}
	lags := map[string]int64{}
	for _, m := range fams["stampede_worker_partition_lag"].GetMetric() {
		v := int64(value(m))
		lags[label(m, "partition")] = v
		w.Lag += v
	}
	for _, m := range fams["stampede_worker_partition_held"].GetMetric() {
		w.Held += int64(value(m))
	}
	for _, m := range fams["stampede_worker_acked_total"].GetMetric() {
		w.Acked += int64(value(m))
	}
	w.Available = true
	return w, lags
}

// value is a gauge's, counter's or untyped metric's value.
func value(m *dto.Metric) float64 {
	switch {
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetUntyped() != nil:
		return m.GetUntyped().GetValue()
	}
	return 0
}

// label is the value of m's label name.
func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
