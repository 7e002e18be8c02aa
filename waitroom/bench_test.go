package waitroom_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-lab/stampede/waitroom"
	"github.com/stampede-lab/stampede/waitroom/redisstore"
)

// Every identifier of this file starts with "bench" so that it cannot
// clash with the helpers of the package's other test files.

const (
	// benchConcurrency is how many clients send at once.
	benchConcurrency = 64
	// benchJoinChunk and benchZaddChunk are the operations of one
	// measurement chunk. The ZADD chunk is larger because a ZADD is much
	// cheaper: both chunks then take a similar time, so that drift of the
	// machine weighs on both alike.
	benchJoinChunk = 3000
	benchZaddChunk = 15000
)

// benchRedisOptions returns the options of STAMPEDE_REDIS_URL moved to the
// URL's database + 2: the benchmark runs Services, which admit in every
// room of their database, and other tests use the URL's database (store
// tests) and the next one (HTTP tests) at the same time.
func benchRedisOptions(b *testing.B) *redis.Options {
	b.Helper()
	url := os.Getenv("STAMPEDE_REDIS_URL")
	if url == "" {
		b.Skip("STAMPEDE_REDIS_URL is not set: this benchmark measures a real Redis server (e.g. STAMPEDE_REDIS_URL=redis://127.0.0.1:6379/0)")
	}
	opts, err := redis.ParseURL(url)
	if err != nil {
		b.Fatalf("STAMPEDE_REDIS_URL: %v", err)
	}
	opts.DB = (opts.DB + 2) % 16
	opts.PoolSize = benchConcurrency
	return opts
}

// benchRun runs n operations on benchConcurrency goroutines and returns
// how long they took. op gets the operation's index; the first error stops
// the run.
func benchRun(n int, op func(i int) error) (time.Duration, error) {
	var (
		next    atomic.Int64
		errOnce sync.Once
		first   error
		failed  atomic.Bool
		wg      sync.WaitGroup
	)
	start := time.Now()
	for range benchConcurrency {
		wg.Go(func() {
			for !failed.Load() {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := op(i); err != nil {
					errOnce.Do(func() { first = err })
					failed.Store(true)
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start), first
}

// BenchmarkHTTPJoin measures joins per second through the HTTP API of three
// instances on one real Redis, 64 clients at once, against a raw go-redis
// ZADD loop at the same concurrency (what one queue insert costs without
// the service). Each iteration runs one chunk of each, alternating which
// goes first. Metrics: joins/s, zadd/s, and x-zadd = joins/s ÷ zadd/s
// (target ≥ 0.5).
func BenchmarkHTTPJoin(b *testing.B) {
	opts := benchRedisOptions(b)
	ctx := context.Background()

	// Three instances, each with its own Redis client and HTTP server.
	var urls []string
	var stores []*redisstore.Store
	for i := range 3 {
		client := redis.NewClient(opts)
		b.Cleanup(func() { client.Close() })
		if err := client.Ping(ctx).Err(); err != nil {
			b.Fatalf("STAMPEDE_REDIS_URL: %v", err)
		}
		store := redisstore.New(client)
		stores = append(stores, store)
		so := waitroom.DefaultServerOptions()
		so.Instance = fmt.Sprintf("bench-join-%d-%s", i, faultRand())
		so.Secret, so.AdminToken = faultSecret, faultAdminToken
		so.Logger = slog.New(slog.DiscardHandler)
		srv, err := waitroom.NewServer(ctx, store, so)
		if err != nil {
			b.Fatalf("NewServer: %v", err)
		}
		ts := httptest.NewServer(srv.Handler())
		b.Cleanup(func() {
			ts.Close()
			srv.Close()
		})
		urls = append(urls, ts.URL)
	}
	tr := &http.Transport{MaxIdleConns: 4 * benchConcurrency, MaxIdleConnsPerHost: benchConcurrency, IdleConnTimeout: time.Minute}
	b.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}

	room := "bench-join-" + faultRand()
	// Long leases and a normal tick: the admitters run as in production
	// while users pile up in the queue.
	b.Cleanup(func() { stores[0].DeleteRoom(context.Background(), room) })
	cfgReq, _ := http.NewRequest("PUT", urls[0]+"/v1/rooms/"+room, strings.NewReader(`{"capacity":100,"lease_seconds":3600}`))
	cfgReq.Header.Set("Content-Type", "application/json")
	cfgReq.Header.Set("Authorization", "Bearer "+faultAdminToken)
	if res, err := hc.Do(cfgReq); err != nil || res.StatusCode != http.StatusOK {
		b.Fatalf("configure the room: %v %v", err, res)
	} else {
		res.Body.Close()
	}

	baseline := redis.NewClient(opts)
	b.Cleanup(func() { baseline.Close() })
	scratch := "{bench-zadd-" + faultRand() + "}:z"
	b.Cleanup(func() { baseline.Del(context.Background(), scratch) })

	var users atomic.Int64 // unique user ids across chunks and runs
	join := func(int) error {
		id := users.Add(1)
		url := urls[id%int64(len(urls))] + "/v1/rooms/" + room + "/tickets"
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
			return fmt.Errorf("join u%d = %d %s", id, res.StatusCode, body)
		}
		return nil
	}
	var members atomic.Int64
	zadd := func(int) error {
		m := members.Add(1)
		return baseline.ZAdd(ctx, scratch, redis.Z{Score: float64(m), Member: fmt.Sprintf("u%d", m)}).Err()
	}

	// Warm up: connections open, scripts loaded.
	if _, err := benchRun(4*benchConcurrency, join); err != nil {
		b.Fatal(err)
	}
	if _, err := benchRun(4*benchConcurrency, zadd); err != nil {
		b.Fatal(err)
	}

	var joinTime, zaddTime time.Duration
	var joins, zadds int
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		phases := []func() error{
			func() error {
				d, err := benchRun(benchJoinChunk, join)
				joinTime, joins = joinTime+d, joins+benchJoinChunk
				return err
			},
			func() error {
				d, err := benchRun(benchZaddChunk, zadd)
				zaddTime, zadds = zaddTime+d, zadds+benchZaddChunk
				return err
			},
		}
		if i%2 == 1 {
			phases[0], phases[1] = phases[1], phases[0]
		}
		for _, phase := range phases {
			if err := phase(); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()

	joinRate := float64(joins) / joinTime.Seconds()
	zaddRate := float64(zadds) / zaddTime.Seconds()
	b.ReportMetric(joinRate, "joins/s")
	b.ReportMetric(zaddRate, "zadd/s")
	b.ReportMetric(joinRate/zaddRate, "x-zadd")

	// The joins really are in the room.
	st, err := stores[0].Stats(ctx, room)
	if err != nil {
		b.Fatalf("Stats: %v", err)
	}
	if want := users.Load(); st.JoinedTotal != want {
		b.Fatalf("the room counts %d joins, the benchmark sent %d", st.JoinedTotal, want)
	}
}
