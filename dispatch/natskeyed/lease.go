package natskeyed

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// LeaseBucketName is the JetStream KV bucket that holds the partition
// leases (Config.Lease): <Stream>_<Durable>_leases, key p<n> for the
// lease of partition n (its value names the holder) and w<n> for the
// process that asks for partition n back.
func (c Config) LeaseBucketName() string { return c.Stream + "_" + c.Durable + "_leases" }

// leasing reports whether partitions are held by leases: Lease is set
// and the consumers are not pinned (pinning does the same job on the
// server).
func (c Config) leasing() bool { return c.Lease > 0 && !c.Pinned }

// leaseState is a partition's lease, as its lease loop sees it. held,
// gen and validUntil are guarded by the partition's mutex (run reads
// them); the rest belongs to the loop.
type leaseState struct {
	held       bool
	gen        uint64    // counts acquisitions; a start of an older one gives up
	validUntil time.Time // start nothing at or after this instant
	rev        uint64    // revision of our lease entry

	seenRev  uint64    // the entry's revision at the last look (0: none)
	seenAt   time.Time // when seenRev was first seen here
	free     time.Time // since when the key has been seen free (zero: not free)
	wantRev  uint64    // the latest request to hand back that this process obeyed
	asked    bool      // this process wrote a request for the partition back
	released time.Time // when this process last handed the partition back
}

// openLeases opens (or creates) the lease bucket with the stream's
// replica count.
func openLeases(ctx context.Context, js jetstream.JetStream, cfg Config, replicas int) (jetstream.KeyValue, error) {
	kv, err := bindOrCreateKV(ctx, js, jetstream.KeyValueConfig{Bucket: cfg.LeaseBucketName(),
		Description: "partition leases of the keyed consumer " + cfg.Durable + " of " + cfg.Stream,
		Replicas:    max(1, replicas), Storage: jetstream.FileStorage, History: 1})
	if err != nil {
		return nil, fmt.Errorf("dispatch/natskeyed: lease bucket %s: %w", cfg.LeaseBucketName(), err)
	}
	return kv, nil
}

// holderID names this consumer in the lease bucket: host, process and a
// random part, so that two consumers never share a name.
func holderID() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// leaseValidLocked reports whether this process may start a message of
// the partition now: always without leases, else while it holds the
// partition's lease and the lease has not run out on its own clock.
func (p *partition) leaseValidLocked() bool {
	if p.lease == nil {
		return true
	}
	return p.lease.held && time.Now().Before(p.lease.validUntil)
}

// leaseLoop holds, renews, gives up and takes over the partition's lease
// until Close. It looks every Lease/3: a holder renews its lease by a
// compare-and-set on the entry's revision; a process that is not the
// holder takes the lease once it has seen the same revision for a whole
// Lease (the holder has not renewed: dead, stopped or cut off), or at
// once when the key is free and the partition is one of its own (Serve).
func (p *partition) leaseLoop() {
	cfg := p.c.cfg
	every := cfg.Lease / 3
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-p.c.stop:
			return
		case <-t.C:
		}
		next := every
		p.mu.Lock()
		held := p.lease.held
		p.mu.Unlock()
		if held {
			p.renew()
			p.mu.Lock()
			held, until := p.lease.held, p.lease.validUntil
			p.mu.Unlock()
			if held {
				next = min(every, max(time.Until(until), time.Millisecond))
			}
		} else if !p.c.closed.Load() {
			p.contend()
		}
		t.Reset(next)
	}
}

