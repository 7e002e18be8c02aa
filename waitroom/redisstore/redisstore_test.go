package redisstore_test

import (
	"context"
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
var configs = map[string]redisstore.Config{
	"autopipeline": redisstore.DefaultConfig(),
	"plain":        {AutoPipeline: false},
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

// TestConformanceEmbedded runs the suite on miniredis, the embedded
// default, with its clock under the test's control.
func TestConformanceEmbedded(t *testing.T) {
	for name, cfg := range configs {
		t.Run(name, func(t *testing.T) {
			m := miniredis.RunT(t)
			now := time.Now()
			m.SetTime(now)
			client := redis.NewClient(&redis.Options{Addr: m.Addr()})
			t.Cleanup(func() { client.Close() })
			storetest.Run(t, storetest.Harness{
				Store: func(t *testing.T) waitroom.Store { return newStore(t, client, cfg) },
				Advance: func(t *testing.T, d time.Duration) {
					now = now.Add(d)
					m.SetTime(now)
					m.FastForward(d) // key TTLs
				},
			})
		})
	}
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
	for name, cfg := range configs {
		t.Run(name, func(t *testing.T) {
			storetest.Run(t, storetest.Harness{
				Store:   func(t *testing.T) waitroom.Store { return newStore(t, client, cfg) },
				Advance: func(t *testing.T, d time.Duration) { time.Sleep(d) },
			})
		})
	}
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
