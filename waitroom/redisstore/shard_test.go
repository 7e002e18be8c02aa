package redisstore_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/stampede-lab/stampede/waitroom"
	"github.com/stampede-lab/stampede/waitroom/redisstore"
)

// TestShardedPassDiedMidway: a pass that admitted users on the room's slot
// but died before its shards let them go leaves them admitted (the cap
// counts them) and still waiting in their shards; a later pass of any
// instance, once the record is older than 10 s, finishes it: the users
// read admitted, nobody is admitted twice, and the accounting holds.
func TestShardedPassDiedMidway(t *testing.T) {
	m := miniredis.RunT(t)
	now := time.Now()
	m.SetTime(now)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { client.Close() })
	ctx := context.Background()
	cfg := redisstore.DefaultConfig()
	cfg.PositionCache = 0
	dying, err := redisstore.NewWithConfig(client, cfg)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := redisstore.NewWithConfig(client, cfg)
	rc := waitroom.DefaultRoomConfig()
	rc.Capacity, rc.QueueShards = 2, 3
	if err := dying.Configure(ctx, "r", rc); err != nil {
		t.Fatal(err)
	}
	users := []string{"a", "b", "c", "d"}
	for _, u := range users {
		if _, err := dying.Join(ctx, "r", u); err != nil {
			t.Fatal(err)
		}
	}
	redisstore.DieAfterAdmit(dying, true)
	if _, err := dying.Admit(ctx, "r"); err == nil {
		t.Fatal("the dying pass returned no error")
	}
	st, err := other.Stats(ctx, "r")
	if err != nil || st.Active != 2 {
		t.Fatalf("after the dead pass: %+v, %v; want its 2 admissions holding the room", st, err)
	}
	// Within 10 s another pass leaves the record alone and admits nobody
	// (the room is full).
	if res, err := other.Admit(ctx, "r"); err != nil || len(res.Admitted) != 0 {
		t.Fatalf("pass at once = %+v, %v; want nothing admitted", res, err)
	}
	now = now.Add(11 * time.Second)
	m.SetTime(now)
	if _, err := other.Admit(ctx, "r"); err != nil {
		t.Fatal(err)
	}
	var admitted []string
	for _, u := range users {
		tk, err := other.Ticket(ctx, "r", u)
		if err != nil {
			t.Fatal(err)
		}
		if tk.State == waitroom.StateAdmitted {
			admitted = append(admitted, u)
		}
	}
	if !slices.Equal(admitted, []string{"a", "b"}) {
		t.Fatalf("admitted after recovery: %v, want a and b (the first two joins)", admitted)
	}
	st, err = other.Stats(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	sst, _ := other.ShardStats(ctx, "r")
	if st.Active != 2 || st.Waiting != 2 || st.AdmittedTotal != 2 || st.JoinedTotal != 4 || sst.Moving != 0 {
		t.Fatalf("after recovery: %+v, %+v; want 2 active, 2 waiting, 2 admitted in all, no admission left moving", st, sst)
	}
}
