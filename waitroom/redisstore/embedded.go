package redisstore

import (
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
)

// Embedded is an in-process Redis-protocol server (miniredis), the
// zero-set-up default when no Redis URL is given. It keeps everything in
// memory and is gone when the process ends.
//
// miniredis does not expire keys on its own (its tests move time by hand),
// so Embedded advances key TTLs with the wall clock every few
// milliseconds; without that, a SET NX PX election key would never expire.
type Embedded struct {
	m    *miniredis.Miniredis
	stop chan struct{}
	done chan struct{}
}

// ttlStep is how often Embedded moves key TTLs forward.
const ttlStep = 5 * time.Millisecond

// StartEmbedded starts an embedded server on a free loopback port.
func StartEmbedded() (*Embedded, error) {
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		return nil, fmt.Errorf("redisstore: start embedded Redis: %w", err)
	}
	e := &Embedded{m: m, stop: make(chan struct{}), done: make(chan struct{})}
	go e.clock()
	return e, nil
}

func (e *Embedded) clock() {
	defer close(e.done)
	t := time.NewTicker(ttlStep)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-e.stop:
			return
		case now := <-t.C:
			e.m.FastForward(now.Sub(last))
			last = now
		}
	}
}

// Addr is the server's host:port.
func (e *Embedded) Addr() string { return e.m.Addr() }

// URL is the server's redis:// URL.
func (e *Embedded) URL() string { return "redis://" + e.m.Addr() }

// Close stops the server and its clock.
func (e *Embedded) Close() {
	close(e.stop)
	<-e.done
	e.m.Close()
}

// Commands is how many commands the server has run since it started,
// those a script calls included (as INFO commandstats counts them on a
// real Redis).
func (e *Embedded) Commands() int { return e.m.CommandCount() }
