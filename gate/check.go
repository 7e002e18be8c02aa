package gate

import (
	"context"
	"errors"
	"time"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/protocol"
	"github.com/stampede-lab/stampede/waitroom"
)

// The online check of an admission, shared by every request of a visitor:
//
//   - at most one store call per admission is in flight (entry.call,
//     started and joined under the gate's lock); every request arriving
//     meanwhile waits for its answer, or, while an earlier answer is
//     still usable, is served that answer;
//   - a token signed within CheckCache is itself the first answer about
//     its admission (answeredBySigner): the first requests are served
//     while the first store call runs;
//   - an answer is fresh for CheckCache from the moment its call began;
//     from three quarters of that on (renewAhead), the next request
//     renews it in the background while the cached answer is served
//     (refresh ahead): not with a call of its own, but in a batch, one
//     store call (waitroom.Service.TouchAdmissions) for every admission
//     this gate has let through in the last keepFresh whose answer is
//     older than CheckCache/renewAhead, at most one batch in flight. A
//     batch slides the lease of each admission with a request since its
//     last check (one write per visitor per batch), and only checks the
//     others. So a gate's steady traffic costs the store about one batch
//     every three quarters of CheckCache, whatever the number of visitors
//     and their requests (chunks of 1,000 admissions a call);
//   - a cached "held" answer is never served past the lease's end less
//     SafetyMargin, nor once the admission was released through this
//     process; a renewal in flight, or one that failed, keeps serving it
//     until that bound (stale while revalidate);
//   - a failed call is not retried by every request: the admission is
//     left alone for CheckBackoff, doubling with each further failure,
//     and meanwhile a request without a usable answer gets 503 at once;
//   - "not held" (released, expired, superseded) is final for an
//     admission (its sequence number is never admitted again): it is
//     remembered and refused without asking;
//   - every store call waits for one of CheckConcurrency places, so a
//     flood of distinct visitors cannot take every connection of the
//     store's pool from the room's admission pass.

// checkTimeout bounds one check's store call, its wait for a place
// included (the store bounds each round trip itself).
const checkTimeout = 5 * time.Second

// renewAhead: an answer is renewed in the background once less than
// CheckCache/renewAhead of its freshness is left, so that with a store
// answering within that (250 ms of a 1 s cache) a steady visitor never
// waits for a call and makes about 1.3 a second.
const renewAhead = 4

// keepFresh is how long after an admission's last request through this
// gate the batches keep its answer fresh: a visitor whose requests are
// spread over several gates, or who pauses between pages, finds it fresh.
const keepFresh = 30 * time.Second

// maxBackoffDoublings caps a visitor's backoff at CheckBackoff << 4.
const maxBackoffDoublings = 4

// maxEntries bounds the remembered admissions (and verified tokens, and
// visitors' buckets) of one gate; past it the unusable ones are dropped,
// then arbitrary ones.
const maxEntries = 100_000

// sweepEvery is how often the remembered admissions, verified tokens and
// visitors' buckets of no use any more are dropped, whatever their
// number: without it, a gate under a steady flow of buyers kept every
// finished admission until maxEntries, growing for hours.
const sweepEvery = time.Minute

// entry is what the gate knows of one admission.
type entry struct {
	// held: the last answer said the admission holds its slot, usable
	// until fresh and, while renewing or after a failed renewal, until
	// bound. checked is when the call that gave it began.
	held    bool
	checked time.Time
	fresh   time.Time
	bound   time.Time
	// refused: the admission no longer holds its slot (the store said so,
	// or it was released here): final.
	refused bool
	// token is the freshest admission token known for it, and tokenExp
	// that token's expiry.
	token    string
	tokenExp time.Time
	// call is closed when the store call in flight ends (nil: none).
	// failures counts the calls failed in a row; none is made before
	// retryAt; lastErr is the last failure.
	call     chan struct{}
	failures int
	retryAt  time.Time
	lastErr  error
	// keep is when the entry is of no use any more (the admission's
	// session ends).
	keep time.Time
	// claims are the admission's; used is when a request last asked;
	// batched: the admission is in the batch in flight.
	claims  protocol.AdmissionClaims
	used    time.Time
	batched bool
}

