package admission

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/stampede-lab/stampede/lab"
	"github.com/stampede-lab/stampede/retry"
	"github.com/stampede-lab/stampede/waitroom"
	"github.com/stampede-lab/stampede/waitroom/api"
	"github.com/stampede-lab/stampede/waitroom/redisstore"
)

// adminToken is the lab instances' admin token; the servers listen on
// loopback only and live for one run.
const adminToken = "stampede-lab-admin-token"

// RunDetail is the per-run data kept in the JSON beside the metrics.
type RunDetail struct {
	Seed     uint64 `json:"seed"`
	Room     string `json:"room"`
	Samples  int    `json:"observer_samples"`
	SampleHz int    `json:"observer_samples_per_s"`
	// RequiredSamples is the fewest samples this run needed to be valid
	// (Config.RequiredSamples).
	RequiredSamples int `json:"observer_required_samples"`
	// MaxGapMS is the longest time between two samples (or from the start
	// to the first one), in milliseconds.
	MaxGapMS float64 `json:"observer_max_gap_ms"`
	// ObserverErrors counts the observer's failed reads of the room; any
	// makes the run invalid. ObserverError is the first one.
	ObserverErrors int    `json:"observer_errors"`
	ObserverError  string `json:"observer_first_error,omitempty"`
	// Active is the room's occupancy over time: the highest count seen in
	// each 10 ms bucket.
	Active []Point `json:"active_over_time"`
	// Accounting is the final tally; it must add up to joined.
	Accounting waitroom.RoomStats `json:"accounting"`
	// HTTPFailures counts the users' failed requests by status or kind.
	HTTPFailures map[string]int `json:"http_failures,omitempty"`
}

// Point is one sample of a time series.
type Point struct {
	MS    int64 `json:"ms"`
	Value int64 `json:"value"`
}

// pass is one admission pass seen through the service's hook.
type pass struct {
	done       time.Time // this process's clock when it returned
	admitted   []string
	admittedAt []time.Time // the store's clock when each user left the queue
	trips      int
	shuffled   int // pre-queue users put in random order by this pass
}

// passLog collects passes from every instance.
type passLog struct {
	mu     sync.Mutex
	passes []pass
}

func (l *passLog) hook(_ string, _ waitroom.Mode, _ time.Duration, res waitroom.AdmitResult, err error) {
	if err != nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.passes = append(l.passes, pass{done: time.Now(), admitted: res.Admitted, admittedAt: res.AdmittedAt, trips: res.RoundTrips, shuffled: res.Shuffled})
}

// instance is one service instance: its own Redis pool, service and HTTP
// server.
type instance struct {
	client *redis.Client
	svc    *waitroom.Service
	server *http.Server
	url    string
	done   chan struct{}
}

