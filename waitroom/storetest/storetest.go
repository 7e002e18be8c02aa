// Package storetest is the conformance suite every waitroom.Store must
// pass. An adapter's tests call Run with a Harness that makes fresh stores
// and moves the store's clock forward.
package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stampede-lab/stampede/waitroom"
)

// Harness makes the store under test.
type Harness struct {
	// Store returns the store under test. Rooms are named uniquely per
	// test, so one store may serve every test.
	Store func(t *testing.T) waitroom.Store
	// Advance moves the store's clock forward by at least d (for a real
	// server: sleep).
	Advance func(t *testing.T, d time.Duration)
}

// Run runs the suite.
func Run(t *testing.T, h Harness) {
	tests := []struct {
		name string
		fn   func(t *testing.T, h Harness)
	}{
		{"UnknownRoom", testUnknownRoom},
		{"ConfigRoundTrip", testConfigRoundTrip},
		{"JoinIsIdempotentAndFIFO", testJoinIdempotentFIFO},
		{"AtomicAdmitsUpToCapacityInOrder", testAtomicAdmits},
		{"LeaveWaitingAndAdmitted", testLeave},
		{"LeaseExpiryReclaimsSlots", testLeaseExpiry},
		{"RunOutLeaseReadsExpiredBeforeAnyPass", testSettleOnRead},
		{"EveryModeAdmitsInOrderWhenAlone", testModesAlone},
		{"LeaderSkipsWhenAnotherLeads", testLeaderSkips},
		{"ConcurrentAtomicNeverOverCapacity", testConcurrentAtomic},
		{"PingAndOldestWait", testPingAndOldestWait},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, h) })
	}
}

var roomSeq = rand.Uint64()

// newRoom configures a uniquely named room.
func newRoom(t *testing.T, s waitroom.Store, capacity int, lease time.Duration) string {
	t.Helper()
	room := fmt.Sprintf("test-%x-%d", roomSeq, time.Now().UnixNano())
	cfg := waitroom.DefaultRoomConfig()
	cfg.Capacity, cfg.Lease = capacity, lease
	if err := s.Configure(context.Background(), room, cfg); err != nil {
		t.Fatalf("Configure: %v", err)
	}
	if d, ok := s.(interface {
		DeleteRoom(context.Context, string) error
	}); ok {
		// A shared real server would otherwise collect test rooms.
		t.Cleanup(func() { _ = d.DeleteRoom(context.Background(), room) })
	}
	return room
}

// labAdmit runs one pass in mode, skipping the test when s is no
// waitroom.LabStore.
func labAdmit(t *testing.T, s waitroom.Store, ctx context.Context, room string, mode waitroom.Mode, instance string) (waitroom.AdmitResult, error) {
	t.Helper()
	lab, ok := s.(waitroom.LabStore)
	if !ok {
		t.Skipf("%T is no LabStore", s)
	}
	return lab.AdmitMode(ctx, room, mode, instance)
}

func join(t *testing.T, s waitroom.Store, room string, users ...string) {
	t.Helper()
	for _, u := range users {
		if _, err := s.Join(context.Background(), room, u); err != nil {
			t.Fatalf("Join(%s): %v", u, err)
		}
	}
}

func state(t *testing.T, s waitroom.Store, room, user string) waitroom.Ticket {
	t.Helper()
	tk, err := s.Ticket(context.Background(), room, user)
	if err != nil {
		t.Fatalf("Ticket(%s): %v", user, err)
	}
	return tk
}

// checkAccounting: every joined user is in exactly one place.
func checkAccounting(t *testing.T, s waitroom.Store, room string) waitroom.RoomStats {
	t.Helper()
	st, err := s.Stats(context.Background(), room)
	if err != nil {
		t.Fatal(err)
	}
	if sum := st.Waiting + st.Active + st.ReleasedTotal + st.ExpiredTotal + st.LeftTotal; sum != st.JoinedTotal {
		t.Fatalf("accounting: waiting %d + active %d + released %d + expired %d + left %d = %d, joined %d",
			st.Waiting, st.Active, st.ReleasedTotal, st.ExpiredTotal, st.LeftTotal, sum, st.JoinedTotal)
	}
	return st
}

func users(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("user-%03d", i)
	}
	return out
}

