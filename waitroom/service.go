package waitroom

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/stampede-lab/stampede"
)

// ServiceConfig configures a Service.
type ServiceConfig struct {
	// Instance names this service instance in leader elections.
	Instance string
	// Immediate admits right after a release and right when the earliest
	// lease runs out, besides the tick. The lab turns it off to show what
	// the tick alone allows.
	Immediate bool
	// RoomRefresh is how often the service looks for rooms configured by
	// other instances and samples every room's admission rate.
	RoomRefresh time.Duration
	// RateWindow is the span over which the admission rate is measured.
	RateWindow time.Duration
	// MinPoll and MaxPoll bound the poll interval suggested to waiting
	// users.
	MinPoll, MaxPoll time.Duration
	// Logger receives the service's logs.
	Logger *slog.Logger
	// OnPass, if set, is called after every admission pass with how long
	// the store took (metrics hook).
	OnPass func(room string, mode Mode, took time.Duration, res AdmitResult, err error)
	// Outflow, when set, adapts the outflow of every room with an outflow
	// limit to the checkout's health (see OutflowController), stepped
	// every RoomRefresh; nil keeps the limit as configured.
	Outflow *OutflowConfig
	// OnOutflow, if set, is called when this instance changes a room's
	// adaptive outflow (metrics hook).
	OnOutflow func(room string, perMinute int, reason string)
	// OnPoll, if set, is called for every Poll with how it is answered
	// (metrics hook).
	OnPoll func(room string, answer PollAnswer)
	// ViewRefresh is how often the instance reads each room's view (one
	// store call per room), from which polls of buyers clearly behind the
	// frontier are answered without the store (see Poll); 0 turns that
	// off: every poll reads the store.
	ViewRefresh time.Duration
	// PresenceFlush is how often the polls answered from a view are
	// written to the store as presence (one call per room), for the
	// room's AbandonAfter.
	PresenceFlush time.Duration
}

// DefaultServiceConfig returns immediate admission, a one-second room
// refresh, a 10-second rate window, polls between 2 and 15 seconds, a
// room view read every 200 ms and presence written every second.
func DefaultServiceConfig() ServiceConfig {
	host, _ := os.Hostname()
	return ServiceConfig{
		Instance:      fmt.Sprintf("%s-%d", host, os.Getpid()),
		Immediate:     true,
		RoomRefresh:   time.Second,
		RateWindow:    10 * time.Second,
		MinPoll:       2 * time.Second,
		MaxPoll:       15 * time.Second,
		Logger:        slog.Default(),
		ViewRefresh:   200 * time.Millisecond,
		PresenceFlush: time.Second,
	}
}

// Validate reports every unusable field by its snake_case name.
func (c ServiceConfig) Validate() error {
	var f stampede.Fields
	if c.Instance == "" {
		f.Add("instance", "must not be empty")
	}
	if c.RoomRefresh <= 0 {
		f.Add("room_refresh", "must be positive, got %s", c.RoomRefresh)
	} else if c.RateWindow < c.RoomRefresh {
		f.Add("rate_window", "must be at least room_refresh (%s), got %s", c.RoomRefresh, c.RateWindow)
	}
	if c.MinPoll <= 0 || c.MaxPoll < c.MinPoll {
		f.Add("min_poll", "need 0 < min_poll <= max_poll, got %s and %s", c.MinPoll, c.MaxPoll)
	}
	if c.Logger == nil {
		f.Add("logger", "must not be nil")
	}
	if c.ViewRefresh != 0 && (c.ViewRefresh < 10*time.Millisecond || c.ViewRefresh > 5*time.Second) {
		f.Add("view_refresh", "must be 0 (off) or between 10ms and 5s, got %s", c.ViewRefresh)
	}
	if c.ViewRefresh != 0 && (c.PresenceFlush < 10*time.Millisecond || c.PresenceFlush > 10*time.Second) {
		f.Add("presence_flush", "must be between 10ms and 10s, got %s", c.PresenceFlush)
	}
	if c.Outflow != nil {
		f.Check("", c.Outflow.Validate())
	}
	return f.Err()
}

