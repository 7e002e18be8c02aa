package natskeyed

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/stampede-lab/stampede/dispatch"
)

// pinHeader carries the pin id on every message of a pinned consumer.
const pinHeader = "Nats-Pin-Id"

// Event is one message as a handler sees it.
type Event struct {
	// ID identifies the event for deduplication: the Nats-Msg-Id header
	// when the publisher set one (the payment relay does), else
	// <stream>-<stream sequence>. It is the same on every delivery.
	ID string
	// Key is the message's key; events of one key run one at a time, in
	// stream order.
	Key string
	// Partition is the partition the message was stored in.
	Partition int
	// Subject is the stored subject, e.g. payments.3.<id>.
	Subject string
	// Sequence is the stream sequence: within a partition, larger means
	// later.
	Sequence uint64
	// Delivery counts deliveries of this message, from 1. Above 1 the
	// message may have run before (a handler failure, or a process that
	// died before its acknowledgement reached the server).
	Delivery uint64
	// Published is when the stream stored the message.
	Published time.Time
	// Epoch is the fencing token of this process's ownership of the
	// partition: the consumer sequence of the first delivery of the
	// session, or on a replicated stream a counter kept in a KV bucket
	// (see the package documentation). A later owner of the
	// partition always has a larger epoch, so an effect store that keeps
	// the largest epoch it has seen per partition, and refuses a write
	// with a smaller one (ErrFenced), refuses the late effects of a
	// process that lost the partition while it was stopped or cut off.
	Epoch uint64
	// Header holds the message headers.
	Header nats.Header
	// Data is the payload.
	Data []byte
}

// Handler processes one event. A nil error acknowledges the message; an
// error negatively acknowledges it with a delay (Config.NakDelay, doubling
// per delivery) and holds the rest of its key until it comes back. An
// error wrapping ErrFenced (the effect store refused Event.Epoch as
// stale) means another process owns the partition now: the message is
// handed back at once and this process ends its session of the partition
// (its queued messages go back too). The context ends when Close gives up
// waiting (Config.DrainTimeout).
type Handler func(ctx context.Context, e Event) error

// ErrFenced is what an effect store returns, and a handler passes on,
// when it refuses a write because a later owner of the partition has
// written (a smaller Event.Epoch than the largest it has seen for the
// partition) or because the key's applied sequence would go backwards.
var ErrFenced = errors.New("dispatch/natskeyed: fenced: a later owner of the partition has written")

// ErrPartitionBusy is what New returns, wrapped, when unpinned and another
// client keeps pull requests waiting on a partition this process was to
// serve: two processes on one partition would break per-key order. The
// check sees waiting requests only, so a live puller caught between two
// of its requests can go unseen: it catches a mistake, it is no lock.
var ErrPartitionBusy = errors.New("another client keeps pulling the partition")

// Consumer feeds the messages of a partitioned JetStream stream to a keyed
// dispatcher. See the package documentation for the protocol and what it
// guarantees.
type Consumer struct {
	cfg     Config
	js      jetstream.JetStream
	nc      *nats.Conn
	version string // the server's version when New connected
	handler Handler
	d       *dispatch.Dispatcher[*keyQueue]
	parts   []*partition

	ctx       context.Context // handlers' context, cancelled after DrainTimeout in Close
	cancel    context.CancelFunc
	stop      chan struct{} // closed by Close: stops the background loops
	bg        sync.WaitGroup
	closeOnce sync.Once
	inFlight  atomic.Int64
	connected atomic.Bool        // the connection was up at the last check
	alive     *liveness          // nil unless Pinned with OwnerTimeout
	closed    atomic.Bool        // Close (or a failed New) has begun: start no pulls
	parking   *Parking           // nil unless MaxAttempts > 0
	epochs    jetstream.KeyValue // the epoch bucket; nil unless the stream is replicated
	parked    parkedKeys
	redriven  atomic.Uint64

	leases      jetstream.KeyValue // the lease bucket; nil unless Config.Lease is in force
	holder      string             // this consumer's name in the lease bucket
	takeovers   atomic.Uint64
	handbacks   atomic.Uint64
	leaseLosses atomic.Uint64
}

