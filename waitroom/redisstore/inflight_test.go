package redisstore

import (
	"testing"
	"time"
)

// TestInflightBound: scripts beyond the limit are refused, joins beyond
// their share of it; a place comes back when the server answers.
func TestInflightBound(t *testing.T) {
	l := newInflight(time.Second)
	l.limit = 8
	for i := range 6 {
		if !l.acquire(true) {
			t.Fatalf("join %d refused under its share (6 of 8)", i+1)
		}
	}
	if l.acquire(true) {
		t.Fatal("a 7th join was let in: joins may hold only 3/4 of a limit of 8")
	}
	for i := range 2 {
		if !l.acquire(false) {
			t.Fatalf("poll %d refused with %d of 8 places taken", i+1, 6+i)
		}
	}
	if l.acquire(false) {
		t.Fatal("a 9th script was let in beyond the limit of 8")
	}
	if got := l.refused.Load(); got != 2 {
		t.Fatalf("refused = %d, want 2", got)
	}
	l.release(time.Millisecond, true)
	if !l.acquire(false) {
		t.Fatal("a place given back was not taken again")
	}
}

// TestInflightAdapts: the limit halves when a script's caller gave up
// before the server answered, falls by a tenth when an answer was slow
// (once per decreaseEvery), and grows while answers come in time with
// the limit at least half used, within its floor and ceiling.
func TestInflightAdapts(t *testing.T) {
	l := newInflight(time.Second)
	l.limit = 100
	l.n = 60
	l.release(time.Millisecond, true)
	if l.limit <= 100 || l.limit > 100.011 {
		t.Fatalf("limit after a fast answer with 60 of 100 in use = %v, want 100.01", l.limit)
	}
	l.n = 10
	before := l.limit
	l.release(time.Millisecond, true)
	if l.limit != before {
		t.Fatalf("limit grew to %v with 10 of 100 in use: an unused limit proves nothing", l.limit)
	}
	l.n = 10
	l.release(2*time.Second, false)
	if l.limit < 50 || l.limit > 50.1 {
		t.Fatalf("limit after an abandoned script = %v, want about half of 100", l.limit)
	}
	l.n = 10
	l.release(2*time.Second, false)
	if l.limit < 50 {
		t.Fatalf("limit fell twice within %v: %v", decreaseEvery, l.limit)
	}
	l.cut = time.Now().Add(-decreaseEvery)
	l.n = 10
	l.release(300*time.Millisecond, true) // slower than a quarter of the timeout
	if l.limit < 45 || l.limit > 45.1 {
		t.Fatalf("limit after a slow answer = %v, want 45 (a tenth less)", l.limit)
	}
	for range 20 {
		l.cut = time.Time{}
		l.n = 1
		l.release(0, false)
	}
	if l.limit != inflightMin {
		t.Fatalf("limit fell to %v, below its floor %d", l.limit, inflightMin)
	}
	l.limit = inflightMax
	l.n = inflightMax
	l.release(0, true)
	if l.limit != inflightMax {
		t.Fatalf("limit grew to %v, above its ceiling %d", l.limit, inflightMax)
	}
}
