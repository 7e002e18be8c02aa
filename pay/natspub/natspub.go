// Package natspub is the NATS JetStream adapter of the payment outbox:
// a pay.Publisher that sends every outbox row as one message on
// payments.<payment id>, stored partitioned for the workers as
// payments.<partition>.<payment id> (see Config.Partitions), with the message id <payment id>-<seq> so that
// JetStream drops a row published twice (a relay that crashed after
// publishing and before marking the row publishes it again on restart),
// and the embedded nats-server that is the zero-set-up default.
//
// The stream is file-backed, with an age and a size limit; Publish
// returns only once JetStream acknowledged the message, and so does the
// Wait of PublishAsync's acknowledgement, so the relay (pay.Relay) never
// marks a row published that the stream does not hold.
package natspub

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/stampede-lab/stampede"
	dispatchjs "github.com/stampede-lab/stampede/dispatch/natskeyed"
	"github.com/stampede-lab/stampede/internal/logging"
	"github.com/stampede-lab/stampede/pay"
)

// Config configures a Publisher and its stream.
type Config struct {
	// Stream is the JetStream stream's name.
	Stream string
	// Subject is the subject prefix; events go to <Subject>.<payment id>.
	Subject string
	// DuplicateWindow is how long JetStream remembers message ids.
	DuplicateWindow time.Duration
	// MaxAge is how long the stream keeps a message; 0 keeps messages
	// for ever. It must be at least DuplicateWindow.
	MaxAge time.Duration
	// MaxBytes is the stream's size limit in bytes; the oldest messages
	// go first when it is reached. -1 means no limit.
	MaxBytes int64
	// PublishTimeout bounds one publish, acknowledgement included.
	PublishTimeout time.Duration
	// Partitions is how many partitions the stream stores events in:
	// <Subject>.<id> is stored as <Subject>.<p>.<id>, p the partition of
	// the payment id (dispatch/natskeyed.PartitionOf), so that keyed
	// workers (dispatch/natskeyed, one consumer per partition) see every
	// event of a payment in one partition and in order. On NATS 2.10+ the
	// server computes p with a subject transform; on an older server,
	// which has none, the publisher computes it and publishes to
	// <Subject>.<p>.<id> itself: the stored layout is the same. Changing
	// it on a stream that holds unconsumed events re-partitions only the
	// new ones: drain the workers first.
	Partitions int
}

// DefaultConfig returns stream PAYMENTS on subjects payments.>, a
// 10-minute duplicate window, messages kept 72 hours and at most 1 GiB,
// a 5-second publish timeout and 8 partitions.
func DefaultConfig() Config {
	return Config{Stream: "PAYMENTS", Subject: "payments", DuplicateWindow: 10 * time.Minute,
		MaxAge: 72 * time.Hour, MaxBytes: 1 << 30, PublishTimeout: 5 * time.Second, Partitions: 8}
}

// Validate reports every unusable field at once, each named in
// snake_case as serve pay's flag that sets it: Stream is "stream",
// Subject "subject", Partitions "partitions", MaxAge "stream_max_age" and
// MaxBytes "stream_max_bytes".
func (c Config) Validate() error {
	var f stampede.Fields
	if c.Stream == "" {
		f.Add("stream", "must not be empty")
	}
	if c.Subject == "" {
		f.Add("subject", "must not be empty")
	}
	if c.DuplicateWindow < time.Second {
		f.Add("duplicate_window", "must be at least 1s, got %s", c.DuplicateWindow)
	}
	switch {
	case c.MaxAge < 0:
		f.Add("stream_max_age", "must not be negative (0: no limit), got %s", c.MaxAge)
	case c.MaxAge > 0 && c.MaxAge < c.DuplicateWindow:
		f.Add("stream_max_age", "must be at least the duplicate window (%s), got %s", c.DuplicateWindow, c.MaxAge)
	}
	if c.MaxBytes == 0 || c.MaxBytes < -1 {
		f.Add("stream_max_bytes", "must be positive, or -1 for no limit, got %d", c.MaxBytes)
	}
	if c.PublishTimeout <= 0 {
		f.Add("publish_timeout", "must be positive, got %s", c.PublishTimeout)
	}
	if c.Partitions < 1 {
		f.Add("partitions", "must be at least 1, got %d", c.Partitions)
	}
	return f.Err()
}