// New creates or updates the durable consumer of every served partition
// and starts consuming. The stream must exist (see StreamConfig). Close
// must be called to stop.
func New(ctx context.Context, js jetstream.JetStream, cfg Config, h Handler) (*Consumer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if h == nil {
		return nil, errors.New("dispatch/natskeyed: handler: must not be nil")
	}
	nc := js.Conn()
	if cfg.Pinned && !PinningSupported(nc.ConnectedServerVersion()) {
		return nil, fmt.Errorf("dispatch/natskeyed: Pinned: nats-server %s has no pinned-client priority groups (2.11+ needed); serve partitions statically instead", nc.ConnectedServerVersion())
	}
	stream, err := js.Stream(ctx, cfg.Stream)
	if err != nil {
		return nil, fmt.Errorf("dispatch/natskeyed: stream %s: %w", cfg.Stream, err)
	}
	c := &Consumer{cfg: cfg, js: js, nc: nc, version: nc.ConnectedServerVersion(), handler: h, stop: make(chan struct{}),
		parked: parkedKeys{keys: map[string]*parkState{}}}
	if cfg.MaxAttempts > 0 {
		if c.parking, err = OpenParking(ctx, js, cfg); err != nil {
			return nil, err
		}
	}
	if r := stream.CachedInfo().Config.Replicas; r > 1 || cfg.leasing() {
		// A replicated stream's consumers can change leader, and a new
		// leader's consumer sequence can be behind the old one's: the
		// epochs come from a bucket instead (see the package
		// documentation). With leases too: each holder of a lease takes
		// its epoch there, after it took the lease.
		if c.epochs, err = openEpochs(ctx, js, cfg, r); err != nil {
			return nil, err
		}
		if cfg.leasing() {
			if c.leases, err = openLeases(ctx, js, cfg, r); err != nil {
				return nil, err
			}
			c.holder = holderID()
		}
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.connected.Store(nc.IsConnected())
	c.bg.Go(c.watch)
	served := cfg.served()
	// Each keyQueue has at most one token outstanding, so a key's queue in
	// the dispatcher holds at most one token per partition and session: it
	// never fills, and Submit never blocks.
	dcfg := dispatch.DefaultConfig()
	dcfg.Strategy, dcfg.Workers, dcfg.QueueSize = dispatch.Keyed, cfg.Workers, 1<<20
	c.d, err = dispatch.New(dcfg, c.run)
	if err != nil {
		close(c.stop)
		c.cancel()
		c.bg.Wait()
		return nil, err
	}
	for _, n := range served {
		ccfg := jetstream.ConsumerConfig{
			Durable:       cfg.ConsumerName(n),
			FilterSubject: cfg.FilterSubject(n),
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       cfg.AckWait,
			MaxAckPending: cfg.MaxPending,
			MaxDeliver:    -1,
			DeliverPolicy: jetstream.DeliverAllPolicy,
		}
		if cfg.Pinned {
			ccfg.PriorityPolicy = jetstream.PriorityPolicyPinned
			ccfg.PriorityGroups = []string{cfg.Group}
			ccfg.PinnedTTL = cfg.PinnedTTL
		}
		cons, err := stream.CreateOrUpdateConsumer(ctx, ccfg)
		if err != nil {
			c.abort()
			return nil, fmt.Errorf("dispatch/natskeyed: consumer %s: %w", ccfg.Durable, err)
		}
		if got := cons.CachedInfo().Config.MaxAckPending; got != cfg.MaxPending {
			c.abort()
			return nil, fmt.Errorf("dispatch/natskeyed: MaxPending: consumer %s has MaxAckPending %d, want %d", ccfg.Durable, got, cfg.MaxPending)
		}
		c.parts = append(c.parts, newPartition(c, n, stream, cons))
	}
	if c.parking != nil {
		if err := c.watchParked(ctx); err != nil {
			c.abort()
			return nil, fmt.Errorf("dispatch/natskeyed: parked keys: %w", err)
		}
	}
	if cfg.Pinned && cfg.OwnerTimeout > 0 {
		if err := c.startLiveness(); err != nil {
			c.abort()
			return nil, fmt.Errorf("dispatch/natskeyed: OwnerTimeout: subscribe to %s: %w", aliveSubject(cfg), err)
		}
	}
	for _, p := range c.parts {
		if c.leases != nil {
			p.lease = &leaseState{}
			c.bg.Go(p.leaseLoop)
			continue
		}
		if err := p.start(ctx); err != nil {
			c.abort()
			return nil, fmt.Errorf("dispatch/natskeyed: consume %s: %w", p.name, err)
		}
	}
	c.bg.Go(c.heartbeat)
	return c, nil
}

// abort undoes a New that failed half-way.
func (c *Consumer) abort() {
	c.closed.Store(true)
	for _, p := range c.parts {
		if cc := p.pulling(); cc != nil {
			cc.Stop()
		}
	}
	close(c.stop)
	c.d.Close()
	c.cancel()
	c.bg.Wait()
}

// Config returns the configuration the consumer was started with.
func (c *Consumer) Config() Config { return c.cfg }

// submit hands kq's next message to the dispatcher.
func (c *Consumer) submit(kq *keyQueue) {
	if err := c.d.Submit(context.Background(), kq.key, kq); err != nil {
		// Only after Close, which has ended every session: nothing to run.
		kq.p.mu.Lock()
		kq.scheduled = false
		kq.p.mu.Unlock()
	}
}

// run is the dispatcher's handler: it runs the oldest message of kq, if it
// may run now. The dispatcher runs at most one token per key at a time.
func (c *Consumer) run(_ string, kq *keyQueue) {
	p := kq.p
	p.mu.Lock()
	kq.scheduled = false
	if kq.redrive && kq.sess == p.sess && kq.sess.open && !kq.running && c.connected.Load() && p.leaseValidLocked() {
		c.runRedrive(kq)
		return
	}
	e := kq.front()
	if kq.sess != p.sess || !kq.sess.open || kq.running || e == nil || e.state != queued || !c.connected.Load() || !p.leaseValidLocked() {
		// Stale token (session ended), barrier closed, disconnected (the
		// heartbeat loop reschedules once connected), or a lease that
		// was not renewed in time: do not start.
		p.mu.Unlock()
		return
	}
	if (e.delivered > 1 || e.seq <= kq.lastDone) && p.done.has(e.seq) {
		// Completed here before (its acknowledgement was lost):
		// acknowledge again, do not run again.
		kq.popFront()
		p.held--
		p.duplicates++
		_ = e.msg.Ack()
		next := p.scheduleLocked(kq)
		p.dropIfEmptyLocked(kq)
		p.mu.Unlock()
		if next {
			c.submit(kq)
		}
		return
	}
	e.state = running
	kq.running = true
	p.inFlight++
	msg := e.msg
	ev := Event{ID: eventID(c.cfg.Stream, msg, e.seq), Key: kq.key, Partition: p.index, Subject: msg.Subject(),
		Sequence: e.seq, Delivery: e.delivered, Published: e.published, Epoch: kq.sess.epoch, Header: msg.Headers(), Data: msg.Data()}
	p.mu.Unlock()

	var err error
	parkedNow := false
	if c.parking != nil && c.parked.get(kq.key) != nil {
		// The key is parked: the event joins its parked events, in order,
		// instead of running.
		if err = c.parkCopy(c.ctx, ev); err == nil {
			parkedNow = true
		} else {
			c.cfg.Logger.Warn("dispatch/natskeyed: could not park an event of a parked key; it comes back", "key", kq.key, "seq", e.seq, "err", err)
		}
	} else {
		c.inFlight.Add(1)
		err = c.handler(c.ctx, ev)
		c.inFlight.Add(-1)
		if err != nil && c.parking != nil && !errors.Is(err, ErrFenced) && !e.draining &&
			(errors.Is(err, ErrPermanent) || ev.Delivery >= uint64(c.cfg.MaxAttempts)) {
			if perr := c.park(c.ctx, ev, err); perr == nil {
				err, parkedNow = nil, true
			} else {
				c.cfg.Logger.Warn("dispatch/natskeyed: could not park a failing event; it comes back", "key", kq.key, "seq", e.seq, "err", perr)
			}
		}
	}

	// The outcome is booked and sent under the lock, so that a message the
	// server hands out once this acknowledgement frees a slot never finds
	// this one still counted (the bound is exact), and a redelivery after
	// the negative acknowledgement finds it away.
	p.mu.Lock()
	p.inFlight--
	kq.running = false
	if err != nil && errors.Is(err, ErrFenced) {
		// Another process owns the partition: hand this message back at
		// once and end the session, whose queued messages go back too.
		p.fenced++
		p.release(e)
		var naks []jetstream.Msg
		if kq.sess == p.sess {
			naks = p.endSessionLocked()
		}
		p.mu.Unlock()
		c.cfg.Logger.Warn("dispatch/natskeyed: fenced: a later owner of the partition has written; session ended",
			"consumer", p.name, "key", kq.key, "seq", e.seq, "epoch", ev.Epoch, "handed_back", len(naks)+1)
		_ = msg.Nak()
		for _, m := range naks {
			_ = m.Nak()
		}
		return
	}
	if err == nil {
		if parkedNow {
			p.parkedEvents++
		} else {
			p.acked++
		}
		p.done.add(e.seq)
		kq.lastDone = max(kq.lastDone, e.seq)
		p.release(e)
		_ = msg.Ack()
	} else {
		p.failed++
		if e.draining {
			// Its session ended while it ran: forget it, the server
			// redelivers it to whoever owns the partition now.
			p.release(e)
		} else {
			e.state = away // its key waits until the server delivers it again
		}
		_ = msg.NakWithDelay(c.cfg.nakDelay(ev.Delivery))
	}
	next := p.scheduleLocked(kq)
	p.dropIfEmptyLocked(kq)
	p.mu.Unlock()
	if next {
		c.submit(kq)
	}
}

// eventID is the Nats-Msg-Id header, or <stream>-<sequence>.
func eventID(stream string, msg jetstream.Msg, seq uint64) string {
	if h := msg.Headers(); h != nil {
		if id := h.Get(nats.MsgIdHdr); id != "" {
			return id
		}
	}
	return stream + "-" + strconv.FormatUint(seq, 10)
}

// keyOf returns a message's key.
func (c *Consumer) keyOf(msg jetstream.Msg) string {
	if c.cfg.KeyHeader != "" {
		if h := msg.Headers(); h != nil {
			if k := h.Get(c.cfg.KeyHeader); k != "" {
				return k
			}
		}
	}
	return subjectToken(msg.Subject(), c.cfg.KeyToken)
}

// subjectToken returns token i of subject (negative from the end), or the
// whole subject when it has no such token.
func subjectToken(subject string, i int) string {
	if i < 0 {
		end := len(subject)
		for k := len(subject) - 1; k >= -1; k-- {
			if k == -1 || subject[k] == '.' {
				i++
				if i == 0 {
					return subject[k+1 : end]
				}
				end = k
			}
		}
		return subject
	}
	start := 0
	for k := 0; k <= len(subject); k++ {
		if k == len(subject) || subject[k] == '.' {
			if i == 0 {
				return subject[start:k]
			}
			i--
			start = k + 1
		}
	}
	return subject
}

// watch follows the connection's status, so that run can check it
// without taking the connection's lock.
func (c *Consumer) watch() {
	ch := c.nc.StatusChanged(nats.CONNECTED, nats.RECONNECTING, nats.DISCONNECTED, nats.CLOSED)
	defer c.nc.RemoveStatusListener(ch)
	for {
		select {
		case <-c.stop:
			return
		case st := <-ch:
			c.connected.Store(st == nats.CONNECTED)
		}
	}
}

// heartbeat reports held messages in progress, reschedules keys that could
// not start while disconnected, and refreshes idle partitions' lag.
func (c *Consumer) heartbeat() {
	every := c.cfg.InProgressEvery / 2
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		connected := c.nc.IsConnected()
		c.connected.Store(connected)
		for _, p := range c.parts {
			p.tick(every, connected)
		}
	}
}