func testUnknownRoom(t *testing.T, h Harness) {
	s := h.Store(t)
	ctx := context.Background()
	if _, err := s.Join(ctx, "never-configured", "u"); waitroom.ErrorCode(err) != waitroom.CodeNotFound {
		t.Errorf("Join on an unknown room = %v, want not found", err)
	}
	if _, err := s.Config(ctx, "never-configured"); waitroom.ErrorCode(err) != waitroom.CodeNotFound {
		t.Errorf("Config on an unknown room = %v, want not found", err)
	}
	room := newRoom(t, s, 1, time.Minute)
	if _, err := s.Ticket(ctx, room, "nobody"); waitroom.ErrorCode(err) != waitroom.CodeNotFound {
		t.Errorf("Ticket of a user who never joined = %v, want not found", err)
	}
	if _, err := s.Leave(ctx, room, "nobody"); waitroom.ErrorCode(err) != waitroom.CodeNotFound {
		t.Errorf("Leave of a user who never joined = %v, want not found", err)
	}
}

func testConfigRoundTrip(t *testing.T, h Harness) {
	s := h.Store(t)
	room := newRoom(t, s, 42, 90*time.Second)
	cfg, err := s.Config(context.Background(), room)
	if err != nil {
		t.Fatal(err)
	}
	rooms, err := s.Rooms(context.Background())
	if err != nil || !slices.Contains(rooms, room) {
		t.Fatalf("Rooms() = %v, %v; want it to list %s", rooms, err, room)
	}
	want := waitroom.DefaultRoomConfig()
	want.Capacity, want.Lease = 42, 90*time.Second
	if cfg != want {
		t.Fatalf("Config = %+v, want %+v", cfg, want)
	}
	bad := want
	bad.Capacity = 0
	if err := s.Configure(context.Background(), room, bad); waitroom.ErrorCode(err) != waitroom.CodeInvalid {
		t.Fatalf("Configure with capacity 0 = %v, want invalid", err)
	}
}

func testJoinIdempotentFIFO(t *testing.T, h Harness) {
	s := h.Store(t)
	ctx := context.Background()
	room := newRoom(t, s, 1, time.Minute)
	us := users(3)
	join(t, s, room, us...)
	for i, u := range us {
		again, err := s.Join(ctx, room, u)
		if err != nil {
			t.Fatal(err)
		}
		if again.State != waitroom.StateWaiting || again.Position != int64(i) || again.Seq != int64(i+1) || again.Created {
			t.Errorf("second Join(%s) = %+v, want the existing ticket: waiting at position %d, seq %d, not created", u, again, i, i+1)
		}
	}
	if st := checkAccounting(t, s, room); st.JoinedTotal != 3 || st.Waiting != 3 {
		t.Fatalf("stats after repeated joins = %+v, want 3 joined, 3 waiting", st)
	}
	if first, _ := s.Join(ctx, room, "newcomer"); !first.Created {
		t.Errorf("first Join = %+v, want Created", first)
	}
}

func testAtomicAdmits(t *testing.T, h Harness) {
	s := h.Store(t)
	ctx := context.Background()
	room := newRoom(t, s, 3, time.Minute)
	us := users(5)
	join(t, s, room, us...)
	res, err := s.Admit(ctx, room)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Admitted, us[:3]) || res.RoundTrips != 1 || res.At.IsZero() {
		t.Fatalf("Admit = %+v, want the first 3 in order in one round trip, with the store's time", res)
	}
	if res, _ := s.Admit(ctx, room); len(res.Admitted) != 0 {
		t.Fatalf("a full room admitted %v", res.Admitted)
	}
	tk := state(t, s, room, us[0])
	if tk.State != waitroom.StateAdmitted || tk.LeaseExpires.IsZero() {
		t.Errorf("admitted ticket = %+v", tk)
	}
	if tk := state(t, s, room, us[4]); tk.State != waitroom.StateWaiting || tk.Position != 1 {
		t.Errorf("last user = %+v, want waiting at position 1", tk)
	}
	if again, _ := s.Join(ctx, room, us[0]); again.State != waitroom.StateAdmitted {
		t.Errorf("Join by an admitted user = %+v, want the admitted ticket back", again)
	}
	if st := checkAccounting(t, s, room); st.Active != 3 || st.AdmittedTotal != 3 {
		t.Errorf("stats = %+v", st)
	}
}