// StreamConfig is the JetStream configuration of cfg's stream: file
// storage, so that acknowledged messages survive a server restart, and,
// when transform is true (NATS 2.10+), the partitioning subject transform
// of dispatch/natskeyed.StreamConfig. Without it the stream stores
// subjects as published.
func StreamConfig(cfg Config, transform bool) jetstream.StreamConfig {
	sc := jetstream.StreamConfig{
		Name:     cfg.Stream,
		Subjects: []string{cfg.Subject + ".>"},
	}
	if transform {
		sc = dispatchjs.StreamConfig(cfg.Stream, cfg.Subject, cfg.Partitions)
	}
	sc.Storage = jetstream.FileStorage
	sc.Duplicates = cfg.DuplicateWindow
	sc.MaxAge = cfg.MaxAge
	sc.MaxBytes = cfg.MaxBytes
	sc.Discard = jetstream.DiscardOld
	return sc
}

// Publisher publishes outbox rows to a JetStream stream.
type Publisher struct {
	js  jetstream.JetStream
	cfg Config
	// transform reports whether the server partitions (NATS 2.10+);
	// otherwise subject partitions on the publisher's side.
	transform bool
}

// ServerPartitions reports whether the server partitions the stream with
// a subject transform (NATS 2.10+); false means the publisher computes
// each event's partition itself, for a server without transforms.
func (p *Publisher) ServerPartitions() bool { return p.transform }

// subject is where e is published: <Subject>.<payment id>, which the
// server's transform partitions, or, without one, the partitioned subject
// itself.
func (p *Publisher) subject(e pay.OutboxEvent) string {
	if p.transform {
		return p.cfg.Subject + "." + e.PaymentID
	}
	return dispatchjs.PartitionedSubject(p.cfg.Subject, e.PaymentID, p.cfg.Partitions)
}

var _ pay.AsyncPublisher = (*Publisher)(nil)

// errCodeSubjectOverlap is nats-server's error code for a stream whose
// subjects another stream already stores (JSStreamSubjectOverlapErr).
const errCodeSubjectOverlap jetstream.ErrorCode = 10065

// NewPublisher returns a Publisher through nc, creating the stream or
// updating an existing one to cfg (its limits included).
func NewPublisher(ctx context.Context, nc *nats.Conn, cfg Config) (*Publisher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// Asynchronous publishes time out like synchronous ones; the relay
	// bounds how many are in flight, far below nats.go's own limit.
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(cfg.PublishTimeout))
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	transform := dispatchjs.TransformSupported(nc.ConnectedServerVersion())
	if _, err := js.CreateOrUpdateStream(ctx, StreamConfig(cfg, transform)); err != nil {
		if apiErr, ok := errors.AsType[*jetstream.APIError](err); ok && apiErr.ErrorCode == errCodeSubjectOverlap {
			if other, lookErr := js.StreamNameBySubject(ctx, cfg.Subject+".>"); lookErr == nil && other != cfg.Stream {
				return nil, fmt.Errorf("jetstream: stream %s: its subjects %s.> already belong to stream %s on this server (a subject goes to one stream: use that stream's name, or another subject prefix): %w",
					cfg.Stream, cfg.Subject, other, err)
			}
		}
		return nil, fmt.Errorf("jetstream: create or update stream %s: %w", cfg.Stream, err)
	}
	return &Publisher{js: js, cfg: cfg, transform: transform}, nil
}

// MsgID is the JetStream message id of an outbox row.
func MsgID(e pay.OutboxEvent) string { return fmt.Sprintf("%s-%d", e.PaymentID, e.Seq) }

// Publish sends e to <Subject>.<payment id> and waits for JetStream's
// acknowledgement: nil means the stream stored it (or already held it,
// as a duplicate).
func (p *Publisher) Publish(ctx context.Context, e pay.OutboxEvent) error {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.PublishTimeout)
	defer cancel()
	ack, err := p.js.Publish(ctx, p.subject(e), e.Payload, jetstream.WithMsgID(MsgID(e)),
		jetstream.WithExpectStream(p.cfg.Stream))
	if err != nil {
		return fmt.Errorf("jetstream: publish %s: %w", MsgID(e), err)
	}
	return p.checkAck(e, ack)
}

func (p *Publisher) checkAck(e pay.OutboxEvent, ack *jetstream.PubAck) error {
	if ack == nil || ack.Stream != p.cfg.Stream {
		return fmt.Errorf("jetstream: publish %s: no acknowledgement from stream %s", MsgID(e), p.cfg.Stream)
	}
	return nil
}

// PublishAsync sends e as Publish does, without waiting for the
// acknowledgement: the returned pay.PublishAck's Wait returns nil once
// JetStream acknowledged the message, or an error when it rejected it or
// did not answer within PublishTimeout.
func (p *Publisher) PublishAsync(_ context.Context, e pay.OutboxEvent) (pay.PublishAck, error) {
	msg := &nats.Msg{Subject: p.subject(e), Data: e.Payload}
	fut, err := p.js.PublishMsgAsync(msg, jetstream.WithMsgID(MsgID(e)), jetstream.WithExpectStream(p.cfg.Stream))
	if err != nil {
		return nil, fmt.Errorf("jetstream: publish %s: %w", MsgID(e), err)
	}
	return &pendingAck{p: p, e: e, fut: fut}, nil
}

