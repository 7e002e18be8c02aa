package waitroom

import (
	"fmt"
	"reflect"
	"time"

	"github.com/stampede-lab/stampede"
)

// Schedules. A room sells from OpensAt (or at once) until ClosesAt (or for
// ever), or by a Schedule: a list of windows, each with its own capacity
// and outflow, such as a presale hour for invited buyers and then the
// general sale. The store decides by its own clock which window is in
// force (see Sale); this file holds the same rule for what the API shows
// and for the admitter's tick.

// MaxWindows is the most windows a room's schedule may hold.
const MaxWindows = 32

// Window is one window of a room's schedule.
type Window struct {
	// Start is when the window opens (required).
	Start time.Time
	// End is when it closes; zero: at the next window's Start, or, for
	// the last window, at the room's ClosesAt (or never).
	End time.Time
	// Capacity is the most users the room holds at once during the
	// window. A lower capacity than the window before admits nobody until
	// the slots held drop below it: leases already given run on.
	Capacity int
	// MaxAdmissionsPerMinute limits the outflow during the window (0: no
	// limit), as RoomConfig.MaxAdmissionsPerMinute.
	MaxAdmissionsPerMinute int
	// AdmitInterval is the admitter's tick during the window; zero: the
	// room's AdmitInterval.
	AdmitInterval time.Duration
	// InviteOnly refuses joins without an invite while this window is in
	// force or is the next one to open (see Invite).
	InviteOnly bool
}

// Phase is where a room's sale stands at an instant.
type Phase string

// The phases of a sale.
const (
	// PhaseBefore: not open yet (before OpensAt, or the first window).
	// Joins queue in the pre-queue, admission waits.
	PhaseBefore Phase = "before"
	// PhaseOpen: admitting (a window is in force, or the room has none).
	PhaseOpen Phase = "open"
	// PhaseBetween: one window has ended and the next has not begun.
	// Waiting users keep their places; admission waits for the next one.
	PhaseBetween Phase = "between"
	// PhaseClosed: the room is closed, past ClosesAt, or past the end of
	// its last window. Nobody joins, waiting users are told, admitted
	// users keep their leases.
	PhaseClosed Phase = "closed"
)

// Sale is what a room's configuration says at one instant.
type Sale struct {
	Phase Phase
	// Window is the index of the window in force (PhaseOpen) or of the
	// next to open (PhaseBefore, PhaseBetween) in the schedule; -1 for a
	// room without a schedule, or after its last window.
	Window int
	// Starts and Ends bound Window (Ends zero: open-ended); for a room
	// without a schedule, Starts is OpensAt and Ends ClosesAt.
	Starts, Ends time.Time
	// Capacity, MaxAdmissionsPerMinute and AdmitInterval are those in
	// force, or, outside a window, those of the next one.
	Capacity               int
	MaxAdmissionsPerMinute int
	AdmitInterval          time.Duration
	// InviteRequired says that a join needs an invite now.
	InviteRequired bool
}

// windowEnd is the end of window i of s: its own, the next one's start,
// or zero (open-ended).
func windowEnd(s []Window, i int) time.Time {
	if !s[i].End.IsZero() || i+1 == len(s) {
		return s[i].End
	}
	return s[i+1].Start
}

// SaleAt returns what c says at now. The store applies the same rule with
// its own clock (and ClosesAt also ends a schedule early).
func (c RoomConfig) SaleAt(now time.Time) Sale {
	s := Sale{Phase: PhaseOpen, Window: -1, Starts: c.OpensAt, Ends: c.ClosesAt, Capacity: c.Capacity,
		MaxAdmissionsPerMinute: c.MaxAdmissionsPerMinute, AdmitInterval: c.AdmitInterval, InviteRequired: c.InviteOnly}
	if c.Closed || !c.ClosesAt.IsZero() && !now.Before(c.ClosesAt) {
		s.Phase = PhaseClosed
		return s
	}
	if len(c.Schedule) == 0 {
		if !c.OpensAt.IsZero() && now.Before(c.OpensAt) {
			s.Phase = PhaseBefore
		}
		return s
	}
	phase := PhaseBefore
	for i, w := range c.Schedule {
		end := windowEnd(c.Schedule, i)
		if now.Before(w.Start) || end.IsZero() || now.Before(end) {
			if !now.Before(w.Start) {
				phase = PhaseOpen
			}
			s.Phase, s.Window, s.Starts, s.Ends = phase, i, w.Start, end
			s.Capacity, s.MaxAdmissionsPerMinute = w.Capacity, w.MaxAdmissionsPerMinute
			if w.AdmitInterval > 0 {
				s.AdmitInterval = w.AdmitInterval
			}
			s.InviteRequired = c.InviteOnly || w.InviteOnly
			return s
		}
		phase = PhaseBetween
	}
	s.Phase = PhaseClosed
	return s
}

