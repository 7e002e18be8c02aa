package waitroom

import (
	"context"
	"errors"
	"time"
)

// AdmissionTouch names one admission for TouchAdmissions: the admission
// numbered Seq of User. Its lease slides to now plus the room's lease,
// never past Until; a zero Until only checks it.
type AdmissionTouch struct {
	User  string
	Seq   int64
	Until time.Time
}

// BatchAdmissionStore is what a Store offers to check and slide many
// admissions of one room in one call (a gate's checks of its active
// visitors, flushed together). redisstore.Store implements it.
type BatchAdmissionStore interface {
	// TouchAdmissions does what AdmissionStore.TouchAdmission does for
	// each admission of touches (only checking those whose Until is
	// zero), atomically for all. The tickets are in the order of touches;
	// a user without a ticket has a zero one (no State). A lease that has
	// run out, or an arrival window passed, is reported expired and left
	// for the room's admission pass to end.
	TouchAdmissions(ctx context.Context, room string, touches []AdmissionTouch) ([]Ticket, error)
}

// TouchAdmissions checks the admissions of touches in room and slides the
// leases of those with an Until (see TouchAdmission), in one store call
// with a BatchAdmissionStore, else one call each. The statuses are in the
// order of touches.
func (s *Service) TouchAdmissions(ctx context.Context, room string, touches []AdmissionTouch) ([]AdmissionStatus, error) {
	if err := ValidateRoom(room); err != nil {
		return nil, err
	}
	for _, t := range touches {
		if err := ValidateUser(t.User); err != nil {
			return nil, err
		}
	}
	out := make([]AdmissionStatus, len(touches))
	bs, ok := s.store.(BatchAdmissionStore)
	if !ok {
		for i, t := range touches {
			var err error
			if t.Until.IsZero() {
				out[i], err = s.CheckAdmission(ctx, room, t.User, t.Seq)
			} else {
				out[i], err = s.TouchAdmission(ctx, room, t.User, t.Seq, t.Until)
			}
			if err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	if len(touches) == 0 {
		return out, nil
	}
	tickets, err := bs.TouchAdmissions(ctx, room, touches)
	if err != nil {
		return nil, err
	}
	if len(tickets) != len(touches) {
		return nil, errors.New("waitroom: touch admissions: the store answered for another number of admissions")
	}
	for i, t := range tickets {
		if t.State == "" {
			out[i] = AdmissionStatus{Reason: ReasonNoTicket}
			continue
		}
		out[i] = statusOf(t, touches[i].Seq)
	}
	return out, nil
}
