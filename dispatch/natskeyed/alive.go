package natskeyed

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// liveness is the check Config.OwnerTimeout turns on. Every process that
// serves the stream publishes, every OwnerTimeout/3 on a core NATS subject
// of the stream and durable, its process id and the pin ids it holds. The
// lowest process id heard of within OwnerTimeout (the leader, so that two
// processes do not unpin one partition twice) lists the consumers and
// unpins a partition that has work pending (undelivered or unacknowledged
// messages) and whose pinned client nobody has announced for OwnerTimeout
// since the leader first saw that pin. The server then pins the partition
// to one of the live processes waiting on it.
//
// A pin is known to its holder only once a message carrying it arrived, so
// a partition with nothing pending is never judged. A process that was
// itself stopped (its last check is more than twice the interval ago)
// forgets what it observed and judges nothing in that round: its view of
// the others is stale.
type liveness struct {
	c        *Consumer
	id       string
	subject  string
	interval time.Duration
	timeout  time.Duration
	sub      *nats.Subscription

	mu    sync.Mutex
	pins  map[string]time.Time // pin id → last announced
	procs map[string]time.Time // process id → last announced
	first map[string]observed  // consumer name → unknown pin and when first seen

	unpins atomic.Uint64
}

// observed is a pin seen pinned with work pending but not announced.
type observed struct {
	pin string
	at  time.Time
}

// aliveSubject is the core NATS subject of the liveness announcements.
func aliveSubject(cfg Config) string {
	return "_stampede.alive." + cfg.Stream + "." + cfg.Durable
}

// startLiveness subscribes to the announcements and starts the loop.
func (c *Consumer) startLiveness() error {
	l := &liveness{c: c, id: strings.TrimPrefix(nats.NewInbox(), nats.InboxPrefix), subject: aliveSubject(c.cfg), timeout: c.cfg.OwnerTimeout,
		interval: max(c.cfg.OwnerTimeout/3, 10*time.Millisecond),
		pins:     map[string]time.Time{}, procs: map[string]time.Time{}, first: map[string]observed{}}
	sub, err := c.nc.Subscribe(l.subject, l.hear)
	if err != nil {
		return err
	}
	l.sub = sub
	c.alive = l
	c.bg.Go(l.loop)
	return nil
}

// hear records one announcement: "<process id> <pin id>...".
func (l *liveness) hear(m *nats.Msg) {
	f := strings.Fields(string(m.Data))
	if len(f) == 0 {
		return
	}
	now := time.Now()
	l.mu.Lock()
	l.procs[f[0]] = now
	for _, pin := range f[1:] {
		l.pins[pin] = now
	}
	l.mu.Unlock()
}

// announce publishes this process's id and pins.
func (l *liveness) announce() {
	var b strings.Builder
	b.WriteString(l.id)
	for _, p := range l.c.parts {
		p.mu.Lock()
		if p.sess != nil && p.sess.pin != "" {
			b.WriteString(" " + p.sess.pin)
		}
		if p.lastPin != "" && (p.sess == nil || p.sess.pin != p.lastPin) {
			b.WriteString(" " + p.lastPin)
		}
		p.mu.Unlock()
	}
	_ = l.c.nc.Publish(l.subject, []byte(b.String()))
}

// leader reports whether this process has the lowest id among those heard
// of within the timeout, and forgets the long silent ones.
func (l *liveness) leader(now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	lead := true
	for id, at := range l.procs {
		switch {
		case now.Sub(at) > 10*l.timeout:
			delete(l.procs, id)
		case now.Sub(at) <= l.timeout && id < l.id:
			lead = false
		}
	}
	for pin, at := range l.pins {
		if now.Sub(at) > 10*l.timeout {
			delete(l.pins, pin)
		}
	}
	return lead
}

func (l *liveness) loop() {
	defer func() { _ = l.sub.Unsubscribe() }()
	t := time.NewTicker(l.interval)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-l.c.stop:
			return
		case <-t.C:
		}
		l.announce()
		now := time.Now()
		gap := now.Sub(last)
		last = now
		if gap > 2*l.interval+l.interval/2 {
			// This process was stopped or starved: what it saw is stale.
			l.mu.Lock()
			clear(l.first)
			l.mu.Unlock()
			continue
		}
		if !l.c.connected.Load() || !l.leader(now) {
			continue
		}
		l.check(now)
	}
}

// check lists the stream's consumers and unpins the served partitions whose
// pinned client is silent.
func (l *liveness) check(now time.Time) {
	if len(l.c.parts) == 0 {
		return
	}
	stream := l.c.parts[0].stream
	names := make(map[string]bool, len(l.c.parts))
	for _, p := range l.c.parts {
		names[p.name] = true
	}
	ctx, cancel := context.WithTimeout(l.c.ctx, l.timeout)
	defer cancel()
	var silent []string
	lister := stream.ListConsumers(ctx)
	l.mu.Lock()
	for info := range lister.Info() {
		if !names[info.Name] {
			continue
		}
		pin := pinnedID(info, l.c.cfg.Group)
		if pin == "" || info.NumPending == 0 && info.NumAckPending == 0 {
			delete(l.first, info.Name)
			continue
		}
		if at, ok := l.pins[pin]; ok && now.Sub(at) <= l.timeout {
			delete(l.first, info.Name)
			continue
		}
		o, ok := l.first[info.Name]
		if !ok || o.pin != pin {
			l.first[info.Name] = observed{pin: pin, at: now}
			continue
		}
		if now.Sub(o.at) >= l.timeout {
			silent = append(silent, info.Name)
			delete(l.first, info.Name)
		}
	}
	l.mu.Unlock()
	slices.Sort(silent)
	for _, name := range silent {
		if err := stream.UnpinConsumer(ctx, name, l.c.cfg.Group); err != nil {
			l.c.cfg.Logger.Debug("dispatch/natskeyed: unpin a silent owner", "consumer", name, "err", err)
			continue
		}
		l.unpins.Add(1)
		l.c.cfg.Logger.Warn("dispatch/natskeyed: unpinned a partition whose owner is silent", "consumer", name, "timeout", l.timeout)
	}
}
