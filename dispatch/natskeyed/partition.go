package natskeyed

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// dropDelivery, set by tests before New, loses the deliveries it returns
// true for, as a connection that breaks while a message is on its way does.
var dropDelivery func(jetstream.Msg, *jetstream.MsgMetadata) bool

// session is one period during which this process owns a partition: one
// pin id of the pinned consumer, or the whole life of an unpinned one. A
// session's messages do not run until its barrier has passed (open).
type session struct {
	pin       string
	epoch     uint64 // Event.Epoch: see the package documentation
	open      bool   // false while a barrier runs (one runs whenever the session is neither open nor ended)
	lastDseq  uint64 // consumer sequence of the session's latest delivery
	ord       uint64 // deliveries received in the session
	jumps     uint64 // deliveries whose consumer sequence did not follow the previous one
	ended     bool
	refreshed bool // the parked keys were read before the barrier opened
	keys      map[string]*keyQueue
}

// partition consumes one partition through its durable consumer.
type partition struct {
	c      *Consumer
	index  int
	name   string
	stream jetstream.Stream
	cons   jetstream.Consumer
	cc     jetstream.ConsumeContext

	mu       sync.Mutex
	sess     *session          // current session; nil when not owned
	held     int               // the current session's messages
	draining map[uint64]*entry // running messages of ended sessions
	done     doneRing
	closing  bool
	lastPin  string      // the latest pin id this process held
	lease    *leaseState // nil unless Config.Lease is in force

	lag          uint64
	lagAt        time.Time
	inFlight     int
	peak         int
	sessions     uint64
	barrierWaits uint64
	delivered    uint64
	redelivered  uint64
	duplicates   uint64
	acked        uint64
	failed       uint64
	parkedEvents uint64
	late         uint64
	fenced       uint64
	barrierTime  time.Duration
	rebarriers   uint64
	sweepKeys    int // see dropIfEmptyLocked
}

func newPartition(c *Consumer, n int, stream jetstream.Stream, cons jetstream.Consumer) *partition {
	return &partition{c: c, index: n, name: c.cfg.ConsumerName(n), stream: stream, cons: cons,
		draining: make(map[uint64]*entry), done: newDoneRing(4 * c.cfg.MaxPending),
		sweepKeys: max(4096, 2*c.cfg.MaxPending)}
}

// start begins pulling. Unpinned, it first waits until no other client
// has a pull request waiting on the partition: a previous owner's requests
// outlive it by up to PullExpiry, and the server would deliver to them
// (messages that come back only after AckWait) while this process's
// barrier, which counts pending messages, cannot see a request.
func (p *partition) start(ctx context.Context) error {
	cfg := p.c.cfg
	opts := []jetstream.PullConsumeOpt{
		jetstream.PullMaxMessages(cfg.PullBatch),
		jetstream.PullExpiry(cfg.PullExpiry),
		jetstream.ConsumeErrHandler(p.onErr),
	}
	if cfg.Pinned {
		opts = append(opts, jetstream.PullPriorityGroup(cfg.Group))
	} else {
		if err := p.awaitNoPullers(ctx); err != nil {
			return err
		}
		// The one session starts now: its barrier usually opens before the
		// first message arrives, instead of after a full window has piled
		// up behind it.
		p.mu.Lock()
		p.startSessionLocked("")
		p.mu.Unlock()
	}
	if cfg.preferred(p.index) {
		return p.consume(opts)
	}
	// Not preferred: let the processes that prefer it pin it first.
	p.c.bg.Go(func() {
		select {
		case <-time.After(cfg.PullExpiry):
		case <-p.c.stop:
			return
		}
		if err := p.consume(opts); err != nil {
			p.c.cfg.Logger.Warn("dispatch/natskeyed: consume a partition not preferred", "consumer", p.name, "err", err)
		}
	})
	return nil
}

// consume starts pulling, unless Close has begun.
func (p *partition) consume(opts []jetstream.PullConsumeOpt) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.c.closed.Load() {
		return nil
	}
	cc, err := p.cons.Consume(p.onMsg, opts...)
	if err != nil {
		return err
	}
	p.cc = cc
	return nil
}

