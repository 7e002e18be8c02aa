// Package webhook delivers payment events to merchants' webhooks. The
// events come from the outbox: every outbox row of a payment whose
// merchant has a webhook is written with a delivery row in the same
// transaction (pay.WebhookStore), and a Deliverer sends those rows.
//
// Each event is POSTed as JSON (pay.WebhookBody) with a unique event id
// (the body's "id" and the Stampede-Event-Id header) and signed in
// Stripe's scheme: Stampede-Signature: t=<unix seconds>,v1=<hex
// HMAC-SHA256 of "<t>.<body>"> (pay.SignWebhook; receivers check it with
// pay.VerifyWebhook). A 2xx answer delivers it; anything else is retried
// with jittered exponential backoff until Config.MaxAge has passed since
// the event (or its last resend), after which the delivery is marked
// failed (stampede pay webhooks --resend sends it again).
//
// Delivery is at least once (an answer lost after the receiver processed
// it is sent again; receivers de-duplicate by event id) and in
// per-payment order: a payment's event n+1 is not sent while its event n
// is pending. Redirects are never followed, so an event cannot be bounced
// to a host the merchant did not register.
package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/pay"
)

// Config configures a Deliverer.
type Config struct {
	// Every is how often the deliverer looks for due deliveries.
	Every time.Duration
	// Batch is how many due deliveries one pass takes.
	Batch int
	// Concurrency bounds the deliveries in flight at once.
	Concurrency int
	// Timeout bounds one attempt, connecting and reading the answer
	// included.
	Timeout time.Duration
	// BaseBackoff is the wait after the first failed attempt; each
	// further failure doubles it, up to MaxBackoff. The wait is jittered:
	// between half of it and all of it.
	BaseBackoff time.Duration
	// MaxBackoff caps the wait between attempts.
	MaxBackoff time.Duration
	// MaxAge is how long a delivery is retried, from its event (or its
	// last resend); then it is marked failed.
	MaxAge time.Duration
	// Lease is how long a claimed delivery is reserved for its attempt;
	// a deliverer that dies mid-attempt leaves it due again after Lease.
	// It must exceed Timeout.
	Lease time.Duration
	// Client sends the requests; nil builds one that never follows
	// redirects. A Client given here must not follow redirects either.
	Client *http.Client
	// Now is the clock; tests inject a fake one.
	Now func() time.Time
	// Jitter returns a number in [0, 1) for the backoff's jitter.
	Jitter func() float64
	// Logger receives the deliverer's logs.
	Logger *slog.Logger
}

// DefaultConfig returns passes every 500 ms of up to 100 deliveries, 8 in
// flight, 10 s attempts, backoff from 1 s doubling to 1 h, retried for
// 24 h, a 30 s lease, the wall clock and math/rand jitter.
func DefaultConfig() Config {
	return Config{
		Every: 500 * time.Millisecond, Batch: 100, Concurrency: 8, Timeout: 10 * time.Second,
		BaseBackoff: time.Second, MaxBackoff: time.Hour, MaxAge: 24 * time.Hour, Lease: 30 * time.Second,
		Now: time.Now, Jitter: rand.Float64, Logger: slog.Default(),
	}
}

// Validate reports every unusable field at once, each named in
// snake_case; with serve pay's prefix "webhook-" they are its flags
// (max_age is --webhook-max-age).
func (c Config) Validate() error {
	var f stampede.Fields
	if c.Every <= 0 {
		f.Add("every", "must be positive, got %s", c.Every)
	}
	if c.Batch < 1 {
		f.Add("batch", "must be at least 1, got %d", c.Batch)
	}
	if c.Concurrency < 1 {
		f.Add("concurrency", "must be at least 1, got %d", c.Concurrency)
	}
	if c.Timeout <= 0 {
		f.Add("timeout", "must be positive, got %s", c.Timeout)
	}
	if c.BaseBackoff <= 0 {
		f.Add("base_backoff", "must be positive, got %s", c.BaseBackoff)
	}
	if c.MaxBackoff < c.BaseBackoff {
		f.Add("max_backoff", "must be at least base_backoff (%s), got %s", c.BaseBackoff, c.MaxBackoff)
	}
	if c.MaxAge <= 0 {
		f.Add("max_age", "must be positive, got %s", c.MaxAge)
	}
	if c.Lease <= c.Timeout {
		f.Add("lease", "must exceed timeout (%s), got %s", c.Timeout, c.Lease)
	}
	if c.Now == nil {
		f.Add("now", "must not be nil")
	}
	if c.Jitter == nil {
		f.Add("jitter", "must not be nil")
	}
	if c.Logger == nil {
		f.Add("logger", "must not be nil")
	}
	return f.Err()
}

// Deliverer sends due webhook deliveries. Several deliverers may share a
// database: a delivery is claimed before it is sent.
type Deliverer struct {
	store pay.WebhookStore
	cfg   Config
}

// New returns a Deliverer over store.
func New(store pay.WebhookStore, cfg Config) (*Deliverer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if store == nil {
		return nil, pay.Invalid("store", "must not be nil")
	}
	if cfg.Client == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = cfg.Concurrency
		tr.DialContext = (&net.Dialer{Timeout: cfg.Timeout}).DialContext
		cfg.Client = &http.Client{Transport: tr, CheckRedirect: noRedirects}
	}
	return &Deliverer{store: store, cfg: cfg}, nil
}

