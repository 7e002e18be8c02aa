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

// BenchmarkJoin measures one new buyer's join (Store.Join) of a room with
// 1,000 and 10,000 users already waiting, on the embedded server and,
// with STAMPEDE_REDIS_URL, on real Redis, in one run: a join's cost must
// not grow with the line. Metrics: cpu-us/join, this process's CPU per
// join (the embedded server runs in it), and on real Redis
// redis-us/join, the server's time in scripts per join (INFO
// commandstats).
func BenchmarkJoin(b *testing.B) {
	benchOnBothServers(b, "waiting", []int{1_000, 10_000}, benchJoin)
}

func benchJoin(b *testing.B, client *redis.Client, waiting int, real bool) {
	ctx := context.Background()
	store, err := redisstore.NewWithConfig(client, redisstore.Config{AutoPipeline: false, OpTimeout: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	room := fmt.Sprintf("bench-join-%x", rand.Uint64())
	cfg := waitroom.DefaultRoomConfig()
	cfg.Capacity = 1
	if err := store.Configure(ctx, room, cfg); err != nil {
		b.Fatalf("Configure: %v", err)
	}
	defer func() {
		if err := store.DeleteRoom(context.Background(), room); err != nil {
			b.Errorf("DeleteRoom: %v", err)
		}
	}()
	for i := range waiting {
		if _, err := store.Join(ctx, room, benchUser(i)); err != nil {
			b.Fatalf("Join: %v", err)
		}
	}
	redis0 := benchScriptUsec(b, client, real)
	b.ResetTimer()
	cpu0 := benchCPU()
	for i := 0; i < b.N; i++ {
		t, err := store.Join(ctx, room, benchUser(waiting+i))
		if err != nil || t.State != waitroom.StateWaiting || t.Position != int64(waiting+i) {
			b.Fatalf("Join = %+v, %v; want waiting at position %d", t, err, waiting+i)
		}
	}
	cpu := benchCPU() - cpu0
	b.StopTimer()
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-us/join")
	if real {
		b.ReportMetric((benchScriptUsec(b, client, real)-redis0)/float64(b.N), "redis-us/join")
	}
}