// pulling returns the partition's consume context, nil if it never
// started.
func (p *partition) pulling() jetstream.ConsumeContext {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cc
}

// awaitNoPullers waits until the consumer has no waiting pull request, for
// at most twice PullExpiry: longer means another live client pulls this
// partition, which Serve must rule out when unpinned.
func (p *partition) awaitNoPullers(ctx context.Context) error {
	limit := time.Now().Add(2*p.c.cfg.PullExpiry + time.Second)
	wait := 5 * time.Millisecond
	for {
		info, err := p.cons.Info(ctx)
		if err != nil {
			return err
		}
		if info.NumWaiting == 0 {
			return nil
		}
		if time.Now().After(limit) {
			return fmt.Errorf("serve: partition %d: %w (%d pull requests waiting on %s); without Pinned, one process per partition", p.index, ErrPartitionBusy, info.NumWaiting, p.name)
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return ctx.Err()
		}
		wait = min(2*wait, 200*time.Millisecond)
	}
}

// onErr hears about pull errors. A pin id mismatch means the server gave
// the partition to another client: the session ends.
func (p *partition) onErr(_ jetstream.ConsumeContext, err error) {
	if !errors.Is(err, jetstream.ErrPinIDMismatch) {
		if !errors.Is(err, jetstream.ErrNoHeartbeat) && !errors.Is(err, jetstream.ErrConnectionClosed) {
			p.c.cfg.Logger.Debug("dispatch/natskeyed: pull", "consumer", p.name, "err", err)
		}
		return
	}
	p.mu.Lock()
	naks := p.endSessionLocked()
	p.mu.Unlock()
	for _, m := range naks {
		_ = m.Nak()
	}
}

// onMsg receives each delivered message, in delivery order (one goroutine
// per partition).
func (p *partition) onMsg(msg jetstream.Msg) {
	md, err := msg.Metadata()
	if err != nil {
		p.c.cfg.Logger.Warn("dispatch/natskeyed: message without metadata", "consumer", p.name, "err", err)
		return
	}
	if dropDelivery != nil && dropDelivery(msg, md) {
		return
	}
	pin := ""
	if p.c.cfg.Pinned {
		pin = msg.Headers().Get(pinHeader)
	}
	key := p.c.keyOf(msg)
	seq := md.Sequence.Stream
	now := time.Now()

	p.mu.Lock()
	p.delivered++
	if md.NumDelivered > 1 {
		p.redelivered++
	}
	p.lag, p.lagAt = md.NumPending, now
	if p.closing || p.lease != nil && (!p.lease.held || p.sess == nil) {
		// Closing, or the lease is gone and this is a late delivery of
		// the pulls that have stopped: back to the server.
		p.mu.Unlock()
		_ = msg.Nak()
		return
	}
	redelivery := md.NumDelivered > 1
	var naks []jetstream.Msg
	if p.sess == nil || p.sess.pin != pin {
		naks = p.endSessionLocked()
		p.startSessionLocked(pin)
	}
	s := p.sess
	dseq := md.Sequence.Consumer
	s.ord++
	if s.lastDseq != 0 && dseq != s.lastDseq+1 {
		// The consumer sequence skipped a delivery (lost on its way here)
		// or went back (a new consumer leader that had not heard of the
		// latest deliveries): what the session holds may no longer be
		// every pending message that comes before what it receives. Start
		// no message until a barrier has seen the consumer's state agree
		// with what is held again.
		p.rebarriers++
		s.jumps++
		if s.open {
			s.open = false
			p.c.bg.Go(func() { p.barrier(s) })
		}
	}
	s.lastDseq = dseq
	if s.epoch == 0 && p.c.epochs == nil {
		s.epoch = dseq
	}
	kq := s.keys[key]
	var submit *keyQueue
	var e *entry
	if kq != nil {
		e = kq.find(seq)
	}
	switch {
	case e != nil:
		// Delivered again while held: after a failure (away), because its
		// AckWait passed before a progress report arrived, or replayed by
		// nats-server 2.9 as a second first delivery (see Close). Keep the
		// one entry, so the message never runs twice here.
		p.duplicates++
		if e.state != running {
			e.msg, e.delivered, e.touched = msg, md.NumDelivered, now
		}
		e.ord = s.ord
		if e.state == away {
			e.state = queued
			if p.scheduleLocked(kq) {
				submit = kq
			}
		}
	case len(p.draining) > 0 && p.draining[seq] != nil:
		// Still running from an ended session; its acknowledgement covers
		// this delivery, and a failure gets it redelivered.
		p.duplicates++
	case (redelivery || kq != nil && seq <= kq.lastDone) && p.done.has(seq):
		// Completed here already: acknowledge again, do not run again.
		p.duplicates++
		p.mu.Unlock()
		for _, m := range naks {
			_ = m.Nak()
		}
		_ = msg.Ack()
		return
	default:
		if kq == nil {
			kq = &keyQueue{p: p, sess: s, key: key}
			s.keys[key] = kq
		}
		if f := kq.front(); seq <= kq.lastDone || f != nil && f.state != queued && f.seq > seq {
			// An earlier message of the key arrives after a later one
			// started: order is already lost (see the package
			// documentation for when this can happen).
			p.late++
			p.c.cfg.Logger.Warn("dispatch/natskeyed: message arrived after a later one of its key had started",
				"consumer", p.name, "key", key, "seq", seq, "done", kq.lastDone)
		}
		kq.insert(&entry{msg: msg, seq: seq, ord: s.ord, delivered: md.NumDelivered,
			published: md.Timestamp, touched: now, kq: kq})
		p.held++
		if n := p.held + len(p.draining); n > p.peak {
			p.peak = n
		}
		if p.scheduleLocked(kq) {
			submit = kq
		}
	}
	p.mu.Unlock()
	for _, m := range naks {
		_ = m.Nak()
	}
	if submit != nil {
		p.c.submit(submit)
	}
}

