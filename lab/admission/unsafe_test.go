package admission

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/stampede-lab/stampede/waitroom"
	"github.com/stampede-lab/stampede/waitroom/redisstore"
)

// unsafeRig is a real store on a miniredis whose clock the test moves.
type unsafeRig struct {
	m      *miniredis.Miniredis
	now    time.Time
	client *redis.Client
	store  *redisstore.Store
}

func newUnsafeRig(t *testing.T) *unsafeRig {
	t.Helper()
	r := &unsafeRig{m: miniredis.RunT(t), now: time.Now()}
	r.m.SetTime(r.now)
	r.client = redis.NewClient(&redis.Options{Addr: r.m.Addr()})
	t.Cleanup(func() { r.client.Close() })
	r.store = redisstore.New(r.client)
	return r
}

// advance moves the server's clock (and key TTLs) forward by d.
func (r *unsafeRig) advance(d time.Duration) {
	r.now = r.now.Add(d)
	r.m.SetTime(r.now)
	r.m.FastForward(d)
}

// room configures a room of capacity with n users waiting, and returns
// its name and the users in order.
func (r *unsafeRig) room(t *testing.T, capacity, n int) (string, []string) {
	t.Helper()
	ctx := context.Background()
	room := fmt.Sprintf("r%d", time.Now().UnixNano())
	cfg := waitroom.DefaultRoomConfig()
	cfg.Capacity, cfg.Lease = capacity, time.Minute
	if err := r.store.Configure(ctx, room, cfg); err != nil {
		t.Fatal(err)
	}
	var us []string
	for i := range n {
		u := fmt.Sprintf("u%02d", i)
		if _, err := r.store.Join(ctx, room, u); err != nil {
			t.Fatal(err)
		}
		us = append(us, u)
	}
	return room, us
}

func (r *unsafeRig) unsafe(t *testing.T, mode waitroom.Mode, instance string) *UnsafeStore {
	t.Helper()
	s, err := StoreFor(r.store, r.client, mode, instance)
	if err != nil {
		t.Fatal(err)
	}
	return s.(*UnsafeStore)
}

// TestEveryModeAdmitsInOrderWhenAlone: alone, every mode admits the head
// of the queue up to capacity, with a store time per admitted user.
func TestEveryModeAdmitsInOrderWhenAlone(t *testing.T) {
	for _, mode := range Modes() {
		t.Run(string(mode), func(t *testing.T) {
			r := newUnsafeRig(t)
			room, us := r.room(t, 3, 5)
			s, err := StoreFor(r.store, r.client, mode, "only")
			if err != nil {
				t.Fatal(err)
			}
			res, err := s.Admit(context.Background(), room)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(res.Admitted, us[:3]) {
				t.Fatalf("%s admitted %v, want %v", mode, res.Admitted, us[:3])
			}
			if len(res.AdmittedAt) != len(res.Admitted) || res.AdmittedAt[0].IsZero() {
				t.Fatalf("%s: AdmittedAt = %v, want one store time per admitted user", mode, res.AdmittedAt)
			}
			if st, err := r.store.Stats(context.Background(), room); err != nil || st.Active != 3 || st.Waiting != 2 {
				t.Fatalf("stats = %+v, %v", st, err)
			}
		})
	}
}

// TestLeaderSkipsWhenAnotherLeads: one instance leads per tick; another
// takes over once the leader stops renewing.
func TestLeaderSkipsWhenAnotherLeads(t *testing.T) {
	r := newUnsafeRig(t)
	ctx := context.Background()
	room, _ := r.room(t, 10, 4)
	a, b := r.unsafe(t, ModeLeader, "a"), r.unsafe(t, ModeLeader, "b")
	first, err := a.Admit(ctx, room)
	if err != nil || first.Skipped || len(first.Admitted) != 4 {
		t.Fatalf("first instance = %+v, %v; want it to lead and admit 4", first, err)
	}
	second, err := b.Admit(ctx, room)
	if err != nil || !second.Skipped {
		t.Fatalf("second instance in the same tick = %+v, %v; want skipped", second, err)
	}
	if _, err := r.store.Join(ctx, room, "late"); err != nil {
		t.Fatal(err)
	}
	again, err := a.Admit(ctx, room)
	if err != nil || again.Skipped || len(again.Admitted) != 1 {
		t.Fatalf("the leader's next pass = %+v, %v; want it to keep leading and admit the late user", again, err)
	}
	r.advance(3 * waitroom.DefaultRoomConfig().AdmitInterval)
	if _, err := r.store.Join(ctx, room, "later"); err != nil {
		t.Fatal(err)
	}
	took, err := b.Admit(ctx, room)
	if err != nil || took.Skipped || len(took.Admitted) != 1 {
		t.Fatalf("after the leader went quiet, b = %+v, %v; want b to lead", took, err)
	}
}

// TestStoreForRefusesUnknownModes: only the lab's modes make a store, and
// the atomic one is the real store itself.
func TestStoreForRefusesUnknownModes(t *testing.T) {
	r := newUnsafeRig(t)
	if s, err := StoreFor(r.store, r.client, waitroom.ModeAtomic, "x"); err != nil || s != waitroom.Store(r.store) {
		t.Errorf("StoreFor(atomic) = %T, %v; want the real store", s, err)
	}
	if _, err := StoreFor(r.store, r.client, "reckless", "x"); err == nil {
		t.Error("StoreFor accepted an unknown mode")
	}
}
