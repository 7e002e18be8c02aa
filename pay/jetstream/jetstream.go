// Package jetstream relays the payment outbox to NATS JetStream: every
// outbox row, in order, as one message on payments.<payment id>, with the
// message id <payment id>-<seq> so that JetStream drops a row published
// twice (a relay that crashed after publishing and before marking the row
// publishes it again on restart). Rows are published one at a time in
// outbox order, and a failed publish stops the batch, so a payment's
// events never overtake each other.
package jetstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/stampede-lab/stampede/internal/logging"
	"github.com/stampede-lab/stampede/pay"
)

// Config configures a Relay.
type Config struct {
	// Stream is the JetStream stream's name.
	Stream string
	// Subject is the subject prefix; events go to <Subject>.<payment id>.
	Subject string
	// Batch is how many outbox rows one pass reads.
	Batch int
	// Every is how often the relay looks for new rows.
	Every time.Duration
	// DuplicateWindow is how long JetStream remembers message ids.
	DuplicateWindow time.Duration
	// Logger receives the relay's logs.
	Logger *slog.Logger
}

// DefaultConfig returns stream PAYMENTS on subjects payments.>, batches of
// 100 every 100 ms, and a 10-minute duplicate window.
func DefaultConfig() Config {
	return Config{Stream: "PAYMENTS", Subject: "payments", Batch: 100, Every: 100 * time.Millisecond,
		DuplicateWindow: 10 * time.Minute, Logger: slog.Default()}
}

// Validate reports the first unusable field.
func (c Config) Validate() error {
	switch {
	case c.Stream == "":
		return pay.Invalid("Stream", "must not be empty")
	case c.Subject == "":
		return pay.Invalid("Subject", "must not be empty")
	case c.Batch < 1:
		return pay.Invalid("Batch", "must be at least 1, got %d", c.Batch)
	case c.Every <= 0:
		return pay.Invalid("Every", "must be positive, got %s", c.Every)
	case c.DuplicateWindow < time.Second:
		return pay.Invalid("DuplicateWindow", "must be at least 1s, got %s", c.DuplicateWindow)
	case c.Logger == nil:
		return pay.Invalid("Logger", "must not be nil")
	}
	return nil
}

// Relay publishes outbox rows to JetStream.
type Relay struct {
	store pay.Store
	js    jetstream.JetStream
	cfg   Config
}

// New returns a Relay publishing through nc, creating or updating the
// stream.
func New(ctx context.Context, store pay.Store, nc *nats.Conn, cfg Config) (*Relay, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	_, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:       cfg.Stream,
		Subjects:   []string{cfg.Subject + ".>"},
		Duplicates: cfg.DuplicateWindow,
	})
	if err != nil {
		return nil, fmt.Errorf("jetstream: create stream %s: %w", cfg.Stream, err)
	}
	return &Relay{store: store, js: js, cfg: cfg}, nil
}

// MsgID is the JetStream message id of an outbox row.
func MsgID(e pay.OutboxEvent) string { return fmt.Sprintf("%s-%d", e.PaymentID, e.Seq) }

// RunOnce publishes up to one batch of unpublished rows, in order, and
// marks each published. It returns how many it published.
func (r *Relay) RunOnce(ctx context.Context) (int, error) {
	events, err := r.store.PendingOutbox(ctx, r.cfg.Batch)
	if err != nil {
		return 0, err
	}
	for i, e := range events {
		if _, err := r.js.Publish(ctx, r.cfg.Subject+"."+e.PaymentID, e.Payload, jetstream.WithMsgID(MsgID(e))); err != nil {
			// Stop here: publishing later rows now could put a payment's
			// events out of order.
			return i, fmt.Errorf("jetstream: publish %s: %w", MsgID(e), err)
		}
		if err := r.store.MarkPublished(ctx, []int64{e.ID}, time.Now()); err != nil {
			// Published but not marked: the next pass publishes it again
			// and JetStream drops the duplicate.
			return i + 1, err
		}
	}
	return len(events), nil
}

// Run relays until ctx ends.
func (r *Relay) Run(ctx context.Context) error {
	t := time.NewTicker(r.cfg.Every)
	defer t.Stop()
	for {
		for {
			n, err := r.RunOnce(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				r.cfg.Logger.Warn("jetstream: relay pass failed", "err", err)
				break
			}
			if n < r.cfg.Batch {
				break
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Embedded is an in-process nats-server with JetStream, the zero-set-up
// default when no NATS URL is given.
type Embedded struct {
	srv *server.Server
}

// StartEmbedded starts an embedded nats-server on a free loopback port,
// keeping JetStream data in dir. The server logs nothing.
func StartEmbedded(dir string) (*Embedded, error) { return StartEmbeddedWithLogger(dir, nil) }

// StartEmbeddedWithLogger is StartEmbedded with the server's logs written
// to log (nil: none), tagged component=nats-server; its debug and trace
// lines are produced only when log is enabled at their level.
func StartEmbeddedWithLogger(dir string, log *slog.Logger) (*Embedded, error) {
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: log == nil, NoSigs: true})
	if err != nil {
		return nil, fmt.Errorf("jetstream: embedded nats-server: %w", err)
	}
	if log != nil {
		nl := logging.NATS(log)
		srv.SetLoggerV2(nl, nl.Enabled(slog.LevelDebug), nl.Enabled(logging.LevelTrace), false)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return nil, errors.New("jetstream: embedded nats-server did not become ready in 10s")
	}
	return &Embedded{srv: srv}, nil
}

// URL is the embedded server's client URL.
func (e *Embedded) URL() string { return e.srv.ClientURL() }

// Close stops the server.
func (e *Embedded) Close() {
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
}