// validateSchedule adds every bad field of c's ClosesAt and Schedule to f,
// by paths such as "schedule[1].capacity".
func (c RoomConfig) validateSchedule(f *stampede.Fields) {
	if !c.ClosesAt.IsZero() {
		switch {
		case c.ClosesAt.Year() < 2000 || c.ClosesAt.Year() > 9999:
			f.Add("closes_at", "must be a time between the years 2000 and 9999, got %s", c.ClosesAt)
		case !c.OpensAt.IsZero() && !c.ClosesAt.After(c.OpensAt):
			f.Add("closes_at", "must be after opens_at (%s), got %s", c.OpensAt.Format(time.RFC3339), c.ClosesAt.Format(time.RFC3339))
		case len(c.Schedule) > 0 && !c.Schedule[0].Start.IsZero() && !c.ClosesAt.After(c.Schedule[0].Start):
			f.Add("closes_at", "must be after schedule[0].start (%s), got %s", c.Schedule[0].Start.Format(time.RFC3339), c.ClosesAt.Format(time.RFC3339))
		}
	}
	if len(c.Schedule) == 0 {
		return
	}
	if len(c.Schedule) > MaxWindows {
		f.Add("schedule", "must hold at most %d windows, got %d", MaxWindows, len(c.Schedule))
		return
	}
	if !c.OpensAt.IsZero() {
		f.Add("opens_at", "must be null in a room with a schedule: its first window's start opens it")
	}
	var prevEnd time.Time // the previous window's end, if it had a usable one
	for i, w := range c.Schedule {
		p := fmt.Sprintf("schedule[%d].", i)
		startOK := !w.Start.IsZero() && w.Start.Year() >= 2000 && w.Start.Year() <= 9999
		if !startOK {
			f.Add(p+"start", "must be a time between the years 2000 and 9999, got %s", w.Start)
		} else if i > 0 && !prevEnd.IsZero() && w.Start.Before(prevEnd) {
			f.Add(p+"start", "must not be before schedule[%d]'s end (or start: %s): windows run in order and may not overlap",
				i-1, prevEnd.Format(time.RFC3339))
		}
		prevEnd = time.Time{}
		if !w.End.IsZero() {
			switch {
			case w.End.Year() < 2000 || w.End.Year() > 9999:
				f.Add(p+"end", "must be a time between the years 2000 and 9999, got %s", w.End)
			case startOK && !w.End.After(w.Start):
				f.Add(p+"end", "must be after schedule[%d].start (%s), got %s", i, w.Start.Format(time.RFC3339), w.End.Format(time.RFC3339))
			default:
				prevEnd = w.End
			}
		}
		if prevEnd.IsZero() && startOK {
			// Open-ended (or a bad end): the next window must at least
			// start later.
			prevEnd = w.Start.Add(time.Nanosecond)
		}
		if w.Capacity < 1 || w.Capacity > 1_000_000 {
			f.Add(p+"capacity", "must be between 1 and 1000000, got %d", w.Capacity)
		}
		if w.MaxAdmissionsPerMinute < 0 || w.MaxAdmissionsPerMinute > 60_000_000 {
			f.Add(p+"max_admissions_per_minute", "must be between 0 (no limit) and 60000000, got %d", w.MaxAdmissionsPerMinute)
		}
		if w.AdmitInterval != 0 && (w.AdmitInterval < 10*time.Millisecond || w.AdmitInterval > time.Minute) {
			f.Add(p+"admit_interval_ms", "must be 0 (the room's) or between 10 and 60000, got %d", w.AdmitInterval.Milliseconds())
		}
	}
}

// Equal reports whether c and d configure a room the same way (times
// compared as the store gives them back: UTC, no monotonic reading).
func (c RoomConfig) Equal(d RoomConfig) bool { return reflect.DeepEqual(c, d) }