func (e *Experiment) run(ctx context.Context, rc runContext) (lab.RunResult, error) {
	c := e.cfg
	opts, stopRedis, err := e.redis()
	if err != nil {
		return lab.RunResult{}, err
	}
	defer stopRedis()
	room := fmt.Sprintf("lab-%s-%d", rc.mode, time.Now().UnixNano())
	defer func() {
		// On a real, shared Redis the room must not outlive the run.
		o := *opts
		client := redis.NewClient(&o)
		_ = redisstore.New(client).DeleteRoom(context.Background(), room)
		client.Close()
	}()

	secret := make([]byte, 32)
	for i := range secret {
		secret[i] = byte(rand.Uint32())
	}
	signer, err := waitroom.NewSigner(secret, nil)
	if err != nil {
		return lab.RunResult{}, err
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	passes := &passLog{}
	svcCtx, stopServices := context.WithCancel(context.Background())
	defer stopServices()
	var instances []*instance
	defer func() {
		stopServices()
		for _, in := range instances {
			<-in.done
			shut, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_ = in.server.Shutdown(shut)
			cancel()
			in.client.Close()
		}
	}()
	for i := range c.Instances {
		in, err := startInstance(svcCtx, opts, signer, fmt.Sprintf("lab-%d", i), rc.mode, rc.immediate, c.maxPoll(), passes.hook, log)
		if err != nil {
			return lab.RunResult{}, err
		}
		instances = append(instances, in)
	}

	users := newUsers(c, rc.seed, instances, room)
	if err := users.configure(ctx, rc); err != nil {
		return lab.RunResult{}, err
	}
	if err := waitForRoom(ctx, instances, room); err != nil {
		return lab.RunResult{}, err
	}

	obs := newObserver(opts, room, c.ObserveEvery)
	start := time.Now()
	if c.Prequeue > 0 {
		if err := users.open(ctx, start.Add(c.OpensAfter)); err != nil {
			return lab.RunResult{}, err
		}
	}
	obsDone := make(chan struct{})
	obsCtx, stopObserver := context.WithCancel(ctx)
	go func() { obs.run(obsCtx, start); close(obsDone) }()

	userCtx, stopUsers := context.WithTimeout(ctx, c.Duration)
	users.run(userCtx, start)
	stopUsers()
	end := time.Now()
	// Stop admission before the final count, so that no pass is caught
	// half way.
	stopServices()
	for _, in := range instances {
		<-in.done
	}
	stopObserver()
	<-obsDone
	if err := ctx.Err(); err != nil {
		return lab.RunResult{}, err
	}
	return e.measure(rc, opts, room, start, end, obs, passes, users)
}

// redis returns the connection options for this run's Redis: a fresh
// embedded server, or the configured real one.
func (e *Experiment) redis() (*redis.Options, func(), error) {
	if e.cfg.RedisURL == "" {
		m, err := redisstore.StartEmbedded()
		if err != nil {
			return nil, nil, err
		}
		return &redis.Options{Addr: m.Addr(), PoolSize: 64}, m.Close, nil
	}
	opts, err := redis.ParseURL(e.cfg.RedisURL)
	if err != nil {
		return nil, nil, fmt.Errorf("admission: redis: %w", err)
	}
	opts.PoolSize = 64
	return opts, func() {}, nil
}

func startInstance(ctx context.Context, opts *redis.Options, signer *waitroom.Signer, name string, mode waitroom.Mode, immediate bool, maxPoll time.Duration,
	hook func(string, waitroom.Mode, time.Duration, waitroom.AdmitResult, error), log *slog.Logger) (*instance, error) {
	o := *opts
	client := redis.NewClient(&o) // each instance its own pool
	scfg := waitroom.DefaultServiceConfig()
	scfg.Instance, scfg.Immediate, scfg.Logger, scfg.OnPass = name, immediate, log, hook
	scfg.RoomRefresh, scfg.RateWindow = 200*time.Millisecond, 2*time.Second
	scfg.MinPoll, scfg.MaxPoll = 50*time.Millisecond, maxPoll
	// The unsafe modes are the lab's own stores, wrapping the real one.
	store, err := StoreFor(redisstore.New(client), client, mode, name)
	if err != nil {
		client.Close()
		return nil, err
	}
	svc, err := waitroom.NewService(store, scfg)
	if err != nil {
		client.Close()
		return nil, err
	}
	hcfg := api.DefaultHandlerConfig()
	hcfg.AdminToken, hcfg.Logger = adminToken, log
	handler, err := api.NewHandler(svc, signer, hcfg, prometheus.NewRegistry())
	if err != nil {
		client.Close()
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		client.Close()
		return nil, err
	}
	in := &instance{client: client, svc: svc, server: &http.Server{Handler: handler}, url: "http://" + ln.Addr().String(), done: make(chan struct{})}
	go func() { _ = in.server.Serve(ln) }()
	go func() { _ = svc.Run(ctx); close(in.done) }()
	return in, nil
}

// waitForRoom waits until every instance admits for room.
func waitForRoom(ctx context.Context, instances []*instance, room string) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		ready := 0
		for _, in := range instances {
			if slices.Contains(in.svc.Rooms(), room) {
				ready++
			}
		}
		if ready == len(instances) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("admission: only %d of %d instances found room %s within 5s", ready, len(instances), room)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// observer counts the room directly on Redis every ObserveEvery.
type observer struct {
	client   *redis.Client
	keys     redisstore.Keys
	every    time.Duration
	capacity int64

	samples   int
	maxActive int64
	overCap   int             // samples above capacity
	buckets   map[int64]int64 // 10 ms bucket → highest active
	// busy marks the 10 ms buckets in which users waited, from the first
	// admission on.
	busy map[int64]bool
	// Utilization: the sum of active/capacity over samples taken while
	// users waited, from the first admission on.
	utilSum   float64
	utilCount int
	started   bool
	// last is the time of the latest sample since the start; maxGap the
	// longest wait for a sample.
	last, maxGap time.Duration
	// errs counts failed reads of the room; firstErr is the first.
	errs     int
	firstErr error
}

func newObserver(opts *redis.Options, room string, every time.Duration) *observer {
	o := *opts
	o.PoolSize = 2
	return &observer{client: redis.NewClient(&o), keys: redisstore.KeysFor(room), every: every, buckets: map[int64]int64{}, busy: map[int64]bool{}}
}

// run reads the room's capacity, then samples the room every o.every until
// ctx ends. A failed read is counted (see fail), never fatal, except for the
// capacity: without it no sample can be judged, and run returns.
func (o *observer) run(ctx context.Context, start time.Time) {
	defer o.client.Close()
	if !o.readCapacity(ctx) {
		return
	}
	t := time.NewTicker(o.every)
	defer t.Stop()
	for {
		if !o.sample(ctx, start) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// readCapacity reads the room's capacity; it reports false, having counted
// the error unless ctx ended, when it cannot.
func (o *observer) readCapacity(ctx context.Context) bool {
	capacity, err := o.client.HGet(ctx, o.keys.Config, "capacity").Int64()
	if err != nil {
		if ctx.Err() == nil {
			o.fail(fmt.Errorf("read the capacity: %w", err))
		}
		return false
	}
	o.capacity = capacity
	return true
}

// sample counts the room and its queue once, in one round trip, and
// records the counts or the error. It reports false when ctx has ended.
func (o *observer) sample(ctx context.Context, start time.Time) bool {
	var active, queue *redis.IntCmd
	_, err := o.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		active = p.ZCard(ctx, o.keys.Active)
		queue = p.ZCard(ctx, o.keys.Queue)
		return nil
	})
	switch {
	case err == nil:
		o.record(time.Since(start), active.Val(), queue.Val())
	case ctx.Err() != nil:
		return false // a read cut short by the end of the run is no error
	default:
		o.fail(fmt.Errorf("count the room: %w", err))
	}
	return true
}

// fail counts a failed read of the room and keeps the first error.
func (o *observer) fail(err error) {
	o.errs++
	if o.firstErr == nil {
		o.firstErr = err
	}
}

func (o *observer) record(at time.Duration, active, waiting int64) {
	o.maxGap = max(o.maxGap, at-o.last)
	o.last = at
	o.samples++
	o.maxActive = max(o.maxActive, active)
	if active > o.capacity {
		o.overCap++
	}
	b := at.Milliseconds() / 10 * 10
	o.buckets[b] = max(o.buckets[b], active)
	if active > 0 {
		o.started = true
	}
	if o.started && waiting > 0 {
		o.busy[b] = true
		o.utilSum += float64(min(active, o.capacity)) / float64(o.capacity)
		o.utilCount++
	}
}

// series is the occupancy over time, one point per 10 ms.
func (o *observer) series() []Point {
	keys := make([]int64, 0, len(o.buckets))
	for k := range o.buckets {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]Point, len(keys))
	for i, k := range keys {
		out[i] = Point{MS: k, Value: o.buckets[k]}
	}
	return out
}

