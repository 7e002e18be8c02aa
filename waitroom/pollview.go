package waitroom

import (
	"context"
	"sync"
	"time"
)

// Polls answered from a room view.
//
// Every Service instance refreshes, every ServiceConfig.ViewRefresh, a
// RoomView of each room it serves: one store call per room whatever the
// crowd. A waiting ticket read from the store gets a Place (its rank and
// the room's counters at that read), which its ticket token carries. A
// later poll with such a token, on any instance, is answered from the
// view without touching the store while the buyer is clearly behind the
// frontier:
//
//	position = Place.Rank - (view.AdmittedTotal - Place.Admitted)
//
// Admission is first in, first out, so every admission since the read was
// of a user ahead: the position never falls below the true rank (save a
// user set aside coming back ahead). It exceeds it by at most the users
// who left the line ahead since the read (left, closed, set aside) plus
// what changed since the view's read (at most ViewRefresh old): a poll
// whose Place has seen more departures since than PositionSlack allows,
// or whose position is within the frontier margin, reads the store, as
// does a poll of a room that is closed, before its opening draw, or
// whose view is stale. The admission pass runs only in the store.
//
// Presence (the last poll abandonment looks at) is recorded locally and
// written by one Toucher call per room every PresenceFlush.

// RoomView is what a waiting buyer's answer needs of a room, read in one
// store call (Store.View).
type RoomView struct {
	// At is the store's clock at the read.
	At time.Time
	// Phase is the sale's phase by the store's clock, and Paused the
	// room's pause.
	Phase  Phase
	Paused bool
	// Waiting counts the users in the queue.
	Waiting int64
	// AdmittedTotal counts every admission ever (RoomStats.AdmittedTotal):
	// the frontier. It never decreases in a room of one queue.
	AdmittedTotal int64
	// DepartedTotal counts every user who ever left the queue other than
	// by admission: left, closed, or set aside for not polling.
	DepartedTotal int64
	// Order names the opening whose draw fixed the queue's order (the
	// opening's time in ms; 0 for a room that never had one), and Ordered
	// says that no draw is pending: ranks read now keep their order.
	Order   int64
	Ordered bool
}

// Marks are a room's counters as one store read saw them (see
// RoomView).
type Marks struct {
	Admitted, Departed int64
}

// Place is what a ticket token carries about its holder's place: their
// rank and the room's counters at the store read that gave it, and the
// room's Order then.
type Place struct {
	Rank, Admitted, Departed, Order int64
}

// LoadReporter is a Store that bounds the per-user calls (joins, polls,
// leaves) it has in flight on its server, refusing the rest as
// unavailable.
type LoadReporter interface {
	// Load returns the calls in flight, their bound now and how many
	// calls were refused at it; bounded is false when no bound applies.
	Load() (inFlight, limit int, refused int64, bounded bool)
}

// Toucher is a Store that records polls answered outside it, in batches.
type Toucher interface {
	// Touch records that users polled now, as a read of their tickets
	// would: a waiting user's last poll is now, and a user set aside for
	// not polling gets their place back within their window. It returns
	// the users who are neither waiting nor set aside (admitted,
	// finished, unknown), whose next poll should read the store.
	Touch(ctx context.Context, room string, users []string) (gone []string, err error)
}

// PositionSlack returns how far a position answered from a view may
// exceed the true rank, besides what changed during the view's last
// refresh: 25, or 10 % of the position when more.
func PositionSlack(position int64) int64 { return max(25, position/10) }

// minLocalAbandon is the shortest AbandonAfter for which polls are
// answered from the view, in PresenceFlush periods: a poll's presence
// reaches the store up to one flush late.
const minLocalAbandon = 5

// viewStale is how many ViewRefresh periods old a view may be and still
// answer polls.
const viewStale = 3

// viewer keeps one room's view and its pending presence on one instance.
type viewer struct {
	svc  *Service
	room string

	mu sync.Mutex
	// view is the latest view, read at fetched (this host's clock, when
	// the read began); ok once one was read.
	view    RoomView
	fetched time.Time
	ok      bool
	// present holds the users answered from the view since the last
	// flush.
	present map[string]struct{}
	// gone holds users the last flushes found not waiting, with when.
	gone map[string]time.Time
}