// noRedirects answers a redirect with the redirect itself, which counts
// as a failed attempt: a webhook goes to the registered URL only.
func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// Run delivers every Every until ctx ends; then it returns nil. A pass
// that fails is logged and the next one tries again.
func (d *Deliverer) Run(ctx context.Context) error {
	t := time.NewTicker(d.cfg.Every)
	defer t.Stop()
	for {
		if _, err := d.RunOnce(ctx); err != nil && ctx.Err() == nil {
			d.cfg.Logger.Warn("webhook: delivery pass failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// RunOnce makes one pass: it takes up to Batch due deliveries (at most one
// per payment), attempts them, at most Concurrency at once, and records
// each outcome. It returns how many were delivered.
func (d *Deliverer) RunOnce(ctx context.Context) (int, error) {
	due, err := d.store.DueDeliveries(ctx, d.cfg.Now(), d.cfg.Batch)
	if err != nil {
		return 0, err
	}
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		delivered int
		errs      []error
	)
	slots := make(chan struct{}, d.cfg.Concurrency)
	for _, del := range due {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return delivered, ctx.Err()
		}
		wg.Go(func() {
			defer func() { <-slots }()
			ok, err := d.attempt(ctx, del)
			mu.Lock()
			defer mu.Unlock()
			if ok {
				delivered++
			}
			if err != nil {
				errs = append(errs, err)
			}
		})
	}
	wg.Wait()
	return delivered, errors.Join(errs...)
}

// attempt claims del, sends it and records the outcome; it reports
// whether del was delivered.
func (d *Deliverer) attempt(ctx context.Context, del pay.Delivery) (bool, error) {
	now := d.cfg.Now()
	ok, err := d.store.ClaimDelivery(ctx, del.ID, now, now.Add(d.cfg.Lease))
	if err != nil || !ok {
		return false, err // taken by another deliverer, or no longer due
	}
	code := d.send(ctx, del)
	end := d.cfg.Now()
	a := pay.Attempt{Status: pay.DeliveryDelivered, At: end}
	if code != "" {
		deadline := del.Since.Add(d.cfg.MaxAge)
		a.LastError = code
		if !end.Before(deadline) {
			a.Status = pay.DeliveryFailed
			d.cfg.Logger.Warn("webhook: delivery given up", "event", del.ID, "payment", del.PaymentID, "seq", del.Seq,
				"attempts", del.Attempts+1, "last_error", code)
		} else {
			a.Status = pay.DeliveryPending
			a.NextAt = end.Add(d.Backoff(del.Attempts + 1))
			if a.NextAt.After(deadline) {
				a.NextAt = deadline // one last attempt when the period ends
			}
		}
	}
	// The outcome is recorded even if ctx ended meanwhile: the attempt
	// happened.
	if err := d.store.RecordAttempt(context.WithoutCancel(ctx), del.ID, a); err != nil {
		return false, fmt.Errorf("webhook: record attempt of %s: %w", del.ID, err)
	}
	return a.Status == pay.DeliveryDelivered, nil
}

// Backoff returns the wait after the n-th failed attempt (n >= 1):
// BaseBackoff·2^(n-1), capped at MaxBackoff, jittered to between half of
// it and all of it ("equal jitter"), so that receivers coming back are
// not hit by every retry at once.
func (d *Deliverer) Backoff(n int) time.Duration {
	w := d.cfg.MaxBackoff
	if n-1 < 40 {
		w = min(d.cfg.BaseBackoff<<max(n-1, 0), d.cfg.MaxBackoff)
		if w <= 0 { // overflow
			w = d.cfg.MaxBackoff
		}
	}
	half := w / 2
	return half + time.Duration(d.cfg.Jitter()*float64(w-half))
}

// maxAnswer is how much of a receiver's answer is read (and discarded),
// so that a keep-alive connection can be reused.
const maxAnswer = 4096

// send makes one attempt; it returns "" when the receiver answered 2xx,
// otherwise the failure's code: invalid_url, timeout, connect, redirect
// or http_<status>.
func (d *Deliverer) send(ctx context.Context, del pay.Delivery) string {
	if err := pay.ValidateWebhookURL(del.URL); err != nil {
		return "invalid_url"
	}
	ctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, del.URL, bytes.NewReader(del.Body))
	if err != nil {
		return "invalid_url"
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "Stampede-Webhooks/1")
	req.Header.Set(pay.EventIDHeader, del.ID)
	req.Header.Set(pay.SignatureHeader, pay.SignWebhook(del.Secret, d.cfg.Now(), del.Body))
	resp, err := d.cfg.Client.Do(req)
	if err != nil {
		d.cfg.Logger.Debug("webhook: attempt failed", "event", del.ID, "err", err)
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			return "timeout"
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return "timeout"
		}
		return "connect"
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxAnswer))
	resp.Body.Close()
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return ""
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		return "redirect"
	}
	return "http_" + strconv.Itoa(resp.StatusCode)
}