// users drives the simulated users through the HTTP API.
type users struct {
	cfg       Config
	rng       *rand.Rand
	instances []*instance
	room      string
	http      *http.Client

	mu       sync.Mutex
	joinedAt map[string]time.Time
	// joinPos is each pre-queue user's position in the queue when they
	// joined: before the opening nobody leaves the queue, so it is their
	// join order.
	joinPos map[string]int64
	// heldUntil is when each live admitted user stopped using their slot
	// (their hold ended, or the run did).
	heldUntil map[string]time.Time
	failures  map[string]int // HTTP failures by kind
}

func newUsers(cfg Config, seed uint64, instances []*instance, room string) *users {
	tr := &http.Transport{MaxIdleConnsPerHost: 256, MaxConnsPerHost: 256, IdleConnTimeout: 10 * time.Second}
	return &users{
		cfg: cfg, rng: rand.New(rand.NewPCG(seed, 42)), instances: instances, room: room,
		http:     &http.Client{Transport: tr, Timeout: 5 * time.Second},
		joinedAt: map[string]time.Time{}, failures: map[string]int{},
		joinPos: map[string]int64{}, heldUntil: map[string]time.Time{},
	}
}

// configure creates the room through instance 0's admin API: a complete
// configuration, closed to admission for now when a pre-queue is wanted
// (open sets the opening time once the run starts).
func (u *users) configure(ctx context.Context, rc runContext) error {
	var opensAt any
	if u.cfg.Prequeue > 0 {
		opensAt = time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano)
	}
	return u.admin(ctx, http.MethodPut, map[string]any{
		"capacity": u.cfg.Capacity, "lease_seconds": int(u.cfg.Lease.Seconds()),
		"admit_interval_ms": rc.tick.Milliseconds(), "max_admissions_per_minute": 0, "opens_at": opensAt,
		"paused": false, "closed": false, "closed_message": "",
		"abandon_after_seconds": u.cfg.AbandonAfter.Seconds(), "arrival_seconds": u.cfg.ArrivalWindow.Seconds(),
		"retention_seconds": 3600, "pow_difficulty": 0, "template": nil,
	})
}

