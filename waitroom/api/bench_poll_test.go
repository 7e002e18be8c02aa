package api_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-lab/stampede/internal/testenv"
	"github.com/stampede-lab/stampede/waitroom"
	"github.com/stampede-lab/stampede/waitroom/api"
	"github.com/stampede-lab/stampede/waitroom/redisstore"
)

const (
	// benchPollChunk and benchHealthChunk are the requests of one
	// measurement chunk of each phase of BenchmarkWaitingPollHTTP.
	benchPollChunk   = 5000
	benchHealthChunk = 5000
	benchStoreChunk  = 300
	// benchPollers is how many buyers far back the benchmark polls as.
	benchPollers = 1000
)

// BenchmarkWaitingPollHTTP measures a waiting buyer's poll,
// GET /v1/rooms/{room}/tickets/{user} with the token a poll handed out,
// against GET /healthz on the same instance, in one run, with 2,000 and
// 20,000 users waiting, on the embedded default and on the Redis of
// STAMPEDE_REDIS_URL (its own database: run it on a Redis nothing else
// uses, since INFO is server-wide). One instance serves 64 clients; each
// iteration runs one chunk of each phase, alternating which goes first.
//
// Metrics: cmds/poll and cmds/healthz, the store's commands per request
// at steady state (INFO commandstats calls on Redis, the embedded server's
// own count; a script's inner commands included), background included
// (admission passes, room views, presence flushes, room refreshes);
// cpu-µs/poll and cpu-µs/healthz, this process's CPU (server, clients
// and, embedded, the store) plus the Redis server's per request;
// x-healthz = cpu-µs/poll ÷ cpu-µs/healthz (target ≤ 1.3); polls/s and
// cmds/s (the store's commands a second while the polls ran); and,
// for the cost before the room view, cmds/storepoll and cpu-µs/storepoll:
// the same polls with tokens that carry no place, each reading the store
// (smaller chunks: on the embedded server one costs milliseconds).
func BenchmarkWaitingPollHTTP(b *testing.B) {
	for _, waiting := range []int{2_000, 20_000} {
		b.Run(fmt.Sprintf("embedded/waiting=%d", waiting), func(b *testing.B) {
			e, err := redisstore.StartEmbedded()
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			opts := &redis.Options{Addr: e.Addr(), PoolSize: benchConcurrency}
			redisstore.DefaultConfig().ApplyTimeouts(opts)
			client := redis.NewClient(opts)
			defer client.Close()
			benchWaitingPolls(b, client, waiting, func() (int64, time.Duration, bool) { return int64(e.Commands()), 0, true })
		})
		b.Run(fmt.Sprintf("real/waiting=%d", waiting), func(b *testing.B) {
			opts, err := redis.ParseURL(testenv.URL(b, testenv.RedisURL))
			if err != nil {
				b.Fatalf("STAMPEDE_REDIS_URL: %v", err)
			}
			opts.PoolSize = benchConcurrency
			redisstore.DefaultConfig().ApplyTimeouts(opts)
			client := redis.NewClient(opts)
			defer client.Close()
			info := redis.NewClient(opts)
			defer info.Close()
			benchWaitingPolls(b, client, waiting, func() (int64, time.Duration, bool) { return benchRedisCounters(info) })
		})
	}
}

// benchRedisCounters reads a Redis server's commands run so far (INFO
// commandstats) and its CPU time (INFO cpu).
func benchRedisCounters(c *redis.Client) (cmds int64, cpu time.Duration, ok bool) {
	out, err := c.Info(context.Background(), "commandstats", "cpu").Result()
	if err != nil {
		return 0, 0, false
	}
	var seconds float64
	for line := range strings.Lines(out) {
		name, value, _ := strings.Cut(strings.TrimSpace(line), ":")
		switch {
		case strings.HasPrefix(name, "cmdstat_"):
			calls, _, _ := strings.Cut(strings.TrimPrefix(value, "calls="), ",")
			n, _ := strconv.ParseInt(calls, 10, 64)
			cmds += n
		case name == "used_cpu_sys" || name == "used_cpu_user":
			v, _ := strconv.ParseFloat(value, 64)
			seconds += v
		}
	}
	return cmds, time.Duration(seconds * float64(time.Second)), true
}