func testLeave(t *testing.T, h Harness) {
	s := h.Store(t)
	ctx := context.Background()
	room := newRoom(t, s, 1, time.Minute)
	us := users(3)
	join(t, s, room, us...)
	if _, err := s.Admit(ctx, room); err != nil {
		t.Fatal(err)
	}
	// us[1] leaves the queue: us[2] moves up.
	if tk, err := s.Leave(ctx, room, us[1]); err != nil || tk.State != waitroom.StateLeft {
		t.Fatalf("Leave(waiting) = %+v, %v", tk, err)
	}
	if tk := state(t, s, room, us[2]); tk.Position != 0 {
		t.Errorf("position after the user ahead left = %d, want 0", tk.Position)
	}
	// us[0] releases the slot: the next admission lets us[2] in.
	if tk, err := s.Leave(ctx, room, us[0]); err != nil || tk.State != waitroom.StateReleased {
		t.Fatalf("Leave(admitted) = %+v, %v", tk, err)
	}
	if tk, err := s.Leave(ctx, room, us[0]); err != nil || tk.State != waitroom.StateReleased {
		t.Fatalf("second Leave = %+v, %v; want released again, no error", tk, err)
	}
	res, err := s.Admit(ctx, room)
	if err != nil || !slices.Equal(res.Admitted, []string{us[2]}) {
		t.Fatalf("Admit after release = %+v, %v", res, err)
	}
	st := checkAccounting(t, s, room)
	if st.ReleasedTotal != 1 || st.LeftTotal != 1 {
		t.Errorf("stats = %+v", st)
	}
	// Joining again after leaving starts at the back.
	if tk, _ := s.Join(ctx, room, us[1]); tk.State != waitroom.StateWaiting || tk.Seq != 4 {
		t.Errorf("rejoin = %+v, want waiting with a new sequence number", tk)
	}
}

func testLeaseExpiry(t *testing.T, h Harness) {
	s := h.Store(t)
	ctx := context.Background()
	room := newRoom(t, s, 2, time.Second)
	us := users(4)
	join(t, s, room, us...)
	if _, err := s.Admit(ctx, room); err != nil {
		t.Fatal(err)
	}
	next, ok, err := s.NextExpiry(ctx, room)
	if err != nil || !ok || next.IsZero() {
		t.Fatalf("NextExpiry = %v, %v, %v", next, ok, err)
	}
	h.Advance(t, 1500*time.Millisecond)
	res, err := s.Admit(ctx, room)
	if err != nil {
		t.Fatal(err)
	}
	if res.Expired != 2 || !slices.Equal(res.Admitted, us[2:]) {
		t.Fatalf("Admit after the leases ran out = %+v, want 2 expired and the next 2 admitted", res)
	}
	if tk := state(t, s, room, us[0]); tk.State != waitroom.StateExpired {
		t.Errorf("expired user = %+v", tk)
	}
	if st := checkAccounting(t, s, room); st.ExpiredTotal != 2 || st.Active != 2 {
		t.Errorf("stats = %+v", st)
	}
}

// testSettleOnRead: once a lease has run out, the ticket reads expired,
// leaving does not count it as released, and joining again starts a new
// ticket, all before any admission pass reclaims the slot.
func testSettleOnRead(t *testing.T, h Harness) {
	s := h.Store(t)
	ctx := context.Background()
	room := newRoom(t, s, 2, time.Second)
	us := users(3)
	join(t, s, room, us...)
	if _, err := s.Admit(ctx, room); err != nil {
		t.Fatal(err)
	}
	h.Advance(t, 1500*time.Millisecond)
	if tk := state(t, s, room, us[0]); tk.State != waitroom.StateExpired {
		t.Fatalf("ticket after the lease ran out = %+v, want expired", tk)
	}
	if tk, err := s.Leave(ctx, room, us[1]); err != nil || tk.State != waitroom.StateExpired {
		t.Fatalf("Leave after the lease ran out = %+v, %v; want expired, not released", tk, err)
	}
	if tk, err := s.Join(ctx, room, us[0]); err != nil || !tk.Created || tk.State != waitroom.StateWaiting {
		t.Fatalf("Join after expiry = %+v, %v; want a new waiting ticket", tk, err)
	}
	st := checkAccounting(t, s, room)
	if st.ExpiredTotal != 2 || st.ReleasedTotal != 0 || st.Active != 0 {
		t.Fatalf("stats = %+v, want 2 expired, none released, none active", st)
	}
}

func testModesAlone(t *testing.T, h Harness) {
	for _, mode := range waitroom.Modes() {
		t.Run(string(mode), func(t *testing.T) {
			s := h.Store(t)
			ctx := context.Background()
			room := newRoom(t, s, 3, time.Minute)
			us := users(5)
			join(t, s, room, us...)
			res, err := labAdmit(t, s, ctx, room, mode, "only")
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(res.Admitted, us[:3]) {
				t.Fatalf("%s admitted %v, want %v", mode, res.Admitted, us[:3])
			}
			if len(res.AdmittedAt) != len(res.Admitted) || res.AdmittedAt[0].IsZero() {
				t.Fatalf("%s: AdmittedAt = %v, want one store time per admitted user", mode, res.AdmittedAt)
			}
			if st := checkAccounting(t, s, room); st.Active != 3 || st.Waiting != 2 {
				t.Fatalf("stats = %+v", st)
			}
		})
	}
}