// open sets the room's opening time.
func (u *users) open(ctx context.Context, at time.Time) error {
	return u.admin(ctx, http.MethodPatch, map[string]any{"opens_at": at.UTC().Format(time.RFC3339Nano)})
}

// admin sends a room configuration request to instance 0.
func (u *users) admin(ctx context.Context, method string, body map[string]any) error {
	b, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(ctx, method, u.instances[0].url+"/v1/rooms/"+u.room, bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+adminToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := u.http.Do(req)
	if err != nil {
		return fmt.Errorf("admission: configure room: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("admission: configure room: %s %s: %s", method, resp.Status, msg)
	}
	return nil
}

// maxPoll is the longest poll interval the instances suggest: a second,
// or half the shorter of the room's abandon and arrival windows, so that
// live users are never taken for gone.
func (c Config) maxPoll() time.Duration {
	p := time.Second
	for _, w := range []time.Duration{c.AbandonAfter, c.ArrivalWindow} {
		if w > 0 {
			p = min(p, w/2)
		}
	}
	return p
}

// plan is one user's script, drawn up front so runs are reproducible.
type plan struct {
	arrive  time.Duration
	hold    time.Duration
	abandon bool
	// pre: joins before the room opens; ghost: stops polling right
	// after joining.
	pre, ghost bool
	via        int // instance index
}

func (u *users) plans() []plan {
	c := u.cfg
	out := make([]plan, c.Users)
	var t time.Duration
	for i := range out {
		pre := i < c.Prequeue
		if c.Arrival == Rate && !pre {
			t += time.Duration(u.rng.ExpFloat64() / c.Rate * float64(time.Second))
		}
		arrive := t
		if c.Prequeue > 0 && !pre {
			// After the opening, and after its first pass.
			arrive += c.OpensAfter + 200*time.Millisecond
		}
		out[i] = plan{
			arrive:  arrive,
			hold:    time.Duration(float64(c.Hold) * (0.5 + u.rng.Float64())),
			abandon: u.rng.Float64() < c.Abandon,
			pre:     pre,
			ghost:   u.rng.Float64() < c.AbandonFraction,
			via:     i % len(u.instances),
		}
	}
	return out
}

// run plays every user until ctx ends.
func (u *users) run(ctx context.Context, start time.Time) {
	var wg sync.WaitGroup
	for _, p := range u.plans() {
		wg.Go(func() { u.play(ctx, start, p) })
	}
	wg.Wait()
}

// ticketReply is the part of the API's ticket JSON the lab reads.
type ticketReply struct {
	UserID      string `json:"user_id"`
	State       string `json:"state"`
	Position    *int64 `json:"position"`
	PollAfterMS int64  `json:"poll_after_ms"`
	TicketToken string `json:"ticket_token"`
}

func (u *users) play(ctx context.Context, start time.Time, p plan) {
	if !sleepUntil(ctx, start.Add(p.arrive)) {
		return
	}
	base := u.instances[p.via].url + "/v1/rooms/" + u.room + "/tickets"
	joined := time.Now()
	// An anonymous join, as the waiting page makes: the server names the
	// user, and the ticket token is the only handle on the ticket.
	var t ticketReply
	if !u.call(ctx, http.MethodPost, base, "", []byte(`{}`), &t) || t.UserID == "" {
		return
	}
	id := t.UserID
	u.mu.Lock()
	u.joinedAt[id] = joined
	if p.pre && t.Position != nil {
		u.joinPos[id] = *t.Position
	}
	u.mu.Unlock()
	if p.ghost {
		return // closed the tab
	}
	token := t.TicketToken
	for t.State == string(waitroom.StateWaiting) {
		if !sleepUntil(ctx, time.Now().Add(time.Duration(t.PollAfterMS)*time.Millisecond)) {
			return
		}
		if !u.call(ctx, http.MethodGet, base+"/"+url.PathEscape(id), token, nil, &t) {
			return
		}
	}
	if t.State != string(waitroom.StateAdmitted) {
		return
	}
	held := sleepUntil(ctx, time.Now().Add(p.hold))
	u.mu.Lock()
	u.heldUntil[id] = time.Now()
	u.mu.Unlock()
	if !held || p.abandon {
		return
	}
	u.call(ctx, http.MethodDelete, base+"/"+url.PathEscape(id), token, nil, &t)
}

// call makes one API request and decodes a 2xx answer into out.
func (u *users) call(ctx context.Context, method, url, token string, body []byte, out any) bool {
	// A 429 or 503 (the room's join limits, a store that did not answer
	// in time) is tried again, as the waiting page does: after the
	// answer's Retry-After, else an equal-jitter backoff from 100 ms to
	// 1 s, for as long as the run lasts. Each failed answer is counted.
	seq := userBackoff.Start()
	for {
		a, ok := u.callOnce(ctx, method, url, token, body, out)
		if ok || a == nil {
			return ok
		}
		d, _ := seq.Next()
		d = max(d, a.after)
		if !sleepUntil(ctx, time.Now().Add(d)) {
			return false
		}
	}
}

// userBackoff is the users' wait between tries of a refused request.
var userBackoff = func() retry.Policy {
	p, err := retry.New(retry.Config{Name: retry.EqualJitter, MaxAttempts: math.MaxInt32,
		Base: 100 * time.Millisecond, Cap: time.Second, Multiplier: 2}, nil)
	if err != nil {
		panic(err)
	}
	return p
}()

// again says that a refused request may be tried again, not before after.
type again struct{ after time.Duration }

// callOnce makes one request: ok when it succeeded (out decoded), a
// non-nil again when its refusal is worth another try.
func (u *users) callOnce(ctx context.Context, method, url, token string, body []byte, out any) (*again, bool) {
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return nil, false
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := u.http.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			u.fail("transport")
		}
		return nil, false
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		// The problem's code says why (a 503 is line_full, joins_throttled
		// or the store unavailable): kept beside the status.
		kind := strconv.Itoa(resp.StatusCode)
		var p struct {
			Code string `json:"code"`
		}
		if json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&p) == nil && p.Code != "" {
			kind += " " + p.Code
		}
		u.fail(kind)
		if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
			a := &again{}
			if n, err := strconv.Atoi(strings.TrimSpace(resp.Header.Get("Retry-After"))); err == nil && n > 0 {
				a.after = time.Duration(n) * time.Second
			}
			return a, false
		}
		return nil, false
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		u.fail("decode")
		return nil, false
	}
	return nil, true
}

