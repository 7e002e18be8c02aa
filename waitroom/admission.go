package waitroom

import (
	"context"
	"errors"
	"time"
)

// AdmissionStore is what a Store offers for online admission checks
// beyond the Store interface: releasing and extending one particular
// admission, identified by the user's arrival sequence number, atomically.
// redisstore.Store implements it; with a Store that does not, the Service
// falls back to a read followed by a Leave (a user re-admitted between the
// two could lose the new slot) and never slides leases.
type AdmissionStore interface {
	// ReleaseAdmission releases user's slot only while the admission
	// numbered seq holds it, and reports whether it did.
	ReleaseAdmission(ctx context.Context, room, user string, seq int64) (Ticket, bool, error)
	// TouchAdmission slides the lease of the admission numbered seq to
	// now plus the room's lease, never past until and never backwards.
	// The ticket it returns has the lease end after the touch; it is not
	// admitted when admission seq no longer holds a slot.
	TouchAdmission(ctx context.Context, room, user string, seq int64, until time.Time) (Ticket, error)
}

// Reasons an admission is not held (AdmissionStatus.Reason).
const (
	// ReasonHeld: the admission holds its slot.
	ReasonHeld = "held"
	// ReasonReleased: the slot was released (by the user, a checkout or
	// a gate).
	ReasonReleased = "released"
	// ReasonExpired: the lease ran out.
	ReasonExpired = "expired"
	// ReasonSuperseded: the user left and joined again; the token is of
	// an earlier admission.
	ReasonSuperseded = "superseded"
	// ReasonNoTicket: the room has no ticket for the user.
	ReasonNoTicket = "no_ticket"
	// ReasonNotAdmitted: the user waits or left the queue.
	ReasonNotAdmitted = "not_admitted"
)

// AdmissionStatus is the answer of an online admission check.
type AdmissionStatus struct {
	// Held is true while the admission holds its slot.
	Held bool
	// Reason is ReasonHeld or why not.
	Reason string
	// Ticket is the user's ticket as the store has it now (zero when
	// there is none).
	Ticket Ticket
}

// statusOf turns the current ticket into the status of admission seq.
func statusOf(t Ticket, seq int64) AdmissionStatus {
	st := AdmissionStatus{Ticket: t}
	switch {
	case t.Seq != seq:
		st.Reason = ReasonSuperseded
	case t.State == StateAdmitted:
		st.Held, st.Reason = true, ReasonHeld
	case t.State == StateReleased:
		st.Reason = ReasonReleased
	case t.State == StateExpired:
		st.Reason = ReasonExpired
	default:
		st.Reason = ReasonNotAdmitted
	}
	return st
}

// CheckAdmission reports whether the admission numbered seq of user still
// holds a slot in room, reading the store (a released or expired slot
// fails at once).
func (s *Service) CheckAdmission(ctx context.Context, room, user string, seq int64) (AdmissionStatus, error) {
	if err := ValidateRoom(room); err != nil {
		return AdmissionStatus{}, err
	}
	if err := ValidateUser(user); err != nil {
		return AdmissionStatus{}, err
	}
	t, err := s.store.Ticket(ctx, room, user)
	if errors.Is(err, ErrNoTicket) {
		return AdmissionStatus{Reason: ReasonNoTicket}, nil
	}
	if err != nil {
		return AdmissionStatus{}, err
	}
	return statusOf(t, seq), nil
}

// ReleaseAdmission releases the slot of the admission numbered seq of user
// (a checkout's "done"). It reports the status before the release: Held
// is true when this call released the slot. A slot refilled at once when
// Immediate is on.
func (s *Service) ReleaseAdmission(ctx context.Context, room, user string, seq int64) (AdmissionStatus, error) {
	if err := ValidateRoom(room); err != nil {
		return AdmissionStatus{}, err
	}
	if err := ValidateUser(user); err != nil {
		return AdmissionStatus{}, err
	}
	var st AdmissionStatus
	if as, ok := s.store.(AdmissionStore); ok {
		t, released, err := as.ReleaseAdmission(ctx, room, user, seq)
		if errors.Is(err, ErrNoTicket) {
			return AdmissionStatus{Reason: ReasonNoTicket}, nil
		}
		if err != nil {
			return AdmissionStatus{}, err
		}
		st = statusOf(t, seq)
		if released {
			st = AdmissionStatus{Held: true, Reason: ReasonHeld, Ticket: t}
		}
	} else {
		cur, err := s.CheckAdmission(ctx, room, user, seq)
		if err != nil || !cur.Held {
			return cur, err
		}
		t, err := s.store.Leave(ctx, room, user)
		if err != nil {
			return AdmissionStatus{}, err
		}
		st = AdmissionStatus{Held: t.State == StateReleased, Reason: ReasonHeld, Ticket: t}
	}
	if st.Held {
		s.poke(room)
	}
	return st, nil
}

// TouchAdmission slides the lease of the admission numbered seq of user
// to now plus the room's lease, never past until, and returns its status
// afterwards. Without an AdmissionStore it only checks.
func (s *Service) TouchAdmission(ctx context.Context, room, user string, seq int64, until time.Time) (AdmissionStatus, error) {
	as, ok := s.store.(AdmissionStore)
	if !ok {
		return s.CheckAdmission(ctx, room, user, seq)
	}
	if err := ValidateRoom(room); err != nil {
		return AdmissionStatus{}, err
	}
	if err := ValidateUser(user); err != nil {
		return AdmissionStatus{}, err
	}
	t, err := as.TouchAdmission(ctx, room, user, seq, until)
	if errors.Is(err, ErrNoTicket) {
		return AdmissionStatus{Reason: ReasonNoTicket}, nil
	}
	if err != nil {
		return AdmissionStatus{}, err
	}
	return statusOf(t, seq), nil
}

// poke asks room's admitter for an admission pass now, when Immediate is
// on.
func (s *Service) poke(room string) {
	if !s.cfg.Immediate {
		return
	}
	s.mu.Lock()
	a := s.admitters[room]
	s.mu.Unlock()
	if a != nil {
		a.poke()
	}
}

// ConfigOf returns room's configuration.
func (s *Service) ConfigOf(ctx context.Context, room string) (RoomConfig, error) {
	if err := ValidateRoom(room); err != nil {
		return RoomConfig{}, err
	}
	return s.store.Config(ctx, room)
}

// signAdmission signs the admission token (a JWT) of admitted ticket t,
// or returns "" when its lease ends within now's second (tokens count
// whole seconds; it is over for any checkout that would see it). The
// admission began one room lease before the lease's end (before any
// sliding by a gate).
func signAdmission(ctx context.Context, svc *Service, signer *AdmissionSigner, t Ticket, now time.Time) (string, error) {
	if t.LeaseExpires.Unix() <= now.Unix() {
		return "", nil
	}
	adm := time.Time{}
	if cfg, err := svc.ConfigOf(ctx, t.Room); err == nil {
		adm = t.LeaseExpires.Add(-cfg.Lease)
	}
	if adm.IsZero() || adm.After(now) {
		adm = now
	}
	return signer.Sign(AdmissionClaims{Room: t.Room, User: t.User, Seq: t.Seq, AdmittedAt: adm, IssuedAt: now, Expires: t.LeaseExpires})
}

// SignAdmission signs the admission token of admitted ticket t at now
// with signer, as GET /v1/rooms/{room}/tickets/{user} does ("" when the
// lease ends within now's second). For a gate embedding the service.
func (s *Service) SignAdmission(ctx context.Context, signer *AdmissionSigner, t Ticket, now time.Time) (string, error) {
	return signAdmission(ctx, s, signer, t, now)
}
