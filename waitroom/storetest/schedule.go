package storetest

import (
	"context"
	"crypto/ed25519"
	"slices"
	"testing"
	"time"

	"github.com/stampede-lab/stampede/waitroom"
)

// The suite's cases for schedules (closes_at, windows) and invites.

// testInviteKey is an invite_key (the store does not check signatures).
func testInviteKey() string {
	return waitroom.EncodeInviteKey(ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize)).Public().(ed25519.PublicKey))
}

// storeNow returns the store's clock, read by an admission pass of a
// probe room.
func storeNow(t *testing.T, h Harness, s waitroom.Store) time.Time {
	t.Helper()
	return admit(t, s, newRoom(t, h, s, 1, time.Minute)).At
}

// testClosesAt: once closes_at has passed, a waiting ticket reads closed
// before any pass, a pass admits nobody and closes the rest of the line,
// a new join is told the sale is over, and the admitted keep their lease.
func testClosesAt(t *testing.T, h Harness) {
	s := h.Store(t)
	ctx := context.Background()
	now := storeNow(t, h, s)
	room := newRoomWith(t, h, s, 1, func(c *waitroom.RoomConfig) {
		c.ClosesAt, c.ClosedMessage = now.Add(time.Hour), "sold out"
	})
	join(t, s, room, users(3)...)
	if res := admit(t, s, room); !slices.Equal(res.Admitted, users(1)) {
		t.Fatalf("before closes_at admitted %v, want %v", res.Admitted, users(1))
	}
	cfg, err := s.Config(ctx, room)
	if err != nil {
		t.Fatal(err)
	}
	// closes_at in the past, by the store's clock: the sale is over.
	cfg.ClosesAt = now.Add(-time.Second)
	if err := s.UpdateConfig(ctx, room, cfg, []string{"closes_at"}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Config(ctx, room); err != nil || !got.ClosesAt.Equal(cfg.ClosesAt) {
		t.Fatalf("closes_at read back = %v, %v; want %v", got.ClosesAt, err, cfg.ClosesAt)
	}
	if tk := state(t, s, room, "user-001"); tk.State != waitroom.StateClosed || tk.Message != "sold out" {
		t.Fatalf("waiting ticket past closes_at = %+v, want closed with the message", tk)
	}
	// A slot left free past closes_at: nobody may take it.
	if _, err := s.Leave(ctx, room, "user-000"); err != nil {
		t.Fatal(err)
	}
	if res := admit(t, s, room); len(res.Admitted) != 0 {
		t.Fatalf("past closes_at admitted %v", res.Admitted)
	}
	if tk := state(t, s, room, "user-002"); tk.State != waitroom.StateClosed {
		t.Errorf("user-002 past closes_at = %+v, want closed", tk)
	}
	tk, err := s.Join(ctx, room, "newcomer")
	if err != nil || tk.State != waitroom.StateClosed || tk.Created {
		t.Errorf("Join past closes_at = %+v, %v; want closed, not queued", tk, err)
	}
	if st := checkAccounting(t, s, room); st.Waiting != 0 || st.ClosedTotal != 2 {
		t.Errorf("stats = %+v, want nobody waiting and 2 closed", st)
	}
}

// testClosesAtKeepsLeases: an admitted user keeps their lease past
// closes_at.
func testClosesAtKeepsLeases(t *testing.T, h Harness) {
	s := h.Store(t)
	ctx := context.Background()
	now := storeNow(t, h, s)
	room := newRoomWith(t, h, s, 2, func(c *waitroom.RoomConfig) { c.ClosesAt = now.Add(time.Hour) })
	join(t, s, room, users(1)...)
	admit(t, s, room)
	cfg, _ := s.Config(ctx, room)
	cfg.ClosesAt = now.Add(-time.Second)
	if err := s.UpdateConfig(ctx, room, cfg, []string{"closes_at"}); err != nil {
		t.Fatal(err)
	}
	admit(t, s, room)
	if tk := state(t, s, room, "user-000"); tk.State != waitroom.StateAdmitted {
		t.Errorf("admitted user past closes_at = %+v, want still admitted", tk)
	}
}

// testScheduleWindows: a schedule of two windows, the second with a lower
// capacity. Before the first nobody is admitted; in it, up to its
// capacity; between the windows nobody, even with a free slot; in the
// second, nobody until the slots held drop below its capacity (the cap
// stays exact across the change). The second window is open-ended, so
// that a slow server has time for every step in it (the end of the last
// window is testScheduleOver's).
func testScheduleWindows(t *testing.T, h Harness) {
	s := h.Store(t)
	ctx := context.Background()
	now := storeNow(t, h, s)
	ms := func(n int) time.Time { return now.Add(time.Duration(n) * time.Millisecond) }
	sched := []waitroom.Window{
		{Start: ms(300), End: ms(600), Capacity: 3},
		{Start: ms(800), Capacity: 1, MaxAdmissionsPerMinute: 600, AdmitInterval: 50 * time.Millisecond},
	}
	room := newRoomWith(t, h, s, 100, func(c *waitroom.RoomConfig) { c.Schedule = sched })
	if cfg, err := s.Config(ctx, room); err != nil || !slices.EqualFunc(cfg.Schedule, sched, func(a, b waitroom.Window) bool {
		return a.Start.Equal(b.Start) && a.End.Equal(b.End) && a.Capacity == b.Capacity &&
			a.MaxAdmissionsPerMinute == b.MaxAdmissionsPerMinute && a.AdmitInterval == b.AdmitInterval && a.InviteOnly == b.InviteOnly
	}) {
		t.Fatalf("schedule read back = %+v, %v; want %+v", cfg.Schedule, err, sched)
	}
	join(t, s, room, users(6)...)
	if res := admit(t, s, room); len(res.Admitted) != 0 {
		t.Fatalf("before the first window admitted %v", res.Admitted)
	}
	h.Advance(t, 350*time.Millisecond) // in the first window
	first := admit(t, s, room)
	if len(first.Admitted) != 3 {
		t.Fatalf("first window (capacity 3) admitted %v, want 3", first.Admitted)
	}
	h.Advance(t, 300*time.Millisecond) // between the windows
	if _, err := s.Leave(ctx, room, first.Admitted[0]); err != nil {
		t.Fatal(err)
	}
	if res := admit(t, s, room); len(res.Admitted) != 0 {
		t.Fatalf("between windows admitted %v", res.Admitted)
	}
	var waiter string // the pre-queue was shuffled: one of those not let in
	for _, u := range users(6) {
		if !slices.Contains(first.Admitted, u) {
			waiter = u
		}
	}
	if tk := state(t, s, room, waiter); tk.State != waitroom.StateWaiting {
		t.Fatalf("a waiting user between windows = %+v, want still waiting", tk)
	}
	h.Advance(t, 200*time.Millisecond) // in the second window: capacity 1, 2 held
	if res := admit(t, s, room); len(res.Admitted) != 0 {
		t.Fatalf("second window (capacity 1) with 2 held admitted %v", res.Admitted)
	}
	if _, err := s.Leave(ctx, room, first.Admitted[1]); err != nil {
		t.Fatal(err)
	}
	if res := admit(t, s, room); len(res.Admitted) != 0 {
		t.Fatalf("second window (capacity 1) with 1 held admitted %v", res.Admitted)
	}
	if _, err := s.Leave(ctx, room, first.Admitted[2]); err != nil {
		t.Fatal(err)
	}
	if res := admit(t, s, room); len(res.Admitted) != 1 {
		t.Fatalf("second window (capacity 1) with none held admitted %v, want one", res.Admitted)
	}
	if st := checkAccounting(t, s, room); st.Active != 1 || st.Waiting != 2 {
		t.Fatalf("in the second window: %+v, want 1 admitted and 2 waiting", st)
	}
}

// testScheduleOver: past the last window's end the sale is over: a
// waiting ticket reads closed, a pass admits nobody and closes the line,
// a join is told, the admitted keep their lease.
func testScheduleOver(t *testing.T, h Harness) {
	s := h.Store(t)
	ctx := context.Background()
	now := storeNow(t, h, s)
	room := newRoomWith(t, h, s, 5, func(c *waitroom.RoomConfig) {
		c.Schedule = []waitroom.Window{{Start: now.Add(-time.Hour), End: now.Add(time.Hour), Capacity: 1}}
	})
	join(t, s, room, users(3)...)
	in := admit(t, s, room).Admitted // one, of the shuffled pre-queue
	waiter := "user-000"
	if slices.Contains(in, waiter) {
		waiter = "user-001"
	}
	cfg, _ := s.Config(ctx, room)
	cfg.Schedule = []waitroom.Window{{Start: now.Add(-2 * time.Hour), End: now.Add(-time.Hour), Capacity: 5}}
	if err := s.UpdateConfig(ctx, room, cfg, []string{"schedule"}); err != nil {
		t.Fatal(err)
	}
	if tk := state(t, s, room, waiter); tk.State != waitroom.StateClosed {
		t.Fatalf("waiting ticket after the last window = %+v, want closed", tk)
	}
	if res := admit(t, s, room); len(res.Admitted) != 0 {
		t.Fatalf("after the last window admitted %v", res.Admitted)
	}
	if st := checkAccounting(t, s, room); st.Waiting != 0 || st.ClosedTotal != 2 || st.Active != 1 {
		t.Errorf("after the last window: %+v, want 2 closed, nobody waiting, the admitted kept", st)
	}
	if tk, err := s.Join(ctx, room, "late"); err != nil || tk.State != waitroom.StateClosed {
		t.Errorf("Join after the last window = %+v, %v; want closed", tk, err)
	}
}

// testScheduleGap: between two windows nobody is admitted, even with
// every slot of both windows free; a waiting user keeps their place.
func testScheduleGap(t *testing.T, h Harness) {
	s := h.Store(t)
	now := storeNow(t, h, s)
	room := newRoomWith(t, h, s, 5, func(c *waitroom.RoomConfig) {
		c.Schedule = []waitroom.Window{
			{Start: now.Add(-2 * time.Hour), End: now.Add(-time.Hour), Capacity: 5},
			{Start: now.Add(time.Hour), Capacity: 5},
		}
	})
	join(t, s, room, users(2)...)
	if res := admit(t, s, room); len(res.Admitted) != 0 {
		t.Fatalf("between windows admitted %v", res.Admitted)
	}
	if tk := state(t, s, room, "user-001"); tk.State != waitroom.StateWaiting || tk.Position != 1 {
		t.Errorf("user-001 between windows = %+v, want waiting second", tk)
	}
}

// testInvites: an invite-only room refuses plain joins; an invite holds
// one place whatever the number of joins with it (devices); once that
// place is finished the invite is refused; the room counts its invites.
func testInvites(t *testing.T, h Harness) {
	s := h.Store(t)
	is, ok := s.(waitroom.InviteStore)
	if !ok {
		t.Skip("the store takes no invites (not a waitroom.InviteStore)")
	}
	ctx := context.Background()
	room := newRoomWith(t, h, s, 1, func(c *waitroom.RoomConfig) {
		c.InviteOnly, c.InviteKey = true, testInviteKey()
	})
	if _, err := s.Join(ctx, room, "plain"); waitroom.ErrorCode(err) != waitroom.CodeInviteRequired {
		t.Fatalf("plain Join in an invite-only room = %v, want %s", err, waitroom.CodeInviteRequired)
	}
	exp := time.Now().Add(time.Hour)
	a, b := waitroom.InvitePrefix+"a", waitroom.InvitePrefix+"b"
	t1, err := is.JoinInvite(ctx, room, a, exp)
	if err != nil || !t1.Created || t1.State != waitroom.StateWaiting {
		t.Fatalf("first JoinInvite = %+v, %v; want a new waiting ticket", t1, err)
	}
	t2, err := is.JoinInvite(ctx, room, a, exp) // a second device
	if err != nil || t2.Created || t2.State != waitroom.StateWaiting || t2.Seq != t1.Seq {
		t.Fatalf("second JoinInvite = %+v, %v; want the same place %+v", t2, err, t1)
	}
	if _, err := is.JoinInvite(ctx, room, b, exp); err != nil {
		t.Fatal(err)
	}
	if res := admit(t, s, room); !slices.Equal(res.Admitted, []string{a}) {
		t.Fatalf("admitted %v, want %s", res.Admitted, a)
	}
	if tk, err := is.JoinInvite(ctx, room, a, exp); err != nil || tk.Created || tk.State != waitroom.StateAdmitted {
		t.Fatalf("JoinInvite of an admitted place = %+v, %v; want the admitted ticket", tk, err)
	}
	if _, err := s.Leave(ctx, room, a); err != nil {
		t.Fatal(err)
	}
	if _, err := is.JoinInvite(ctx, room, a, exp); waitroom.ErrorCode(err) != waitroom.CodeInviteUsed {
		t.Fatalf("JoinInvite of a released place = %v, want %s", err, waitroom.CodeInviteUsed)
	}
	st := checkAccounting(t, s, room)
	if st.InvitesUsed != 2 || st.InvitesHeld != 2 || st.InvitesRefused != 1 || st.JoinedTotal != 2 {
		t.Errorf("stats = %+v, want 2 invites used and held, 1 refused, 2 joined", st)
	}
}

// testInviteWindow: a window's invite rule holds while it is in force: a
// presale window takes invited buyers only, the general sale anyone.
func testInviteWindow(t *testing.T, h Harness) {
	s := h.Store(t)
	ctx := context.Background()
	now := storeNow(t, h, s)
	presale := []waitroom.Window{
		{Start: now.Add(-time.Hour), End: now.Add(time.Hour), Capacity: 1, InviteOnly: true},
		{Start: now.Add(2 * time.Hour), Capacity: 5},
	}
	room := newRoomWith(t, h, s, 1, func(c *waitroom.RoomConfig) {
		c.Schedule, c.InviteKey = presale, testInviteKey()
	})
	if _, err := s.Join(ctx, room, "plain"); waitroom.ErrorCode(err) != waitroom.CodeInviteRequired {
		t.Fatalf("plain Join in a presale window = %v, want %s", err, waitroom.CodeInviteRequired)
	}
	cfg, _ := s.Config(ctx, room)
	cfg.Schedule = []waitroom.Window{{Start: now.Add(-time.Hour), Capacity: 5}} // the general sale
	if err := s.UpdateConfig(ctx, room, cfg, []string{"schedule"}); err != nil {
		t.Fatal(err)
	}
	if tk, err := s.Join(ctx, room, "plain"); err != nil || !tk.Created {
		t.Fatalf("plain Join in the general sale = %+v, %v; want queued", tk, err)
	}
}