func (u *users) fail(kind string) {
	u.mu.Lock()
	u.failures[kind]++
	u.mu.Unlock()
}

func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

// measure turns one run's observations into metrics.
func (e *Experiment) measure(rc runContext, opts *redis.Options, room string, start, end time.Time,
	obs *observer, passes *passLog, us *users) (lab.RunResult, error) {
	c := e.cfg
	o := *opts
	client := redis.NewClient(&o)
	defer client.Close()
	ctx := context.Background()
	store := redisstore.New(client)
	stats, err := store.Stats(ctx, room)
	if err != nil {
		return lab.RunResult{}, err
	}
	seqs, err := client.HGetAll(ctx, redisstore.KeysFor(room).SeqOf).Result()
	if err != nil {
		return lab.RunResult{}, err
	}

	// Waits (join → the pass that admitted the user), round trips, and FIFO
	// inversions: users ordered by the store's clock at the moment they
	// left the queue (millisecond resolution; users of the same
	// millisecond are never counted against each other).
	passes.mu.Lock()
	ps := slices.Clone(passes.passes)
	passes.mu.Unlock()
	var entries, lateEntries []queueExit
	var order []admission // every admission, in pass order
	waits := hdrhistogram.New(1, int64(time.Hour/time.Millisecond), 3)
	trips, admitted, shuffled := 0, 0, 0
	for _, p := range ps {
		trips += p.trips
		shuffled += p.shuffled
		for i, user := range p.admitted {
			admitted++
			seq, _ := strconv.ParseInt(seqs[user], 10, 64)
			if i < len(p.admittedAt) {
				entries = append(entries, queueExit{p.admittedAt[i], seq})
				order = append(order, admission{user: user, at: p.admittedAt[i], done: p.done, seq: seq})
			}
			us.mu.Lock()
			joined, ok := us.joinedAt[user]
			us.mu.Unlock()
			if ok {
				_ = waits.RecordValue(max(0, p.done.Sub(joined).Milliseconds()))
			}
		}
	}
	inversions := fifoInversions(entries)
	slices.SortStableFunc(order, func(a, b admission) int { return a.at.Compare(b.at) })
	// The users the opening shuffled are the first admitted; everyone
	// admitted after them joined after the shuffle and must be first come
	// first served.
	for _, a := range order[min(shuffled, len(order)):] {
		lateEntries = append(lateEntries, queueExit{a.at, a.seq})
	}

	overCap := obs.overCap
	secs := end.Sub(start).Seconds()
	m := lab.Metrics{
		"instances":                 float64(c.Instances),
		"capacity":                  float64(c.Capacity),
		"max_active_observed":       float64(obs.maxActive),
		"over_cap_samples":          float64(overCap),
		"admitted":                  float64(stats.AdmittedTotal),
		"admissions_per_s":          float64(stats.AdmittedTotal) / secs,
		"slot_utilization":          ratio(obs.utilSum, float64(obs.utilCount)),
		"wait_p50_ms":               float64(waits.ValueAtQuantile(50)),
		"wait_p99_ms":               float64(waits.ValueAtQuantile(99)),
		"fifo_inversions":           float64(inversions),
		"round_trips_per_admission": ratio(float64(trips), float64(admitted)),
		"expired":                   float64(stats.ExpiredTotal),
		"joined":                    float64(stats.JoinedTotal),
		"http_failures":             float64(us.failureCount()),
		"live_slot_utilization":     liveUtilization(order, us, obs, start, c.Capacity),
		"no_shows":                  float64(stats.NoShowTotal),
		"abandoned":                 float64(stats.AbandonedTotal),
	}
	if c.Prequeue > 0 {
		m["spearman_rho"] = prequeueSpearman(order[:min(shuffled, len(order))], us)
		m["prequeue_shuffled"] = float64(shuffled)
		m["fifo_inversions_after_open"] = float64(fifoInversions(lateEntries))
	}
	// The wait for the first sample, or after the last one, counts as a
	// gap as well.
	maxGap := max(obs.maxGap, end.Sub(start)-obs.last)
	if obs.samples == 0 {
		maxGap = end.Sub(start)
	}
	detail := RunDetail{
		Seed: rc.seed, Room: room, Samples: obs.samples, SampleHz: int(float64(obs.samples) / secs),
		RequiredSamples: c.RequiredSamples(end.Sub(start), rc.tick),
		MaxGapMS:        float64(maxGap) / float64(time.Millisecond),
		ObserverErrors:  obs.errs,
		Active:          obs.series(), Accounting: stats,
	}
	if obs.firstErr != nil {
		detail.ObserverError = obs.firstErr.Error()
	}
	res := lab.RunResult{Metrics: m, Extra: detail, Valid: true}
	var reasons []string
	if stats.JoinedTotal == 0 {
		reasons = append(reasons, "no user joined")
	}
	if stats.AdmittedTotal == 0 {
		reasons = append(reasons, "no user was admitted")
	}
	reasons = append(reasons, observerProblems(obs.samples, detail.RequiredSamples, obs.errs, obs.firstErr, end.Sub(start), rc.tick)...)
	if len(reasons) > 0 {
		res.Valid, res.Reason = false, strings.Join(reasons, "; ")
	}
	sum := stats.Waiting + stats.Away + stats.Active + stats.ReleasedTotal + stats.ExpiredTotal + stats.LeftTotal + stats.ClosedTotal + stats.AbandonedTotal
	// The unsafe modes admit in several round trips under one pass
	// deadline: a ZPOPMIN whose answer arrives after the deadline, or an
	// add that fails after it, drops the users it popped. That loss is one
	// of the defects those designs are measured for (lost_users), not a
	// broken promise of the product, whose own pass is one atomic script.
	m["lost_users"] = float64(stats.JoinedTotal - sum)
	if rc.mode == waitroom.ModeAtomic && sum != stats.JoinedTotal {
		res.Broken = append(res.Broken, fmt.Sprintf("%s: accounting: waiting %d + away %d + active %d + released %d + expired %d + left %d + closed %d + abandoned %d = %d, but %d joined",
			rc.mode, stats.Waiting, stats.Away, stats.Active, stats.ReleasedTotal, stats.ExpiredTotal, stats.LeftTotal, stats.ClosedTotal, stats.AbandonedTotal, sum, stats.JoinedTotal))
	}
	if rc.mode == waitroom.ModeAtomic {
		if obs.maxActive > int64(c.Capacity) || overCap > 0 {
			res.Broken = append(res.Broken, fmt.Sprintf("atomic: room of %d observed at %d (%d samples over capacity)", c.Capacity, obs.maxActive, overCap))
		}
		// A user set aside for not polling is passed over, and may come
		// back to their place: FIFO holds only without abandonment.
		if inversions > 0 && c.AbandonAfter == 0 {
			res.Broken = append(res.Broken, fmt.Sprintf("atomic: %d FIFO inversions", inversions))
		}
		if v, ok := m["fifo_inversions_after_open"]; ok && v > 0 && c.AbandonAfter == 0 {
			res.Broken = append(res.Broken, fmt.Sprintf("atomic: %v FIFO inversions among users who joined after the opening", v))
		}
	}
	if n := us.failureCount(); n > 0 {
		// Kept in the run, not fatal: a real rush has failed requests too.
		detail.HTTPFailures = us.failureKinds()
		res.Extra = detail
	}
	return res, nil
}

