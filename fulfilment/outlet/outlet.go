// Package outlet delivers payment events to another team's HTTP endpoint
// instead of the fulfilment store: serve worker --deliver URL hands each
// event the keyed consumer (dispatch/natskeyed) gives it to an Outlet,
// which POSTs it and reports the outcome back to the consumer.
//
// The request: POST <URL> with the event's JSON exactly as pay published
// it (protocol.PaymentEvent) as the body, Content-Type application/json,
// the event id (protocol.EventID: "<payment id>-<seq>") as both
// Idempotency-Key and Stampede-Event-Id, and a Stampede-Signature in the
// scheme of pay's webhooks (protocol.Sign: "t=<unix>,v1=<hex HMAC-SHA256
// of "<t>.<body>">", signed afresh at every attempt), so the receiver can
// check it with protocol.VerifySignature or Stripe's libraries.
//
// Outcomes:
//   - 2xx: delivered; the consumer acknowledges the event and runs the
//     key's next one. Order per key (per payment) is the consumer's: no
//     event of a payment is sent before the previous one was accepted.
//   - 5xx, 408, 429, a timeout (Config.Timeout per attempt) or a
//     connection error: retried here, after an exponential backoff with
//     equal jitter (Config.BaseBackoff doubling to Config.MaxBackoff), or
//     after the answer's Retry-After when that is longer (capped at
//     Config.MaxRetryAfter), up to Config.Attempts attempts; then the error
//     goes back to the consumer, which redelivers the event after its own
//     growing delay and parks it after its MaxAttempts deliveries.
//   - any other 4xx, or a 3xx (redirects are never followed): permanent.
//     The error wraps natskeyed.ErrPermanent, so the consumer parks the
//     event at once with its key's later events (stampede events parked,
//     redrive) while other keys flow.
//
// A body that is not a valid payment event is never sent: Deliver returns
// an error of class stampede.Invalid, which serve worker's engine
// (fulfilment/worker) logs, counts and acknowledges.
//
// Delivery is at least once: an answer lost after the receiver applied the
// event, a restart, or a redrive sends it again with the same
// Idempotency-Key, which the receiver de-duplicates.
package outlet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stampede-lab/stampede"
	dispatchjs "github.com/stampede-lab/stampede/dispatch/natskeyed"
	"github.com/stampede-lab/stampede/protocol"
	"github.com/stampede-lab/stampede/retry"
)

// HeaderIdempotencyKey carries the event id on every request, the same on
// every attempt and every redelivery.
const HeaderIdempotencyKey = "Idempotency-Key"

// Config configures an Outlet. Validate names its fields as serve
// worker's flags: URL is "deliver" (--deliver), Timeout "deliver_timeout"
// (--deliver-timeout), Secret "deliver_secret" (the environment variable
// STAMPEDE_DELIVER_SECRET).
type Config struct {
	// URL is the endpoint every event is POSTed to: http or https, with a
	// host.
	URL string
	// Secret is the shared HMAC key the requests are signed with.
	Secret string
	// Timeout bounds one attempt, connecting and reading the answer's
	// head included.
	Timeout time.Duration
	// Attempts is how many attempts one delivery of an event makes before
	// it hands the event back to the consumer for a later redelivery.
	Attempts int
	// BaseBackoff is the wait after the first failed attempt; it doubles
	// with each further failure, up to MaxBackoff, jittered between half
	// of it and all of it.
	BaseBackoff time.Duration
	// MaxBackoff caps the wait between two attempts.
	MaxBackoff time.Duration
	// MaxRetryAfter caps the wait a Retry-After answer asks for: a
	// handler is held while it waits.
	MaxRetryAfter time.Duration
	// Client sends the requests; nil builds one that never follows
	// redirects. A Client given here must not follow redirects either.
	Client *http.Client
	// Now is the clock the signatures are dated by.
	Now func() time.Time
	// Rand feeds the backoff's jitter; nil is math/rand/v2.
	Rand retry.Rand
	// Sleep waits between attempts; tests inject one that returns at once.
	Sleep retry.Sleeper
	// Logger receives the outlet's logs.
	Logger *slog.Logger
}

// DefaultConfig returns 10 s attempts, 5 attempts per delivery, backoff
// from 200 ms doubling to 5 s, Retry-After honoured up to 30 s, the wall
// clock and a real sleep. URL and Secret are left for the caller.
func DefaultConfig() Config {
	return Config{
		Timeout: 10 * time.Second, Attempts: 5, BaseBackoff: 200 * time.Millisecond, MaxBackoff: 5 * time.Second,
		MaxRetryAfter: 30 * time.Second, Now: time.Now, Sleep: retry.Sleep, Logger: slog.Default(),
	}
}

// MinSecret is the shortest signing secret accepted.
const MinSecret = 16

