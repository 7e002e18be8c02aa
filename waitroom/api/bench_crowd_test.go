package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-lab/stampede/retry"
	"github.com/stampede-lab/stampede/waitroom"
	"github.com/stampede-lab/stampede/waitroom/api"
	"github.com/stampede-lab/stampede/waitroom/redisstore"
)

const (
	// benchCrowdInstances is how many waiting-room instances the crowd
	// polls, round robin, each with its own Redis pool.
	benchCrowdInstances = 3
	// benchCrowdWarmup is how long the crowd polls before the first
	// measured window: longer than the longest poll_after_ms (MaxPoll,
	// 15 s), so that every buyer has polled at their own interval.
	benchCrowdWarmup = 20 * time.Second
	// benchCrowdWindow is one iteration's measured window, and
	// benchCrowdCheck the window of position checks that follows it.
	benchCrowdWindow = 10 * time.Second
	benchCrowdCheck  = 4 * time.Second
	// benchCrowdSampleEvery: one poll in this many is checked against
	// the store's true rank.
	benchCrowdSampleEvery = 50
)

// BenchmarkCrowdPolls measures what a waiting crowd costs the shared
// store: 10,000 and 100,000 buyers waiting in one room of 100 (10-second
// leases, so about 10 admissions a second), each polling
// GET /v1/rooms/{room}/tickets/{user} at the poll_after_ms its last answer
// gave, round robin over three instances (each its own Redis pool, as
// three `serve waitroom` processes would have) on the Redis of
// STAMPEDE_REDIS_URL (database + 2; run it on a Redis nothing else uses,
// since INFO is server-wide). After a 20-second warm-up each iteration is
// a measured 10-second window, then a 4-second window of position checks
// (whose own reads of the store would count against the crowd); run it
// with -benchtime 3x.
//
// Metrics, over the measured windows: redis-cpu-share, the Redis server's
// CPU time over the windows' wall time (INFO cpu; the target is below
// 0.10 of one core at 100,000), the observer's ZCARDs included;
// cmds/poll (INFO commandstats, every instance's background included, the
// observer's ZCARDs taken out); polls/s; admitted/s. It fails when an
// observer reading the room every 10 ms (all along) sees more users
// active than the capacity, and when a poll sampled in the warm-up or a
// check window (one in 50) shows a position outside the stated bound of the true rank
// the store gives right after it: at most PositionSlack plus the
// admissions and departures since 700 ms before the poll (the oldest view
// an instance answers from is 600 ms old), and never below the true rank.
// pos-samples, pos-excess-max and max-active report them.
func BenchmarkCrowdPolls(b *testing.B) {
	for _, waiting := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("waiting=%d", waiting), func(b *testing.B) { benchCrowd(b, waiting) })
	}
}

// benchViewAt is a room view the benchmark read, and when.
type benchViewAt struct {
	at time.Time
	v  waitroom.RoomView
}

