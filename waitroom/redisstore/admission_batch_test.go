package redisstore_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/stampede-lab/stampede/internal/testenv"
	"github.com/stampede-lab/stampede/waitroom"
	"github.com/stampede-lab/stampede/waitroom/redisstore"
)

// TestTouchAdmissions: one call checks many admissions of a room and
// slides the leases of those asked to, as TouchAdmission does for one:
// a held admission's lease slides (never past its cap), one only checked
// keeps its lease, a released one, another join's seq, a user without a
// ticket and a lease run out are not held; on rooms of one queue and of
// several, embedded and (with STAMPEDE_REDIS_URL) on real Redis.
func TestTouchAdmissions(t *testing.T) {
	run := func(t *testing.T, client redis.UniversalClient, advance func(time.Duration)) {
		for _, shards := range []int{0, 3} {
			s := redisstore.New(client)
			ctx := context.Background()
			room := fmt.Sprintf("touches-%d", time.Now().UnixNano())
			if shards > 0 {
				room += "-sharded"
			}
			t.Cleanup(func() { s.DeleteRoom(context.Background(), room) })
			const lease = time.Second
			if err := s.Configure(ctx, room, waitroom.RoomConfig{Capacity: 4, Lease: lease, AdmitInterval: time.Second,
				Retention: waitroom.DefaultRetention, QueueShards: shards}); err != nil {
				t.Fatal(err)
			}
			seq := map[string]int64{}
			for _, u := range []string{"a", "b", "c", "e"} {
				if _, err := s.Join(ctx, room, u); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := s.Admit(ctx, room); err != nil {
				t.Fatal(err)
			}
			before := map[string]time.Time{}
			for _, u := range []string{"a", "b", "c", "e"} {
				tk, err := s.Ticket(ctx, room, u)
				if err != nil || tk.State != waitroom.StateAdmitted {
					t.Fatalf("%s: %+v %v", u, tk, err)
				}
				seq[u], before[u] = tk.Seq, tk.LeaseExpires
			}
			if _, _, err := s.ReleaseAdmission(ctx, room, "b", seq["b"]); err != nil {
				t.Fatal(err)
			}
			advance(300 * time.Millisecond)
			far := time.Now().Add(time.Hour)
			capped := before["e"].Add(100 * time.Millisecond) // e's lease may grow by 100 ms only
			got, err := s.TouchAdmissions(ctx, room, []waitroom.AdmissionTouch{
				{User: "a", Seq: seq["a"], Until: far},
				{User: "b", Seq: seq["b"], Until: far},
				{User: "c", Seq: seq["c"]},
				{User: "nobody", Seq: 1, Until: far},
				{User: "a", Seq: seq["a"] + 100, Until: far},
				{User: "e", Seq: seq["e"], Until: capped},
			})
			if err != nil || len(got) != 6 {
				t.Fatalf("TouchAdmissions: %d tickets, %v", len(got), err)
			}
			if got[0].State != waitroom.StateAdmitted || !got[0].LeaseExpires.After(before["a"].Add(200*time.Millisecond)) {
				t.Errorf("shards %d: a: %s, lease %s (was %s): want admitted, slid by about 300 ms", shards, got[0].State, got[0].LeaseExpires, before["a"])
			}
			if tk, _ := s.Ticket(ctx, room, "a"); !tk.LeaseExpires.Equal(got[0].LeaseExpires) {
				t.Errorf("shards %d: a's lease in the store %s, the touch said %s", shards, tk.LeaseExpires, got[0].LeaseExpires)
			}
			if got[1].State == waitroom.StateAdmitted {
				t.Errorf("shards %d: b, released: %s, want not admitted", shards, got[1].State)
			}
			if got[2].State != waitroom.StateAdmitted || !got[2].LeaseExpires.Equal(before["c"]) {
				t.Errorf("shards %d: c, only checked: %s lease %s, want admitted, lease still %s", shards, got[2].State, got[2].LeaseExpires, before["c"])
			}
			if got[3].State != "" {
				t.Errorf("shards %d: a user without a ticket: %q, want none", shards, got[3].State)
			}
			if got[4].Seq != seq["a"] {
				t.Errorf("shards %d: a with another seq: answered seq %d, want the current %d (not held)", shards, got[4].Seq, seq["a"])
			}
			if !got[5].LeaseExpires.Equal(capped.Truncate(time.Millisecond)) {
				t.Errorf("shards %d: e, capped: lease %s, want %s", shards, got[5].LeaseExpires, capped)
			}
			// Past c's lease (never slid): expired, without an admission pass.
			advance(lease - 200*time.Millisecond)
			got, err = s.TouchAdmissions(ctx, room, []waitroom.AdmissionTouch{{User: "c", Seq: seq["c"], Until: far}, {User: "a", Seq: seq["a"], Until: far}})
			if err != nil || got[0].State != waitroom.StateExpired || got[1].State != waitroom.StateAdmitted {
				t.Errorf("shards %d: after c's lease: c %s, a %s, %v; want expired and admitted", shards, got[0].State, got[1].State, err)
			}
		}
	}
	t.Run("embedded", func(t *testing.T) {
		m := miniredis.RunT(t)
		now := time.Now()
		m.SetTime(now)
		client := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { client.Close() })
		run(t, client, func(d time.Duration) { now = now.Add(d); m.SetTime(now); m.FastForward(d) })
	})
	t.Run("redis", func(t *testing.T) {
		if os.Getenv(testenv.RedisURL) == "" {
			t.Skip("STAMPEDE_REDIS_URL is not set")
		}
		opts, err := redis.ParseURL(testenv.URL(t, testenv.RedisURL))
		if err != nil {
			t.Fatal(err)
		}
		client := redis.NewClient(opts)
		t.Cleanup(func() { client.Close() })
		run(t, client, func(d time.Duration) { time.Sleep(d) })
	})
}