// admission is one user leaving the queue for the room: the store's
// clock then, and this process's clock when the pass returned.
type admission struct {
	user     string
	at, done time.Time
	seq      int64 // arrival sequence (the shuffled one for the pre-queue)
}

// prequeueSpearman is the Spearman rank correlation between the join
// order (the position each pre-queue user was given when joining) and the
// admission order of the users the opening shuffled: near 0 when the
// shuffle worked, 1 for first come first served. shuffled is the
// admissions from the opening on, as many as the opening shuffled: the
// shuffled users are ahead of every later joiner, so they are the first
// admitted (a pre-queue user whose join reached the room only after the
// opening was not shuffled, and is rightly not counted).
func prequeueSpearman(order []admission, us *users) float64 {
	us.mu.Lock()
	defer us.mu.Unlock()
	var joinPos []float64
	for _, a := range order {
		if pos, ok := us.joinPos[a.user]; ok {
			joinPos = append(joinPos, float64(pos))
		}
	}
	adm := make([]float64, len(joinPos))
	for i := range adm {
		adm[i] = float64(i)
	}
	return spearman(joinPos, adm)
}

// spearman returns the Spearman rank correlation of x and y: the Pearson
// correlation of their ranks (ties get their mean rank); 0 with fewer than
// two values or no spread.
func spearman(x, y []float64) float64 {
	if len(x) != len(y) || len(x) < 2 {
		return 0
	}
	rx, ry := ranks(x), ranks(y)
	n := float64(len(x))
	var mx, my float64
	for i := range rx {
		mx += rx[i]
		my += ry[i]
	}
	mx, my = mx/n, my/n
	var sxy, sxx, syy float64
	for i := range rx {
		dx, dy := rx[i]-mx, ry[i]-my
		sxy += dx * dy
		sxx += dx * dx
		syy += dy * dy
	}
	if sxx == 0 || syy == 0 {
		return 0
	}
	return sxy / math.Sqrt(sxx*syy)
}