// Validate reports every unusable field at once (see stampede.Fields),
// each named as serve worker's flag that sets it (see Config).
func (c Config) Validate() error {
	var f stampede.Fields
	if err := validURL(c.URL); err != nil {
		f.Add("deliver", "%s", err)
	}
	if len(c.Secret) < MinSecret {
		f.Add("deliver_secret", "must be at least %d bytes (got %d): the requests are signed with it, and a short key can be guessed", MinSecret, len(c.Secret))
	}
	if c.Timeout <= 0 {
		f.Add("deliver_timeout", "must be positive, got %s", c.Timeout)
	}
	if c.Attempts < 1 {
		f.Add("deliver_attempts", "must be at least 1, got %d", c.Attempts)
	}
	if c.BaseBackoff <= 0 {
		f.Add("deliver_backoff", "must be positive, got %s", c.BaseBackoff)
	}
	if c.MaxBackoff < c.BaseBackoff {
		f.Add("deliver_max_backoff", "must be at least deliver_backoff (%s), got %s", c.BaseBackoff, c.MaxBackoff)
	}
	if c.MaxRetryAfter < 0 {
		f.Add("deliver_max_retry_after", "must not be negative, got %s", c.MaxRetryAfter)
	}
	if c.Now == nil {
		f.Add("now", "must not be nil")
	}
	if c.Sleep == nil {
		f.Add("sleep", "must not be nil")
	}
	if c.Logger == nil {
		f.Add("logger", "must not be nil")
	}
	return f.Err()
}

// validURL checks an endpoint: an absolute http or https URL with a host,
// no user information and no fragment.
func validURL(raw string) error {
	if raw == "" {
		return errors.New("must be the receiver's URL, such as https://orders.example.com/stampede/events")
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return fmt.Errorf("is not a URL: %v", err)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("must be an http or https URL, got %q", raw)
	case u.Hostname() == "":
		return fmt.Errorf("must name a host, got %q", raw)
	case u.User != nil:
		return errors.New("must not carry user information: the requests are authenticated by their signature")
	case u.Fragment != "":
		return fmt.Errorf("must not have a fragment, got %q", raw)
	}
	return nil
}

// Stats counts what an Outlet did.
type Stats struct {
	Delivered  uint64 // events the endpoint accepted (2xx)
	Attempts   uint64 // requests sent, or tried
	Retries    uint64 // attempts after a failed one, within a delivery
	HandedBack uint64 // deliveries that failed every attempt: the consumer redelivers them later
	Permanent  uint64 // events refused for good (4xx, 3xx): parked by the consumer
	Invalid    uint64 // bodies that are not payment events, never sent
}

// Outlet POSTs payment events to one endpoint. It is safe for concurrent
// use: the consumer runs one Deliver per key at a time, several keys at
// once.
type Outlet struct {
	cfg    Config
	policy retry.Policy

	delivered, attempts, retries, handedBack, permanent, invalid atomic.Uint64
}

// New returns an Outlet for cfg. It starts nothing and sends nothing.
func New(cfg Config) (*Outlet, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	policy, err := retry.New(retry.Config{Name: retry.EqualJitter, MaxAttempts: cfg.Attempts, Base: cfg.BaseBackoff,
		Cap: cfg.MaxBackoff, Multiplier: 2}, cfg.Rand)
	if err != nil {
		return nil, err
	}
	if cfg.Client == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.DialContext = (&net.Dialer{Timeout: cfg.Timeout}).DialContext
		tr.MaxIdleConnsPerHost = 64
		cfg.Client = &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		}}
	}
	return &Outlet{cfg: cfg, policy: policy}, nil
}

// Stats returns the outlet's counters.
func (o *Outlet) Stats() Stats {
	return Stats{Delivered: o.delivered.Load(), Attempts: o.attempts.Load(), Retries: o.retries.Load(),
		HandedBack: o.handedBack.Load(), Permanent: o.permanent.Load(), Invalid: o.invalid.Load()}
}

// Collector returns Prometheus counters read from Stats at every scrape:
// stampede_outlet_{delivered,attempts,retries,handed_back,permanent,invalid}_total.
func (o *Outlet) Collector() prometheus.Collector { return collector{o} }

var descs = map[string]*prometheus.Desc{
	"delivered":   prometheus.NewDesc("stampede_outlet_delivered_total", "Events the endpoint accepted (2xx).", nil, nil),
	"attempts":    prometheus.NewDesc("stampede_outlet_attempts_total", "Requests sent or tried.", nil, nil),
	"retries":     prometheus.NewDesc("stampede_outlet_retries_total", "Requests after a failed one, within a delivery.", nil, nil),
	"handed_back": prometheus.NewDesc("stampede_outlet_handed_back_total", "Deliveries that failed every attempt, redelivered later by the consumer.", nil, nil),
	"permanent":   prometheus.NewDesc("stampede_outlet_permanent_total", "Events the endpoint refused for good (4xx, 3xx), parked with their key.", nil, nil),
	"invalid":     prometheus.NewDesc("stampede_outlet_invalid_total", "Bodies that are not payment events, never sent.", nil, nil),
}

