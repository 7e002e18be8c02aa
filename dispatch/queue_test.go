package dispatch

import "testing"

// TestDequeKeepsOrderAcrossWrapAndGrowth checks the ring buffer against a
// plain slice through pushes, pops at both ends, wrap-around and growth.
func TestDequeKeepsOrderAcrossWrapAndGrowth(t *testing.T) {
	var q deque[int]
	var model []int
	next := 0
	for round := range 200 {
		for range round%7 + 1 {
			q.pushBack(next)
			model = append(model, next)
			next++
		}
		for range round % 5 {
			got, ok := q.popFront()
			if len(model) == 0 {
				if ok {
					t.Fatalf("popFront on empty returned %d", got)
				}
				continue
			}
			if !ok || got != model[0] {
				t.Fatalf("popFront = %d, %v; want %d", got, ok, model[0])
			}
			model = model[1:]
		}
		if round%11 == 0 && len(model) > 0 {
			got, _ := q.popBack()
			if got != model[len(model)-1] {
				t.Fatalf("popBack = %d, want %d", got, model[len(model)-1])
			}
			model = model[:len(model)-1]
		}
		if q.len() != len(model) {
			t.Fatalf("len = %d, want %d", q.len(), len(model))
		}
		for i, want := range model {
			if got := q.at(i); got != want {
				t.Fatalf("at(%d) = %d, want %d", i, got, want)
			}
		}
		if len(q.buf)&(len(q.buf)-1) != 0 {
			t.Fatalf("buffer size %d is not a power of two", len(q.buf))
		}
	}
}
