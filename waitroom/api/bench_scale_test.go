package api_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-lab/stampede/internal/testenv"
	"github.com/stampede-lab/stampede/waitroom/api"
	"github.com/stampede-lab/stampede/waitroom/redisstore"
)

// Every identifier of this file starts with "scale" so that it cannot
// clash with the helpers of the package's other test files.

// scaleClients is how many clients send joins at once, spread round-robin
// over the instances.
const scaleClients = 64

// BenchmarkJoinInstances measures joins through the HTTP API of 1, 2 and 3
// waiting-room instances that share one Redis: the scaling curve of the
// join path against instances. Each instance is a Server with its own
// Redis client, admitter and HTTP server (httptest, in this process);
// scaleClients clients post joins round-robin over the instances, b.N joins
// in all, each for a new user.
//
// Redis is the embedded one (miniredis, which runs each script in a Lua
// interpreter written in Go, under one lock) unless STAMPEDE_REDIS_URL
// names a real server. Metrics: joins/s, and the 50th and 99th percentile of a
// join's latency as the client sees it (p50-ms, p99-ms). On a machine with
// few cores, the clients, the instances and Redis share the CPU, so more
// instances add no capacity there; the curve shows what they cost.
//
// The sub-benchmarks are named <redis>/instances=<n>, where <redis> is
// "redis" for a real server and "miniredis" for the embedded one, so that
// the outputs of both runs chart side by side (cmd/benchchart).
func BenchmarkJoinInstances(b *testing.B) {
	backend := "miniredis"
	if os.Getenv(testenv.RedisURL) != "" {
		backend = "redis"
	}
	b.Run(backend, func(b *testing.B) {
		for _, n := range []int{1, 2, 3} {
			b.Run(fmt.Sprintf("instances=%d", n), func(b *testing.B) {
				scaleJoins(b, n)
			})
		}
	})
}

// scaleRedisOptions returns the options of the Redis the benchmark runs
// on, and whether it is the embedded one: STAMPEDE_REDIS_URL moved to its
// database + 2 (as BenchmarkHTTPJoin does, away from the tests that use the
// URL's database and the next), or an embedded server, which is closed
// when the benchmark ends.
func scaleRedisOptions(b *testing.B) (opts *redis.Options, embedded bool) {
	b.Helper()
	if url := os.Getenv(testenv.RedisURL); url != "" {
		o, err := redis.ParseURL(url)
		if err != nil {
			b.Fatalf("%s: %v", testenv.RedisURL, err)
		}
		o.DB = (o.DB + 2) % 16
		opts = o
	} else {
		e, err := redisstore.StartEmbedded()
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(e.Close)
		opts, embedded = &redis.Options{Addr: e.Addr()}, true
	}
	opts.PoolSize = scaleClients
	scaleStoreConfig().ApplyTimeouts(opts)
	return opts, embedded
}

// scaleStoreConfig is the Store configuration of the instances:
// redisstore's default with a 10 s OpTimeout instead of 1 s, so that a
// loaded machine (or miniredis, much slower than Redis) slows the
// benchmark down and shows in its latency instead of failing joins with
// 503.
func scaleStoreConfig() redisstore.Config {
	c := redisstore.DefaultConfig()
	c.OpTimeout = 10 * time.Second
	return c
}