func testLeaderSkips(t *testing.T, h Harness) {
	s := h.Store(t)
	ctx := context.Background()
	room := newRoom(t, s, 10, time.Minute)
	join(t, s, room, users(4)...)
	first, err := labAdmit(t, s, ctx, room, waitroom.ModeLeader, "a")
	if err != nil || first.Skipped || len(first.Admitted) != 4 {
		t.Fatalf("first instance = %+v, %v; want it to lead and admit 4", first, err)
	}
	second, err := labAdmit(t, s, ctx, room, waitroom.ModeLeader, "b")
	if err != nil || !second.Skipped {
		t.Fatalf("second instance in the same tick = %+v, %v; want skipped", second, err)
	}
	join(t, s, room, "late")
	again, err := labAdmit(t, s, ctx, room, waitroom.ModeLeader, "a")
	if err != nil || again.Skipped || len(again.Admitted) != 1 {
		t.Fatalf("the leader's next pass = %+v, %v; want it to keep leading and admit the late user", again, err)
	}
	// When the leader stops renewing, another instance takes over after
	// the key's lifetime (two admit intervals).
	h.Advance(t, 3*waitroom.DefaultRoomConfig().AdmitInterval)
	join(t, s, room, "later")
	took, err := labAdmit(t, s, ctx, room, waitroom.ModeLeader, "b")
	if err != nil || took.Skipped || len(took.Admitted) != 1 {
		t.Fatalf("after the leader went quiet, b = %+v, %v; want b to lead", took, err)
	}
}

// testConcurrentAtomic: several admitters, joiners and leavers at once;
// an observer counting the room never sees it over capacity, and the
// accounting holds at the end.
func testConcurrentAtomic(t *testing.T, h Harness) {
	s := h.Store(t)
	ctx := context.Background()
	const capacity = 5
	room := newRoom(t, s, capacity, time.Minute)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var maxSeen int64
	wg.Go(func() { // observer
		for {
			select {
			case <-stop:
				return
			default:
			}
			st, err := s.Stats(ctx, room)
			if err != nil {
				t.Error(err)
				return
			}
			maxSeen = max(maxSeen, st.Active)
		}
	})
	var workers sync.WaitGroup
	for c := range 3 {
		workers.Go(func() {
			for i := range 30 {
				u := fmt.Sprintf("c%d-u%d", c, i)
				if _, err := s.Join(ctx, room, u); err != nil {
					t.Error(err)
					return
				}
				if _, err := s.Admit(ctx, room); err != nil {
					t.Error(err)
					return
				}
				if i%3 == 0 {
					if _, err := s.Leave(ctx, room, fmt.Sprintf("c%d-u%d", c, i/2)); err != nil {
						t.Error(err)
						return
					}
				}
			}
		})
	}
	workers.Wait()
	close(stop)
	wg.Wait()
	if maxSeen > capacity {
		t.Fatalf("observer saw %d users in a room of %d", maxSeen, capacity)
	}
	if st := checkAccounting(t, s, room); st.JoinedTotal != 90 {
		t.Fatalf("joined %d, want 90", st.JoinedTotal)
	}
}

// testPingAndOldestWait: Ping answers, and Stats.OldestWait is the wait of
// the head of the queue, zero when nobody waits.
func testPingAndOldestWait(t *testing.T, h Harness) {
	s := h.Store(t)
	ctx := context.Background()
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping = %v", err)
	}
	room := newRoom(t, s, 1, time.Minute)
	oldest := func() time.Duration {
		t.Helper()
		st, err := s.Stats(ctx, room)
		if err != nil {
			t.Fatalf("Stats: %v", err)
		}
		return st.OldestWait
	}
	if d := oldest(); d != 0 {
		t.Fatalf("OldestWait of an empty queue = %s, want 0", d)
	}
	for _, u := range []string{"a", "b"} {
		if _, err := s.Join(ctx, room, u); err != nil {
			t.Fatalf("Join(%s): %v", u, err)
		}
	}
	h.Advance(t, time.Second)
	if d := oldest(); d < time.Second {
		t.Fatalf("OldestWait after 1s = %s, want at least 1s", d)
	}
	if _, err := s.Admit(ctx, room); err != nil {
		t.Fatalf("Admit: %v", err)
	}
	if d := oldest(); d < time.Second {
		t.Fatalf("OldestWait with b at the head = %s, want at least 1s", d)
	}
	if _, err := s.Leave(ctx, room, "b"); err != nil {
		t.Fatalf("Leave(b): %v", err)
	}
	if d := oldest(); d != 0 {
		t.Fatalf("OldestWait with nobody waiting = %s, want 0", d)
	}
}