// Service is the waiting room's logic over a Store: it validates requests,
// runs one admitter per room, and estimates waits. Several Services (one
// per process) share one store.
type Service struct {
	store Store
	cfg   ServiceConfig

	mu        sync.Mutex
	admitters map[string]*admitter
	rates     map[string]*rateMeter
	runCtx    context.Context // set by Run; admitters live under it
	// health and controllers serve the adaptive outflow (outflow.go).
	health      map[string]*healthWindow
	controllers map[string]*OutflowController
}

// NewService returns a Service on store. Call Run to start admission.
func NewService(store Store, cfg ServiceConfig) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Service{store: store, cfg: cfg, admitters: map[string]*admitter{}, rates: map[string]*rateMeter{},
		health: map[string]*healthWindow{}, controllers: map[string]*OutflowController{}}, nil
}

// Run admits for every room in the store until ctx ends. It looks for new
// rooms and samples admission rates every RoomRefresh.
func (s *Service) Run(ctx context.Context) error {
	s.mu.Lock()
	s.runCtx = ctx
	s.mu.Unlock()
	var wg sync.WaitGroup
	defer wg.Wait()
	t := time.NewTicker(s.cfg.RoomRefresh)
	defer t.Stop()
	for {
		s.refresh(ctx, &wg)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// refresh starts admitters for rooms it does not run yet, updates their
// configuration, stops those of rooms that no longer exist (deleted on any
// instance), and samples admission counts.
func (s *Service) refresh(ctx context.Context, wg *sync.WaitGroup) {
	rooms, err := s.store.Rooms(ctx)
	if err != nil {
		s.cfg.Logger.Warn("waitroom: listing rooms failed", "err", err)
		return
	}
	live := make(map[string]bool, len(rooms))
	for _, room := range rooms {
		live[room] = true
		cfg, err := s.store.Config(ctx, room)
		if errors.Is(err, ErrNoRoom) {
			live[room] = false // deleted between the list and the read
			continue
		}
		if err != nil {
			s.cfg.Logger.Warn("waitroom: reading room config failed", "room", room, "err", err)
			continue
		}
		s.ensureAdmitter(ctx, wg, room, cfg)
		s.steerOutflow(ctx, room, cfg)
		if st, err := s.store.Stats(ctx, room); err == nil {
			meter := s.rate(room)
			meter.sample(time.Now(), st.AdmittedTotal, st.ReleasedTotal+st.ExpiredTotal)
			// What a wait estimate needs besides the rate: the slots held
			// and when the first of their leases ends (one more round trip
			// per refresh, for a room with slots held).
			var next time.Time
			if st.Active > 0 {
				if t, ok, err := s.store.NextExpiry(ctx, room); err == nil && ok {
					next = t
				}
			}
			meter.load(st.Active, next)
		}
	}
	s.mu.Lock()
	for room, a := range s.admitters {
		if !live[room] {
			a.stop()
			delete(s.admitters, room)
			delete(s.rates, room)
			delete(s.health, room)
			delete(s.controllers, room)
		}
	}
	s.mu.Unlock()
}

func (s *Service) ensureAdmitter(ctx context.Context, wg *sync.WaitGroup, room string, cfg RoomConfig) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a, ok := s.admitters[room]; ok {
		a.configure(cfg)
		return
	}
	actx, cancel := context.WithCancel(ctx)
	a := newAdmitter(s, room, cfg, cancel)
	s.admitters[room] = a
	wg.Go(func() { a.run(actx) })
	if s.cfg.ViewRefresh > 0 {
		a.view = newViewer(s, room)
		wg.Go(func() { a.view.run(actx) })
	}
}

func (s *Service) rate(room string) *rateMeter {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.rates[room]
	if !ok {
		r = &rateMeter{window: s.cfg.RateWindow}
		s.rates[room] = r
	}
	return r
}

// Configure creates a room or replaces its whole configuration. The
// admitter of this instance picks the change up at once, the others within
// RoomRefresh.
func (s *Service) Configure(ctx context.Context, room string, cfg RoomConfig) error {
	if err := ValidateRoom(room); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	if err := s.store.Configure(ctx, room, cfg); err != nil {
		return err
	}
	s.reconfigured(room, cfg)
	return nil
}

// Update changes only the named fields (JSON names, see
// RoomConfigFields) of an existing room: change applies them to the
// current configuration (an error of change is returned and nothing is
// written), the result is validated as a whole, and only the
// named fields are written, so that concurrent updates of other fields are
// kept. It returns the configuration as updated.
func (s *Service) Update(ctx context.Context, room string, fields []string, change func(*RoomConfig) error) (RoomConfig, error) {
	if err := ValidateRoom(room); err != nil {
		return RoomConfig{}, err
	}
	cfg, err := s.store.Config(ctx, room)
	if err != nil {
		return RoomConfig{}, err
	}
	if err := change(&cfg); err != nil {
		return RoomConfig{}, err
	}
	if err := cfg.Validate(); err != nil {
		return RoomConfig{}, err
	}
	if err := s.store.UpdateConfig(ctx, room, cfg, fields); err != nil {
		return RoomConfig{}, err
	}
	if cfg, err = s.store.Config(ctx, room); err != nil {
		return RoomConfig{}, err
	}
	s.reconfigured(room, cfg)
	return cfg, nil
}

// reconfigured hands this instance's admitter of room its new
// configuration and asks it for a pass (a room resumed or closed acts at
// once).
func (s *Service) reconfigured(room string, cfg RoomConfig) {
	s.mu.Lock()
	a := s.admitters[room]
	s.mu.Unlock()
	if a != nil {
		a.configure(cfg)
		a.poke()
	}
}

// DeleteRoom removes a room and all its data. This instance stops its
// admitter at once, the others at their next room refresh.
func (s *Service) DeleteRoom(ctx context.Context, room string) error {
	if err := ValidateRoom(room); err != nil {
		return err
	}
	if _, err := s.store.Config(ctx, room); err != nil {
		return err
	}
	if err := s.store.DeleteRoom(ctx, room); err != nil {
		return err
	}
	s.mu.Lock()
	if a := s.admitters[room]; a != nil {
		a.stop()
		delete(s.admitters, room)
		delete(s.rates, room)
	}
	s.mu.Unlock()
	return nil
}

// ListRooms returns every configured room, sorted, as the store has them
// (not only those this instance admits for yet).
func (s *Service) ListRooms(ctx context.Context) ([]string, error) {
	rooms, err := s.store.Rooms(ctx)
	if err != nil {
		return nil, err
	}
	slices.Sort(rooms)
	return rooms, nil
}

// MarkArrived records that an admitted user reached the checkout, so that
// the room's Arrival check does not release them (for an admission check).
func (s *Service) MarkArrived(ctx context.Context, room, user string) (Ticket, error) {
	if err := ValidateRoom(room); err != nil {
		return Ticket{}, err
	}
	if err := ValidateUser(user); err != nil {
		return Ticket{}, err
	}
	return s.store.MarkArrived(ctx, room, user)
}

// Join puts user in room's queue (idempotent).
func (s *Service) Join(ctx context.Context, room, user string) (Ticket, error) {
	if err := ValidateRoom(room); err != nil {
		return Ticket{}, err
	}
	if err := ValidateUser(user); err != nil {
		return Ticket{}, err
	}
	return s.withPlace(room, func() (Ticket, error) { return s.store.Join(ctx, room, user) })
}

// withPlace runs read, a store read of a ticket of room, and sets the
// Place of the waiting ticket it returns from the view held before it
// (however old: a stale view still says whether the order was drawn), so
// that a buyer whose poll read the store always gets a place as exact as
// the read.
func (s *Service) withPlace(room string, read func() (Ticket, error)) (Ticket, error) {
	var before RoomView
	ok := false
	if v := s.viewer(room); v != nil {
		before, ok = v.latest()
	}
	t, err := read()
	if err == nil && ok {
		t.Place = placeOf(before, t)
	}
	return t, err
}

// Ticket returns user's ticket in room.
func (s *Service) Ticket(ctx context.Context, room, user string) (Ticket, error) {
	if err := ValidateRoom(room); err != nil {
		return Ticket{}, err
	}
	if err := ValidateUser(user); err != nil {
		return Ticket{}, err
	}
	return s.store.Ticket(ctx, room, user)
}

// Leave takes user out of room's queue or releases their slot; a released
// slot is refilled at once when Immediate is on.
func (s *Service) Leave(ctx context.Context, room, user string) (Ticket, error) {
	if err := ValidateRoom(room); err != nil {
		return Ticket{}, err
	}
	if err := ValidateUser(user); err != nil {
		return Ticket{}, err
	}
	t, err := s.store.Leave(ctx, room, user)
	if err == nil && t.State == StateReleased && s.cfg.Immediate {
		s.mu.Lock()
		a := s.admitters[room]
		s.mu.Unlock()
		if a != nil {
			a.poke()
		}
	}
	return t, err
}

// RoomStatus is what GET /v1/rooms/{room} shows.
type RoomStatus struct {
	RoomStats
	// AdmissionRate is admissions per second over the rate window, as seen
	// by this instance's samples of the shared counter.
	AdmissionRate float64
	// Config is the room's configuration.
	Config RoomConfig
}

// Ping checks that the store answers (the readiness check).
func (s *Service) Ping(ctx context.Context) error { return s.store.Ping(ctx) }

// Room returns a room's counters and measured admission rate.
func (s *Service) Room(ctx context.Context, room string) (RoomStatus, error) {
	if err := ValidateRoom(room); err != nil {
		return RoomStatus{}, err
	}
	cfg, err := s.store.Config(ctx, room)
	if err != nil {
		return RoomStatus{}, err
	}
	st, err := s.store.Stats(ctx, room)
	if err != nil {
		return RoomStatus{}, err
	}
	return RoomStatus{RoomStats: st, AdmissionRate: s.rate(room).perSecond(), Config: cfg}, nil
}

// RoomConfig returns a room's configuration: the copy this instance's
// admitter holds (at most RoomRefresh old) when it runs one, otherwise
// the store's. An unknown room is ErrNoRoom.
func (s *Service) RoomConfig(ctx context.Context, room string) (RoomConfig, error) {
	if err := ValidateRoom(room); err != nil {
		return RoomConfig{}, err
	}
	s.mu.Lock()
	a := s.admitters[room]
	s.mu.Unlock()
	if a != nil {
		return a.config(), nil
	}
	return s.store.Config(ctx, room)
}

// Estimate returns a waiting ticket's expected wait (EstimateWait: from
// the measured admission rate, else from the room's capacity, the leases
// of its held slots and its outflow limit, as this instance saw them at
// its last room refresh) and how long its holder should wait before
// polling again: a quarter of the shortest expected wait (on the
// capacity basis, no more than 50 ms per user ahead), within [MinPoll,
// maxPoll], so that thousands of users far back in line do not poll
// every second. A ticket not waiting, or in a room this instance
// does not admit for, has no estimate.
func (s *Service) Estimate(t Ticket) (est WaitEstimate, pollAfter time.Duration) {
	if t.State != StateWaiting {
		return WaitEstimate{}, s.cfg.MinPoll
	}
	hi := s.maxPoll(t.Room)
	s.mu.Lock()
	a := s.admitters[t.Room]
	s.mu.Unlock()
	if a != nil {
		cfg := a.config()
		now := time.Now()
		meter := s.rate(t.Room)
		active, next := meter.loadNow()
		est = EstimateWait(t.Position, RoomLoad{Now: now, Sale: cfg.SaleAt(now), Paused: cfg.Paused, Lease: cfg.Lease,
			Active: active, NextExpiry: next, Rate: min(meter.perSecond(), meter.freedPerSecond())})
	}
	byPlace := time.Duration(t.Position) * 50 * time.Millisecond
	switch est.Basis {
	case BasisRate:
		return est, clamp(est.Low/4, s.cfg.MinPoll, hi)
	case BasisCapacity:
		// A holder may leave any time, sooner than the leases say: the
		// users near the head keep polling by their place.
		return est, clamp(min(est.Low/4, byPlace), s.cfg.MinPoll, hi)
	}
	// Nothing to go by: back off by place alone.
	return est, clamp(byPlace, s.cfg.MinPoll, hi)
}

// maxPoll is the longest poll interval suggested in room: MaxPoll, or
// half the room's AbandonAfter or Arrival when shorter, so that a user who
// follows the suggestion is never taken for gone (never below MinPoll).
func (s *Service) maxPoll(room string) time.Duration {
	hi := s.cfg.MaxPoll
	s.mu.Lock()
	a := s.admitters[room]
	s.mu.Unlock()
	if a == nil {
		return hi
	}
	cfg := a.config()
	for _, w := range []time.Duration{cfg.AbandonAfter, cfg.Arrival} {
		if w > 0 {
			hi = min(hi, w/2)
		}
	}
	return max(hi, s.cfg.MinPoll)
}

func clamp(d, lo, hi time.Duration) time.Duration { return min(max(d, lo), hi) }

// rateMeter turns samples of a growing counter into a rate, and keeps
// the room's load seen at the same refresh (for wait estimates).
type rateMeter struct {
	mu      sync.Mutex
	window  time.Duration
	samples []rateSample
	// active is the slots held; next when the earliest lease ends (zero:
	// not read, or none).
	active int64
	next   time.Time
}

// load records the slots held and the earliest lease's end.
func (r *rateMeter) load(active int64, next time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.active, r.next = active, next
}

// loadNow returns what load recorded last.
func (r *rateMeter) loadNow() (active int64, next time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.active, r.next
}

type rateSample struct {
	at    time.Time
	total int64
	// freed counts the slots freed (released and expired), for wait
	// estimates: a full room admits no faster than slots free up.
	freed int64
}

func (r *rateMeter) sample(at time.Time, total, freed int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.samples = append(r.samples, rateSample{at, total, freed})
	cut := 0
	for cut < len(r.samples)-1 && at.Sub(r.samples[cut].at) > r.window {
		cut++
	}
	r.samples = r.samples[cut:]
}

// perSecond is the admissions per second over the window.
func (r *rateMeter) perSecond() float64 {
	return r.over(func(s rateSample) int64 { return s.total })
}

// freedPerSecond is the slots freed per second over the window.
func (r *rateMeter) freedPerSecond() float64 {
	return r.over(func(s rateSample) int64 { return s.freed })
}

// over is the growth per second of the counter that count reads, from the
// window's first sample to its last.
func (r *rateMeter) over(count func(rateSample) int64) float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.samples) < 2 {
		return 0
	}
	first, last := r.samples[0], r.samples[len(r.samples)-1]
	dt := last.at.Sub(first.at).Seconds()
	if dt <= 0 {
		return 0
	}
	return float64(count(last)-count(first)) / dt
}

// SpendChallenge spends a proof-of-work challenge (already checked by a
// PoWIssuer) in the shared store when the store is a Spender, so that a
// solution joins once across every instance; a replay is forbidden
// (403). On a store that is not a Spender the PoWIssuer's own memory is
// all there is.
func (s *Service) SpendChallenge(ctx context.Context, room, challenge string) error {
	sp, ok := s.store.(Spender)
	if !ok {
		return nil
	}
	c, err := ParseChallenge(challenge)
	if err != nil {
		return fieldError("challenge", "is malformed; get a new one")
	}
	fresh, err := sp.SpendOnce(ctx, room, challengeKey(challenge), c.Expires)
	if err != nil {
		return err
	}
	if !fresh {
		return &Error{Code: CodeForbidden, Field: "challenge", Message: "this challenge was used already; get a new one"}
	}
	return nil
}