// scaleJoins runs b.N joins against n instances and reports joins/s,
// p50-ms and p99-ms.
func scaleJoins(b *testing.B, n int) {
	opts, embedded := scaleRedisOptions(b)
	ctx := context.Background()
	const admin = "scale-admin-token-0123456789abcdef"
	secret := []byte("scale-test-secret-0123456789abcdef0123456789")

	// Every instance is stopped when this function returns: the testing
	// package calls it twice (b.N = 1, then the real b.N), and the first
	// call's servers must not run beside the second's.
	var urls []string
	var store *redisstore.Store
	for i := range n {
		client := redis.NewClient(opts)
		defer client.Close()
		if err := client.Ping(ctx).Err(); err != nil {
			b.Fatalf("Redis at %s: %v", opts.Addr, err)
		}
		s, err := redisstore.NewWithConfig(client, scaleStoreConfig())
		if err != nil {
			b.Fatal(err)
		}
		if store == nil {
			store = s
		}
		so := api.DefaultConfig()
		so.AllowUnsignedUsers = true // the clients join as named users
		so.Instance = fmt.Sprintf("scale-%d-%s", i, faultRand())
		so.Secret, so.AdminToken = secret, admin
		so.Logger = slog.New(slog.DiscardHandler)
		srv, err := startServer(b, ctx, s, so)
		if err != nil {
			b.Fatalf("NewServer: %v", err)
		}
		ts := httptest.NewServer(srv.Handler())
		defer srv.Close()
		defer ts.Close()
		urls = append(urls, ts.URL)
	}
	// Room in the idle pool for every client's connection to every instance:
	// a connection closed for want of it would be reopened on the next join.
	tr := &http.Transport{MaxIdleConns: 3 * scaleClients, MaxIdleConnsPerHost: scaleClients, IdleConnTimeout: time.Minute}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}

	// Long leases: the admitters run as in production while users pile up
	// in the queue.
	room := "scale-" + faultRand()
	defer store.DeleteRoom(context.Background(), room)
	req, _ := http.NewRequest("PUT", urls[0]+"/v1/rooms/"+room, strings.NewReader(roomBody(b, `{"capacity":100,"lease_seconds":3600}`)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+admin)
	if res, err := hc.Do(req); err != nil || res.StatusCode != http.StatusOK {
		b.Fatalf("configure the room: %v %v", err, res)
	} else {
		res.Body.Close()
	}

	var users atomic.Int64
	join := func() error {
		id := users.Add(1)
		url := urls[id%int64(n)] + "/v1/rooms/" + room + "/tickets"
		res, err := hc.Post(url, "application/json", strings.NewReader(fmt.Sprintf(`{"user_id":"u%d"}`, id)))
		if err != nil {
			return err
		}
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		if err != nil {
			return err
		}
		if res.StatusCode != http.StatusCreated {
			return fmt.Errorf("POST %s u%d = %d %s", url, id, res.StatusCode, body)
		}
		return nil
	}
	// Warm up: connections open, scripts loaded.
	if _, _, err := scaleRun(2*scaleClients, join); err != nil {
		b.Fatalf("warm-up: %v", err)
	}
	warm := users.Load()

	// CPU time: this process's, plus the Redis server's when it is a real
	// one (miniredis runs in this process).
	cpuClient := redis.NewClient(opts)
	defer cpuClient.Close()
	cpu := func() (time.Duration, bool) {
		if embedded {
			return benchProcessCPU()
		}
		self, server, ok := benchCPU(ctx, cpuClient)
		return self + server, ok
	}

	b.ResetTimer()
	cpu0, ok0 := cpu()
	took, lat, err := scaleRun(b.N, join)
	cpu1, ok1 := cpu()
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/took.Seconds(), "joins/s")
	b.ReportMetric(scalePercentile(lat, 0.50), "p50-ms")
	b.ReportMetric(scalePercentile(lat, 0.99), "p99-ms")
	if ok0 && ok1 {
		b.ReportMetric(float64((cpu1-cpu0).Microseconds())/float64(b.N), "cpu-us/join")
	}

	// Every join really is in the room.
	st, err := store.Stats(ctx, room)
	if err != nil {
		b.Fatalf("Stats: %v", err)
	}
	if st.JoinedTotal != warm+int64(b.N) {
		b.Fatalf("the room counts %d joins, the benchmark sent %d", st.JoinedTotal, warm+int64(b.N))
	}
}

// scaleRun runs op n times on scaleClients goroutines and returns how long
// that took and every call's latency. The first error stops the run.
func scaleRun(n int, op func() error) (time.Duration, []time.Duration, error) {
	var (
		next    atomic.Int64
		errOnce sync.Once
		first   error
		failed  atomic.Bool
		wg      sync.WaitGroup
	)
	lat := make([]time.Duration, n)
	start := time.Now()
	for range scaleClients {
		wg.Go(func() {
			for !failed.Load() {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				t0 := time.Now()
				err := op()
				lat[i] = time.Since(t0)
				if err != nil {
					errOnce.Do(func() { first = err })
					failed.Store(true)
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start), lat, first
}

// scalePercentile returns the q-quantile of lat in milliseconds (nearest
// rank). It sorts lat.
func scalePercentile(lat []time.Duration, q float64) float64 {
	if len(lat) == 0 {
		return 0
	}
	slices.Sort(lat)
	i := int(q*float64(len(lat))+0.5) - 1
	i = min(max(i, 0), len(lat)-1)
	return float64(lat[i]) / float64(time.Millisecond)
}