// check tells whether admission c holds its slot (see above) and returns
// the token to use: token, or a fresher one re-signed when the lease
// moved past token's expiry.
func (g *Gate) check(ctx context.Context, c protocol.AdmissionClaims, token string) (string, bool, error) {
	k := admissionKey{c.User, c.Seq}
	for waited := false; ; waited = true {
		now := g.cfg.Now()
		g.mu.Lock()
		e := g.entry(k, c, now)
		if e.refused {
			g.mu.Unlock()
			return "", false, nil
		}
		if g.answeredBySigner(e, c, now) {
			g.startCall(k, e, c) // the arrival, recorded without a wait
		}
		if now.After(e.used) {
			e.used = now
		}
		if !g.renewAt.IsZero() && !now.Before(g.renewAt) {
			g.startBatch(now) // some answer is due for renewal
		}
		tok := newer(e, token, c.Expires)
		if e.held && now.Before(e.bound) {
			// Fresh; or renewing, or its renewal failed, and within
			// the bound; or the answer of the call this request waited
			// for.
			if now.Before(e.fresh) || waited || (g.cfg.CheckCache > 0 && (e.call != nil || e.batched || e.failures > 0)) {
				if e.call == nil && !e.batched && !now.Before(e.checked.Add(g.cfg.CheckCache-g.cfg.CheckCache/renewAhead)) && !now.Before(e.retryAt) {
					g.startBatch(now) // refresh ahead, or retry after a backoff
				}
				g.mu.Unlock()
				return tok, true, nil
			}
		}
		if waited && e.held && e.call == nil && e.lastErr == nil {
			// Held, by an answer just given, but within the margin of
			// its lease's end or its token's: the admission is ending.
			g.mu.Unlock()
			return "", false, nil
		}
		if e.call == nil {
			if waited || now.Before(e.retryAt) {
				err := backoffErr(e.lastErr, e.retryAt.Sub(now))
				g.mu.Unlock()
				return "", false, err
			}
			g.startCall(k, e, c)
		}
		call := e.call
		g.mu.Unlock()
		select {
		case <-call:
		case <-ctx.Done():
			return "", false, stampede.UnavailableErr("the admission check", ctx.Err())
		}
	}
}

// answeredBySigner takes admission c's token as the first answer about
// it when it is fresh, and reports whether it did; g.mu is held. A token
// is signed when the store has just said the admission holds its slot
// (the room's admission, or a gate's check that re-signed it), so it is
// an answer from its IssuedAt, as usable as a cached one: fresh for
// CheckCache from then, never past its expiry less SafetyMargin. Its
// visitor's first requests are then served at once while the first store
// call, which records the arrival and slides the lease, runs beside them:
// without it a flood from a newly admitted visitor queued every request
// behind that call and then dialled the upstream for all of them at once
// (see docs/gate.md). Only an admission about which nothing is known yet
// (no answer, no call, no failure) qualifies, and only a token issued at
// most CheckCache ago by a clock not ahead of this one: a token stolen or
// replayed later, or an admission released elsewhere more than CheckCache
// after its token was signed, waits for the store as before.
func (g *Gate) answeredBySigner(e *entry, c protocol.AdmissionClaims, now time.Time) bool {
	// An answer (held, or renewing in a batch) sets checked; a call in
	// flight or one that failed leaves it zero.
	if !e.checked.IsZero() || e.call != nil || e.failures > 0 || g.cfg.CheckCache <= 0 {
		return false
	}
	age := now.Sub(c.IssuedAt)
	bound := c.Expires.Add(-g.cfg.SafetyMargin)
	if age < 0 || age >= g.cfg.CheckCache || !now.Before(bound) {
		return false
	}
	e.held, e.checked, e.bound = true, c.IssuedAt, bound
	e.fresh = minTime(c.IssuedAt.Add(g.cfg.CheckCache), bound)
	return true
}

// newer records token (whose expiry is exp) as the entry's freshest
// when it is, and returns the freshest; g.mu is held.
func newer(e *entry, token string, exp time.Time) string {
	if e.token == "" || exp.After(e.tokenExp) {
		e.token, e.tokenExp = token, exp
	}
	return e.token
}

// backoffErr is the answer while admission checks are backed off.
func backoffErr(last error, wait time.Duration) error {
	e := stampede.UnavailableErr("the admission check", last)
	e.RetryAfter = max(wait, time.Second)
	return e
}

// startCall starts the store call about admission c, k's only one in
// flight (e.call is closed when it ends); g.mu is held.
func (g *Gate) startCall(k admissionKey, e *entry, c protocol.AdmissionClaims) {
	done := make(chan struct{})
	e.call = done
	go g.lookup(k, c, done)
}