// pendingAck is the acknowledgement of one PublishAsync.
type pendingAck struct {
	p   *Publisher
	e   pay.OutboxEvent
	fut jetstream.PubAckFuture
}

// Wait implements pay.PublishAck.
func (a *pendingAck) Wait(ctx context.Context) error {
	select {
	case ack := <-a.fut.Ok():
		return a.p.checkAck(a.e, ack)
	case err := <-a.fut.Err():
		return fmt.Errorf("jetstream: publish %s: %w", MsgID(a.e), err)
	case <-ctx.Done():
		return fmt.Errorf("jetstream: publish %s: %w", MsgID(a.e), ctx.Err())
	}
}

// EmbeddedConfig configures an embedded nats-server.
type EmbeddedConfig struct {
	// Dir is where JetStream keeps its store; it survives restarts.
	Dir string
	// SyncAlways makes JetStream fsync every write before it
	// acknowledges it, so that an acknowledged message also survives a
	// machine crash or power loss. Without it, an acknowledged message is
	// already written to the operating system (it survives the process
	// being killed) and fsynced every SyncInterval.
	SyncAlways bool
	// SyncInterval is how often JetStream fsyncs when not SyncAlways;
	// 0 is nats-server's default (2 minutes).
	SyncInterval time.Duration
	// ReadyTimeout bounds the start-up.
	ReadyTimeout time.Duration
	// Port is the client port on 127.0.0.1; 0 picks a free one. A fixed
	// port lets clients reconnect to a restarted server.
	Port int
	// Logger receives the server's logs; nil means none.
	Logger *slog.Logger
}

// DefaultEmbeddedConfig returns a server keeping its store in dir,
// without SyncAlways, ready within 10 seconds.
func DefaultEmbeddedConfig(dir string) EmbeddedConfig {
	return EmbeddedConfig{Dir: dir, ReadyTimeout: 10 * time.Second}
}

// Validate reports every unusable field at once, each named in
// snake_case (dir, sync_interval, ready_timeout, port).
func (c EmbeddedConfig) Validate() error {
	var f stampede.Fields
	if c.Dir == "" {
		f.Add("dir", "must name the JetStream directory")
	}
	if c.SyncInterval < 0 {
		f.Add("sync_interval", "must not be negative, got %s", c.SyncInterval)
	}
	if c.ReadyTimeout <= 0 {
		f.Add("ready_timeout", "must be positive, got %s", c.ReadyTimeout)
	}
	if c.Port < 0 || c.Port > 65535 {
		f.Add("port", "must be 0 (a free port) to 65535, got %d", c.Port)
	}
	return f.Err()
}

// Embedded is an in-process nats-server with JetStream, the zero-set-up
// default when no NATS URL is given.
type Embedded struct {
	srv *server.Server
}

// StartEmbedded starts an embedded nats-server on a free loopback port,
// keeping JetStream data in dir, with DefaultEmbeddedConfig.
func StartEmbedded(dir string) (*Embedded, error) {
	return StartEmbeddedConfig(DefaultEmbeddedConfig(dir))
}

// StartEmbeddedConfig starts an embedded nats-server on a free loopback
// port as cfg says. Its logs go to cfg.Logger (nil: none), tagged
// component=nats-server; debug and trace lines are produced only when the
// logger is enabled at their level.
func StartEmbeddedConfig(cfg EmbeddedConfig) (*Embedded, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	port := cfg.Port
	if port == 0 {
		port = -1
	}
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: cfg.Dir,
		SyncAlways: cfg.SyncAlways, SyncInterval: cfg.SyncInterval, NoLog: log == nil, NoSigs: true})
	if err != nil {
		return nil, fmt.Errorf("jetstream: embedded nats-server: %w", err)
	}
	if log != nil {
		nl := logging.NATS(log)
		srv.SetLoggerV2(nl, nl.Enabled(slog.LevelDebug), nl.Enabled(logging.LevelTrace), false)
	}
	go srv.Start()
	if !srv.ReadyForConnections(cfg.ReadyTimeout) {
		srv.Shutdown()
		return nil, errors.New("jetstream: embedded nats-server did not become ready in " + cfg.ReadyTimeout.String())
	}
	return &Embedded{srv: srv}, nil
}

// URL is the embedded server's client URL.
func (e *Embedded) URL() string { return e.srv.ClientURL() }

// Close stops the server, flushing its store.
func (e *Embedded) Close() {
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
}