// renew extends the lease, gives it up when it was lost or ran out, and
// hands a partition not of this process's own back to a process that
// asked for it.
func (p *partition) renew() {
	cfg, kv, ls := p.c.cfg, p.c.leases, p.lease
	// A slow answer is waited for up to Lease/2: the lease's validity
	// counts from when the renewal was sent, so a late success is still
	// sound, and meanwhile run starts nothing once the old validity ran
	// out. Giving up sooner would turn every stall of the server longer
	// than the wait into a lost lease and a handover.
	ctx, cancel := context.WithTimeout(p.c.ctx, cfg.Lease/2)
	defer cancel()
	sent := time.Now()
	rev, err := kv.Update(ctx, p.leaseKey(), []byte(p.c.holder), ls.rev)
	switch {
	case err == nil:
		p.mu.Lock()
		ls.rev, ls.validUntil = rev, sent.Add(cfg.Lease*3/4)
		p.mu.Unlock()
	case errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists):
		// An earlier renewal whose answer was lost may have landed: the
		// entry still naming this process means nobody took it.
		if e, gerr := kv.Get(ctx, p.leaseKey()); gerr == nil && string(e.Value()) == p.c.holder {
			p.mu.Lock()
			ls.rev = e.Revision()
			p.mu.Unlock()
			return
		}
		p.lose("another process holds the lease now")
		return
	default:
		p.mu.Lock()
		out := !time.Now().Before(ls.validUntil)
		p.mu.Unlock()
		if out {
			p.lose("the lease could not be renewed in time: " + err.Error())
		}
		return
	}
	if cfg.preferredLease(p.index) || p.c.closed.Load() {
		return
	}
	// Not one of ours: hand it back when its own process asks.
	w, err := kv.Get(ctx, p.wantKey())
	if err != nil || w.Revision() == ls.wantRev || string(w.Value()) == p.c.holder {
		return
	}
	ls.wantRev = w.Revision()
	p.handBack(w.Value())
}

// contend looks at the lease of a partition this process does not hold
// and takes it when it may.
func (p *partition) contend() {
	cfg, kv, ls := p.c.cfg, p.c.leases, p.lease
	ctx, cancel := context.WithTimeout(p.c.ctx, cfg.Lease/4)
	defer cancel()
	own := cfg.preferredLease(p.index)
	e, err := kv.Get(ctx, p.leaseKey())
	now := time.Now()
	var rev uint64
	takeover := false
	sent := now
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted):
		if ls.free.IsZero() {
			ls.free, ls.seenRev = now, 0
		}
		// A free partition goes to its own process at once; another
		// process waits a whole Lease for it, so that a partition handed
		// back reaches the process that asked for it, and does not take
		// straight back what it has just handed back.
		if !own && (now.Sub(ls.free) < cfg.Lease || now.Sub(ls.released) < 2*cfg.Lease) {
			return
		}
		rev, err = kv.Create(ctx, p.leaseKey(), []byte(p.c.holder))
	case err != nil:
		return
	default:
		ls.free = time.Time{}
		if string(e.Value()) == p.c.holder {
			// Ours still (a renewal whose answer was lost landed after
			// this process gave the lease up): nobody took it meanwhile.
			sent = time.Now()
			rev, err = kv.Update(ctx, p.leaseKey(), []byte(p.c.holder), e.Revision())
			break
		}
		if e.Revision() != ls.seenRev {
			ls.seenRev, ls.seenAt = e.Revision(), now
		}
		if now.Sub(ls.seenAt) < cfg.Lease {
			if own && !ls.asked {
				// Ours, held by another live process: ask for it back.
				if _, werr := kv.Put(ctx, p.wantKey(), []byte(p.c.holder)); werr == nil {
					ls.asked = true
				}
			}
			return
		}
		// The holder has not renewed for a whole Lease: take over.
		sent = time.Now()
		rev, err = kv.Update(ctx, p.leaseKey(), []byte(p.c.holder), e.Revision())
		takeover = true
	}
	if err != nil {
		return // another process was quicker
	}
	if ls.asked {
		_ = kv.Delete(ctx, p.wantKey())
		ls.asked = false
	}
	p.mu.Lock()
	ls.held, ls.rev, ls.validUntil = true, rev, sent.Add(cfg.Lease*3/4)
	ls.gen++
	gen := ls.gen
	p.mu.Unlock()
	if takeover {
		p.c.takeovers.Add(1)
		p.c.cfg.Logger.Info("dispatch/natskeyed: took over a partition whose lease ran out", "consumer", p.name, "previous", string(e.Value()))
	}
	p.c.bg.Go(func() { p.begin(gen) })
}

