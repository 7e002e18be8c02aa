// Package storetest is the conformance suite every waitroom.Store must
// pass. An adapter's tests call Exercise with a function that opens the
// store under test (and options: a clock the suite can move, sharded
// rooms), or Run with a Harness.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"math"
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
	// QueueShards is the RoomConfig.QueueShards of every room the suite
	// creates (0: one queue). A sharded room must behave as a room of one
	// queue, except that its sequence numbers are its own, an admission
	// pass takes several round trips.
	QueueShards int
}

// sharded reports whether the harness's rooms have several queue shards.
func (h Harness) sharded() bool { return h.QueueShards > 1 }

// Option changes how Exercise runs the suite.
type Option func(*Harness)

// WithAdvance moves the store's clock forward by at least d; without it
// the suite sleeps (right for a real server).
func WithAdvance(advance func(t *testing.T, d time.Duration)) Option {
	return func(h *Harness) { h.Advance = advance }
}

// WithQueueShards gives every room the suite creates n queue shards
// (Harness.QueueShards).
func WithQueueShards(n int) Option {
	return func(h *Harness) { h.QueueShards = n }
}

// Exercise runs the suite on the stores open returns, one subtest per
// behaviour. Rooms are named uniquely per test, so open may return one
// shared store.
func Exercise(t *testing.T, open func(t *testing.T) waitroom.Store, opts ...Option) {
	h := Harness{Store: open, Advance: func(t *testing.T, d time.Duration) { time.Sleep(d) }}
	for _, o := range opts {
		o(&h)
	}
	Run(t, h)
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
		{"AdmitsInOrderWhenAlone", testAdmitsInOrderWhenAlone},
		{"ConcurrentAtomicNeverOverCapacity", testConcurrentAtomic},
		{"PingAndOldestWait", testPingAndOldestWait},
		{"UpdateConfigChangesOnlyNamedFields", testUpdateConfig},
		{"DeleteRoomRemovesEverything", testDeleteRoom},
		{"OutflowLimitSpendsTokens", testOutflowLimit},
		{"PausedAdmitsNobody", testPaused},
		{"ClosedTellsWaitingUsers", testClosed},
		{"PrequeueShuffledThenFIFO", testPrequeue},
		{"AbandonedPlaceKeptWithinWindow", testAbandon},
		{"NoShowReleasedAfterArrival", testArrival},
		{"FinishedTicketsForgottenAfterRetention", testRetention},
		{"LineBoundRefusesNewJoinsOnly", testLineBound},
		{"JoinRateBoundsNewJoins", testJoinRate},
		{"ClosesAtEndsTheSale", testClosesAt},
		{"ClosesAtKeepsLeases", testClosesAtKeepsLeases},
		{"ScheduleWindowsCapacityAndGaps", testScheduleWindows},
		{"ScheduleGapAdmitsNobody", testScheduleGap},
		{"ScheduleOverAfterLastWindow", testScheduleOver},
		{"InvitesOnePlaceEachUsedOnce", testInvites},
		{"InviteOnlyWindow", testInviteWindow},
		{"FairnessLogVerifies", testFairness},
		{"AdaptiveOutflowBelowLimit", testAdaptiveOutflow},
		{"ViewCountsQueueAdmissionsDepartures", testView},
		{"TouchRecordsPresenceInBatches", testTouch},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, h) })
	}
}

var roomSeq = rand.Uint64()