// Close stops pulling, hands back the messages that have not started
// (negative acknowledgement, so the server redelivers them at once),
// waits for running handlers (at most DrainTimeout, then cancels their
// context) and acknowledges them, and unpins the partitions this process
// held so that another process takes them over without waiting for
// PinnedTTL, or deletes the leases it held (Config.Lease) so that their
// own processes take them at once. It is safe to call more than once.
func (c *Consumer) Close() {
	c.closeOnce.Do(func() {
		drain, cancel := context.WithTimeout(context.Background(), c.cfg.DrainTimeout)
		defer cancel()
		c.closed.Store(true)
		for _, p := range c.parts {
			if cc := p.pulling(); cc != nil {
				cc.Drain()
			}
		}
		for _, p := range c.parts {
			if cc := p.pulling(); cc != nil {
				select {
				case <-cc.Closed():
				case <-drain.Done():
				}
			}
		}
		if !c.cfg.Pinned && !PinningSupported(c.version) {
			// Our pull requests outlive the subscription at the server for
			// up to PullExpiry. A message handed back while one of them is
			// first in the server's queue meets a request nobody listens
			// to, and a server before the fix of 2024 (nats-server pull
			// request 5305; every server before 2.11 is treated as
			// unfixed) then steps the consumer's stream position back by
			// one: the partition's latest message, which may have run and
			// been acknowledged here, goes out again as a first delivery.
			// So the queued messages go back once the requests are gone;
			// running and queued handlers go on meanwhile, and the next
			// owner could not start earlier anyway (it waits for the same
			// thing).
			wait, cancel := context.WithTimeout(drain, 2*c.cfg.PullExpiry+time.Second)
			var wg sync.WaitGroup
			for _, p := range c.parts {
				if c.leases != nil && p.pulling() == nil {
					continue // not held here: another process may pull it
				}
				wg.Go(func() {
					if err := p.awaitNoPullers(wait); err != nil && drain.Err() == nil {
						c.cfg.Logger.Warn("dispatch/natskeyed: close: could not see this process's pull requests leave the server; handing queued messages back anyway", "consumer", p.name, "err", err)
					}
				})
			}
			wg.Wait()
			cancel()
		}
		var pins []string
		for _, p := range c.parts {
			pins = append(pins, p.shut())
		}
		done := make(chan struct{})
		go func() {
			c.d.Close() // waits for running handlers; stale tokens return at once
			close(done)
		}()
		select {
		case <-done:
		case <-drain.Done():
			c.cancel() // handlers' context: give up waiting politely
			<-done
		}
		close(c.stop)
		c.bg.Wait()
		if c.leases != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			for _, p := range c.parts {
				p.releaseLease(ctx)
			}
			cancel()
		}
		c.cancel()
		_ = c.nc.FlushTimeout(5 * time.Second)
		if c.cfg.Pinned {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			for i, p := range c.parts {
				p.unpin(ctx, pins[i])
			}
		}
	})
}

