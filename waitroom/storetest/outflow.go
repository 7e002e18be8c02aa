package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/stampede-lab/stampede/waitroom"
)

// testAdaptiveOutflow: a store that holds an adaptive outflow admits at
// it, below the room's limit, and lets it lapse when nobody renews it.
func testAdaptiveOutflow(t *testing.T, h Harness) {
	s := h.Store(t)
	os, ok := s.(waitroom.OutflowStore)
	if !ok {
		t.Skip("the store holds no adaptive outflow (not a waitroom.OutflowStore)")
	}
	if h.sharded() {
		t.Skip("a sharded room's admission ignores the adaptive outflow (documented in docs/waitroom.md)")
	}
	ctx := context.Background()
	room := newRoomWith(t, h, s, 50, func(c *waitroom.RoomConfig) { c.MaxAdmissionsPerMinute = 600 }) // bursts of 10
	join(t, s, room, users(40)...)
	if err := os.SetOutflow(ctx, room, 60, "upstream p99 3s over 1s"); err != nil {
		t.Fatal(err)
	}
	if n, why, err := os.Outflow(ctx, room); err != nil || n != 60 || why != "upstream p99 3s over 1s" {
		t.Fatalf("Outflow = %d %q %v, want 60 and its reason", n, why, err)
	}
	if res := admit(t, s, room); len(res.Admitted) != 1 {
		t.Fatalf("admitted %d at 60 a minute (bursts of 1), want 1", len(res.Admitted))
	}
	h.Advance(t, waitroom.OutflowLapse+time.Second)
	if n, _, err := os.Outflow(ctx, room); err != nil || n != 0 {
		t.Fatalf("Outflow after the lapse = %d %v, want 0", n, err)
	}
	if res := admit(t, s, room); len(res.Admitted) != 10 {
		t.Fatalf("admitted %d once the adaptive outflow lapsed, want the limit's burst of 10", len(res.Admitted))
	}
	if err := os.SetOutflow(ctx, "no-such-room-outflow", 60, ""); err == nil {
		t.Error("SetOutflow on a room that does not exist succeeded")
	}
}
