package redisstore

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stampede-lab/stampede/waitroom"
)

// Bounding the per-user scripts in flight.
//
// The auto-pipeliner queues the per-user scripts (join, ticket, leave)
// without a bound, and a script whose caller gave up at its deadline
// still runs on the server when its batch is sent. A server slower than
// the scripts arrive (the embedded server at a sale's opening: about a
// millisecond a script) then works only on scripts nobody waits for any
// more: every caller times out while the server is busy. So a Store
// keeps at most a limit of these scripts queued or running, counted
// until the server answers, and refuses the rest at once (unavailable:
// 503 with Retry-After), which costs the server nothing. Joins may use
// only joinShare of the limit, so that a crowd arriving keeps none of
// the polls of the buyers already waiting, or being admitted, from the
// server.
//
// The limit adapts, additive increase and multiplicative decrease: it
// falls by a tenth when a script took longer than a quarter of
// OpTimeout to answer and by half when one did not answer within it (at
// most once per decreaseEvery each), and grows by 1/limit for each
// script that answered in time while the limit was at least half used.

// inflightStart, inflightMin and inflightMax bound the limit: its start,
// its floor and its ceiling.
const (
	inflightStart = 256
	inflightMin   = 8
	inflightMax   = 4096
)

// joinShare is the part of the limit joins may use.
const joinShare = 0.75

// decreaseEvery is the shortest time between two decreases: the scripts
// of one late batch all answer late together and are one signal.
const decreaseEvery = 100 * time.Millisecond

// errBusy is the error of a script refused because the limit is reached.
var errBusy = waitroom.Unavailable(errors.New("too many calls in flight to a slow server; try again shortly"))

// inflight is a Store's bound on its per-user scripts in flight.
type inflight struct {
	// slow is the latency above which the limit falls.
	slow time.Duration

	mu    sync.Mutex
	n     int
	limit float64
	// cut is when the limit last fell.
	cut time.Time

	// refused counts the scripts refused.
	refused atomic.Int64
}

func newInflight(opTimeout time.Duration) *inflight {
	return &inflight{slow: opTimeout / 4, limit: inflightStart}
}

// acquire takes a place for one script, a join when join is set; false
// when the limit (for a join, its joinShare) is reached.
func (l *inflight) acquire(join bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	limit := int(l.limit)
	if join {
		limit = max(1, int(l.limit*joinShare))
	}
	if l.n >= limit {
		l.refused.Add(1)
		return false
	}
	l.n++
	return true
}

// release gives a place back once the server answered the script, took
// after it was sent; ok is false when its caller's deadline passed
// first.
func (l *inflight) release(took time.Duration, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	used := l.n
	l.n--
	now := time.Now()
	switch {
	case !ok || took > l.slow:
		if now.Sub(l.cut) < decreaseEvery {
			return
		}
		f := 0.9
		if !ok {
			f = 0.5
		}
		l.limit, l.cut = max(inflightMin, l.limit*f), now
	case float64(used) >= l.limit/2:
		l.limit = min(inflightMax, l.limit+1/l.limit)
	}
}

// state returns the scripts in flight and the limit.
func (l *inflight) state() (n int, limit int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n, int(l.limit)
}

var _ waitroom.LoadReporter = (*Store)(nil)

// Load implements waitroom.LoadReporter: the auto-pipelined scripts in
// flight, their limit and the scripts refused; bounded only with
// auto-pipelining (otherwise the client's connection pool bounds them).
func (s *Store) Load() (inFlight, limit int, refused int64, bounded bool) {
	if s.inflight == nil {
		return 0, 0, 0, false
	}
	n, l := s.inflight.state()
	return n, l, s.inflight.refused.Load(), true
}