func newViewer(svc *Service, room string) *viewer {
	return &viewer{svc: svc, room: room, present: map[string]struct{}{}, gone: map[string]time.Time{}}
}

// run refreshes the view every ViewRefresh and flushes presence every
// PresenceFlush until ctx ends, flushing once more at the end.
func (v *viewer) run(ctx context.Context) {
	refresh := time.NewTicker(v.svc.cfg.ViewRefresh)
	defer refresh.Stop()
	flush := time.NewTicker(v.svc.cfg.PresenceFlush)
	defer flush.Stop()
	v.refresh(ctx)
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			v.flush(fctx)
			cancel()
			return
		case <-refresh.C:
			v.refresh(ctx)
		case <-flush.C:
			v.flush(ctx)
		}
	}
}

func (v *viewer) refresh(ctx context.Context) {
	start := time.Now()
	rv, err := v.svc.store.View(ctx, v.room)
	if err != nil {
		if ctx.Err() == nil {
			v.svc.cfg.Logger.Debug("waitroom: reading the room view failed", "room", v.room, "err", err)
		}
		return
	}
	v.mu.Lock()
	v.view, v.fetched, v.ok = rv, start, true
	v.mu.Unlock()
}

// flush writes the pending presence in one Touch and remembers the users
// it found gone.
func (v *viewer) flush(ctx context.Context) {
	t, ok := v.svc.store.(Toucher)
	if !ok {
		return
	}
	v.mu.Lock()
	if len(v.present) == 0 {
		v.mu.Unlock()
		return
	}
	users := make([]string, 0, len(v.present))
	for u := range v.present {
		users = append(users, u)
	}
	v.present = map[string]struct{}{}
	v.mu.Unlock()
	gone, err := t.Touch(ctx, v.room, users)
	if err != nil {
		// Put them back: the next flush tries again.
		v.mu.Lock()
		for _, u := range users {
			v.present[u] = struct{}{}
		}
		v.mu.Unlock()
		if ctx.Err() == nil {
			v.svc.cfg.Logger.Warn("waitroom: writing presence failed", "room", v.room, "users", len(users), "err", err)
		}
		return
	}
	now := time.Now()
	v.mu.Lock()
	for u, at := range v.gone {
		if now.Sub(at) > time.Minute {
			delete(v.gone, u)
		}
	}
	for _, u := range gone {
		v.gone[u] = now
	}
	v.mu.Unlock()
}

// current returns the view if one was read within viewStale refreshes.
func (v *viewer) current() (RoomView, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.ok || time.Since(v.fetched) > viewStale*v.svc.cfg.ViewRefresh {
		return RoomView{}, false
	}
	return v.view, true
}

// latest returns the latest view, however old, if one was read: its
// Order and Ordered stay true of every later read (a draw, once done,
// stays done for that opening), which is all a Place takes from it.
func (v *viewer) latest() (RoomView, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.view, v.ok
}

// viewer returns room's viewer on this instance, nil when none runs.
func (s *Service) viewer(room string) *viewer {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a := s.admitters[room]; a != nil {
		return a.view
	}
	return nil
}

// View returns the room view this instance holds (for tests and
// operators), and whether it is fresh enough to answer polls.
func (s *Service) View(room string) (RoomView, bool) {
	if v := s.viewer(room); v != nil {
		return v.current()
	}
	return RoomView{}, false
}

// Poll returns user's ticket for the bearer of a ticket token of the join
// generation that carries place (nil: none). A waiting user clearly
// behind the frontier is answered from this instance's room view without
// a store call (see the top of this file); any other poll reads the store
// as Ticket does, and a waiting ticket so read has its Place set, for a
// new token. The returned ticket's Generation is the join's: a caller
// checks it against the token's.
func (s *Service) Poll(ctx context.Context, room, user string, generation int64, place *Place) (Ticket, error) {
	if err := ValidateRoom(room); err != nil {
		return Ticket{}, err
	}
	if err := ValidateUser(user); err != nil {
		return Ticket{}, err
	}
	v := s.viewer(room)
	t, answer := s.answerFromView(v, room, user, generation, place)
	if hook := s.cfg.OnPoll; hook != nil {
		hook(room, answer)
	}
	if answer == PollFromView {
		return t, nil
	}
	t, err := s.withPlace(room, func() (Ticket, error) { return s.store.Ticket(ctx, room, user) })
	if err != nil {
		return t, err
	}
	if v != nil && t.State == StateWaiting {
		v.mu.Lock()
		delete(v.gone, user)
		v.mu.Unlock()
	}
	return t, nil
}