// begin starts a session of the partition for lease acquisition gen,
// once no other client has a pull request waiting on the partition (the
// previous holder's outlive it by up to PullExpiry).
func (p *partition) begin(gen uint64) {
	current := func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.lease.held && p.lease.gen == gen && !p.c.closed.Load()
	}
	ctx, cancel := context.WithCancel(p.c.ctx)
	defer cancel()
	go func() {
		select {
		case <-p.c.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	for current() {
		err := p.awaitNoPullers(ctx)
		if err == nil {
			break
		}
		if !errors.Is(err, ErrPartitionBusy) {
			select {
			case <-time.After(100 * time.Millisecond):
			case <-p.c.stop:
				return
			}
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.lease.held || p.lease.gen != gen || p.c.closed.Load() {
		return
	}
	cfg := p.c.cfg
	p.startSessionLocked("")
	cc, err := p.cons.Consume(p.onMsg, jetstream.PullMaxMessages(cfg.PullBatch),
		jetstream.PullExpiry(cfg.PullExpiry), jetstream.ConsumeErrHandler(p.onErr))
	if err != nil {
		p.c.cfg.Logger.Warn("dispatch/natskeyed: consume a leased partition", "consumer", p.name, "err", err)
		naks := p.endSessionLocked()
		p.lease.validUntil = time.Time{} // the next renewal gives the lease up
		go nakAll(naks)
		return
	}
	p.cc = cc
}

// lose ends the partition's session at once: the lease is gone, another
// process may own the partition already. Running handlers finish (their
// effects carry the old epoch, which the fence refuses once the new
// owner has written); queued messages go back once this process's pull
// requests have left the server (the next holder waits for the same
// before it pulls; on a server before 2.11 a message handed back while a
// request nobody listens to waits there can be delivered again: see
// Close).
func (p *partition) lose(why string) {
	p.mu.Lock()
	p.lease.held = false
	p.lease.gen++
	cc := p.cc
	p.cc = nil
	naks := p.endSessionLocked()
	p.mu.Unlock()
	if cc != nil {
		cc.Stop()
	}
	if len(naks) > 0 {
		p.c.bg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*p.c.cfg.PullExpiry+time.Second)
			defer cancel()
			_ = p.awaitNoPullers(ctx)
			nakAll(naks)
		})
	}
	p.c.leaseLosses.Add(1)
	p.c.cfg.Logger.Warn("dispatch/natskeyed: lost a partition's lease; stopped pulling it", "consumer", p.name, "why", why)
}

// handBack gives a partition to the process whose own it is, the way
// Close gives one up: stop pulling, wait for the pull requests to leave
// the server, hand the queued messages back, then delete the lease so
// that the asking process takes it at once. Running handlers finish
// meanwhile; the new owner's barrier waits for them.
func (p *partition) handBack(to []byte) {
	p.mu.Lock()
	p.lease.validUntil = time.Time{} // start nothing more
	p.lease.gen++
	cc := p.cc
	p.cc = nil
	p.mu.Unlock()
	if cc != nil {
		cc.Drain()
		select {
		case <-cc.Closed():
		case <-time.After(p.c.cfg.PullExpiry + time.Second):
		}
	}
	ctx, cancel := context.WithTimeout(p.c.ctx, 2*p.c.cfg.PullExpiry+2*time.Second)
	defer cancel()
	_ = p.awaitNoPullers(ctx)
	p.mu.Lock()
	p.lease.held = false
	p.lease.released = time.Now()
	rev := p.lease.rev
	naks := p.endSessionLocked()
	p.mu.Unlock()
	nakAll(naks)
	_ = p.c.leases.Delete(ctx, p.leaseKey(), jetstream.LastRevision(rev))
	p.c.handbacks.Add(1)
	p.c.cfg.Logger.Info("dispatch/natskeyed: handed a partition back to its own process", "consumer", p.name, "to", string(to))
}

// releaseLease deletes the lease at Close, if this process still holds
// it, so that the partition's own process (or, after a Lease, any other)
// takes it without waiting for it to run out.
func (p *partition) releaseLease(ctx context.Context) {
	p.mu.Lock()
	held, rev := p.lease.held, p.lease.rev
	p.lease.held = false
	p.mu.Unlock()
	if held {
		_ = p.c.leases.Delete(ctx, p.leaseKey(), jetstream.LastRevision(rev))
	}
}

func (p *partition) leaseKey() string { return "p" + strconv.Itoa(p.index) }
func (p *partition) wantKey() string  { return "w" + strconv.Itoa(p.index) }

// nakAll hands messages back to the server for redelivery at once.
func nakAll(msgs []jetstream.Msg) {
	for _, m := range msgs {
		_ = m.Nak()
	}
}
