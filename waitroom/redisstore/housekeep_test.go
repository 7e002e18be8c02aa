package redisstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/stampede-lab/stampede/waitroom"
	"github.com/stampede-lab/stampede/waitroom/redisstore"
)

// housekeepRig is a store on miniredis whose clock the test moves, and a
// paused room of one seat whose users are set aside after abandon without
// a poll.
type housekeepRig struct {
	t    *testing.T
	m    *miniredis.Miniredis
	now  time.Time
	s    waitroom.Store
	room string
}

func newHousekeepRig(t *testing.T, shards int, abandon time.Duration) *housekeepRig {
	t.Helper()
	r := &housekeepRig{t: t, m: miniredis.RunT(t), now: time.Now(), room: "hk"}
	r.m.SetTime(r.now)
	client := redis.NewClient(&redis.Options{Addr: r.m.Addr()})
	t.Cleanup(func() { client.Close() })
	r.s = newStore(t, client, withTimeout(redisstore.DefaultConfig()))
	cfg := waitroom.DefaultRoomConfig()
	cfg.Capacity, cfg.Lease, cfg.QueueShards = 1, time.Minute, shards
	cfg.Paused, cfg.AbandonAfter, cfg.Arrival = true, abandon, 0
	if err := r.s.Configure(context.Background(), r.room, cfg); err != nil {
		t.Fatalf("Configure: %v", err)
	}
	return r
}

func (r *housekeepRig) advance(d time.Duration) {
	r.now = r.now.Add(d)
	r.m.SetTime(r.now)
}

func (r *housekeepRig) admit() waitroom.RoomStats {
	r.t.Helper()
	if _, err := r.s.Admit(context.Background(), r.room); err != nil {
		r.t.Fatalf("Admit: %v", err)
	}
	st, err := r.s.Stats(context.Background(), r.room)
	if err != nil {
		r.t.Fatalf("Stats: %v", err)
	}
	return st
}

// TestHousekeepingOncePerInterval: an admission pass sets aside the users
// who stopped polling only when HousekeepInterval (or a quarter of the
// room's abandon window, when shorter) has passed since the last pass
// that did, so a user stale just after one is set aside at the next, up to
// that interval later, and not by the passes between.
func TestHousekeepingOncePerInterval(t *testing.T) {
	if redisstore.HousekeepInterval != time.Second {
		t.Fatalf("HousekeepInterval = %v; this test's times assume 1s", redisstore.HousekeepInterval)
	}
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	for _, c := range []struct {
		abandon time.Duration
		every   time.Duration // the interval in force
	}{{4 * time.Second, time.Second}, {time.Second, 250 * time.Millisecond}} {
		for _, shards := range []int{0, testShards} {
			t.Run(fmt.Sprintf("abandon=%v/shards=%d", c.abandon, shards), func(t *testing.T) {
				r := newHousekeepRig(t, shards, c.abandon)
				r.admit() // housekeeping at t0
				r.advance(ms(10))
				if _, err := r.s.Join(context.Background(), r.room, "a"); err != nil {
					t.Fatal(err)
				}
				// Just before a is stale: due, a still fresh.
				r.advance(c.abandon - ms(20))
				if st := r.admit(); st.Away != 0 || st.Waiting != 1 {
					t.Fatalf("just before a is stale: %+v, want a waiting", st)
				}
				// a stale, the last housekeeping less than the interval ago.
				r.advance(c.every - ms(40))
				if st := r.admit(); st.Away != 0 || st.Waiting != 1 {
					t.Fatalf("%v after the last housekeeping: %+v, want a still waiting", c.every-ms(40), st)
				}
				r.advance(ms(50)) // the interval has passed
				if st := r.admit(); st.Away != 1 || st.Waiting != 0 {
					t.Fatalf("an interval after the last housekeeping: %+v, want a set aside", st)
				}
			})
		}
	}
}

// TestHousekeepingGoesOnWhileABatchFills: a pass that sets aside a whole
// batch leaves housekeeping due, so the next pass goes on at once.
func TestHousekeepingGoesOnWhileABatchFills(t *testing.T) {
	r := newHousekeepRig(t, 0, time.Second)
	r.admit()
	n := redisstore.MaxBatch + 5
	for i := range n {
		if _, err := r.s.Join(context.Background(), r.room, fmt.Sprintf("u%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	r.advance(1100 * time.Millisecond)
	if st := r.admit(); st.Away != redisstore.MaxBatch {
		t.Fatalf("first pass: %d away, want a batch of %d", st.Away, redisstore.MaxBatch)
	}
	if st := r.admit(); st.Away != int64(n) || st.Waiting != 0 {
		t.Fatalf("second pass at the same time: %+v, want all %d away", st, n)
	}
}