// lookup asks the store about admission c (touching it, which slides the
// lease), records the answer in k's entry and closes done.
func (g *Gate) lookup(k admissionKey, c protocol.AdmissionClaims, done chan struct{}) {
	defer close(done)
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel()
	start := g.cfg.Now()
	held, end, err := g.touch(ctx, c)
	now := g.cfg.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	e := g.entry(k, c, now)
	if e.call == done {
		e.call = nil
	}
	if e.refused {
		return // released here meanwhile
	}
	if err != nil {
		g.failed(e, now, err)
		return
	}
	g.record(e, start, now, held, end)
}

// failed records a failed store call about e's admission; g.mu is held.
func (g *Gate) failed(e *entry, now time.Time, err error) {
	e.failures++
	e.retryAt = now.Add(g.cfg.CheckBackoff << min(e.failures-1, maxBackoffDoublings))
	e.lastErr = err
	if e.held {
		g.renewFrom(e.retryAt)
	}
}

// renewFrom records that an answer is due for renewal from at: the first
// request from then on starts a batch; g.mu is held.
func (g *Gate) renewFrom(at time.Time) {
	if g.renewAt.IsZero() || at.Before(g.renewAt) {
		g.renewAt = at
	}
}

// record records the store's answer about e's admission, from a call
// begun at start: whether it holds its slot, and until when. The token
// is re-signed once less than half of the lease (plus a second: its
// expiry has whole seconds) is left of it, so that an active visitor's
// cookie (and its verification, cached per token) changes about twice a
// lease, not at every check, and the visitor has half a lease of
// requests to pick the new one up; g.mu is held.
func (g *Gate) record(e *entry, start, now time.Time, held bool, end time.Time) {
	e.failures, e.retryAt, e.lastErr = 0, time.Time{}, nil
	if !held || !start.Add(g.cfg.SafetyMargin).Before(end) {
		e.held, e.refused = false, true
		return
	}
	e.held, e.checked = true, start
	e.bound = end.Add(-g.cfg.SafetyMargin)
	g.renewFrom(start.Add(g.cfg.CheckCache - g.cfg.CheckCache/renewAhead))
	if end.Unix() > e.tokenExp.Unix() && e.tokenExp.Sub(now) < end.Sub(now)/2+time.Second {
		c := e.claims
		fresh, err := g.cfg.Admissions.Sign(protocol.AdmissionClaims{Room: c.Room, User: c.User, Seq: c.Seq,
			AdmittedAt: c.AdmittedAt, IssuedAt: now, Expires: end})
		if err == nil && fresh != "" {
			e.token, e.tokenExp = fresh, end.Truncate(time.Second)
		}
	}
	// A token's exp has whole seconds, up to one before the lease's end,
	// and the upstream refuses it from then on: the answer is not used
	// past it either (less the margin). A request after that asks the
	// store again, which slides the lease and signs a later token; at the
	// session's end, when none can be, the admission ends here (check).
	if !e.tokenExp.IsZero() {
		e.bound = minTime(e.bound, e.tokenExp.Add(-g.cfg.SafetyMargin))
	}
	e.fresh = minTime(start.Add(g.cfg.CheckCache), e.bound)
}

// startBatch starts a batch (unless one is in flight): one store call
// renewing the answers of every admission let through here within
// keepFresh whose answer is older than CheckCache/renewAhead, not
// refused, with no call of its own in flight and not backed off; the
// leases of those asked about since their last check slide. g.mu is held.
func (g *Gate) startBatch(now time.Time) {
	if g.batching || g.cfg.CheckCache <= 0 {
		return
	}
	var (
		entries []*entry
		touches []waitroom.AdmissionTouch
	)
	g.renewAt = time.Time{}
	for _, e := range g.cache {
		if !e.held || e.refused || e.call != nil || e.batched || now.Sub(e.used) >= keepFresh {
			continue
		}
		if young := e.checked.Add(g.cfg.CheckCache / renewAhead); now.Before(young) || now.Before(e.retryAt) {
			due := e.checked.Add(g.cfg.CheckCache - g.cfg.CheckCache/renewAhead)
			if due.Before(e.retryAt) {
				due = e.retryAt
			}
			g.renewFrom(due)
			continue
		}
		t := waitroom.AdmissionTouch{User: e.claims.User, Seq: e.claims.Seq}
		if e.used.After(e.checked) {
			t.Until = e.claims.AdmittedAt.Add(g.cfg.MaxSession)
		}
		e.batched = true
		entries, touches = append(entries, e), append(touches, t)
	}
	if len(entries) == 0 {
		return
	}
	g.batching = true
	go g.flush(entries, touches)
}