func benchCrowd(b *testing.B, waiting int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	opts := benchRedisOptions(b)
	info := redis.NewClient(opts)
	defer info.Close()
	var urls []string
	var first *running
	for i := range benchCrowdInstances {
		o := *opts
		client := redis.NewClient(&o)
		defer client.Close()
		so := api.DefaultConfig()
		so.Instance = fmt.Sprintf("bench-crowd-%d-%s", i, faultRand())
		so.Secret, so.AdminToken = faultSecret, faultAdminToken
		so.Logger = slog.New(slog.DiscardHandler)
		srv, err := startServer(b, ctx, redisstore.New(client), so)
		if err != nil {
			b.Fatal(err)
		}
		if first == nil {
			first = srv
		}
		ts := httptest.NewServer(srv.Handler())
		defer ts.Close()
		urls = append(urls, ts.URL)
	}
	store := redisstore.New(info)
	tr := &http.Transport{MaxIdleConns: 4 * benchConcurrency, MaxIdleConnsPerHost: 2 * benchConcurrency, IdleConnTimeout: time.Minute}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}

	// The crowd, written directly as joins write it (100,000 joins through
	// the API are not what is measured), then the room.
	room := "bench-crowd-" + faultRand()
	defer store.DeleteRoom(context.Background(), room)
	k := redisstore.KeysFor(room)
	now := time.Now().UnixMilli()
	users := benchWriteCrowd(b, info, room, "c", waiting, now)
	const capacity = 100
	benchPutRoom(b, hc, urls[0], room, fmt.Sprintf(`{"capacity":%d,"lease_seconds":10}`, capacity))
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, fresh := first.Service().View(room); fresh {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("no room view after 10 s")
		}
	}

	// Each buyer starts with the token a join would have given: their
	// place at one read of the room (admission is FIFO, so the first
	// AdmittedTotal users are the admitted ones).
	v0, err := store.View(ctx, room)
	if err != nil {
		b.Fatal(err)
	}
	signer, err := waitroom.NewSigner(faultSecret, nil)
	if err != nil {
		b.Fatal(err)
	}
	type buyer struct {
		user, token string
	}
	var crowd []*buyer
	for i := int(v0.AdmittedTotal); i < waiting; i++ {
		place := &waitroom.Place{Rank: int64(i) - v0.AdmittedTotal, Admitted: v0.AdmittedTotal, Departed: v0.DepartedTotal, Order: v0.Order}
		tok, err := signer.Sign(waitroom.Claims{Kind: waitroom.TicketToken, Room: room, User: users[i], Generation: now, Place: place, Expires: time.Now().Add(time.Hour)})
		if err != nil {
			b.Fatal(err)
		}
		crowd = append(crowd, &buyer{user: users[i], token: tok})
	}

	// The room's views, every 100 ms, for the position checks.
	var (
		viewsMu sync.Mutex
		views   []benchViewAt
	)
	viewAt := func(t time.Time) (waitroom.RoomView, bool) { // the newest read at or before t
		viewsMu.Lock()
		defer viewsMu.Unlock()
		i, _ := slices.BinarySearchFunc(views, t, func(e benchViewAt, t time.Time) int { return e.at.Compare(t) })
		if i == 0 {
			return waitroom.RoomView{}, false
		}
		return views[i-1].v, true
	}
	// The observer: the room's active users every 10 ms, all along; while
	// checking (not in a measured window), the room's view every 100 ms
	// too, for the position checks.
	var maxActive, overCap, observed atomic.Int64
	var checking atomic.Bool
	checking.Store(true)
	var checkFrom atomic.Int64 // positions are sampled from 1 s after it (unix ns)
	checkFrom.Store(time.Now().UnixNano())
	var bg sync.WaitGroup
	defer bg.Wait()
	defer cancel()
	bg.Go(func() {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for n := 0; ; n++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			observed.Add(1)
			if a, err := info.ZCard(ctx, k.Active).Result(); err == nil {
				maxActive.Store(max(maxActive.Load(), a))
				if a > capacity {
					overCap.Add(1)
				}
			}
			if n%10 == 0 && checking.Load() {
				at := time.Now()
				if v, err := store.View(ctx, room); err == nil {
					viewsMu.Lock()
					views = append(views, benchViewAt{at: at, v: v})
					viewsMu.Unlock()
				}
			}
		}
	})

	// The crowd: every buyer polls at their poll_after_ms, at most
	// 2×benchConcurrency requests in flight.
	var (
		polls, admitted, failures     atomic.Int64
		samples, overBound, belowTrue atomic.Int64
		excessMax                     atomic.Int64
		firstFailure                  atomic.Value
		inflight                      = make(chan struct{}, 2*benchConcurrency)
		maxPoll                       = 15 * time.Second
		rng                           = rand.New(rand.NewPCG(7, uint64(waiting)))
		starts                        = make([]time.Duration, len(crowd))
		pollErr                       = func(err error) {
			failures.Add(1)
			firstFailure.CompareAndSwap(nil, err.Error())
		}
	)
	for i := range starts {
		starts[i] = time.Duration(rng.Int64N(int64(maxPoll)))
	}
	type answer struct {
		State       string `json:"state"`
		Ahead       int64  `json:"ahead"`
		PollAfterMS int64  `json:"poll_after_ms"`
		TicketToken string `json:"ticket_token"`
	}
	poll := func(bu *buyer, n int64) (next time.Duration, done bool) {
		inflight <- struct{}{}
		defer func() { <-inflight }()
		startedAt := time.Now()
		r, _ := http.NewRequestWithContext(ctx, http.MethodGet, urls[n%int64(len(urls))]+"/v1/rooms/"+room+"/tickets/"+bu.user, nil)
		r.Header.Set("Authorization", "Bearer "+bu.token)
		res, err := hc.Do(r)
		if err != nil {
			if ctx.Err() == nil {
				pollErr(err)
			}
			return 2 * time.Second, ctx.Err() != nil
		}
		body, err := io.ReadAll(res.Body)
		res.Body.Close()
		var a answer
		if err != nil || res.StatusCode != http.StatusOK || json.Unmarshal(body, &a) != nil {
			pollErr(fmt.Errorf("poll of %s = %d %.200s", bu.user, res.StatusCode, body))
			return 2 * time.Second, false
		}
		polls.Add(1)
		if a.TicketToken != "" {
			bu.token = a.TicketToken
		}
		if a.State != string(waitroom.StateWaiting) {
			admitted.Add(1)
			return 0, true
		}
		if n%benchCrowdSampleEvery == 0 && checking.Load() && time.Since(time.Unix(0, checkFrom.Load())) > time.Second {
			before, ok := viewAt(startedAt.Add(-700 * time.Millisecond))
			tk, terr := store.Ticket(ctx, room, bu.user)
			after, verr := store.View(ctx, room)
			if ok && terr == nil && verr == nil && tk.State == waitroom.StateWaiting {
				samples.Add(1)
				excess := a.Ahead - tk.Position
				bound := waitroom.PositionSlack(a.Ahead) + (after.AdmittedTotal - before.AdmittedTotal) + (after.DepartedTotal - before.DepartedTotal)
				if excess < 0 {
					belowTrue.Add(1)
				}
				if excess > bound {
					overBound.Add(1)
				}
				for m := excessMax.Load(); excess > m && !excessMax.CompareAndSwap(m, excess); m = excessMax.Load() {
				}
			}
		}
		return time.Duration(a.PollAfterMS) * time.Millisecond, false
	}
	var pollSeq atomic.Int64
	var crowdWG sync.WaitGroup
	for i, bu := range crowd {
		crowdWG.Go(func() {
			if retry.Sleep(ctx, starts[i]) != nil {
				return
			}
			for {
				next, done := poll(bu, pollSeq.Add(1))
				if done || retry.Sleep(ctx, next) != nil {
					return
				}
			}
		})
	}
	defer crowdWG.Wait()
	defer cancel()

	if retry.Sleep(ctx, benchCrowdWarmup) != nil {
		b.Fatal("cancelled in the warm-up")
	}
	var (
		wall, redisCPU    time.Duration
		cmds, pollsIn, ad int64
	)
	b.ResetTimer()
	for range b.N {
		// A measured window without the position checks' reads (the
		// observer's ZCARDs go on: their count is taken out of the
		// commands, their CPU is left in), then a window of checks.
		checking.Store(false)
		cmds0, cpu0, ok0 := benchRedisCounters(info)
		p0, a0, o0, t0 := polls.Load(), admitted.Load(), observed.Load(), time.Now()
		_ = retry.Sleep(ctx, benchCrowdWindow)
		cmds1, cpu1, ok1 := benchRedisCounters(info)
		p1, a1, o1, t1 := polls.Load(), admitted.Load(), observed.Load(), time.Now()
		cmds1 -= o1 - o0
		checkFrom.Store(time.Now().UnixNano())
		checking.Store(true)
		_ = retry.Sleep(ctx, benchCrowdCheck)
		if !ok0 || !ok1 {
			b.Fatal("cannot read INFO from Redis")
		}
		wall += t1.Sub(t0)
		redisCPU += cpu1 - cpu0
		cmds += cmds1 - cmds0
		pollsIn += p1 - p0
		ad += a1 - a0
	}
	b.StopTimer()
	cancel()
	crowdWG.Wait()
	bg.Wait()
	b.ReportMetric(redisCPU.Seconds()/wall.Seconds(), "redis-cpu-share")
	b.ReportMetric(float64(cmds)/float64(max(pollsIn, 1)), "cmds/poll")
	b.ReportMetric(float64(pollsIn)/wall.Seconds(), "polls/s")
	b.ReportMetric(float64(ad)/wall.Seconds(), "admitted/s")
	b.ReportMetric(float64(maxActive.Load()), "max-active")
	b.ReportMetric(float64(samples.Load()), "pos-samples")
	b.ReportMetric(float64(excessMax.Load()), "pos-excess-max")
	b.ReportMetric(float64(failures.Load()), "failed-polls")
	if n := overCap.Load(); n > 0 {
		b.Errorf("%d observer samples saw more than %d users active (max %d)", n, capacity, maxActive.Load())
	}
	if n := overBound.Load(); n > 0 {
		b.Errorf("%d of %d sampled positions exceeded the true rank by more than the stated bound", n, samples.Load())
	}
	if n := belowTrue.Load(); n > 0 {
		b.Errorf("%d of %d sampled positions were below the true rank", n, samples.Load())
	}
	if samples.Load() == 0 {
		b.Error("no position was sampled")
	}
	if n := failures.Load(); n > 0 {
		b.Errorf("%d polls failed, the first: %v", n, firstFailure.Load())
	}
}