// scheduleLocked reports whether kq should get a dispatcher token now, and
// if so marks it scheduled; the caller submits after unlocking.
func (p *partition) scheduleLocked(kq *keyQueue) bool {
	s := kq.sess
	if s != p.sess || !s.open || kq.running || kq.scheduled || p.closing {
		return false
	}
	if e := kq.front(); (e == nil || e.state != queued) && !kq.redrive {
		return false
	}
	kq.scheduled = true
	return true
}

// release forgets a finished message: the head of its key (it ran), or a
// running message of an ended session.
func (p *partition) release(e *entry) {
	if e.draining {
		delete(p.draining, e.seq)
	} else {
		p.held--
	}
	e.kq.remove(e)
}

// dropIfEmptyLocked keeps the keys of a session bounded. A key with nothing
// left stays in the map, so that its next message costs no allocation,
// until the map holds more than sweepKeys keys; then every idle key goes.
// At most MaxPending keys hold messages, so sweeps are rare.
func (p *partition) dropIfEmptyLocked(kq *keyQueue) {
	s := kq.sess
	if len(s.keys) <= p.sweepKeys || kq.len() > 0 {
		return
	}
	for k, q := range s.keys {
		if q.len() == 0 && !q.running && !q.scheduled {
			delete(s.keys, k)
		}
	}
}

// startSessionLocked begins a session and its barrier.
func (p *partition) startSessionLocked(pin string) {
	s := &session{pin: pin, keys: make(map[string]*keyQueue)}
	p.sess = s
	p.sessions++
	if pin != "" {
		p.lastPin = pin
	}
	p.c.bg.Go(func() { p.barrier(s) })
}

// endSessionLocked ends the current session: running messages finish (and
// are acknowledged), queued ones are returned for the caller to negatively
// acknowledge after unlocking, so that the server redelivers them at once
// to the partition's owner. Messages away after a failure are already
// back at the server.
func (p *partition) endSessionLocked() []jetstream.Msg {
	s := p.sess
	if s == nil {
		return nil
	}
	s.ended = true
	p.sess = nil
	var naks []jetstream.Msg
	for _, kq := range s.keys {
		for _, e := range kq.items[kq.head:] {
			switch e.state {
			case running:
				e.draining = true
				p.draining[e.seq] = e
			case queued:
				naks = append(naks, e.msg)
			}
		}
	}
	p.held = 0
	return naks
}

