package redisstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-lab/stampede/waitroom"
	"github.com/stampede-lab/stampede/waitroom/redisstore"
)

// BenchmarkOpeningPass measures a room's opening pass — the fairness draw
// of its whole pre-queue, which one script does at once — with 1,000 and
// 10,000 users pre-queued, on the embedded server and, with
// STAMPEDE_REDIS_URL, on real Redis, in one run. The room's capacity is
// 10, so the pass draws everyone and admits ten: the draw's cost, not the
// admissions'. Metrics: ms/pass (the script's wall time as the store
// call sees it), cpu-us/user (this process's CPU per pre-queued user:
// the embedded server runs in it) and, on real Redis, redis-us/user (the
// server's time in scripts per pre-queued user, INFO commandstats).
func BenchmarkOpeningPass(b *testing.B) {
	benchOnBothServers(b, "prequeued", []int{1_000, 10_000}, benchOpening)
}

func benchOpening(b *testing.B, client *redis.Client, n int, real bool) {
	ctx := context.Background()
	store, err := redisstore.NewWithConfig(client, redisstore.Config{AutoPipeline: false, OpTimeout: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	var wall, cpu time.Duration
	var scripts float64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		room := fmt.Sprintf("bench-open-%x", rand.Uint64())
		cfg := waitroom.DefaultRoomConfig()
		cfg.Capacity = 10
		cfg.OpensAt = time.Now().Add(time.Hour)
		if err := store.Configure(ctx, room, cfg); err != nil {
			b.Fatalf("Configure: %v", err)
		}
		for j := range n {
			if _, err := store.Join(ctx, room, benchUser(j)); err != nil {
				b.Fatalf("Join: %v", err)
			}
		}
		// Open it now: the pre-queue is drawn at the first pass after.
		cfg.OpensAt = time.Now().Add(20 * time.Millisecond)
		if err := store.UpdateConfig(ctx, room, cfg, []string{"opens_at"}); err != nil {
			b.Fatalf("UpdateConfig: %v", err)
		}
		time.Sleep(30 * time.Millisecond)
		redis0 := benchScriptUsec(b, client, real)
		cpu0, t0 := benchCPU(), time.Now()
		b.StartTimer()
		res, err := store.Admit(ctx, room)
		b.StopTimer()
		wall += time.Since(t0)
		cpu += benchCPU() - cpu0
		scripts += benchScriptUsec(b, client, real) - redis0
		if err != nil || res.Shuffled != n {
			b.Fatalf("Admit = %+v, %v; want %d drawn", res, err, n)
		}
		if err := store.DeleteRoom(ctx, room); err != nil {
			b.Fatalf("DeleteRoom: %v", err)
		}
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(float64(wall.Milliseconds())/float64(b.N), "ms/pass")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N*n), "cpu-us/user")
	if real {
		b.ReportMetric(scripts/float64(b.N*n), "redis-us/user")
	}
}