// newRoom configures a uniquely named room.
func newRoom(t *testing.T, h Harness, s waitroom.Store, capacity int, lease time.Duration) string {
	t.Helper()
	room := fmt.Sprintf("test-%x-%d", roomSeq, time.Now().UnixNano())
	cfg := waitroom.DefaultRoomConfig()
	cfg.Capacity, cfg.Lease, cfg.QueueShards = capacity, lease, h.QueueShards
	// No abandonment or arrival check unless a test turns them on: the
	// suite's users do not poll.
	cfg.AbandonAfter, cfg.Arrival = 0, 0
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

// newRoomWith configures a uniquely named room of capacity with a one-minute
// lease, changed by change.
func newRoomWith(t *testing.T, h Harness, s waitroom.Store, capacity int, change func(*waitroom.RoomConfig)) string {
	t.Helper()
	room := newRoom(t, h, s, capacity, time.Minute)
	cfg, err := s.Config(context.Background(), room)
	if err != nil {
		t.Fatal(err)
	}
	change(&cfg)
	if err := s.Configure(context.Background(), room, cfg); err != nil {
		t.Fatalf("Configure(%+v): %v", cfg, err)
	}
	return room
}

// admit runs one atomic pass and fails the test on an error.
func admit(t *testing.T, s waitroom.Store, room string) waitroom.AdmitResult {
	t.Helper()
	res, err := s.Admit(context.Background(), room)
	if err != nil {
		t.Fatalf("Admit: %v", err)
	}
	return res
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
	if sum := st.Waiting + st.Away + st.Active + st.ReleasedTotal + st.ExpiredTotal + st.LeftTotal + st.ClosedTotal + st.AbandonedTotal; sum != st.JoinedTotal {
		t.Fatalf("accounting: waiting %d + away %d + active %d + released %d + expired %d + left %d + closed %d + abandoned %d = %d, joined %d",
			st.Waiting, st.Away, st.Active, st.ReleasedTotal, st.ExpiredTotal, st.LeftTotal, st.ClosedTotal, st.AbandonedTotal, sum, st.JoinedTotal)
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
	room := newRoom(t, h, s, 1, time.Minute)
	if _, err := s.Ticket(ctx, room, "nobody"); waitroom.ErrorCode(err) != waitroom.CodeNotFound {
		t.Errorf("Ticket of a user who never joined = %v, want not found", err)
	}
	if _, err := s.Leave(ctx, room, "nobody"); waitroom.ErrorCode(err) != waitroom.CodeNotFound {
		t.Errorf("Leave of a user who never joined = %v, want not found", err)
	}
}

func testConfigRoundTrip(t *testing.T, h Harness) {
	s := h.Store(t)
	room := newRoom(t, h, s, 42, 90*time.Second)
	cfg, err := s.Config(context.Background(), room)
	if err != nil {
		t.Fatal(err)
	}
	rooms, err := s.Rooms(context.Background())
	if err != nil || !slices.Contains(rooms, room) {
		t.Fatalf("Rooms() = %v, %v; want it to list %s", rooms, err, room)
	}
	want := waitroom.DefaultRoomConfig()
	want.Capacity, want.Lease, want.QueueShards = 42, 90*time.Second, h.QueueShards
	want.AbandonAfter, want.Arrival = 0, 0
	if !cfg.Equal(want) {
		t.Fatalf("Config = %+v, want %+v", cfg, want)
	}
	bad := want
	bad.Capacity = 0
	if err := s.Configure(context.Background(), room, bad); waitroom.ErrorCode(err) != waitroom.CodeInvalid {
		t.Fatalf("Configure with capacity 0 = %v, want invalid", err)
	}
	// The number of queue shards is fixed once the room exists.
	bad = want
	bad.QueueShards = max(h.QueueShards, 1) + 1
	if err := s.Configure(context.Background(), room, bad); waitroom.ErrorCode(err) != waitroom.CodeInvalid {
		t.Fatalf("Configure with another queue_shards = %v, want invalid", err)
	}
	// The proof of work and the template round-trip too, and a zero
	// template reads back as none.
	want.PoWDifficulty = 12
	want.Template = waitroom.RoomTemplate{Title: "T <b>", PrimaryColor: "#123456", TextKO: "한국어\nline"}
	for range 2 {
		if err := s.Configure(context.Background(), room, want); err != nil {
			t.Fatal(err)
		}
		if cfg, err := s.Config(context.Background(), room); err != nil || !cfg.Equal(want) {
			t.Fatalf("Config = %+v, %v; want %+v", cfg, err, want)
		}
		want.PoWDifficulty, want.Template = 0, waitroom.RoomTemplate{}
	}
}

func testJoinIdempotentFIFO(t *testing.T, h Harness) {
	s := h.Store(t)
	ctx := context.Background()
	room := newRoom(t, h, s, 1, time.Minute)
	us := users(3)
	join(t, s, room, us...)
	for i, u := range us {
		again, err := s.Join(ctx, room, u)
		if err != nil {
			t.Fatal(err)
		}
		wantSeq := int64(i + 1)
		if h.sharded() {
			wantSeq = again.Seq // a shard's own sequence
		}
		if again.State != waitroom.StateWaiting || again.Position != int64(i) || again.Seq != wantSeq || again.Created {
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
	room := newRoom(t, h, s, 3, time.Minute)
	us := users(5)
	join(t, s, room, us...)
	res, err := s.Admit(ctx, room)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Admitted, us[:3]) || (res.RoundTrips != 1 && !h.sharded()) || res.At.IsZero() {
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
	room := newRoom(t, h, s, 1, time.Minute)
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
	if tk, _ := s.Join(ctx, room, us[1]); tk.State != waitroom.StateWaiting || (tk.Seq != 4 && !h.sharded()) || tk.Position != 0 {
		t.Errorf("rejoin = %+v, want waiting with a new sequence number", tk)
	}
}

func testLeaseExpiry(t *testing.T, h Harness) {
	s := h.Store(t)
	ctx := context.Background()
	room := newRoom(t, h, s, 2, time.Second)
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
	room := newRoom(t, h, s, 2, time.Second)
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

func testAdmitsInOrderWhenAlone(t *testing.T, h Harness) {
	s := h.Store(t)
	ctx := context.Background()
	room := newRoom(t, h, s, 3, time.Minute)
	us := users(5)
	join(t, s, room, us...)
	res, err := s.Admit(ctx, room)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Admitted, us[:3]) {
		t.Fatalf("admitted %v, want %v", res.Admitted, us[:3])
	}
	if len(res.AdmittedAt) != len(res.Admitted) || res.AdmittedAt[0].IsZero() {
		t.Fatalf("AdmittedAt = %v, want one store time per admitted user", res.AdmittedAt)
	}
	if st := checkAccounting(t, s, room); st.Active != 3 || st.Waiting != 2 {
		t.Fatalf("stats = %+v", st)
	}
}

// testConcurrentAtomic: several admitters, joiners and leavers at once;
// an observer counting the room never sees it over capacity, and the
// accounting holds at the end.
func testConcurrentAtomic(t *testing.T, h Harness) {
	s := h.Store(t)
	ctx := context.Background()
	const capacity = 5
	room := newRoom(t, h, s, capacity, time.Minute)
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
	room := newRoom(t, h, s, 1, time.Minute)
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

func testUpdateConfig(t *testing.T, h Harness) {
	s := h.Store(t)
	ctx := context.Background()
	room := newRoom(t, h, s, 5, time.Minute)
	want, err := s.Config(ctx, room)
	if err != nil {
		t.Fatal(err)
	}
	// The caller's config holds other changes too: only the named field
	// is written.
	other := want
	other.Capacity, other.Paused, other.Lease = 9, true, time.Hour
	if err := s.UpdateConfig(ctx, room, other, []string{"paused"}); err != nil {
		t.Fatal(err)
	}
	want.Paused = true
	if got, err := s.Config(ctx, room); err != nil || !got.Equal(want) {
		t.Fatalf("after UpdateConfig(paused) = %+v, %v; want %+v", got, err, want)
	}
	if err := s.UpdateConfig(ctx, "never-configured", other, []string{"paused"}); waitroom.ErrorCode(err) != waitroom.CodeNotFound {
		t.Errorf("UpdateConfig on an unknown room = %v, want not found", err)
	}
	if _, err := s.Config(ctx, "never-configured"); waitroom.ErrorCode(err) != waitroom.CodeNotFound {
		t.Errorf("UpdateConfig created the unknown room: %v", err)
	}
}

func testDeleteRoom(t *testing.T, h Harness) {
	s := h.Store(t)
	ctx := context.Background()
	room := newRoom(t, h, s, 1, time.Minute)
	join(t, s, room, users(3)...)
	admit(t, s, room)
	if err := s.DeleteRoom(ctx, room); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Config(ctx, room); waitroom.ErrorCode(err) != waitroom.CodeNotFound {
		t.Errorf("Config after DeleteRoom = %v, want not found", err)
	}
	if _, err := s.Join(ctx, room, "late"); waitroom.ErrorCode(err) != waitroom.CodeNotFound {
		t.Errorf("Join after DeleteRoom = %v, want not found", err)
	}
	if _, err := s.Admit(ctx, room); waitroom.ErrorCode(err) != waitroom.CodeNotFound {
		t.Errorf("Admit after DeleteRoom = %v, want not found", err)
	}
	rooms, err := s.Rooms(ctx)
	if err != nil || slices.Contains(rooms, room) {
		t.Errorf("Rooms after DeleteRoom = %v, %v; want %s gone", rooms, err, room)
	}
	if err := s.DeleteRoom(ctx, room); err != nil {
		t.Errorf("deleting twice = %v", err)
	}
}

func testOutflowLimit(t *testing.T, h Harness) {
	s := h.Store(t)
	// 60 a minute: one a second, a bucket of one.
	room := newRoomWith(t, h, s, 100, func(c *waitroom.RoomConfig) { c.MaxAdmissionsPerMinute = 60 })
	join(t, s, room, users(5)...)
	if res := admit(t, s, room); len(res.Admitted) != 1 {
		t.Fatalf("first pass admitted %v, want one (a full bucket of one)", res.Admitted)
	}
	if res := admit(t, s, room); len(res.Admitted) != 0 {
		t.Fatalf("second pass at once admitted %v, want none (bucket empty)", res.Admitted)
	}
	h.Advance(t, 1100*time.Millisecond)
	if res := admit(t, s, room); len(res.Admitted) != 1 || res.Admitted[0] != "user-001" {
		t.Fatalf("a second later admitted %v, want user-001", res.Admitted)
	}
	checkAccounting(t, s, room)
}

func testPaused(t *testing.T, h Harness) {
	s := h.Store(t)
	ctx := context.Background()
	room := newRoomWith(t, h, s, 10, func(c *waitroom.RoomConfig) { c.Paused = true })
	join(t, s, room, users(3)...)
	if res := admit(t, s, room); len(res.Admitted) != 0 {
		t.Fatalf("paused room admitted %v", res.Admitted)
	}
	cfg, _ := s.Config(ctx, room)
	cfg.Paused = false
	if err := s.UpdateConfig(ctx, room, cfg, []string{"paused"}); err != nil {
		t.Fatal(err)
	}
	if res := admit(t, s, room); !slices.Equal(res.Admitted, users(3)) {
		t.Fatalf("resumed room admitted %v, want %v", res.Admitted, users(3))
	}
}

func testClosed(t *testing.T, h Harness) {
	s := h.Store(t)
	ctx := context.Background()
	room := newRoom(t, h, s, 1, time.Minute)
	join(t, s, room, users(4)...)
	admit(t, s, room) // user-000 in
	cfg, _ := s.Config(ctx, room)
	cfg.Closed, cfg.ClosedMessage = true, "sold out"
	if err := s.UpdateConfig(ctx, room, cfg, []string{"closed", "closed_message"}); err != nil {
		t.Fatal(err)
	}
	// Told at once, before any pass.
	if tk := state(t, s, room, "user-001"); tk.State != waitroom.StateClosed || tk.Message != "sold out" {
		t.Fatalf("waiting ticket in a closed room = %+v, want closed with the message", tk)
	}
	res := admit(t, s, room)
	if len(res.Admitted) != 0 {
		t.Fatalf("closed room admitted %v", res.Admitted)
	}
	for _, u := range []string{"user-002", "user-003"} {
		if tk := state(t, s, room, u); tk.State != waitroom.StateClosed || tk.Message != "sold out" {
			t.Errorf("%s = %+v, want closed with the message", u, tk)
		}
	}
	if tk := state(t, s, room, "user-000"); tk.State != waitroom.StateAdmitted {
		t.Errorf("the admitted user = %+v, want still admitted", tk)
	}
	tk, err := s.Join(ctx, room, "newcomer")
	if err != nil || tk.State != waitroom.StateClosed || tk.Message != "sold out" || tk.Created {
		t.Errorf("Join a closed room = %+v, %v; want closed, not queued", tk, err)
	}
	st := checkAccounting(t, s, room)
	if st.Waiting != 0 || st.ClosedTotal != 3 {
		t.Errorf("stats = %+v, want nobody waiting and 3 closed", st)
	}
}

func testPrequeue(t *testing.T, h Harness) {
	s := h.Store(t)
	ctx := context.Background()
	const n = 1000
	probe := newRoom(t, h, s, 1, time.Minute)
	storeNow := admit(t, s, probe).At // the store's clock
	room := newRoomWith(t, h, s, n+10, func(c *waitroom.RoomConfig) { c.OpensAt = storeNow.Add(1500 * time.Millisecond) })
	early := make([]string, n)
	for i := range early {
		early[i] = fmt.Sprintf("early-%04d", i)
	}
	// Eight joiners, each in join order over its stride, so that the
	// pre-queue fills well within the 1.5 s before opening on a slow
	// server; without the shuffle, admission would follow join order.
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				if _, err := s.Join(ctx, room, early[i]); err != nil {
					t.Errorf("Join(%s): %v", early[i], err)
					return
				}
			}
		})
	}
	wg.Wait()
	if res := admit(t, s, room); len(res.Admitted) != 0 || res.Shuffled != 0 {
		t.Fatalf("before opening: %+v, want nothing done", res)
	}
	h.Advance(t, 1600*time.Millisecond)
	res := admit(t, s, room)
	if res.Shuffled != n || len(res.Admitted) != n {
		t.Fatalf("first pass after opening shuffled %d, admitted %d; want %d and %d", res.Shuffled, len(res.Admitted), n, n)
	}
	joinRank := map[string]int{}
	for i, u := range early {
		joinRank[u] = i
	}
	admitRank := make([]int, n)
	for i, u := range res.Admitted {
		admitRank[i] = joinRank[u]
	}
	if rho := Spearman(admitRank); math.Abs(rho) > 0.15 {
		t.Errorf("Spearman rho between join and admission order = %.3f, want |rho| < 0.15", rho)
	}
	// A ticket's number follows the draw: the admitted hold rising
	// numbers in the order they were let in.
	var prev int64
	for i, u := range res.Admitted {
		tk, err := s.Ticket(ctx, room, u)
		if err != nil {
			t.Fatalf("Ticket(%s): %v", u, err)
		}
		if tk.Seq <= prev {
			t.Fatalf("admitted #%d %s holds number %d after %d: numbers do not follow the draw", i, u, tk.Seq, prev)
		}
		prev = tk.Seq
	}
	// Later joiners: first come, first served, and no second shuffle.
	late := []string{"late-1", "late-2", "late-3"}
	join(t, s, room, late...)
	if res := admit(t, s, room); !slices.Equal(res.Admitted, late) || res.Shuffled != 0 {
		t.Errorf("after opening admitted %v (shuffled %d), want %v in order", res.Admitted, res.Shuffled, late)
	}
	if cfg, err := s.Config(ctx, room); err != nil || cfg.OpensAt.IsZero() {
		t.Errorf("config after opening = %+v, %v", cfg, err)
	}
}

// Spearman returns the rank correlation between positions 0..n-1 and
// ranks (a permutation of 0..n-1): 1 for the same order, -1 reversed,
// near 0 unrelated.
func Spearman(ranks []int) float64 {
	n := float64(len(ranks))
	if n < 2 {
		return 0
	}
	var d2 float64
	for i, r := range ranks {
		d := float64(i - r)
		d2 += d * d
	}
	return 1 - 6*d2/(n*(n*n-1))
}

func testAbandon(t *testing.T, h Harness) {
	s := h.Store(t)
	room := newRoomWith(t, h, s, 1, func(c *waitroom.RoomConfig) { c.Paused, c.AbandonAfter = true, time.Second })
	join(t, s, room, "a", "b", "c")
	h.Advance(t, 1100*time.Millisecond)
	state(t, s, room, "b") // b and c keep polling
	state(t, s, room, "c")
	admit(t, s, room)
	st := checkAccounting(t, s, room)
	if st.Away != 1 || st.Waiting != 2 {
		t.Fatalf("after a stopped polling: %+v, want a away and 2 waiting", st)
	}
	if tk := state(t, s, room, "b"); tk.Position != 0 {
		t.Fatalf("b = %+v, want position 0 while a is away", tk)
	}
	// a returns within the window: their place, ahead of b.
	h.Advance(t, 500*time.Millisecond)
	if tk := state(t, s, room, "a"); tk.State != waitroom.StateWaiting || tk.Position != 0 {
		t.Fatalf("a back within the window = %+v, want waiting at position 0", tk)
	}
	if tk := state(t, s, room, "b"); tk.Position != 1 {
		t.Fatalf("b after a came back = %+v, want position 1", tk)
	}
	// a stops again and stays away past the window: the place is gone.
	for range 2 {
		h.Advance(t, 1100*time.Millisecond)
		state(t, s, room, "b")
		state(t, s, room, "c")
		admit(t, s, room)
	}
	if tk := state(t, s, room, "a"); tk.State != waitroom.StateAbandoned {
		t.Fatalf("a away past the window = %+v, want abandoned", tk)
	}
	st = checkAccounting(t, s, room)
	if st.AbandonedTotal != 1 || st.Away != 0 || st.Waiting != 2 {
		t.Errorf("stats = %+v, want one abandoned, b and c waiting", st)
	}
	// Joining again queues a at the back.
	tk, err := s.Join(context.Background(), room, "a")
	if err != nil || !tk.Created || tk.Position != 2 {
		t.Errorf("a rejoining = %+v, %v; want a new ticket at position 2", tk, err)
	}
}

func testArrival(t *testing.T, h Harness) {
	s := h.Store(t)
	ctx := context.Background()
	room := newRoomWith(t, h, s, 3, func(c *waitroom.RoomConfig) { c.Arrival = time.Second })
	join(t, s, room, "reader", "checker", "ghost")
	if res := admit(t, s, room); len(res.Admitted) != 3 {
		t.Fatalf("admitted %v, want all three", res.Admitted)
	}
	state(t, s, room, "reader") // the first read after admission is the arrival
	if tk, err := s.MarkArrived(ctx, room, "checker"); err != nil || tk.State != waitroom.StateAdmitted {
		t.Fatalf("MarkArrived = %+v, %v", tk, err)
	}
	h.Advance(t, 1100*time.Millisecond)
	res := admit(t, s, room)
	if res.Expired != 1 {
		t.Fatalf("pass after the arrival window expired %d, want the ghost only", res.Expired)
	}
	for u, want := range map[string]waitroom.State{"reader": waitroom.StateAdmitted, "checker": waitroom.StateAdmitted, "ghost": waitroom.StateExpired} {
		if tk := state(t, s, room, u); tk.State != want {
			t.Errorf("%s = %s, want %s", u, tk.State, want)
		}
	}
	if st := checkAccounting(t, s, room); st.NoShowTotal != 1 || st.Active != 2 {
		t.Errorf("stats = %+v, want one no-show and two active", st)
	}
}

func testRetention(t *testing.T, h Harness) {
	s := h.Store(t)
	ctx := context.Background()
	room := newRoomWith(t, h, s, 1, func(c *waitroom.RoomConfig) { c.Retention = time.Second })
	join(t, s, room, "leaver", "stayer")
	if _, err := s.Leave(ctx, room, "leaver"); err != nil {
		t.Fatal(err)
	}
	admit(t, s, room)
	if tk := state(t, s, room, "leaver"); tk.State != waitroom.StateLeft {
		t.Fatalf("leaver within the retention = %+v, want left", tk)
	}
	h.Advance(t, 1100*time.Millisecond)
	admit(t, s, room)
	if _, err := s.Ticket(ctx, room, "leaver"); waitroom.ErrorCode(err) != waitroom.CodeNotFound {
		t.Errorf("leaver after the retention = %v, want no ticket", err)
	}
	if tk := state(t, s, room, "stayer"); tk.State != waitroom.StateAdmitted {
		t.Errorf("stayer = %+v, want admitted (retention forgets finished users only)", tk)
	}
}

// joinAll joins each user and sorts them into joined and refused, failing
// the test on any error other than want.
func joinAll(t *testing.T, s waitroom.Store, room string, want error, us []string) (joined, refused []string) {
	t.Helper()
	for _, u := range us {
		_, err := s.Join(context.Background(), room, u)
		switch {
		case err == nil:
			joined = append(joined, u)
		case errors.Is(err, want):
			refused = append(refused, u)
		default:
			t.Fatalf("Join(%s): %v, want nil or %v", u, err, want)
		}
	}
	return joined, refused
}

// share is a bound of n over the harness's shards as the store enforces
// it: each shard its share, rounded up.
func (h Harness) share(n int) int {
	k := max(1, h.QueueShards)
	return k * ((n + k - 1) / k)
}

func testLineBound(t *testing.T, h Harness) {
	s := h.Store(t)
	ctx := context.Background()
	const bound = 8
	room := newRoomWith(t, h, s, 1, func(c *waitroom.RoomConfig) { c.MaxWaiting = bound })
	joined, refused := joinAll(t, s, room, waitroom.ErrLineFull, users(40))
	if len(refused) == 0 || len(joined) > h.share(bound) || !h.sharded() && len(joined) != bound {
		t.Fatalf("a line of at most %d: %d joined, %d refused", bound, len(joined), len(refused))
	}
	var e *waitroom.Error
	if _, err := s.Join(ctx, room, refused[0]); !errors.As(err, &e) || e.Code != waitroom.CodeLineFull || e.RetryAfter <= 0 {
		t.Fatalf("a join to a full line = %v, want line_full with a Retry-After", err)
	}
	// Someone already in line keeps their place and may join again.
	if tk, err := s.Join(ctx, room, joined[0]); err != nil || tk.State != waitroom.StateWaiting || tk.Created {
		t.Fatalf("a waiting user's join to a full line = %+v, %v; want their ticket", tk, err)
	}
	// A place that frees lets one more in.
	if _, err := s.Leave(ctx, room, joined[0]); err != nil {
		t.Fatal(err)
	}
	if h.sharded() {
		// The freed place is in one shard: join until a refused user of
		// that shard gets it.
		if j, _ := joinAll(t, s, room, waitroom.ErrLineFull, refused); len(j) != 1 {
			t.Fatalf("after one left, %d more joined, want 1", len(j))
		}
	} else if _, err := s.Join(ctx, room, refused[0]); err != nil {
		t.Fatalf("a join after one left = %v, want it in line", err)
	}
	// Lifting the bound lets everyone in.
	cfg, _ := s.Config(ctx, room)
	cfg.MaxWaiting = 0
	if err := s.UpdateConfig(ctx, room, cfg, []string{"max_waiting"}); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Config(ctx, room); got.MaxWaiting != 0 {
		t.Fatalf("max_waiting after the update = %d, want 0", got.MaxWaiting)
	}
	join(t, s, room, refused...)
	checkAccounting(t, s, room)
}

func testJoinRate(t *testing.T, h Harness) {
	s := h.Store(t)
	const rate = 2
	room := newRoomWith(t, h, s, 1, func(c *waitroom.RoomConfig) { c.MaxJoinsPerSecond = rate })
	if cfg, _ := s.Config(context.Background(), room); cfg.MaxJoinsPerSecond != rate {
		t.Fatalf("max_joins_per_second = %d, want %d", cfg.MaxJoinsPerSecond, rate)
	}
	us := users(4*h.share(rate) + 1)
	joined, refused := joinAll(t, s, room, waitroom.ErrJoinsThrottled, us)
	// The bucket starts full (one second's worth) and refills at the rate:
	// at once, at most that second's worth (plus what refilled while the
	// joins ran, well under one token).
	if len(refused) == 0 || len(joined) == 0 || len(joined) > h.share(rate) || !h.sharded() && len(joined) != rate {
		t.Fatalf("%d joins a second, at once: %d joined, %d refused", rate, len(joined), len(refused))
	}
	// Re-reading a ticket or re-joining is no new join.
	if tk, err := s.Join(context.Background(), room, joined[0]); err != nil || tk.Created {
		t.Fatalf("a waiting user's join = %+v, %v; want their ticket, not throttled", tk, err)
	}
	h.Advance(t, 1100*time.Millisecond)
	if more, _ := joinAll(t, s, room, waitroom.ErrJoinsThrottled, refused); len(more) == 0 || len(more) > h.share(rate) {
		t.Fatalf("a second later %d more joined, want 1 to %d", len(more), h.share(rate))
	}
	checkAccounting(t, s, room)
}
