package storetest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/stampede-lab/stampede/waitroom"
)

// testView: Store.View counts the queue, the admissions and the
// departures (left, set aside), says whether the room is paused or
// closed, and a waiting ticket's marks, when the store reports them, are
// the view's counters at the read.
func testView(t *testing.T, h Harness) {
	s := h.Store(t)
	ctx := context.Background()
	if _, err := s.View(ctx, "never-configured"); !errors.Is(err, waitroom.ErrNoRoom) {
		t.Errorf("View of an unknown room = %v, want ErrNoRoom", err)
	}
	room := newRoomWith(t, h, s, 2, func(c *waitroom.RoomConfig) { c.AbandonAfter = time.Second })
	us := users(6)
	join(t, s, room, us...)
	view := func() waitroom.RoomView {
		t.Helper()
		v, err := s.View(ctx, room)
		if err != nil {
			t.Fatalf("View: %v", err)
		}
		return v
	}
	v := view()
	if v.Waiting != 6 || v.AdmittedTotal != 0 || v.DepartedTotal != 0 || v.Phase != waitroom.PhaseOpen || v.Paused || !v.Ordered {
		t.Fatalf("view after 6 joins = %+v, want 6 waiting, nothing admitted or departed, open and ordered", v)
	}
	admit(t, s, room)
	if _, err := s.Leave(ctx, room, us[5]); err != nil {
		t.Fatal(err)
	}
	v = view()
	if v.Waiting != 3 || v.AdmittedTotal != 2 || v.DepartedTotal != 1 {
		t.Fatalf("view after 2 admissions and one leave = %+v, want 3 waiting, 2 admitted, 1 departed", v)
	}
	if tk := state(t, s, room, us[4]); tk.Marks != nil && (tk.Marks.Admitted != 2 || tk.Marks.Departed != 1 || tk.Position != 2) {
		t.Errorf("%s = %+v marks %+v, want position 2 with the view's counters (2 admitted, 1 departed)", us[4], tk, *tk.Marks)
	}
	// us[2] stops polling, us[3] and us[4] poll: us[2] is set aside, a
	// departure.
	h.Advance(t, 1100*time.Millisecond)
	state(t, s, room, us[3])
	state(t, s, room, us[4])
	admit(t, s, room)
	if v = view(); v.Waiting != 2 || v.DepartedTotal != 2 {
		t.Fatalf("view after %s was set aside = %+v, want 2 waiting, 2 departed", us[2], v)
	}
	cfg, err := s.Config(ctx, room)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Paused = true
	if err := s.UpdateConfig(ctx, room, cfg, []string{"paused"}); err != nil {
		t.Fatal(err)
	}
	if v = view(); !v.Paused || v.Phase != waitroom.PhaseOpen {
		t.Errorf("view of a paused room = %+v, want paused, open", v)
	}
	cfg.Closed = true
	if err := s.UpdateConfig(ctx, room, cfg, []string{"closed"}); err != nil {
		t.Fatal(err)
	}
	if v = view(); v.Phase != waitroom.PhaseClosed {
		t.Errorf("view of a closed room = %+v, want phase closed", v)
	}
}

// testTouch: a store that records presence in batches (waitroom.Toucher)
// keeps a touched user's place as a read would, gives a user set aside
// their place back, and names the users not waiting.
func testTouch(t *testing.T, h Harness) {
	s := h.Store(t)
	tc, ok := s.(waitroom.Toucher)
	if !ok {
		t.Skip("the store records no presence in batches (not a waitroom.Toucher)")
	}
	ctx := context.Background()
	room := newRoomWith(t, h, s, 1, func(c *waitroom.RoomConfig) { c.AbandonAfter = time.Second })
	join(t, s, room, "adm", "a", "b", "c")
	admit(t, s, room) // adm
	h.Advance(t, 1100*time.Millisecond)
	// b and c are touched, a is not: a is set aside at the next pass.
	gone, err := tc.Touch(ctx, room, []string{"b", "c", "adm", "nobody"})
	if err != nil {
		t.Fatalf("Touch: %v", err)
	}
	slices.Sort(gone)
	if !slices.Equal(gone, []string{"adm", "nobody"}) {
		t.Errorf("Touch named %v gone, want [adm nobody] (admitted, unknown)", gone)
	}
	admit(t, s, room)
	st := checkAccounting(t, s, room)
	if st.Away != 1 || st.Waiting != 2 {
		t.Fatalf("after a was not touched: %+v, want a away, b and c waiting", st)
	}
	// Touching a within the window gives the place back, ahead of b.
	if gone, err := tc.Touch(ctx, room, []string{"a"}); err != nil || len(gone) != 0 {
		t.Fatalf("Touch(a) = %v, %v; want a back", gone, err)
	}
	if tk := state(t, s, room, "a"); tk.State != waitroom.StateWaiting || tk.Position != 0 {
		t.Errorf("a after a touch within the window = %+v, want waiting at position 0", tk)
	}
	if tk := state(t, s, room, "b"); tk.Position != 1 {
		t.Errorf("b = %+v, want position 1", tk)
	}
}
