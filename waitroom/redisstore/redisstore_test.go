package redisstore_test

import (
	"os"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/stampede-lab/stampede/waitroom"
	"github.com/stampede-lab/stampede/waitroom/redisstore"
	"github.com/stampede-lab/stampede/waitroom/storetest"
)

// TestConformanceEmbedded runs the suite on miniredis, the embedded
// default, with its clock under the test's control.
func TestConformanceEmbedded(t *testing.T) {
	m := miniredis.RunT(t)
	now := time.Now()
	m.SetTime(now)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { client.Close() })
	storetest.Run(t, storetest.Harness{
		Store: func(t *testing.T) waitroom.Store { return redisstore.New(client) },
		Advance: func(t *testing.T, d time.Duration) {
			now = now.Add(d)
			m.SetTime(now)
		},
	})
}

// TestConformanceRealRedis runs the suite on the Redis server named by
// STAMPEDE_REDIS_URL.
func TestConformanceRealRedis(t *testing.T) {
	url := os.Getenv("STAMPEDE_REDIS_URL")
	if url == "" {
		t.Skip("STAMPEDE_REDIS_URL is not set: no real Redis to test against (.ci/run sets it)")
	}
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatalf("STAMPEDE_REDIS_URL: %v", err)
	}
	client := redis.NewClient(opts)
	t.Cleanup(func() { client.Close() })
	storetest.Run(t, storetest.Harness{
		Store:   func(t *testing.T) waitroom.Store { return redisstore.New(client) },
		Advance: func(t *testing.T, d time.Duration) { time.Sleep(d) },
	})
}
