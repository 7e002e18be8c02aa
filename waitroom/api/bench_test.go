package api_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strconv"
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

// Every identifier of this file starts with "bench" so that it cannot
// clash with the helpers of the package's other test files.

const (
	// benchConcurrency is how many clients send at once.
	benchConcurrency = 64
	// The bench…Chunk constants are the operations of one measurement
	// chunk of each phase. Cheaper operations get larger chunks, so that
	// every chunk takes a similar time and drift of the machine weighs on
	// all phases alike.
	benchJoinChunk   = 3000
	benchZaddChunk   = 15000
	benchScriptChunk = 8000
	benchNoopChunk   = 6000
)

// benchRedisOptions returns the options of STAMPEDE_REDIS_URL moved to the
// URL's database + 2: the benchmark runs Services, which admit in every
// room of their database, and other tests use the URL's database (store
// tests) and the next one (HTTP tests) at the same time.
func benchRedisOptions(b *testing.B) *redis.Options {
	b.Helper()
	url := testenv.URL(b, testenv.RedisURL)
	opts, err := redis.ParseURL(url)
	if err != nil {
		b.Fatalf("STAMPEDE_REDIS_URL: %v", err)
	}
	opts.DB = (opts.DB + 2) % 16
	opts.PoolSize = benchConcurrency
	// As `stampede serve waitroom` configures its client.
	redisstore.DefaultConfig().ApplyTimeouts(opts)
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

// BenchmarkHTTPJoin measures what a join through the HTTP API costs in
// CPU time against its floor, measured in the same run: a no-op request
// through the same HTTP machinery plus one call of the join script.
//
// Three instances share one real Redis; 64 clients send at once. Each
// iteration runs one chunk of every phase, rotating which goes first:
//
//   - join: POST /v1/rooms/{room}/tickets to the instances;
//   - noop: the same HTTP client and httptest servers posting the same
//     body to a handler that reads it and answers a ticket-sized JSON;
//   - script: Store.Join called directly, auto-pipelined as the service
//     runs it: one call of the join script;
//   - zadd: a raw go-redis ZADD loop, for reference.
//
// CPU time is this process's (getrusage: the clients, the servers and the
// admitters) plus the Redis server's (INFO cpu); with the machine's cores
// all busy, throughput follows it. Metrics: cpu-µs/join, cpu-µs/noop,
// cpu-µs/script, cpu-µs/zadd, x-floor = cpu-µs/join ÷ (cpu-µs/noop +
// cpu-µs/script) (target ≤ 1.3), allocs/join, allocs/noop and
// allocs/script (heap allocations of this process per operation, both
// ends of the HTTP exchange), and joins/s.
func BenchmarkHTTPJoin(b *testing.B) {
	opts := benchRedisOptions(b)
	ctx := context.Background()

	// Three instances, each with its own Redis client and HTTP server.
	var urls []string
	var stores []*redisstore.Store
	var servers []*running
	for i := range 3 {
		client := redis.NewClient(opts)
		b.Cleanup(func() { client.Close() })
		if err := client.Ping(ctx).Err(); err != nil {
			b.Fatalf("STAMPEDE_REDIS_URL: %v", err)
		}
		store := redisstore.New(client)
		stores = append(stores, store)
		so := api.DefaultConfig()
		so.AllowUnsignedUsers = true
		so.Instance = fmt.Sprintf("bench-join-%d-%s", i, faultRand())
		so.Secret, so.AdminToken = faultSecret, faultAdminToken
		so.Logger = slog.New(slog.DiscardHandler)
		srv, err := startServer(b, ctx, store, so)
		if err != nil {
			b.Fatalf("NewServer: %v", err)
		}
		ts := httptest.NewServer(srv.Handler())
		b.Cleanup(func() {
			ts.Close()
			srv.Close()
		})
		urls = append(urls, ts.URL)
		servers = append(servers, srv)
	}
	// The no-op endpoint: three servers like the instances, each reading
	// the body and answering a ticket-sized JSON.
	var noopURLs []string
	for range 3 {
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, `{"room":"r","user_id":"u","state":"waiting","position":1,"ticket_token":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}`)
		}))
		b.Cleanup(ts.Close)
		noopURLs = append(noopURLs, ts.URL)
	}
	tr := &http.Transport{MaxIdleConns: 8 * benchConcurrency, MaxIdleConnsPerHost: benchConcurrency, IdleConnTimeout: time.Minute}
	b.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}

	room := "bench-join-" + faultRand()
	// Long leases and a normal tick: the admitters run as in production
	// while users pile up in the queue.
	b.Cleanup(func() { stores[0].DeleteRoom(context.Background(), room) })
	cfgReq, _ := http.NewRequest("PUT", urls[0]+"/v1/rooms/"+room, strings.NewReader(roomBody(b, `{"capacity":100,"lease_seconds":3600}`)))
	cfgReq.Header.Set("Content-Type", "application/json")
	cfgReq.Header.Set("Authorization", "Bearer "+faultAdminToken)
	if res, err := hc.Do(cfgReq); err != nil || res.StatusCode != http.StatusOK {
		b.Fatalf("configure the room: %v %v", err, res)
	} else {
		res.Body.Close()
	}
	// Until an instance runs the room's admitter (from its next room
	// refresh), its joins read the room's configuration from Redis: wait
	// for all three, so that only the steady state is measured.
	for _, srv := range servers {
		for deadline := time.Now().Add(10 * time.Second); !slices.Contains(srv.Service().Rooms(), room); {
			if time.Now().After(deadline) {
				b.Fatalf("an instance does not run room %s after 10 s", room)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	post := func(url string, id int64, want int) error {
		res, err := hc.Post(url, "application/json", strings.NewReader(fmt.Sprintf(`{"user_id":"u%d"}`, id)))
		if err != nil {
			return err
		}
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		if err != nil {
			return err
		}
		if res.StatusCode != want {
			return fmt.Errorf("POST %s u%d = %d %s", url, id, res.StatusCode, body)
		}
		return nil
	}
	var users atomic.Int64 // unique user ids across phases, chunks and runs
	join := func(int) error {
		id := users.Add(1)
		return post(urls[id%int64(len(urls))]+"/v1/rooms/"+room+"/tickets", id, http.StatusCreated)
	}
	noop := func(i int) error {
		return post(noopURLs[i%len(noopURLs)]+"/v1/rooms/"+room+"/tickets", int64(i), http.StatusCreated)
	}
	// The script phase runs on a client of its own, so that the HTTP
	// instances' pools stay as they are.
	piped := redis.NewClient(opts)
	b.Cleanup(func() { piped.Close() })
	pipedStore := redisstore.New(piped)
	script := func(int) error {
		id := users.Add(1)
		t, err := pipedStore.Join(ctx, room, "u"+strconv.FormatInt(id, 10))
		if err == nil && !t.Created {
			err = fmt.Errorf("Store.Join u%d: not a new ticket", id)
		}
		return err
	}

	baseline := redis.NewClient(opts)
	b.Cleanup(func() { baseline.Close() })
	scratch := "{bench-zadd-" + faultRand() + "}:z"
	b.Cleanup(func() { baseline.Del(context.Background(), scratch) })
	var members atomic.Int64
	zadd := func(int) error {
		m := members.Add(1)
		return baseline.ZAdd(ctx, scratch, redis.Z{Score: float64(m), Member: fmt.Sprintf("u%d", m)}).Err()
	}

	phases := []*benchPhase{
		{name: "join", chunk: benchJoinChunk, op: join},
		{name: "noop", chunk: benchNoopChunk, op: noop},
		{name: "script", chunk: benchScriptChunk, op: script},
		{name: "zadd", chunk: benchZaddChunk, op: zadd},
	}
	joinP, noopP, scriptP, zaddP := phases[0], phases[1], phases[2], phases[3]
	// Warm up: connections open, scripts loaded.
	for _, p := range phases {
		if _, err := benchRun(4*benchConcurrency, p.op); err != nil {
			b.Fatalf("warm-up of %s: %v", p.name, err)
		}
	}

	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for k := range phases {
			p := phases[(i+k)%len(phases)]
			mallocs0 := benchMallocs()
			self0, redis0, cpuOK0 := benchCPU(ctx, baseline)
			d, err := benchRun(p.chunk, p.op)
			if err != nil {
				b.Fatalf("%s: %v", p.name, err)
			}
			self1, redis1, cpuOK1 := benchCPU(ctx, baseline)
			p.mallocs += benchMallocs() - mallocs0
			p.time += d
			p.ops += p.chunk
			p.cpu += self1 - self0 + redis1 - redis0
			p.redisCPU += redis1 - redis0
			p.cpuOK = cpuOK0 && cpuOK1 && (p.cpuOK || p.ops == p.chunk)
		}
	}
	b.StopTimer()

	b.ReportMetric(joinP.rate(), "joins/s")
	for _, p := range []struct {
		phase *benchPhase
		name  string
	}{{joinP, "join"}, {noopP, "noop"}, {scriptP, "script"}} {
		b.ReportMetric(float64(p.phase.mallocs)/float64(p.phase.ops), "allocs/"+p.name)
	}
	if joinP.cpuOK && noopP.cpuOK && scriptP.cpuOK && zaddP.cpuOK {
		b.ReportMetric(joinP.cpuPerOp(), "cpu-µs/join")
		b.ReportMetric(noopP.cpuPerOp(), "cpu-µs/noop")
		b.ReportMetric(scriptP.cpuPerOp(), "cpu-µs/script")
		b.ReportMetric(zaddP.cpuPerOp(), "cpu-µs/zadd")
		b.ReportMetric(joinP.cpuPerOp()/(noopP.cpuPerOp()+scriptP.cpuPerOp()), "x-floor")
		b.ReportMetric(float64(joinP.redisCPU.Nanoseconds())/1000/float64(joinP.ops), "redis-µs/join")
		b.ReportMetric(float64(scriptP.redisCPU.Nanoseconds())/1000/float64(scriptP.ops), "redis-µs/script")
	}

	// Every join really is in the room.
	st, err := stores[0].Stats(ctx, room)
	if err != nil {
		b.Fatalf("Stats: %v", err)
	}
	if want := users.Load(); st.JoinedTotal != want {
		b.Fatalf("the room counts %d joins, the benchmark sent %d", st.JoinedTotal, want)
	}
}

// benchPhase is one kind of operation of BenchmarkHTTPJoin and the time
// its chunks took.
type benchPhase struct {
	name  string
	chunk int
	op    func(int) error
	time  time.Duration
	ops   int
	// cpu is the CPU time of this process and the Redis server during the
	// phase's chunks; cpuOK says whether every reading succeeded.
	cpu   time.Duration
	cpuOK bool
	// redisCPU is the Redis server's part of cpu.
	redisCPU time.Duration
	// mallocs counts this process's heap allocations during the chunks.
	mallocs uint64
}

// cpuPerOp is the phase's CPU time per operation in microseconds.
func (p *benchPhase) cpuPerOp() float64 {
	return float64(p.cpu.Nanoseconds()) / 1000 / float64(p.ops)
}

// benchMallocs returns how many heap objects this process has allocated.
func benchMallocs() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.Mallocs
}