// placeOf is the Place of t, read from the store after view was: nil
// unless t waits with marks and view's order was final (so that t's rank
// is of that order).
func placeOf(view RoomView, t Ticket) *Place {
	if t.State != StateWaiting || t.Marks == nil || !view.Ordered || t.Position < 0 {
		return nil
	}
	return &Place{Rank: t.Position, Admitted: t.Marks.Admitted, Departed: t.Marks.Departed, Order: view.Order}
}

// PollAnswer says how Poll answered: from the room view, or from the
// store and why (the label of stampede_waitroom_polls_total).
type PollAnswer string

// The answers of Poll.
const (
	// PollFromView: from the instance's room view, no store call.
	PollFromView PollAnswer = "view"
	// PollNoPlace: the token carries no place (its first poll, a token
	// from before places, or a place the store could not give).
	PollNoPlace PollAnswer = "store_no_place"
	// PollNoView: the instance has no fresh view of the room, the view's
	// order is not the place's, or the sale is not open.
	PollNoView PollAnswer = "store_no_view"
	// PollNoPresence: the store cannot record presence in batches, or the
	// room sets users aside too soon for a batch.
	PollNoPresence PollAnswer = "store_no_presence"
	// PollDepartures: more users left the line since the place was read
	// than PositionSlack allows.
	PollDepartures PollAnswer = "store_departures"
	// PollFrontier: the buyer is within the frontier margin.
	PollFrontier PollAnswer = "store_frontier"
	// PollGone: a presence flush found the buyer no longer waiting.
	PollGone PollAnswer = "store_gone"
)

// answerFromView answers a poll from v when the place allows it, and says
// why not otherwise.
func (s *Service) answerFromView(v *viewer, room, user string, generation int64, p *Place) (Ticket, PollAnswer) {
	if v == nil || p == nil || generation <= 0 {
		return Ticket{}, PollNoPlace
	}
	view, ok := v.current()
	if !ok || !view.Ordered || view.Order != p.Order || (view.Phase != PhaseOpen && view.Phase != PhaseBetween) {
		return Ticket{}, PollNoView
	}
	if _, ok := s.store.(Toucher); !ok {
		return Ticket{}, PollNoPresence
	}
	if cfg, ok := s.roomConfig(room); !ok || cfg.AbandonAfter > 0 && cfg.AbandonAfter < minLocalAbandon*s.cfg.PresenceFlush {
		return Ticket{}, PollNoPresence
	}
	pos := p.Rank - max(0, view.AdmittedTotal-p.Admitted)
	if view.DepartedTotal-p.Departed > PositionSlack(pos) {
		return Ticket{}, PollDepartures
	}
	if pos <= s.frontierMargin(room) {
		return Ticket{}, PollFrontier
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if _, gone := v.gone[user]; gone {
		return Ticket{}, PollGone
	}
	v.present[user] = struct{}{}
	return Ticket{Room: room, User: user, State: StateWaiting, Position: pos, Generation: generation}, PollFromView
}

// frontierMargin is how close to the head (in users ahead) a poll reads
// the store: twice the smallest slack, plus what the room admits in two
// of the shortest poll intervals.
func (s *Service) frontierMargin(room string) int64 {
	rate := s.rate(room).perSecond()
	return 2*PositionSlack(0) + int64(rate*2*s.cfg.MinPoll.Seconds()+0.5)
}

// roomConfig returns the configuration this instance's admitter of room
// holds.
func (s *Service) roomConfig(room string) (RoomConfig, bool) {
	s.mu.Lock()
	a := s.admitters[room]
	s.mu.Unlock()
	if a == nil {
		return RoomConfig{}, false
	}
	return a.config(), true
}