// ranks returns the rank of each value of v (0-based; ties share their
// mean rank).
func ranks(v []float64) []float64 {
	idx := make([]int, len(v))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(v[a], v[b]) })
	out := make([]float64, len(v))
	for i := 0; i < len(idx); {
		j := i
		for j+1 < len(idx) && v[idx[j+1]] == v[idx[i]] {
			j++
		}
		mean := float64(i+j) / 2
		for k := i; k <= j; k++ {
			out[idx[k]] = mean
		}
		i = j + 1
	}
	return out
}

// liveUtilization is the share of the room's slots used by users who are
// there, over the 10 ms buckets in which users waited: a slot counts from
// the admission (the pass's return) until its user's hold ended, so that
// a slot held by someone who left without releasing, or who never came
// (a user who stopped polling), counts as idle. slot_utilization counts
// every admitted slot instead.
func liveUtilization(order []admission, us *users, obs *observer, start time.Time, capacity int) float64 {
	type span struct{ from, to int64 } // ms since start
	us.mu.Lock()
	var spans []span
	for _, a := range order {
		if end, ok := us.heldUntil[a.user]; ok {
			spans = append(spans, span{a.done.Sub(start).Milliseconds(), end.Sub(start).Milliseconds()})
		}
	}
	us.mu.Unlock()
	if len(obs.busy) == 0 {
		return 0
	}
	var sum float64
	for b := range obs.busy {
		mid := b + 5
		live := 0
		for _, sp := range spans {
			if sp.from <= mid && mid < sp.to {
				live++
			}
		}
		sum += float64(min(live, capacity)) / float64(capacity)
	}
	return sum / float64(len(obs.busy))
}