// flush is the store call of a batch, in one of CheckConcurrency places;
// it records each answer.
func (g *Gate) flush(entries []*entry, touches []waitroom.AdmissionTouch) {
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel()
	start := g.cfg.Now()
	var (
		sts []waitroom.AdmissionStatus
		err error
	)
	select {
	case g.places <- struct{}{}:
		sts, err = g.cfg.Service.TouchAdmissions(ctx, g.cfg.Room, touches)
		<-g.places
	case <-ctx.Done():
		err = stampede.UnavailableErr("the admission check", context.Cause(ctx))
	}
	now := g.cfg.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.batching = false
	for i, e := range entries {
		e.batched = false
		switch {
		case e.refused: // released here meanwhile
		case err != nil:
			g.failed(e, now, err)
		default:
			g.record(e, start, now, sts[i].Held, sts[i].Ticket.LeaseExpires)
		}
	}
}

// touch is one store call for admission c, in one of CheckConcurrency
// places: whether it holds its slot, and the lease's end after the touch.
func (g *Gate) touch(ctx context.Context, c protocol.AdmissionClaims) (bool, time.Time, error) {
	select {
	case g.places <- struct{}{}:
	case <-ctx.Done():
		return false, time.Time{}, stampede.UnavailableErr("the admission check", context.Cause(ctx))
	}
	defer func() { <-g.places }()
	st, err := g.cfg.Service.TouchAdmission(ctx, g.cfg.Room, c.User, c.Seq, c.AdmittedAt.Add(g.cfg.MaxSession))
	if err != nil {
		return false, time.Time{}, err
	}
	return st.Held, st.Ticket.LeaseExpires, nil
}

// entry returns k's entry, made if missing; g.mu is held. Making one past
// maxEntries, or sweepEvery after the last sweep, first drops the entries
// of no use any more.
func (g *Gate) entry(k admissionKey, c protocol.AdmissionClaims, now time.Time) *entry {
	e := g.cache[k]
	if e != nil {
		return e
	}
	if len(g.cache) >= maxEntries || now.Sub(g.sweptAt) >= sweepEvery {
		g.sweptAt = now
		for kk, v := range g.cache {
			if !now.Before(v.keep) && v.call == nil && !v.batched {
				delete(g.cache, kk)
			}
		}
	}
	if len(g.cache) >= maxEntries {
		for kk, v := range g.cache { // still full: drop arbitrary ones
			if len(g.cache) < maxEntries*9/10 {
				break
			}
			if v.call == nil {
				delete(g.cache, kk)
			}
		}
	}
	e = &entry{keep: c.AdmittedAt.Add(g.cfg.MaxSession), claims: c}
	g.cache[k] = e
	return e
}

// released marks admission k released through this process: refused from
// now on without asking the store.
func (g *Gate) released(k admissionKey, c protocol.AdmissionClaims) {
	g.mu.Lock()
	e := g.entry(k, c, g.cfg.Now())
	e.held, e.refused = false, true
	g.mu.Unlock()
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// roomKey is the single flight of the room's status (no admission's: a
// user is never empty).
const roomKey = "\x00room"

// roomStatus is the room's status for a refused API client's answer
// (the queue's length and Retry-After): read from the store at most once
// a second, in one call however many ask, in one of the checks' places
// (none free: no status). ok is false without one.
func (g *Gate) roomStatus(ctx context.Context) (waitroom.RoomStatus, bool) {
	now := g.cfg.Now()
	g.mu.Lock()
	st, at := g.room, g.roomAt
	g.mu.Unlock()
	if !at.IsZero() && now.Sub(at) < time.Second && !now.Before(at) {
		return st, true
	}
	ch := g.flights.DoChan(roomKey, func() (any, error) {
		select {
		case g.places <- struct{}{}:
		default:
			return nil, errors.New("no place for a store call")
		}
		defer func() { <-g.places }()
		ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
		defer cancel()
		st, err := g.cfg.Service.Room(ctx, g.cfg.Room)
		if err != nil {
			return nil, err
		}
		g.mu.Lock()
		g.room, g.roomAt = st, now
		g.mu.Unlock()
		return st, nil
	})
	select {
	case res := <-ch:
		if res.Err != nil {
			return waitroom.RoomStatus{}, false
		}
		return res.Val.(waitroom.RoomStatus), true
	case <-ctx.Done():
		return waitroom.RoomStatus{}, false
	}
}