// KeyDepth is one key's backlog.
type KeyDepth struct {
	// Key is the key.
	Key string
	// Partition is the key's partition.
	Partition int
	// Depth counts its held messages, the running one included.
	Depth int
}

// PartitionStats is one partition's part of Stats.
type PartitionStats struct {
	// Partition is the partition number.
	Partition int
	// Owned reports whether this process holds the partition now: it has
	// a session whose barrier has passed.
	Owned bool
	// Leased reports whether this process holds the partition's lease
	// (Config.Lease); a partition leased but not yet Owned waits for its
	// barrier.
	Leased bool
	// Lag counts the partition's messages not yet delivered to any client
	// (the consumer's NumPending, from the latest delivery or consumer
	// info).
	Lag uint64
	// Held counts messages delivered to this process and not yet
	// acknowledged; never more than Config.MaxPending.
	Held int
	// HeldPeak is the largest Held seen.
	HeldPeak int
	// InFlight counts running handlers.
	InFlight int
	// Keys counts keys with held messages.
	Keys int
	// MaxKeyDepth is the largest backlog of one key.
	MaxKeyDepth int
	// Sessions counts ownership sessions (pins) this process had.
	Sessions uint64
	// BarrierWaits counts barrier checks that found messages still held
	// elsewhere.
	BarrierWaits uint64
	// BarrierTime is the time sessions spent behind their barrier, from
	// their first message to their opening.
	BarrierTime time.Duration
	// Rebarriers counts deliveries whose consumer sequence did not follow
	// the session's previous one (a delivery lost on its way, or a new
	// consumer leader behind the old one), each of which closed the
	// session's barrier again until the held messages matched the
	// consumer's pending ones.
	Rebarriers uint64
}

