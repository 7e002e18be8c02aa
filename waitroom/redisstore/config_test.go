package redisstore_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/stampede-lab/stampede/internal/testenv"
	"github.com/stampede-lab/stampede/waitroom"
	"github.com/stampede-lab/stampede/waitroom/redisstore"
)

// TestOutflowLimitHoldsOverAMinute: with max_admissions_per_minute set,
// passes every 50 ms over one minute of the store's clock (miniredis,
// its TIME set by the test) admit the limit within 5 %, however much
// capacity is free.
func TestOutflowLimitHoldsOverAMinute(t *testing.T) {
	for _, limit := range []int{60, 600, 3000} {
		t.Run(strconv.Itoa(limit), func(t *testing.T) {
			m := miniredis.RunT(t)
			now := time.Now()
			m.SetTime(now)
			client := redis.NewClient(&redis.Options{Addr: m.Addr()})
			t.Cleanup(func() { client.Close() })
			// The test is about the limit: no store deadline on a loaded
			// machine under -race.
			s, err := redisstore.NewWithConfig(client, redisstore.Config{AutoPipeline: true, OpTimeout: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			cfg := waitroom.DefaultRoomConfig()
			cfg.Capacity, cfg.Lease, cfg.MaxAdmissionsPerMinute = 100_000, time.Hour, limit
			if err := s.Configure(ctx, "out", cfg); err != nil {
				t.Fatal(err)
			}
			joinMany(t, s, "out", limit+limit/5)
			admitted := 0
			// 1200 passes 50 ms apart: the first at 0, the last at 59.95 s.
			for i := range 1200 {
				m.SetTime(now.Add(time.Duration(i) * 50 * time.Millisecond))
				res, err := s.Admit(ctx, "out")
				if err != nil {
					t.Fatal(err)
				}
				admitted += len(res.Admitted)
			}
			if dev := math.Abs(float64(admitted-limit)) / float64(limit); dev > 0.05 {
				t.Errorf("admitted %d in a minute with a limit of %d: %.1f%% off, want within 5%%", admitted, limit, 100*dev)
			}
			t.Logf("limit %d/min: admitted %d in one minute", limit, admitted)
		})
	}
}

// joinMany joins n users to room, 32 at a time.
func joinMany(t testing.TB, s waitroom.Store, room string, n int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for w := range 32 {
		wg.Go(func() {
			for i := w; i < n; i += 32 {
				if _, err := s.Join(context.Background(), room, fmt.Sprintf("u%07d", i)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// cycleAndPurge runs n join-and-leave cycles in room (32 at a time), lets
// the room's retention pass, and runs admission passes until the purge
// has forgotten every user.
// advance is called between the two, at the room's peak.
func cycleAndPurge(t *testing.T, s waitroom.Store, room string, n int, advance func(time.Duration)) {
	t.Helper()
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for w := range 32 {
		wg.Go(func() {
			for i := w; i < n; i += 32 {
				u := fmt.Sprintf("user-%07d", i)
				if _, err := s.Join(ctx, room, u); err != nil {
					errs <- err
					return
				}
				if _, err := s.Leave(ctx, room, u); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	advance(1100 * time.Millisecond)
	for range n/redisstore.MaxBatch + 2 {
		if _, err := s.Admit(ctx, room); err != nil {
			t.Fatal(err)
		}
	}
}

// TestStateBoundedEmbedded: after 10,000 join-and-leave cycles and the
// retention, the room holds no trace of any user: the same keys as
// before, with no more members than before (miniredis has no memory
// figure; it counts keys and members). miniredis runs Lua slowly (about
// half a millisecond a script, far more under -race), so the 100,000
// cycles run on real Redis (TestStateBoundedRealRedis) or here with
// STAMPEDE_BOUNDED_CYCLES=100000.
func TestStateBoundedEmbedded(t *testing.T) {
	n := 10_000
	if v, err := strconv.Atoi(os.Getenv("STAMPEDE_BOUNDED_CYCLES")); err == nil && v > 0 {
		n = v
	}
	m := miniredis.RunT(t)
	now := time.Now()
	m.SetTime(now)
	client := redis.NewClient(&redis.Options{Addr: m.Addr(), PoolSize: 64})
	t.Cleanup(func() { client.Close() })
	// miniredis under -race may take over a second for a purge of 1,000.
	s, err := redisstore.NewWithConfig(client, redisstore.Config{AutoPipeline: true, OpTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cfg := waitroom.DefaultRoomConfig()
	cfg.Retention = time.Second
	if err := s.Configure(ctx, "bounded", cfg); err != nil {
		t.Fatal(err)
	}
	// The baseline: a room that has seen one user, who is gone.
	cycleAndPurge(t, s, "bounded", 1, func(d time.Duration) { now = now.Add(d); m.SetTime(now) })
	before := roomSize(t, client, "bounded")
	cycleAndPurge(t, s, "bounded", n, func(d time.Duration) { now = now.Add(d); m.SetTime(now) })
	after := roomSize(t, client, "bounded")
	t.Logf("room after 1 cycle: %v; after %d: %v", before, n, after)
	if after.keys != before.keys || after.members > before.members {
		t.Errorf("after %d cycles and the retention: %v, want the baseline %v", n, after, before)
	}
	if st, err := s.Stats(ctx, "bounded"); err != nil || st.JoinedTotal != int64(n+1) || st.LeftTotal != int64(n+1) {
		t.Errorf("stats = %+v, %v; want %d joined and left (counters stay)", st, err, n+1)
	}
}

// size is a room's footprint: keys and the members of its hashes and
// sorted sets.
type size struct{ keys, members int64 }

func (s size) String() string { return fmt.Sprintf("%d keys, %d members", s.keys, s.members) }

func roomSize(t *testing.T, client *redis.Client, room string) size {
	t.Helper()
	ctx := context.Background()
	var out size
	for _, k := range redisstore.KeysFor(room).All() {
		typ, err := client.Type(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		switch typ {
		case "none":
			continue
		case "hash":
			out.members += client.HLen(ctx, k).Val()
		case "zset":
			out.members += client.ZCard(ctx, k).Val()
		default:
			out.members++
		}
		out.keys++
	}
	return out
}

// TestStateBoundedRealRedis: the same on a real Redis, in DB 5 unless
// STAMPEDE_REDIS_URL names another, with used_memory from INFO memory and
// DBSIZE: 100,000 cycles with a one-second retention leave the room's keys
// within 256 KiB of the baseline (MEMORY USAGE; used_memory is logged) and
// no extra key.
func TestStateBoundedRealRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("100,000 cycles")
	}
	url := testenv.URL(t, testenv.RedisURL)
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(url, "/") || opts.DB == 0 {
		opts.DB = 5 // a database of this test's own
	}
	opts.PoolSize = 64
	client := redis.NewClient(opts)
	t.Cleanup(func() { client.Close() })
	ctx := context.Background()
	s := redisstore.New(client)
	room := fmt.Sprintf("bounded-%d", time.Now().UnixNano())
	cfg := waitroom.DefaultRoomConfig()
	cfg.Retention = time.Second
	if err := s.Configure(ctx, room, cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.DeleteRoom(context.Background(), room) })
	n := 100_000
	sleep := func(d time.Duration) { time.Sleep(d) }
	// The baseline after a warm-up that opens every pooled connection
	// (each has buffers on the server).
	cycleAndPurge(t, s, room, 1000, sleep)
	memBefore, keysBefore := usedMemory(t, client), client.DBSize(ctx).Val()
	roomBefore, sizeBefore := roomMemory(t, client, room), roomSize(t, client, room)
	var memPeak int64
	cycleAndPurge(t, s, room, n, func(d time.Duration) { memPeak = usedMemory(t, client); time.Sleep(d) })
	memAfter, keysAfter := usedMemory(t, client), client.DBSize(ctx).Val()
	t.Logf("DB %d: used_memory %d → %d bytes at the peak (%.0f bytes per finished user within the retention) → %d after the retention; DBSIZE %d → %d after %d cycles",
		opts.DB, memBefore, memPeak, float64(memPeak-memBefore)/float64(n), memAfter, keysBefore, keysAfter, n)
	// No user left: the room's keys and members are what they were after
	// the warm-up (its configuration hash and counters).
	if sz := roomSize(t, client, room); sz.keys > sizeBefore.keys || sz.members > sizeBefore.members {
		t.Errorf("room after the retention: %v, before the cycles %v", sz, sizeBefore)
	}
	if keysAfter > keysBefore {
		t.Errorf("DBSIZE %d → %d", keysBefore, keysAfter)
	}
	// used_memory is the whole server's, which other tests' clients move
	// under go test ./...; the bound is asserted on the room's own keys
	// (MEMORY USAGE of each), which only this test writes.
	if grew := roomMemory(t, client, room) - roomBefore; grew > 256<<10 {
		t.Errorf("the room's keys grew by %d bytes over %d cycles (used_memory by %d), want at most 256 KiB", grew, n, memAfter-memBefore)
	}
}

// roomMemory sums MEMORY USAGE over every key of room.
func roomMemory(t *testing.T, client *redis.Client, room string) int64 {
	t.Helper()
	var total int64
	for _, key := range redisstore.KeysFor(room).All() {
		n, err := client.MemoryUsage(context.Background(), key).Result()
		if err != nil && err != redis.Nil {
			t.Fatalf("MEMORY USAGE %s: %v", key, err)
		}
		total += n
	}
	return total
}

// usedMemory reads used_memory from INFO memory.
func usedMemory(t *testing.T, client *redis.Client) int64 {
	t.Helper()
	info, err := client.Info(context.Background(), "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	t.Fatal("INFO memory has no used_memory")
	return 0
}