// benchCPU returns the CPU time used so far by this process and by the
// Redis server client talks to, and whether both could be read.
func benchCPU(ctx context.Context, client *redis.Client) (self, server time.Duration, ok bool) {
	self, ok = benchProcessCPU()
	if !ok {
		return 0, 0, false
	}
	info, err := client.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, 0, false
	}
	var seconds float64
	found := 0
	for line := range strings.Lines(info) {
		name, value, _ := strings.Cut(strings.TrimSpace(line), ":")
		if name == "used_cpu_sys" || name == "used_cpu_user" {
			v, err := strconv.ParseFloat(value, 64)
			if err != nil {
				return 0, 0, false
			}
			seconds += v
			found++
		}
	}
	if found != 2 {
		return 0, 0, false
	}
	return self, time.Duration(seconds * float64(time.Second)), true
}

// rate is the phase's operations per second over all its chunks.
func (p *benchPhase) rate() float64 { return float64(p.ops) / p.time.Seconds() }

// BenchmarkJoinHandler calls the join handler of one instance directly,
// without a network on the HTTP side, on the real Redis of
// STAMPEDE_REDIS_URL: its allocations per join (-benchmem) and its CPU
// profile are those of the server's join path alone (with go-redis and
// httptest's request and recorder).
func BenchmarkJoinHandler(b *testing.B) {
	opts := benchRedisOptions(b)
	client := redis.NewClient(opts)
	b.Cleanup(func() { client.Close() })
	if err := client.Ping(context.Background()).Err(); err != nil {
		b.Fatalf("STAMPEDE_REDIS_URL: %v", err)
	}
	e := newEnvWith(b, backend{client: client}, false, func(o *api.Config) { o.RoomRefresh = time.Second })
	room := e.newRoom(b, `{"capacity":100,"lease_seconds":3600}`)
	b.Cleanup(func() { e.store.DeleteRoom(context.Background(), room) })
	for !slices.Contains(e.srv.Service().Rooms(), room) {
		time.Sleep(20 * time.Millisecond)
	}
	h := e.srv.Handler()
	path := "/v1/rooms/" + room + "/tickets"
	var users atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(benchConcurrency / runtime.GOMAXPROCS(0))
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(`{"user_id":"u`+strconv.FormatInt(users.Add(1), 10)+`"}`))
			r.Header.Set("Content-Type", "application/json")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != http.StatusCreated {
				b.Fatalf("join: %d %s", w.Code, w.Body)
			}
		}
	})
}