func benchWaitingPolls(b *testing.B, client *redis.Client, waiting int, counters func() (int64, time.Duration, bool)) {
	ctx := context.Background()
	store := redisstore.New(client)
	so := api.DefaultConfig()
	so.Instance = "bench-poll-" + faultRand()
	so.Secret, so.AdminToken = faultSecret, faultAdminToken
	so.Logger = slog.New(slog.DiscardHandler)
	srv, err := startServer(b, ctx, store, so)
	if err != nil {
		b.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	tr := &http.Transport{MaxIdleConns: 2 * benchConcurrency, MaxIdleConnsPerHost: benchConcurrency, IdleConnTimeout: time.Minute}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}

	// A room of 100 with hour-long leases: the first pass admits 100, then
	// the admitter ticks with nothing to admit, as in a sale whose
	// checkout is full.
	room := "bench-poll-" + faultRand()
	defer store.DeleteRoom(context.Background(), room)
	benchPutRoom(b, hc, ts.URL, room, `{"capacity":100,"lease_seconds":3600}`)
	// The crowd, written directly as joins write it (a join per user
	// through the API would take minutes on the embedded server).
	now := time.Now().UnixMilli()
	users := benchWriteCrowd(b, client, room, "w", waiting, now)
	for deadline := time.Now().Add(10 * time.Second); !slices.Contains(srv.Service().Rooms(), room); {
		if time.Now().After(deadline) {
			b.Fatalf("the instance does not run room %s after 10 s", room)
		}
		time.Sleep(20 * time.Millisecond)
	}
	signer, err := waitroom.NewSigner(faultSecret, nil)
	if err != nil {
		b.Fatal(err)
	}
	// The pollers are the last benchPollers users: their first poll reads
	// the store and hands out a token with their place.
	pollers := users[waiting-benchPollers:]
	tokens := make([]string, len(pollers))
	for i, u := range pollers {
		if tokens[i], err = signer.Sign(waitroom.Claims{Kind: waitroom.TicketToken, Room: room, User: u, Generation: now, Expires: time.Now().Add(time.Hour)}); err != nil {
			b.Fatal(err)
		}
	}
	get := func(url, token string) ([]byte, error) {
		r, _ := http.NewRequest(http.MethodGet, url, nil)
		if token != "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		res, err := hc.Do(r)
		if err != nil {
			return nil, err
		}
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		if err == nil && res.StatusCode != http.StatusOK {
			err = fmt.Errorf("GET %s = %d %s", url, res.StatusCode, body)
		}
		return body, err
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, fresh := srv.Service().View(room); fresh {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("no room view after 10 s")
		}
	}
	plain := slices.Clone(tokens) // tokens without a place
	for i, u := range pollers {
		body, err := get(ts.URL+"/v1/rooms/"+room+"/tickets/"+u, tokens[i])
		if err != nil {
			b.Fatal(err)
		}
		tok, _, _ := strings.Cut(string(body)[strings.Index(string(body), `"ticket_token":"`)+len(`"ticket_token":"`):], `"`)
		if !strings.Contains(string(body), `"state":"waiting"`) || !strings.Contains(string(body), `"ticket_token":"`) {
			b.Fatalf("first poll of %s = %s, want waiting with a new token", u, body)
		}
		tokens[i] = tok
	}
	poll := func(i int) error {
		body, err := get(ts.URL+"/v1/rooms/"+room+"/tickets/"+pollers[i%len(pollers)], tokens[i%len(pollers)])
		if err == nil && !strings.Contains(string(body), `"state":"waiting"`) {
			err = fmt.Errorf("poll = %s, want waiting", body)
		}
		return err
	}
	// The same polls with tokens that carry no place: each reads the
	// store, as every poll did before the room view.
	// A store too slow to answer within the store's OpTimeout answers
	// 503: counted, not fatal (the embedded server with 20,000 waiting).
	var unavailable atomic.Int64
	storePoll := func(i int) error {
		body, err := get(ts.URL+"/v1/rooms/"+room+"/tickets/"+pollers[i%len(pollers)], plain[i%len(pollers)])
		if err != nil && strings.Contains(err.Error(), "= 503 ") {
			unavailable.Add(1)
			return nil
		}
		if err == nil && !strings.Contains(string(body), `"state":"waiting"`) {
			err = fmt.Errorf("poll = %s, want waiting", body)
		}
		return err
	}
	health := func(int) error {
		_, err := get(ts.URL+"/healthz", "")
		return err
	}
	type phase struct {
		name  string
		chunk int
		op    func(int) error
		ops   int64
		cmds  int64
		cpu   time.Duration
		time  time.Duration
	}
	phases := []*phase{{name: "poll", chunk: benchPollChunk, op: poll}, {name: "healthz", chunk: benchHealthChunk, op: health},
		{name: "store", chunk: benchStoreChunk, op: storePoll}}
	for _, p := range phases { // warm up
		if _, err := benchRun(4*benchConcurrency, p.op); err != nil {
			b.Fatalf("warm-up of %s: %v", p.name, err)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := range phases {
			p := phases[(i+j)%len(phases)]
			cmds0, srv0, ok0 := counters()
			self0, okSelf0 := benchProcessCPU()
			d, err := benchRun(p.chunk, p.op)
			if err != nil {
				b.Fatalf("%s: %v", p.name, err)
			}
			self1, okSelf1 := benchProcessCPU()
			cmds1, srv1, ok1 := counters()
			if !ok0 || !ok1 || !okSelf0 || !okSelf1 {
				b.Fatal("cannot read the CPU or the commands")
			}
			p.ops += int64(p.chunk)
			p.cmds += cmds1 - cmds0
			p.cpu += self1 - self0 + srv1 - srv0
			p.time += d
		}
	}
	b.StopTimer()
	pollP, healthP, storeP := phases[0], phases[1], phases[2]
	per := func(p *phase) float64 { return float64(p.cpu.Nanoseconds()) / 1000 / float64(p.ops) }
	b.ReportMetric(float64(pollP.cmds)/float64(pollP.ops), "cmds/poll")
	b.ReportMetric(float64(healthP.cmds)/float64(healthP.ops), "cmds/healthz")
	b.ReportMetric(per(pollP), "cpu-µs/poll")
	b.ReportMetric(per(healthP), "cpu-µs/healthz")
	b.ReportMetric(per(pollP)/per(healthP), "x-healthz")
	b.ReportMetric(float64(pollP.ops)/pollP.time.Seconds(), "polls/s")
	b.ReportMetric(float64(pollP.cmds)/pollP.time.Seconds(), "cmds/s")
	b.ReportMetric(float64(storeP.cmds)/float64(storeP.ops), "cmds/storepoll")
	b.ReportMetric(per(storeP), "cpu-µs/storepoll")
	b.ReportMetric(float64(unavailable.Load())/float64(storeP.ops), "503/storepoll")
}

// benchWriteCrowd writes n users waiting in room (named prefix and a
// number, in that order), as joins at now (ms) write them, in pipelines of
// 1,000, and returns their names.
func benchWriteCrowd(b testing.TB, client *redis.Client, room, prefix string, n int, now int64) []string {
	b.Helper()
	ctx := context.Background()
	k := redisstore.KeysFor(room)
	users := make([]string, n)
	for lo := 0; lo < n; lo += 1000 {
		_, err := client.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := lo; i < min(lo+1000, n); i++ {
				users[i] = fmt.Sprintf("%s%06d", prefix, i)
				p.ZAdd(ctx, k.Queue, redis.Z{Score: float64(i + 1), Member: users[i]})
				p.ZAdd(ctx, k.Seen, redis.Z{Score: float64(now), Member: users[i]})
				p.HSet(ctx, k.State, users[i], "waiting")
				p.HSet(ctx, k.SeqOf, users[i], i+1)
				p.HSet(ctx, k.JoinedAt, users[i], now)
			}
			return nil
		})
		if err != nil {
			b.Fatalf("writing the crowd: %v", err)
		}
	}
	if err := client.Set(ctx, k.Seq, n, 0).Err(); err != nil {
		b.Fatal(err)
	}
	if err := client.HIncrBy(ctx, k.Stats, "joined", int64(n)).Err(); err != nil {
		b.Fatal(err)
	}
	return users
}

// benchPutRoom configures room on the instance at base with the admin
// token: PUT of partial (completed by roomBody); anything but 200 fails b.
func benchPutRoom(b testing.TB, hc *http.Client, base, room, partial string) {
	b.Helper()
	req, _ := http.NewRequest("PUT", base+"/v1/rooms/"+room, strings.NewReader(roomBody(b, partial)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+faultAdminToken)
	res, err := hc.Do(req)
	if err != nil || res.StatusCode != http.StatusOK {
		b.Fatalf("configure the room: %v %v", err, res)
	}
	res.Body.Close()
}
