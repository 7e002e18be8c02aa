package redisstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-lab/stampede/waitroom"
	"github.com/stampede-lab/stampede/waitroom/redisstore"
)

// BenchmarkWaitingPoll measures one waiting buyer's poll (Store.Ticket of
// a user still in the queue) in a room with 200, 2,000 and 8,000 users
// waiting, on the embedded server and, with STAMPEDE_REDIS_URL, on real
// Redis, in one run. Metrics: cpu-us/poll, this process's CPU per poll
// (the embedded server runs in it), and on real Redis redis-us/poll, the
// server's time in scripts per poll (INFO commandstats, evalsha and
// eval).
func BenchmarkWaitingPoll(b *testing.B) {
	benchOnBothServers(b, "waiting", []int{200, 2_000, 8_000}, benchPoll)
}

func benchPoll(b *testing.B, client *redis.Client, waiting int, real bool) {
	ctx := context.Background()
	store, err := redisstore.NewWithConfig(client, redisstore.Config{AutoPipeline: false, OpTimeout: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	room := fmt.Sprintf("bench-poll-%x", rand.Uint64())
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
	users := make([]string, waiting)
	for i := range users {
		users[i] = benchUser(i)
		if _, err := store.Join(ctx, room, users[i]); err != nil {
			b.Fatalf("Join: %v", err)
		}
	}
	redis0 := benchScriptUsec(b, client, real)
	b.ResetTimer()
	cpu0 := benchCPU()
	for i := 0; i < b.N; i++ {
		t, err := store.Ticket(ctx, room, users[(i*7919)%waiting])
		if err != nil || t.State != waitroom.StateWaiting {
			b.Fatalf("Ticket = %+v, %v; want waiting", t, err)
		}
	}
	cpu := benchCPU() - cpu0
	b.StopTimer()
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-us/poll")
	if real {
		b.ReportMetric((benchScriptUsec(b, client, real)-redis0)/float64(b.N), "redis-us/poll")
	}
}

// benchScriptUsec is the server's time in EVALSHA and EVAL so far, in µs
// (INFO commandstats); 0 when not real.
func benchScriptUsec(b *testing.B, client *redis.Client, real bool) float64 {
	if !real {
		return 0
	}
	info, err := client.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	total := 0.0
	for _, line := range strings.Split(info, "\n") {
		if !strings.HasPrefix(line, "cmdstat_evalsha:") && !strings.HasPrefix(line, "cmdstat_eval:") {
			continue
		}
		for _, f := range strings.Split(strings.TrimSpace(line[strings.IndexByte(line, ':')+1:]), ",") {
			if v, ok := strings.CutPrefix(f, "usec="); ok {
				n, _ := strconv.ParseFloat(v, 64)
				total += n
			}
		}
	}
	return total
}

// benchCPU is this process's CPU time (user and system) so far.
func benchCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
