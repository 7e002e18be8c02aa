package waitroom

import (
	"context"
	"sync"
	"time"
)

// passTimeout bounds one admission pass.
const passTimeout = 5 * time.Second

// admitter runs admission passes for one room on one instance: on every
// tick and, when the service's Immediate is on, right after a release on
// this instance and right when the earliest lease runs out.
type admitter struct {
	svc  *Service
	room string

	mu      sync.Mutex
	cfg     RoomConfig
	changed chan struct{} // capacity 1: the configuration changed
	pokes   chan struct{} // capacity 1: admit now
	// stop ends run (the room was deleted).
	stop context.CancelFunc
	// view is the room's view on this instance (nil when
	// ServiceConfig.ViewRefresh is 0); it runs and stops with run.
	view *viewer
}

func newAdmitter(svc *Service, room string, cfg RoomConfig, stop context.CancelFunc) *admitter {
	return &admitter{svc: svc, room: room, cfg: cfg, changed: make(chan struct{}, 1), pokes: make(chan struct{}, 1), stop: stop}
}

// configure hands the admitter a (possibly) new configuration.
func (a *admitter) configure(cfg RoomConfig) {
	a.mu.Lock()
	same := a.cfg.Equal(cfg)
	a.cfg = cfg
	a.mu.Unlock()
	if !same {
		signalOnce(a.changed)
	}
}

// poke asks for an admission pass now.
func (a *admitter) poke() { signalOnce(a.pokes) }

func signalOnce(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (a *admitter) config() RoomConfig {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cfg
}

func (a *admitter) run(ctx context.Context) {
	cfg := a.config()
	// The tick of the window in force (see RoomConfig.SaleAt).
	interval := cfg.SaleAt(time.Now()).AdmitInterval
	tick := time.NewTicker(interval)
	defer tick.Stop()
	expiry := time.NewTimer(time.Hour)
	expiry.Stop()
	defer expiry.Stop()
	armed := false // the expiry timer waits for a lease
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.changed:
			cfg = a.config()
			interval = cfg.SaleAt(time.Now()).AdmitInterval
			tick.Reset(interval)
			continue
		case <-tick.C:
		case <-a.pokes:
		case <-expiry.C:
			armed = false
		}
		armed = a.pass(ctx, cfg, expiry, armed)
		if iv := cfg.SaleAt(time.Now()).AdmitInterval; iv != interval {
			interval = iv
			tick.Reset(interval)
		}
	}
}

// pass runs one admission pass and, with immediate admission on, arms the
// expiry timer for the room's earliest lease; it reports whether the timer
// is armed. A lease admitted later expires later (the tick covers a lease
// shortened meanwhile), so an armed timer stays
// right until a pass reclaims leases: only then, or when the timer is not
// armed, does pass ask the store for the earliest expiry again.
func (a *admitter) pass(ctx context.Context, cfg RoomConfig, expiry *time.Timer, armed bool) bool {
	log := a.svc.cfg.Logger
	// A pass that has begun runs to its end even when the service is
	// stopping: a store admitting in several steps would otherwise drop
	// a user popped from the queue but not yet in the room.
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), passTimeout)
	defer cancel()
	start := time.Now()
	res, err := a.svc.store.Admit(pctx, a.room)
	if hook := a.svc.cfg.OnPass; hook != nil {
		hook(a.room, ModeAtomic, time.Since(start), res, err)
	}
	if err != nil {
		if ctx.Err() == nil {
			log.Warn("waitroom: admission pass failed", "room", a.room, "err", err)
		}
		return armed
	}
	if len(res.Admitted) > 0 || res.Expired > 0 {
		log.Debug("waitroom: admitted", "room", a.room, "admitted", len(res.Admitted), "expired", res.Expired)
	}
	if !a.svc.cfg.Immediate || (armed && res.Expired == 0) {
		return armed
	}
	next, ok, err := a.svc.store.NextExpiry(pctx, a.room)
	if err != nil || !ok {
		expiry.Stop()
		return false
	}
	// Redis server time and this host's clock may differ a little; an
	// early pass reclaims nothing and the tick covers the rest.
	expiry.Reset(max(time.Until(next), time.Millisecond))
	return true
}
