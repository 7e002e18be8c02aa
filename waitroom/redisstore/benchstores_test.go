package redisstore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-lab/stampede/internal/testenv"
	"github.com/stampede-lab/stampede/waitroom/redisstore"
)

// benchOnBothServers runs fn as sub-benchmarks "embedded/LABEL=N" and
// "real/LABEL=N" for every n of sizes, in that order: on a fresh embedded
// server, and on the Redis server STAMPEDE_REDIS_URL names (skipped when
// unset). real tells fn which it has: only a real server has INFO
// commandstats.
func benchOnBothServers(b *testing.B, label string, sizes []int, fn func(b *testing.B, client *redis.Client, n int, real bool)) {
	for _, n := range sizes {
		b.Run(fmt.Sprintf("embedded/%s=%d", label, n), func(b *testing.B) {
			e, err := redisstore.StartEmbedded()
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			client := redis.NewClient(&redis.Options{Addr: e.Addr(), ReadTimeout: time.Minute, WriteTimeout: time.Minute})
			defer client.Close()
			fn(b, client, n, false)
		})
		b.Run(fmt.Sprintf("real/%s=%d", label, n), func(b *testing.B) {
			opts, err := redis.ParseURL(testenv.URL(b, testenv.RedisURL))
			if err != nil {
				b.Fatalf("STAMPEDE_REDIS_URL: %v", err)
			}
			client := redis.NewClient(opts)
			defer client.Close()
			fn(b, client, n, true)
		})
	}
}