// barrier opens session s once every message the server counts as pending
// on this partition is held by s: then no earlier message of any key can
// still be running elsewhere, or be waiting for its AckWait to pass before
// it comes here. It compares the consumer's NumAckPending with the
// messages s holds whose stream sequence is not above the info's last
// delivered one; those are pending and unacknowledged, so equal counts
// mean equal sets. A message s received before the reading but above the
// consumer's delivered position is one the consumer does not know it
// delivered (a new leader that had not heard of it): the consumer will
// deliver it again, and its earlier messages may be pending elsewhere, so
// the barrier waits for that. With pinning, it also checks that s's pin
// is the current one. With an epoch bucket, it first takes s's epoch,
// then confirms the pin with a later reading, so that a later session's
// epoch is larger. A session runs its barrier at its start and again
// whenever its consumer sequences jump (onMsg).
func (p *partition) barrier(s *session) {
	wait := 2 * time.Millisecond
	began := time.Now()
	for {
		p.mu.Lock()
		before, jumps := s.ord, s.jumps
		p.mu.Unlock()
		ctx, cancel := context.WithTimeout(p.c.ctx, 5*time.Second)
		info, err := p.cons.Info(ctx)
		cancel()
		var submit []*keyQueue
		p.mu.Lock()
		if s.ended || p.closing {
			p.mu.Unlock()
			return
		}
		pin := s.pin
		if err == nil {
			p.lag, p.lagAt = info.NumPending, time.Now()
			if p.c.cfg.Pinned {
				pin = pinnedID(info, p.c.cfg.Group)
			}
			if pin != s.pin && pin != "" {
				// Another client owns the partition: this session is stale.
				naks := p.endSessionLocked()
				p.mu.Unlock()
				for _, m := range naks {
					_ = m.Nak()
				}
				return
			}
			if s.epoch == 0 && p.c.epochs != nil {
				// An epoch bucket: take the session's epoch, then read again.
				p.mu.Unlock()
				ctx, cancel := context.WithTimeout(p.c.ctx, 5*time.Second)
				epoch, eerr := p.nextEpoch(ctx, info.Delivered.Consumer)
				cancel()
				p.mu.Lock()
				if s.ended || p.closing {
					p.mu.Unlock()
					return
				}
				if eerr == nil {
					s.epoch = epoch
					p.mu.Unlock()
					continue
				}
				p.c.cfg.Logger.Warn("dispatch/natskeyed: take an epoch", "consumer", p.name, "err", eerr)
				err = eerr
			}
		}
		if err == nil {
			known, unknown := 0, 0
			for _, kq := range s.keys {
				for _, e := range kq.items[kq.head:] {
					switch {
					case e.seq <= info.Delivered.Stream:
						known++
					case e.ord <= before:
						unknown++
					}
				}
			}
			// A jump after the reading began makes it stale: read again.
			if pin == s.pin && info.NumAckPending <= known && unknown == 0 && s.jumps == jumps {
				if p.c.parking != nil && !s.refreshed {
					// Before the first event runs, read the parked keys
					// afresh: an earlier owner may have parked one just
					// before it let go, and the watcher may lag.
					p.mu.Unlock()
					ctx, cancel := context.WithTimeout(p.c.ctx, 5*time.Second)
					redrive, rerr := p.c.refreshParked(ctx)
					cancel()
					p.mu.Lock()
					if s.ended || p.closing {
						p.mu.Unlock()
						return
					}
					if rerr != nil {
						// Not open: read again on the next round.
						p.barrierWaits++
						p.mu.Unlock()
						select {
						case <-time.After(wait):
						case <-p.c.stop:
							return
						}
						wait = min(2*wait, 250*time.Millisecond)
						continue
					}
					s.refreshed = true
					for _, r := range redrive {
						if r.Partition != p.index {
							continue
						}
						kq := s.keys[r.Key]
						if kq == nil {
							kq = &keyQueue{p: p, sess: s, key: r.Key}
							s.keys[r.Key] = kq
						}
						kq.redrive = true
					}
				}
				if s.jumps != jumps {
					// A jump while the parked keys were read: read again.
					p.mu.Unlock()
					continue
				}
				s.open = true
				p.barrierTime += time.Since(began)
				for _, kq := range s.keys {
					if p.scheduleLocked(kq) {
						submit = append(submit, kq)
					}
				}
				p.mu.Unlock()
				for _, kq := range submit {
					p.c.submit(kq)
				}
				return
			}
		}
		p.barrierWaits++
		p.mu.Unlock()
		select {
		case <-time.After(wait):
		case <-p.c.stop:
			return
		}
		wait = min(2*wait, 250*time.Millisecond)
	}
}