// Stats is a snapshot of a Consumer's counters, summed over partitions
// where it makes sense.
type Stats struct {
	// Partitions holds one entry per served partition (with leases, one
	// per partition of the stream: see PartitionStats.Leased).
	Partitions []PartitionStats
	// Delivered counts deliveries received.
	Delivered uint64
	// Redelivered counts deliveries with NumDelivered above 1.
	Redelivered uint64
	// Duplicates counts deliveries of a message already held or recently
	// completed here, which were not run again.
	Duplicates uint64
	// Acked counts messages whose handler succeeded.
	Acked uint64
	// Failed counts handler errors (each negatively acknowledged).
	Failed uint64
	// Fenced counts handler runs refused by the effect store as stale
	// (ErrFenced): this process had lost the partition.
	Fenced uint64
	// Unpins counts partitions this process unpinned because their pinned
	// client was not heard of for OwnerTimeout.
	Unpins uint64
	// Takeovers counts partitions this process took over because their
	// holder had not renewed its lease for a whole Config.Lease.
	Takeovers uint64
	// Handbacks counts partitions this process handed back to the process
	// whose own share they are (Config.Serve), when it asked.
	Handbacks uint64
	// LeaseLosses counts leases this process lost: not renewed in time,
	// or taken by another process meanwhile (it was stopped or cut off).
	LeaseLosses uint64
	// Rebarriers sums PartitionStats.Rebarriers.
	Rebarriers uint64
	// Late counts messages that arrived while a later message of their key
	// was running or waiting for its redelivery: per-key order lost, which
	// the protocol rules out except in the failures the package
	// documentation lists. Alert on it. (A late message whose later
	// neighbours had all completed goes uncounted.)
	Late uint64
	// Parked counts events this process parked (Config.MaxAttempts): the
	// failing event of a key and the later events of a parked key.
	Parked uint64
	// Redriven counts parked events this process ran again and completed
	// in a redrive.
	Redriven uint64
	// ParkedKeys counts the keys parked now (all processes').
	ParkedKeys int
	// InFlight counts running handlers.
	InFlight int
	// Held counts messages held over all partitions.
	Held int
	// HotKeys lists up to five keys with the largest backlog, largest first.
	HotKeys []KeyDepth
}

