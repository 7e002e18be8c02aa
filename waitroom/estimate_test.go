package waitroom_test

import (
	"testing"
	"time"

	"github.com/stampede-lab/stampede/waitroom"
)

// open is a sale in force with capacity c and no outflow limit.
func open(c int) waitroom.Sale {
	return waitroom.Sale{Phase: waitroom.PhaseOpen, Window: -1, Capacity: c, AdmitInterval: 200 * time.Millisecond}
}

// TestEstimateFullRoomNobodyLeaving: both slots of a room held on
// 300-second leases (the earliest ends in 290 s), nobody admitted within
// the rate window: the next buyer waits about five minutes, not "less
// than a minute"; the third waits for a slot's second turn.
func TestEstimateFullRoomNobodyLeaving(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	load := waitroom.RoomLoad{Now: now, Sale: open(2), Lease: 300 * time.Second, Active: 2, NextExpiry: now.Add(290 * time.Second)}
	for _, c := range []struct {
		ahead     int64
		low, high time.Duration
	}{
		{0, 290 * time.Second, 300*time.Second + 200*time.Millisecond}, // the earliest lease's end, or the last's
		{1, 290 * time.Second, 300*time.Second + 200*time.Millisecond}, // the second held lease: within one lease
		{2, 590 * time.Second, 600*time.Second + 200*time.Millisecond}, // a slot's second turn
	} {
		e := waitroom.EstimateWait(c.ahead, load)
		if e.Basis != waitroom.BasisCapacity || e.Low != c.low || e.High != c.high {
			t.Errorf("ahead %d: %+v, want %s–%s on the room's capacity", c.ahead, e, c.low, c.high)
		}
		if e.High < time.Minute || e.Low < time.Minute {
			t.Errorf("ahead %d: %s–%s: less than a minute while every slot is held for minutes", c.ahead, e.Low, e.High)
		}
	}
	// The same room with a slot free: the next buyer goes at the next pass.
	load.Active = 1
	if e := waitroom.EstimateWait(0, load); e.Low != 0 || e.High != 200*time.Millisecond {
		t.Errorf("a free slot: %+v, want 0–200ms", e)
	}
}

// TestEstimateSteadyRate: with a measured rate of 2 admissions a second,
// the 100th in line waits 50 s, shown as 40–62.5 s; the outflow limit
// keeps the low end at what it allows.
func TestEstimateSteadyRate(t *testing.T) {
	now := time.Now()
	load := waitroom.RoomLoad{Now: now, Sale: open(10), Lease: 300 * time.Second, Active: 10, NextExpiry: now.Add(time.Minute), Rate: 2}
	e := waitroom.EstimateWait(99, load)
	if e.Basis != waitroom.BasisRate || e.Low != 40*time.Second || e.High != 62500*time.Millisecond || e.Mid() != 51250*time.Millisecond {
		t.Errorf("rate 2/s, 100th: %+v, want 40s–1m2.5s from the rate", e)
	}
	// Halving the rate doubles the wait.
	load.Rate = 1
	if e2 := waitroom.EstimateWait(99, load); e2.Low != 2*e.Low || e2.High != 2*e.High {
		t.Errorf("rate 1/s: %+v, want twice %+v", e2, e)
	}
	// An outflow of 30 a minute lets the 100th in after 99 × 2 s at the
	// earliest, whatever the rate measured.
	load.Rate, load.Sale.MaxAdmissionsPerMinute = 10, 30
	if e := waitroom.EstimateWait(99, load); e.Low != 198*time.Second || e.High < e.Low {
		t.Errorf("outflow 30/min, rate 10/s: %+v, want at least 198s", e)
	}
}

// TestEstimateBeforeAndBetween: nobody is admitted before the sale starts
// or between windows: that time comes first, whatever the rate measured
// in the window before.
func TestEstimateBeforeAndBetween(t *testing.T) {
	now := time.Now()
	for _, phase := range []waitroom.Phase{waitroom.PhaseBefore, waitroom.PhaseBetween} {
		sale := open(5)
		sale.Phase, sale.Starts = phase, now.Add(10*time.Minute)
		e := waitroom.EstimateWait(2, waitroom.RoomLoad{Now: now, Sale: sale, Lease: time.Minute, Rate: 3})
		if e.Basis != waitroom.BasisCapacity || e.Low != 10*time.Minute || e.High != 10*time.Minute+200*time.Millisecond {
			t.Errorf("%s: %+v, want 10m to 10m and a tick", phase, e)
		}
	}
}

// TestEstimateUnknown: a paused or closed room, or an unknown place, has
// no estimate.
func TestEstimateUnknown(t *testing.T) {
	now := time.Now()
	closed := open(5)
	closed.Phase = waitroom.PhaseClosed
	for name, c := range map[string]struct {
		ahead int64
		load  waitroom.RoomLoad
	}{
		"paused":   {3, waitroom.RoomLoad{Now: now, Sale: open(5), Lease: time.Minute, Paused: true, Rate: 1}},
		"closed":   {3, waitroom.RoomLoad{Now: now, Sale: closed, Lease: time.Minute}},
		"no place": {-1, waitroom.RoomLoad{Now: now, Sale: open(5), Lease: time.Minute}},
	} {
		if e := waitroom.EstimateWait(c.ahead, c.load); e.Known() {
			t.Errorf("%s: %+v, want no estimate", name, e)
		}
	}
}