// observerProblems says why the observer cannot vouch for a run: it failed
// to read the room (errs, the first being first), or it took fewer samples
// than the required number over a run of length d with admit interval
// tick. It returns nil when the observer did its job.
func observerProblems(samples, required, errs int, first error, d, tick time.Duration) []string {
	var out []string
	if errs > 0 {
		out = append(out, fmt.Sprintf("the observer failed %d times to read the room (first: %v)", errs, first))
	}
	if samples < required {
		out = append(out, fmt.Sprintf("the observer took %d samples in %s, fewer than the %d needed "+
			"(at least Config.ObserveMinSamples, and one per %s admit interval on average)",
			samples, d.Round(time.Millisecond), required, tick))
	}
	return out
}

// queueExit is one user leaving the queue: the store's clock at that moment
// (millisecond resolution) and the user's arrival sequence in the queue.
type queueExit struct {
	at  time.Time
	seq int64
}

// fifoInversions counts the users who left the queue after someone who
// joined later had already left it: exits are ordered by the store's clock,
// and each exit whose sequence is below the highest sequence that left in
// an earlier millisecond is one inversion. Users who left in the same
// millisecond are never counted against each other, since the clock cannot
// order them. exits is not modified.
func fifoInversions(exits []queueExit) int {
	sorted := slices.Clone(exits)
	slices.SortStableFunc(sorted, func(a, b queueExit) int { return a.at.Compare(b.at) })
	inversions := 0
	var maxBefore, groupMax int64 // highest seq admitted in earlier milliseconds / this one
	var groupAt time.Time
	for i, en := range sorted {
		if i == 0 || !en.at.Equal(groupAt) {
			maxBefore, groupAt, groupMax = max(maxBefore, groupMax), en.at, 0
		}
		if en.seq < maxBefore {
			inversions++ // someone who joined later left the queue first
		}
		groupMax = max(groupMax, en.seq)
	}
	return inversions
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func (u *users) failureCount() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	n := 0
	for _, v := range u.failures {
		n += v
	}
	return n
}

func (u *users) failureKinds() map[string]int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return maps.Clone(u.failures)
}