// Stats returns a snapshot of the consumer's counters. It does not call
// the server.
func (c *Consumer) Stats() Stats {
	var s Stats
	var all []KeyDepth
	for _, p := range c.parts {
		ps, keys := p.stats()
		s.Partitions = append(s.Partitions, ps)
		s.Held += ps.Held
		all = append(all, keys...)
		p.mu.Lock()
		s.Delivered += p.delivered
		s.Redelivered += p.redelivered
		s.Duplicates += p.duplicates
		s.Acked += p.acked
		s.Failed += p.failed
		s.Late += p.late
		s.Rebarriers += p.rebarriers
		s.Fenced += p.fenced
		s.Parked += p.parkedEvents
		p.mu.Unlock()
	}
	s.InFlight = int(c.inFlight.Load())
	s.Redriven = c.redriven.Load()
	if c.parking != nil {
		c.parked.mu.Lock()
		for _, k := range c.parked.keys {
			if !k.unparked {
				s.ParkedKeys++
			}
		}
		c.parked.mu.Unlock()
	}
	if c.alive != nil {
		s.Unpins = c.alive.unpins.Load()
	}
	s.Takeovers, s.Handbacks, s.LeaseLosses = c.takeovers.Load(), c.handbacks.Load(), c.leaseLosses.Load()
	for i := 0; i < len(all) && i < 5; i++ {
		m := i
		for j := i + 1; j < len(all); j++ {
			if all[j].Depth > all[m].Depth {
				m = j
			}
		}
		all[i], all[m] = all[m], all[i]
		s.HotKeys = append(s.HotKeys, all[i])
	}
	return s
}
