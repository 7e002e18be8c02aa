package redisstore_test

import (
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/stampede-lab/stampede/internal/testenv"
	"github.com/stampede-lab/stampede/waitroom"
	"github.com/stampede-lab/stampede/waitroom/redisstore"
	"github.com/stampede-lab/stampede/waitroom/storetest"
)

// configs are the Store configurations every conformance run covers: the
// default (auto-pipelined per-user scripts) and the plain client.
//
// The suite checks what the store does, not how fast: its calls get
// conformanceTimeout, not the default second. The pre-queue case's
// opening pass draws and admits 1,000 users in one script, which under
// the race detector on a machine loaded by other test binaries took over
// a second on the embedded server (BenchmarkOpeningPass measures the
// draw without them).
var configs = map[string]redisstore.Config{
	"autopipeline": withTimeout(redisstore.DefaultConfig()),
	"plain":        withTimeout(redisstore.Config{AutoPipeline: false}),
}

// conformanceTimeout is the conformance runs' OpTimeout.
const conformanceTimeout = 5 * time.Second

func withTimeout(c redisstore.Config) redisstore.Config {
	c.OpTimeout = conformanceTimeout
	return c
}

// newStore returns a Store on client configured by cfg.
func newStore(t *testing.T, client redis.UniversalClient, cfg redisstore.Config) waitroom.Store {
	t.Helper()
	s, err := redisstore.NewWithConfig(client, cfg)
	if err != nil {
		t.Fatalf("NewWithConfig(%+v): %v", cfg, err)
	}
	return s
}

// shardedConfigs are the configurations of the sharded conformance runs:
// positions counted exactly (the suite checks them at once after each
// change).
var shardedConfigs = map[string]redisstore.Config{
	"sharded-autopipeline": withTimeout(redisstore.Config{AutoPipeline: true}),
	"sharded-plain":        withTimeout(redisstore.Config{AutoPipeline: false}),
}

// testShards is the number of queue shards of the sharded conformance runs.
const testShards = 3

// eachConfig runs fn for every configuration, with the suite's rooms of
// one queue, and then of testShards queue shards.
func eachConfig(t *testing.T, fn func(t *testing.T, cfg redisstore.Config, shards int)) {
	for name, cfg := range configs {
		t.Run(name, func(t *testing.T) { fn(t, cfg, 0) })
	}
	for name, cfg := range shardedConfigs {
		t.Run(name, func(t *testing.T) { fn(t, cfg, testShards) })
	}
}

// TestConformanceEmbedded runs the suite on miniredis, the embedded
// default, with its clock under the test's control, on rooms of one queue
// and of several.
func TestConformanceEmbedded(t *testing.T) {
	eachConfig(t, func(t *testing.T, cfg redisstore.Config, shards int) {
		{
			m := miniredis.RunT(t)
			now := time.Now()
			m.SetTime(now)
			client := redis.NewClient(&redis.Options{Addr: m.Addr()})
			t.Cleanup(func() { client.Close() })
			storetest.Exercise(t, func(t *testing.T) waitroom.Store { return newStore(t, client, cfg) },
				storetest.WithAdvance(func(t *testing.T, d time.Duration) {
					now = now.Add(d)
					m.SetTime(now)
					m.FastForward(d) // key TTLs
				}),
				storetest.WithQueueShards(shards))
		}
	})
}

// TestConformanceRealRedis runs the suite on the Redis server named by
// STAMPEDE_REDIS_URL.
func TestConformanceRealRedis(t *testing.T) {
	url := testenv.URL(t, testenv.RedisURL)
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatalf("STAMPEDE_REDIS_URL: %v", err)
	}
	client := redis.NewClient(opts)
	t.Cleanup(func() { client.Close() })
	eachConfig(t, func(t *testing.T, cfg redisstore.Config, shards int) {
		storetest.Exercise(t, func(t *testing.T) waitroom.Store { return newStore(t, client, cfg) }, storetest.WithQueueShards(shards))
	})
}

// TestEmbeddedExpiresKeys: the embedded server expires keys with the wall
// clock (miniredis alone would keep them until told to move time).
func TestEmbeddedExpiresKeys(t *testing.T) {
	e, err := redisstore.StartEmbedded()
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	client := redis.NewClient(&redis.Options{Addr: e.Addr()})
	defer client.Close()
	ctx := context.Background()
	if err := client.Set(ctx, "k", "v", 50*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for client.Exists(ctx, "k").Val() == 1 {
		if time.Now().After(deadline) {
			t.Fatal("a key with a 50ms TTL still exists after 5s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// blackHole accepts connections and reads them without ever answering,
// as a frozen Redis does (the kernel accepts, the process never replies).
// It returns its address and a function that closes it.
func blackHole(t *testing.T) (string, func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go io.Copy(io.Discard, c)
		}
	}()
	return ln.Addr().String(), func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	}
}

// TestFrozenRedisAnswersWithinOpTimeout: against a server that never
// answers, every Store call ends with an unavailable error within
// OpTimeout (+ 1 s of slack), whether the client honours deadlines itself
// (ApplyTimeouts) or not (go-redis defaults: 3 s reads, retries), with and
// without auto-pipelining. The multi-step admission modes, which run under
// the caller's deadline, are checked with the tuned client.
func TestFrozenRedisAnswersWithinOpTimeout(t *testing.T) {
	const opTimeout = 200 * time.Millisecond
	for _, tc := range []struct {
		name     string
		pipeline bool
		tuned    bool
	}{{"tuned client", true, true}, {"tuned client, plain", false, true}, {"default client", true, false}, {"default client, plain", false, false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			addr, closeHole := blackHole(t)
			cfg := redisstore.Config{AutoPipeline: tc.pipeline, OpTimeout: opTimeout}
			opts := &redis.Options{Addr: addr}
			if tc.tuned {
				cfg.ApplyTimeouts(opts)
			}
			client := redis.NewClient(opts)
			// The server goes first, so that Close does not wait for
			// the requests abandoned in the auto-pipeliner.
			t.Cleanup(func() { closeHole(); client.Close() })
			s, err := redisstore.NewWithConfig(client, cfg)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			calls := map[string]func() error{
				"Ping":      func() error { return s.Ping(ctx) },
				"Configure": func() error { return s.Configure(ctx, "r", waitroom.DefaultRoomConfig()) },
				"Config":    func() error { _, err := s.Config(ctx, "r"); return err },
				"Join":      func() error { _, err := s.Join(ctx, "r", "u"); return err },
				"Ticket":    func() error { _, err := s.Ticket(ctx, "r", "u"); return err },
				"Leave":     func() error { _, err := s.Leave(ctx, "r", "u"); return err },
				"Stats":     func() error { _, err := s.Stats(ctx, "r"); return err },
				"Rooms":     func() error { _, err := s.Rooms(ctx); return err },
				"NextExpiry": func() error {
					_, _, err := s.NextExpiry(ctx, "r")
					return err
				},
			}
			calls["Admit atomic"] = func() error { _, err := s.Admit(ctx, "r"); return err }
			var wg sync.WaitGroup
			for name, fn := range calls {
				wg.Go(func() {
					start := time.Now()
					err := fn()
					took := time.Since(start)
					if waitroom.ErrorCode(err) != waitroom.CodeUnavailable {
						t.Errorf("%s = %v, want an unavailable error", name, err)
					}
					if took > opTimeout+time.Second {
						t.Errorf("%s took %s, want at most %s (OpTimeout + 1s)", name, took, opTimeout+time.Second)
					}
				})
			}
			wg.Wait()
		})
	}
}