// pinnedID is the pin id of group in info, or "".
func pinnedID(info *jetstream.ConsumerInfo, group string) string {
	for _, g := range info.PriorityGroups {
		if g.Group == group {
			return g.PinnedClientID
		}
	}
	return ""
}

// tick reports in progress every held message not reported for at least
// every, reschedules keys when connected, and refreshes the lag of a
// partition that received nothing for a while.
func (p *partition) tick(every time.Duration, connected bool) {
	now := time.Now()
	var progress []jetstream.Msg
	var submit []*keyQueue
	p.mu.Lock()
	touch := func(e *entry) {
		if e.state != away && now.Sub(e.touched) >= every {
			e.touched = now
			progress = append(progress, e.msg)
		}
	}
	for _, e := range p.draining {
		touch(e)
	}
	if p.sess != nil {
		for _, kq := range p.sess.keys {
			for _, e := range kq.items[kq.head:] {
				touch(e)
			}
		}
	}
	if connected && p.sess != nil {
		for _, kq := range p.sess.keys {
			if p.scheduleLocked(kq) {
				submit = append(submit, kq)
			}
		}
	}
	stale := now.Sub(p.lagAt) >= every
	p.mu.Unlock()
	for _, m := range progress {
		_ = m.InProgress()
	}
	for _, kq := range submit {
		p.c.submit(kq)
	}
	if stale && connected {
		ctx, cancel := context.WithTimeout(p.c.ctx, every)
		info, err := p.cons.Info(ctx)
		cancel()
		if err == nil {
			p.mu.Lock()
			p.lag, p.lagAt = info.NumPending, time.Now()
			p.mu.Unlock()
		}
	}
}

// shut ends the partition's session for Close and returns the pin id it
// last held.
func (p *partition) shut() string {
	p.mu.Lock()
	p.closing = true
	naks := p.endSessionLocked()
	pin := p.lastPin
	p.mu.Unlock()
	for _, m := range naks {
		_ = m.Nak()
	}
	return pin
}

// unpin releases the partition if it is still pinned to this process.
func (p *partition) unpin(ctx context.Context, pin string) {
	if pin == "" {
		return
	}
	info, err := p.cons.Info(ctx)
	if err != nil || pinnedID(info, p.c.cfg.Group) != pin {
		return
	}
	if err := p.stream.UnpinConsumer(ctx, p.name, p.c.cfg.Group); err != nil {
		p.c.cfg.Logger.Debug("dispatch/natskeyed: unpin", "consumer", p.name, "err", err)
	}
}

// stats returns the partition's figures and its keys' depths.
func (p *partition) stats() (PartitionStats, []KeyDepth) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ps := PartitionStats{Partition: p.index, Lag: p.lag, Held: p.held + len(p.draining), HeldPeak: p.peak,
		InFlight: p.inFlight, Sessions: p.sessions, BarrierWaits: p.barrierWaits, BarrierTime: p.barrierTime,
		Rebarriers: p.rebarriers}
	var keys []KeyDepth
	if p.lease != nil {
		ps.Leased = p.lease.held
	}
	if s := p.sess; s != nil {
		ps.Owned = s.open
		for _, kq := range s.keys {
			d := kq.len()
			if d == 0 {
				continue
			}
			ps.Keys++
			ps.MaxKeyDepth = max(ps.MaxKeyDepth, d)
			keys = append(keys, KeyDepth{Key: kq.key, Partition: p.index, Depth: d})
		}
	}
	return ps, keys
}
