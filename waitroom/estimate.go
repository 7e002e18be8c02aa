package waitroom

import (
	"math"
	"time"
)

// EstimateBasis says what a wait estimate rests on.
type EstimateBasis string

const (
	// BasisRate: the admission rate measured over the service's rate
	// window (all instances together), as far as slots freed in that
	// window allow it (a room's first fill is no turnover).
	BasisRate EstimateBasis = "rate"
	// BasisCapacity: no admission was measured within the rate window (a
	// room just opened, or a full room where nobody has left), or the
	// sale has not begun, or a slot is free now: the estimate comes from
	// the room's free slots, the leases of the slots held, its capacity,
	// lease and outflow limit, assuming that every holder keeps their
	// slot to the end of its lease and no longer.
	BasisCapacity EstimateBasis = "capacity"
)

// rateLow and rateHigh are how far a rate-based estimate reaches either
// side of the wait the measured rate gives: the rate of the next minutes
// is not the rate of the last ten seconds.
const rateLow, rateHigh = 0.8, 1.25

// WaitEstimate is a waiting user's expected wait: a range, never a point
// that pretends to know more than the room does.
type WaitEstimate struct {
	// Low and High bound the expected wait (0 <= Low <= High).
	Low, High time.Duration
	// Basis is what the range rests on; empty when there is no estimate
	// (the room is paused or closed, or its state is not known here).
	Basis EstimateBasis
}

// Known reports whether e is an estimate.
func (e WaitEstimate) Known() bool { return e.Basis != "" }

// Mid is the middle of the range.
func (e WaitEstimate) Mid() time.Duration { return e.Low + (e.High-e.Low)/2 }

// RoomLoad is what a wait estimate knows of a room at one instant.
type RoomLoad struct {
	// Now is the instant of the estimate.
	Now time.Time
	// Sale is the room's sale at Now (RoomConfig.SaleAt): its phase, and
	// the capacity, outflow limit and tick in force (or of the next
	// window).
	Sale Sale
	// Paused is the room's Paused: nobody is admitted until it resumes,
	// whenever that is.
	Paused bool
	// Lease is how long an admission lasts.
	Lease time.Duration
	// Active is how many slots are held.
	Active int64
	// NextExpiry is when the earliest lease held runs out (zero: none is
	// known).
	NextExpiry time.Time
	// Rate is the measured rate at which the room takes buyers in, per
	// second: the admissions in the rate window, but no more than the
	// slots freed (released or expired) in it, since a full room admits
	// only as fast as slots free up, and the burst that first fills a
	// room says nothing of that. 0 when nothing was measured.
	Rate float64
}

// EstimateWait estimates the wait of a user with ahead users before them
// in line, who is admitted with the (ahead+1)-th admission from now:
//
//   - Before the sale begins or between two windows, nobody is admitted
//     until the next start: that time comes first, then the wait below
//     on the room's capacity (BasisCapacity).
//   - With a measured rate r (RoomLoad.Rate), the users beyond the free
//     slots divided by r, from 0.8 to 1.25 times it (BasisRate), and never
//     below what the outflow limit allows.
//   - Without one (BasisCapacity): the free slots go at the next tick; the
//     admissions after them wait for leases to end. Among the held slots
//     the earliest ends at NextExpiry and all within a lease; slots taken
//     now end a lease from now; each slot then turns over once a lease.
//     So a full room of 300-second leases where nobody leaves says five
//     minutes to its next buyer, not "less than a minute". The outflow
//     limit bounds it from below too.
//
// A paused or closed room, or a negative ahead, has no estimate.
func EstimateWait(ahead int64, l RoomLoad) WaitEstimate {
	if ahead < 0 || l.Paused || l.Sale.Phase == PhaseClosed {
		return WaitEstimate{}
	}
	n := ahead + 1 // the admissions up to and including this user's
	var start time.Duration
	if l.Sale.Phase == PhaseBefore || l.Sale.Phase == PhaseBetween {
		start = max(l.Sale.Starts.Sub(l.Now), 0)
	}
	// The outflow limit: n admissions take at least (n-1) intervals of
	// the limit after the first (its bucket holds about one).
	var outLow, outHigh time.Duration
	if m := l.Sale.MaxAdmissionsPerMinute; m > 0 {
		per := float64(time.Minute) / float64(m)
		outLow, outHigh = seconds(per*float64(n-1)), seconds(per*float64(n))
	}
	capacity := int64(l.Sale.Capacity)
	free := max(capacity-l.Active, 0)
	if start == 0 && l.Rate > 0 && n > free {
		mid := float64(n-free) / l.Rate * float64(time.Second)
		low := max(seconds(mid*rateLow), outLow)
		return WaitEstimate{Low: low, High: max(seconds(mid*rateHigh), low), Basis: BasisRate}
	}
	var low, high time.Duration
	if beyond := n - free; beyond > 0 && capacity > 0 && l.Lease > 0 {
		// The beyond-th slot to free up: the held ones end first (the
		// earliest at NextExpiry, all within a lease), then the ones
		// taken now, a lease from now; each turns over once a lease.
		cycles := (beyond - 1) / capacity
		k := (beyond-1)%capacity + 1
		turn := time.Duration(cycles) * l.Lease
		first := l.Lease // a slot taken now
		if k <= l.Active {
			first = min(max(l.NextExpiry.Sub(l.Now), 0), l.Lease)
			if l.NextExpiry.IsZero() {
				first = 0 // unknown: as early as now
			}
		}
		low, high = first+turn, l.Lease+turn
	} else if beyond > 0 {
		return WaitEstimate{} // no capacity or no lease: nothing to go by
	}
	high += l.Sale.AdmitInterval // the pass that admits
	low = max(low, outLow)
	high = max(high, outHigh, low)
	return WaitEstimate{Low: start + low, High: start + high, Basis: BasisCapacity}
}

// seconds turns a float number of nanoseconds into a Duration, bounded.
func seconds(ns float64) time.Duration {
	if ns >= math.MaxInt64 || math.IsNaN(ns) {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(ns)
}