type collector struct{ o *Outlet }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range descs {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	s := c.o.Stats()
	for name, v := range map[string]uint64{"delivered": s.Delivered, "attempts": s.Attempts, "retries": s.Retries,
		"handed_back": s.HandedBack, "permanent": s.Permanent, "invalid": s.Invalid} {
		ch <- prometheus.MustNewConstMetric(descs[name], prometheus.CounterValue, float64(v))
	}
}

// Deliver is a natskeyed.Handler: it POSTs e to the endpoint, retrying
// transient failures, and returns nil once the endpoint accepted it, an
// error wrapping natskeyed.ErrPermanent when the endpoint refused it for
// good, an Invalid error when e is not a payment event, and any other
// error when every attempt failed or ctx ended.
func (o *Outlet) Deliver(ctx context.Context, e dispatchjs.Event) error {
	ev, err := protocol.DecodePaymentEvent(e.Data)
	if err != nil {
		o.invalid.Add(1)
		return err
	}
	id := ev.ID()
	seq := o.policy.Start()
	for {
		o.attempts.Add(1)
		res := o.send(ctx, id, e.Data)
		switch {
		case res.err == nil:
			o.delivered.Add(1)
			return nil
		case res.permanent:
			o.permanent.Add(1)
			o.cfg.Logger.Warn("outlet: event refused for good, parked with its key", "event", id, "key", e.Key, "err", res.err)
			return fmt.Errorf("outlet: event %s: %w: %w", id, res.err, dispatchjs.ErrPermanent)
		}
		wait, again := seq.Next()
		if ra := min(res.retryAfter, o.cfg.MaxRetryAfter); ra > wait {
			wait = ra
		}
		if !again || ctx.Err() != nil {
			o.handedBack.Add(1)
			o.cfg.Logger.Info("outlet: delivery failed, handed back for redelivery", "event", id, "key", e.Key,
				"delivery", e.Delivery, "err", res.err)
			return fmt.Errorf("outlet: event %s: %w", id, res.err)
		}
		o.cfg.Logger.Debug("outlet: attempt failed, retrying", "event", id, "wait", wait, "err", res.err)
		if err := o.cfg.Sleep(ctx, wait); err != nil {
			o.handedBack.Add(1)
			return fmt.Errorf("outlet: event %s: %w (then %w)", id, res.err, err)
		}
		o.retries.Add(1)
	}
}

// result is one attempt's outcome.
type result struct {
	err        error         // nil: delivered
	permanent  bool          // no retry can cure it
	retryAfter time.Duration // the answer's Retry-After, if any
}

// maxAnswer is how much of an answer is read (and discarded), so that a
// keep-alive connection can be reused.
const maxAnswer = 4096

// send makes one attempt.
func (o *Outlet) send(ctx context.Context, id string, body []byte) result {
	ctx, cancel := context.WithTimeout(ctx, o.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, o.cfg.URL, bytes.NewReader(body))
	if err != nil {
		return result{err: err, permanent: true}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "Stampede-Outlet/1")
	req.Header.Set(HeaderIdempotencyKey, id)
	req.Header.Set(protocol.HeaderEventID, id)
	req.Header.Set(protocol.HeaderSignature, protocol.Sign(o.cfg.Secret, o.cfg.Now(), body))
	resp, err := o.cfg.Client.Do(req)
	if err != nil {
		var ne net.Error
		if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
			return result{err: fmt.Errorf("timed out after %s", o.cfg.Timeout)}
		}
		return result{err: fmt.Errorf("request failed: %w", err)}
	}
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	resp.Body.Close()
	code := resp.StatusCode
	switch {
	case code >= 200 && code < 300:
		return result{}
	case code == http.StatusRequestTimeout || code == http.StatusTooManyRequests || code >= 500:
		return result{err: fmt.Errorf("answered %d", code), retryAfter: retryAfter(resp.Header.Get("Retry-After"), o.cfg.Now())}
	case code >= 300 && code < 400:
		return result{err: fmt.Errorf("answered %d (redirects are not followed: --deliver must name the endpoint itself)", code), permanent: true}
	case code >= 400 && code < 500:
		return result{err: fmt.Errorf("answered %d%s", code, excerpt(answer)), permanent: true}
	}
	return result{err: fmt.Errorf("answered %d", code)} // 1xx as a final answer: odd, retried
}

// excerpt is the start of a refusal's body, for the parked key's reason
// (stampede events parked): ": <up to 200 bytes>", or "" when empty.
func excerpt(b []byte) string {
	const most = 200
	s := strings.TrimSpace(strings.ToValidUTF8(string(b[:min(len(b), most)]), ""))
	if s == "" {
		return ""
	}
	return ": " + strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
}

// retryAfter reads a Retry-After value: delay-seconds or an HTTP date
// (RFC 9110 §10.2.3); 0 when absent or unreadable.
func retryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil {
		if s <= 0 {
			return 0
		}
		return time.Duration(min(s, int64(24*time.Hour/time.Second))) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0)
	}
	return 0
}
