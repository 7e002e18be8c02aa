package gate_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/gate"
	"github.com/stampede-lab/stampede/protocol"
	"github.com/stampede-lab/stampede/waitroom"
	"github.com/stampede-lab/stampede/waitroom/api"
	"github.com/stampede-lab/stampede/waitroom/redisstore"
)

// countingStore is the Redis store with its admission touches (the
// gate's online checks, one by one or in batches) counted, slowed or failed on demand.
type countingStore struct {
	*redisstore.Store
	touches atomic.Int64
	batched atomic.Int64
	// answered counts the calls returned, touches and batches alike.
	answered atomic.Int64
	delay    atomic.Int64 // nanoseconds each touch waits first
	fail     atomic.Bool
}

func (s *countingStore) TouchAdmission(ctx context.Context, room, user string, seq int64, until time.Time) (waitroom.Ticket, error) {
	s.touches.Add(1)
	defer s.answered.Add(1)
	if d := time.Duration(s.delay.Load()); d > 0 {
		time.Sleep(d)
	}
	if s.fail.Load() {
		return waitroom.Ticket{}, stampede.UnavailableErr("the store", errors.New("test: the store fails"))
	}
	return s.Store.TouchAdmission(ctx, room, user, seq, until)
}

// TouchAdmissions counts a batch of the gate's checks as one touch (one
// store call), and batched the admissions in it once the call returns
// (a test that waits for them then sees the batch answered, not in
// flight).
func (s *countingStore) TouchAdmissions(ctx context.Context, room string, touches []waitroom.AdmissionTouch) ([]waitroom.Ticket, error) {
	s.touches.Add(1)
	defer s.answered.Add(1)
	defer s.batched.Add(int64(len(touches)))
	if d := time.Duration(s.delay.Load()); d > 0 {
		time.Sleep(d)
	}
	if s.fail.Load() {
		return nil, stampede.UnavailableErr("the store", errors.New("test: the store fails"))
	}
	return s.Store.TouchAdmissions(ctx, room, touches)
}

// floodRig is one gate on one waiting-room instance on a counting store,
// in front of an upstream that answers 200 (and "Stampede-Release: done"
// for /done), with a clock that tests can move forward.
type floodRig struct {
	t      testing.TB
	room   string
	store  *countingStore
	srv    *running
	gate   *gate.Gate
	ahead  atomic.Int64 // nanoseconds the gate's clock is ahead
	frozen atomic.Int64 // when not 0, the gate's clock stands at this Unix time in nanoseconds (plus ahead)
	cfg    gate.Config
	served atomic.Int64 // requests that reached upstream
}

func newFloodRig(t testing.TB, client redis.UniversalClient, capacity int, change func(*gate.Config)) *floodRig {
	t.Helper()
	rig := &floodRig{t: t, room: "flood-" + randomName(), store: &countingStore{Store: redisstore.New(client)}}
	ctx := context.Background()
	t.Cleanup(func() { rig.store.DeleteRoom(context.Background(), rig.room) })
	opts := api.DefaultConfig()
	opts.Instance = "flood-" + randomName()
	opts.Secret, opts.AdminToken, opts.CheckoutKey = testSecret, adminToken, checkoutKey
	opts.Logger = slog.New(slog.DiscardHandler)
	opts.RoomRefresh = 50 * time.Millisecond
	srv, err := startServer(t, ctx, rig.store, opts)
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	rig.srv = srv
	rc := waitroom.RoomConfig{Capacity: capacity, Lease: 30 * time.Second, AdmitInterval: 20 * time.Millisecond, Retention: waitroom.DefaultRetention}
	if err := srv.Service().Configure(ctx, rig.room, rc); err != nil {
		t.Fatalf("Configure: %v", err)
	}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rig.served.Add(1)
		if r.URL.Path == "/done" {
			w.Header().Set(protocol.HeaderRelease, protocol.ReleaseDone)
		}
		io.WriteString(w, "ok")
	}))
	t.Cleanup(up.Close)
	upURL, _ := url.Parse(up.URL)
	cfg := gate.DefaultConfig()
	cfg.Room, cfg.Upstream, cfg.Logger = rig.room, upURL, slog.New(slog.DiscardHandler)
	cfg.Now = func() time.Time {
		now := time.Now()
		if at := rig.frozen.Load(); at != 0 {
			now = time.Unix(0, at)
		}
		return now.Add(time.Duration(rig.ahead.Load()))
	}
	if change != nil {
		change(&cfg)
	}
	rig.cfg = cfg
	if rig.gate, err = gate.New(withWaitroom(cfg, srv)); err != nil {
		t.Fatalf("gate.New: %v", err)
	}
	return rig
}

// admit joins user and waits until admitted; it returns the admission
// cookie the gate's hand-off would set, signed now: fresh, the gate takes
// it as the first answer and does not wait for its first store call.
func (rig *floodRig) admit(user string) string {
	rig.t.Helper()
	return rig.admitSigned(user, time.Now())
}

// admitEarlyInASecond is admit with the token signed early in a second:
// a token's iat counts whole seconds, so one signed late in a second is
// fresh for the gate only for what is left of it (for a test under load,
// less than the time to send its first request).
func (rig *floodRig) admitEarlyInASecond(user string) string {
	rig.t.Helper()
	now := time.Now()
	time.Sleep(now.Truncate(time.Second).Add(time.Second).Sub(now))
	return rig.admit(user)
}

// admitStale is admit with the token signed two seconds ago, past the
// gate's CheckCache: the gate waits for the first store call about it.
func (rig *floodRig) admitStale(user string) string {
	rig.t.Helper()
	return rig.admitSigned(user, time.Now().Add(-2*time.Second))
}

// admitSigned is admit with the token signed at signed.
func (rig *floodRig) admitSigned(user string, signed time.Time) string {
	rig.t.Helper()
	ctx := context.Background()
	svc := rig.srv.Service()
	tk, err := svc.Join(ctx, rig.room, user)
	for deadline := time.Now().Add(10 * time.Second); err == nil && tk.State != waitroom.StateAdmitted; {
		if time.Now().After(deadline) {
			rig.t.Fatalf("%s not admitted: %s", user, tk.State)
		}
		time.Sleep(20 * time.Millisecond)
		tk, err = svc.Ticket(ctx, rig.room, user)
	}
	if err != nil {
		rig.t.Fatalf("admitting %s: %v", user, err)
	}
	tok, err := svc.SignAdmission(ctx, rig.srv.Admissions(), tk, signed)
	if err != nil || tok == "" {
		rig.t.Fatalf("SignAdmission: %q %v", tok, err)
	}
	return tok
}

// settle waits until every store call the gate has started returned and
// the gate has recorded its answer.
func (rig *floodRig) settle() {
	rig.t.Helper()
	for deadline := time.Now().Add(10 * time.Second); rig.store.answered.Load() < rig.store.touches.Load() || !rig.gate.Idle(); {
		if time.Now().After(deadline) {
			rig.t.Fatalf("store calls still in flight after 10 s: %d of %d answered, gate idle: %v",
				rig.store.answered.Load(), rig.store.touches.Load(), rig.gate.Idle())
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// do sends one request with the admission cookie through the gate.
func (rig *floodRig) do(cookie, path, accept string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodGet, "http://shop.test"+path, nil)
	req.AddCookie(&http.Cookie{Name: rig.cfg.CookieName, Value: cookie})
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	rec := httptest.NewRecorder()
	rig.gate.ServeHTTP(rec, req)
	return rec
}

// flood sends n requests at once with cookie and counts the answers by
// status.
func (rig *floodRig) flood(cookie string, n int) map[int]int {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		codes = map[int]int{}
		start = make(chan struct{})
	)
	for range n {
		wg.Go(func() {
			<-start
			rec := rig.do(cookie, "/cart", "application/json")
			mu.Lock()
			codes[rec.Code]++
			mu.Unlock()
		})
	}
	close(start)
	wg.Wait()
	return codes
}

// TestGateOneStoreCallPerVisitor: 300 requests at once from one admitted
// visitor whose token is older than the cache, on a fresh gate and a store
// taking 100 ms per call, make one store call, and all go upstream; so do
// 300 more once the answer is past its freshness (the cached answer is
// served while one call renews it).
func TestGateOneStoreCallPerVisitor(t *testing.T) {
	withRedis(t, func(t *testing.T, client redis.UniversalClient) {
		rig := newFloodRig(t, client, 1, func(c *gate.Config) { c.VisitorRate = 0 })
		cookie := rig.admitStale("flooder")
		rig.frozen.Store(time.Now().UnixNano()) // no renewal ahead of time while the rounds last
		rig.store.delay.Store(int64(100 * time.Millisecond))
		codes := rig.flood(cookie, 300)
		if codes[http.StatusOK] != 300 || rig.served.Load() != 300 {
			t.Errorf("300 requests of an admitted visitor: %v, %d upstream; want 300 × 200", codes, rig.served.Load())
		}
		if n := rig.store.touches.Load(); n != 1 {
			t.Errorf("300 concurrent requests of one visitor made %d store calls, want 1", n)
		}
		before := rig.store.touches.Load()
		rig.ahead.Store(int64(rig.cfg.CheckCache + 100*time.Millisecond)) // the answer is no longer fresh
		codes = rig.flood(cookie, 300)
		if codes[http.StatusOK] != 300 {
			t.Errorf("300 requests past the cache: %v; want 300 × 200", codes)
		}
		if n := rig.store.touches.Load() - before; n != 1 {
			t.Errorf("300 concurrent requests past the cache made %d store calls, want 1", n)
		}
		t.Logf("600 requests of one visitor, two rounds: %d store calls", rig.store.touches.Load())
	})
}

// TestGateFreshTokenIsTheFirstAnswer: a token signed within the cache's
// second is the first answer about its admission. A newly admitted
// visitor's requests go upstream at once while the first store call
// (slowed to a second here) slides the lease beside them; the next
// requests use that call's answer, so an admission released elsewhere
// meanwhile is refused from then on. A token older than the cache, or
// signed by a clock ahead of the gate's, waits for the call as before.
func TestGateFreshTokenIsTheFirstAnswer(t *testing.T) {
	withRedis(t, func(t *testing.T, client redis.UniversalClient) {
		rig := newFloodRig(t, client, 4, func(c *gate.Config) { c.VisitorRate = 0 })
		ctx := context.Background()
		svc := rig.srv.Service()
		fresh := rig.admitEarlyInASecond("newcomer")
		before, err := svc.Ticket(ctx, rig.room, "newcomer")
		if err != nil {
			t.Fatal(err)
		}
		rig.store.delay.Store(int64(time.Second))
		codes := rig.flood(fresh, 100)
		if codes[http.StatusOK] != 100 || rig.store.answered.Load() != 0 || rig.store.touches.Load() != 1 {
			t.Errorf("100 requests with a fresh token, the store slow: %v, %d store calls, %d answered; want 100 × 200 before the one call answers",
				codes, rig.store.touches.Load(), rig.store.answered.Load())
		}
		rig.settle()
		after, err := svc.Ticket(ctx, rig.room, "newcomer")
		if err != nil || !after.LeaseExpires.After(before.LeaseExpires) {
			t.Errorf("the first call did not slide the lease: %v then %v (%v)", before.LeaseExpires, after.LeaseExpires, err)
		}

		// Released elsewhere: let through on the signer's answer until
		// the first call answers, refused from then on.
		rig.store.delay.Store(0)
		leaver := rig.admitEarlyInASecond("leaver")
		if _, err := svc.Leave(ctx, rig.room, "leaver"); err != nil {
			t.Fatal(err)
		}
		if rec := rig.do(leaver, "/cart", "application/json"); rec.Code != http.StatusOK {
			t.Errorf("a fresh token released elsewhere, its first request: %d, want 200 (the signer's answer)", rec.Code)
		}
		rig.settle()
		if rec := rig.do(leaver, "/cart", "application/json"); rec.Code == http.StatusOK {
			t.Errorf("a fresh token released elsewhere, after the first call: %d, want a refusal", rec.Code)
		}

		// Older than the cache, or from a clock ahead: the request waits.
		rig.store.delay.Store(int64(200 * time.Millisecond))
		for _, tc := range []struct {
			name   string
			cookie func() string
		}{
			{"signed 2 s ago", func() string { return rig.admitStale("late") }},
			{"signed 1.5 s ahead of the gate's clock", func() string {
				c := rig.admitEarlyInASecond("ahead")
				rig.ahead.Store(int64(-1500 * time.Millisecond))
				return c
			}},
		} {
			cookie := tc.cookie()
			answered := rig.store.answered.Load()
			rec := rig.do(cookie, "/cart", "application/json")
			if rec.Code != http.StatusOK || rig.store.answered.Load() != answered+1 {
				t.Errorf("a token %s: %d with %d calls answered; want 200 after its call answered", tc.name, rec.Code, rig.store.answered.Load()-answered)
			}
		}
	})
}

// TestGateFailingStoreNotAskedByEveryRequest: while the store fails, a
// visitor's requests do not each make a store call: one call fails, the
// requests waiting for it get 503, and the next ones get 503 with
// Retry-After at once until the backoff ends. A visitor whose answer was
// cached goes on being let through until the lease's end less the safety
// margin, with one store call per backoff.
func TestGateFailingStoreNotAskedByEveryRequest(t *testing.T) {
	withRedis(t, func(t *testing.T, client redis.UniversalClient) {
		rig := newFloodRig(t, client, 2, func(c *gate.Config) {
			c.VisitorRate, c.CheckBackoff, c.SafetyMargin = 0, time.Second, 10*time.Second
		})
		cached := rig.admit("cached")
		if rec := rig.do(cached, "/cart", ""); rec.Code != http.StatusOK {
			t.Fatalf("admitted visitor: %d", rec.Code)
		}
		rig.settle() // its first check answered
		unknown := rig.admitStale("unknown")
		rig.store.fail.Store(true)
		rig.store.delay.Store(int64(50 * time.Millisecond))
		rig.frozen.Store(time.Now().UnixNano()) // no backoff ends while the rounds last
		before := rig.store.touches.Load()
		codes := rig.flood(unknown, 500)
		if codes[http.StatusServiceUnavailable] != 500 {
			t.Errorf("a visitor never checked, store failing: %v; want 500 × 503", codes)
		}
		codes = rig.flood(unknown, 500)
		if codes[http.StatusServiceUnavailable] != 500 {
			t.Errorf("again: %v; want 500 × 503", codes)
		}
		if n := rig.store.touches.Load() - before; n != 1 {
			t.Errorf("1,000 requests on a failing store made %d store calls, want 1", n)
		}
		rec := rig.do(unknown, "/cart", "application/json")
		if ra, _ := strconv.Atoi(rec.Header().Get("Retry-After")); rec.Code != http.StatusServiceUnavailable || ra < 1 {
			t.Errorf("while backed off: %d Retry-After %q", rec.Code, rec.Header().Get("Retry-After"))
		}

		// The cached visitor, past the cache's second: still let through
		// (the lease ends in about 30 s), with one call per backoff.
		before = rig.store.touches.Load()
		rig.ahead.Store(int64(rig.cfg.CheckCache + 100*time.Millisecond))
		codes = rig.flood(cached, 200)
		if codes[http.StatusOK] != 200 {
			t.Errorf("a cached visitor while the store fails: %v; want 200 × 200 (its lease holds)", codes)
		}
		if n := rig.store.touches.Load() - before; n != 1 {
			t.Errorf("200 requests of a cached visitor on a failing store made %d store calls, want 1", n)
		}
		// Past its lease's end (in 30 s) less the safety margin (10 s),
		// its token still valid: no longer.
		rig.ahead.Store(int64(25 * time.Second))
		if rec := rig.do(cached, "/cart", "application/json"); rec.Code == http.StatusOK {
			t.Errorf("a cached visitor past the lease's end: %d, want a refusal", rec.Code)
		}
		t.Logf("store calls while failing: %d for 1,702 requests", rig.store.touches.Load()-1)
	})
}

// TestGateVisitorLimit: an admitted visitor over its rate gets 429 with
// Retry-After (problem+json for an API client, a page for a page) without
// a store call; another visitor is not affected.
func TestGateVisitorLimit(t *testing.T) {
	withRedis(t, func(t *testing.T, client redis.UniversalClient) {
		rig := newFloodRig(t, client, 2, func(c *gate.Config) { c.VisitorRate, c.VisitorBurst = 0.1, 3 })
		greedy, calm := rig.admit("greedy"), rig.admit("calm")
		for i := range 3 {
			if rec := rig.do(greedy, "/cart", ""); rec.Code != http.StatusOK {
				t.Fatalf("request %d within the burst: %d", i+1, rec.Code)
			}
		}
		touches, served := rig.store.touches.Load(), rig.served.Load()
		rec := rig.do(greedy, "/cart", "application/json")
		ra, _ := strconv.Atoi(rec.Header().Get("Retry-After"))
		if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Content-Type") != "application/problem+json" ||
			!strings.Contains(rec.Body.String(), `"rate_limited"`) || ra < 5 || ra > 10 {
			t.Errorf("over the limit, API client: %d %q Retry-After %q %s", rec.Code, rec.Header().Get("Content-Type"), rec.Header().Get("Retry-After"), rec.Body)
		}
		rec = rig.do(greedy, "/cart", "text/html")
		if rec.Code != http.StatusTooManyRequests || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/html") ||
			rec.Header().Get("Retry-After") == "" || !strings.Contains(rec.Body.String(), "http-equiv=\"refresh\"") {
			t.Errorf("over the limit, a page: %d %q Retry-After %q", rec.Code, rec.Header().Get("Content-Type"), rec.Header().Get("Retry-After"))
		}
		codes := rig.flood(greedy, 200)
		if codes[http.StatusTooManyRequests] != 200 {
			t.Errorf("200 more over the limit: %v, want 200 × 429", codes)
		}
		if rig.store.touches.Load() != touches || rig.served.Load() != served {
			t.Errorf("refused requests made %d store calls and %d went upstream, want none", rig.store.touches.Load()-touches, rig.served.Load()-served)
		}
		for i := range 3 {
			if rec := rig.do(calm, "/cart", ""); rec.Code != http.StatusOK {
				t.Errorf("another visitor, request %d: %d, want 200", i+1, rec.Code)
			}
		}
		// The bucket fills again: one more request after 10 s.
		rig.ahead.Store(int64(10*time.Second + 100*time.Millisecond))
		if rec := rig.do(greedy, "/cart", ""); rec.Code != http.StatusOK {
			t.Errorf("after the bucket refilled: %d, want 200", rec.Code)
		}
	})
}

// TestGateReleasedAdmissionRefused: an admission released elsewhere (the
// checkout's own call) is refused within CheckCache plus one store round
// trip however many requests keep coming; one released through this gate
// ("Stampede-Release: done") is refused at once, without a store call.
func TestGateReleasedAdmissionRefused(t *testing.T) {
	withRedis(t, func(t *testing.T, client redis.UniversalClient) {
		const checkCache = 300 * time.Millisecond
		rig := newFloodRig(t, client, 2, func(c *gate.Config) { c.VisitorRate, c.CheckCache = 0, checkCache })
		elsewhere, here := rig.admit("elsewhere"), rig.admit("here")
		if rec := rig.do(elsewhere, "/cart", ""); rec.Code != http.StatusOK {
			t.Fatalf("admitted visitor: %d", rec.Code)
		}
		var (
			lastPass atomic.Int64
			stop     atomic.Bool
			wg       sync.WaitGroup
		)
		for range 20 {
			wg.Go(func() {
				for !stop.Load() {
					sent := time.Now()
					if rig.do(elsewhere, "/cart", "").Code == http.StatusOK {
						lastPass.Store(sent.UnixNano())
					}
				}
			})
		}
		time.Sleep(200 * time.Millisecond)
		c, err := protocol.VerifyAdmission(elsewhere, rig.srv.Admissions().JWKS(), rig.room, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if st, err := rig.srv.Service().ReleaseAdmission(context.Background(), rig.room, c.User, c.Seq); err != nil || !st.Held {
			t.Fatalf("release: %+v %v", st, err)
		}
		released := time.Now()
		time.Sleep(2*checkCache + 200*time.Millisecond)
		stop.Store(true)
		wg.Wait()
		late := time.Duration(lastPass.Load() - released.UnixNano())
		t.Logf("released elsewhere: last let through %s after the release (check cache %s)", max(0, late).Round(time.Millisecond), checkCache)
		if late >= checkCache+150*time.Millisecond {
			t.Errorf("a released admission was let through %s after its release, want within %s and one store call", late, checkCache)
		}

		// Released through this gate: refused at once, without asking.
		if rec := rig.do(here, "/done", ""); rec.Code != http.StatusOK {
			t.Fatalf("checkout's done: %d", rec.Code)
		}
		touches := rig.store.touches.Load()
		codes := rig.flood(here, 200)
		if codes[http.StatusServiceUnavailable] != 200 {
			t.Errorf("after Stampede-Release: done, 200 API requests: %v, want 200 × 503 (go and wait)", codes)
		}
		if rec := rig.do(here, "/cart", ""); rec.Code != http.StatusSeeOther {
			t.Errorf("after Stampede-Release: done, a page: %d, want 303 to the waiting page", rec.Code)
		}
		if n := rig.store.touches.Load() - touches; n != 0 {
			t.Errorf("requests of an admission released here made %d store calls, want 0", n)
		}
	})
}

// BenchmarkGateAdmittedRequest: one admitted visitor's request through
// the gate to an upstream that answers "ok", the answer cached (the
// upstream's own cost included).
func BenchmarkGateAdmittedRequest(b *testing.B) {
	m := miniredis.RunT(b)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	b.Cleanup(func() { client.Close() })
	rig := newFloodRig(b, client, 1, func(c *gate.Config) { c.VisitorRate = 0 })
	cookie := rig.admit("bench")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if rec := rig.do(cookie, "/cart", ""); rec.Code != http.StatusOK {
				b.Fatalf("status %d", rec.Code)
			}
		}
	})
	b.ReportMetric(float64(rig.store.touches.Load())/float64(b.N), "store-calls/op")
}

// TestForwardAuthOneStoreCallAndLimit: the forward-auth server shares the
// gate's check and limit: 300 questions at once about one admitted
// visitor make one store call, and the next one over the visitor's burst
// is answered 429 without one.
func TestForwardAuthOneStoreCallAndLimit(t *testing.T) {
	withRedis(t, func(t *testing.T, client redis.UniversalClient) {
		rig := newFloodRig(t, client, 1, func(c *gate.Config) { c.VisitorRate, c.VisitorBurst = 0.1, 300 })
		cookie := rig.admit("asker")
		rig.frozen.Store(time.Now().UnixNano())
		rig.store.delay.Store(int64(100 * time.Millisecond))
		fa, err := gate.NewForwardAuth(withWaitroom(rig.cfg, rig.srv), nil)
		if err != nil {
			t.Fatal(err)
		}
		ask := func() *httptest.ResponseRecorder {
			req := httptest.NewRequest(http.MethodGet, "http://auth.test"+gate.AuthPath, nil)
			req.Header.Set("X-Forwarded-Uri", "/cart")
			req.AddCookie(&http.Cookie{Name: rig.cfg.CookieName, Value: cookie})
			rec := httptest.NewRecorder()
			fa.ServeHTTP(rec, req)
			return rec
		}
		var (
			wg    sync.WaitGroup
			ok    atomic.Int64
			start = make(chan struct{})
		)
		for range 300 {
			wg.Go(func() {
				<-start
				if rec := ask(); rec.Code == http.StatusOK && rec.Header().Get(protocol.HeaderUser) == "asker" {
					ok.Add(1)
				}
			})
		}
		close(start)
		wg.Wait()
		if ok.Load() != 300 || rig.store.touches.Load() != 1 {
			t.Errorf("300 questions at once: %d answered 200 with the user, %d store calls; want 300 and 1", ok.Load(), rig.store.touches.Load())
		}
		rec := ask()
		if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") == "" || rig.store.touches.Load() != 1 {
			t.Errorf("over the burst: %d Retry-After %q, %d store calls; want 429 with Retry-After and no call", rec.Code, rec.Header().Get("Retry-After"), rig.store.touches.Load())
		}
	})
}

// TestGateReissuesTokenTwiceALease: the checks renewed every few seconds
// slide the lease each time, but the cookie's token is re-signed (and a
// new cookie sent) only once it has less than half the room's 30 s lease
// (plus a second) left: over 20 s of a visitor's requests, one new token,
// not one per check, so the token's verification is cached for half a
// lease. On miniredis, whose clock the test moves with the gate's.
func TestGateReissuesTokenTwiceALease(t *testing.T) {
	m := miniredis.RunT(t)
	start := time.Now()
	m.SetTime(start)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { client.Close() })
	{
		rig := newFloodRig(t, client, 1, func(c *gate.Config) { c.VisitorRate = 0 })
		cookie := rig.admit("reader")
		rig.frozen.Store(start.UnixNano())
		if rec := rig.do(cookie, "/cart", ""); rec.Code != http.StatusOK {
			t.Fatalf("first request: %d", rec.Code)
		}
		rig.settle() // its first check answered
		var reissued []time.Duration
		for step := 1; step <= 10; step++ {
			before := rig.store.touches.Load()
			rig.ahead.Store(int64(time.Duration(step) * 2 * time.Second))
			m.SetTime(start.Add(time.Duration(step) * 2 * time.Second))
			rec := rig.do(cookie, "/cart", "")
			if rec.Code != http.StatusOK {
				t.Fatalf("at +%ds: %d", 2*step, rec.Code)
			}
			for _, c := range rec.Result().Cookies() {
				if c.Name == rig.cfg.CookieName && c.Value != cookie {
					cookie = c.Value
					reissued = append(reissued, time.Duration(step)*2*time.Second)
				}
			}
			for deadline := time.Now().Add(5 * time.Second); rig.store.touches.Load() == before; {
				if time.Now().After(deadline) {
					t.Fatalf("at +%ds: no check renewed the answer", 2*step)
				}
				time.Sleep(5 * time.Millisecond)
			}
			rig.settle() // the batch records its answers
		}
		t.Logf("11 requests over 20 s, 10 checks, a 30 s lease: new cookies at %v", reissued)
		if len(reissued) != 1 || reissued[0] < 14*time.Second {
			t.Errorf("new cookies at %v, want one, once less than 16 s of the first token's 30 s were left", reissued)
		}
	}
}

// TestGateBatchesRenewals: the answers of 20 admitted visitors, each
// renewed ahead of its end, take one store call together (a batch) each
// time, not one call per visitor; every request is let through meanwhile.
func TestGateBatchesRenewals(t *testing.T) {
	withRedis(t, func(t *testing.T, client redis.UniversalClient) {
		const n = 20
		rig := newFloodRig(t, client, n, func(c *gate.Config) { c.VisitorRate = 0 })
		cookies := make([]string, n)
		for i := range cookies {
			cookies[i] = rig.admit(fmt.Sprint("visitor-", i))
		}
		rig.frozen.Store(time.Now().UnixNano())
		for i, c := range cookies {
			if rec := rig.do(c, "/cart", ""); rec.Code != http.StatusOK {
				t.Fatalf("visitor %d's first request: %d", i, rec.Code)
			}
		}
		rig.settle()
		first := rig.store.touches.Load() // one each: the first checks
		for step := 1; step <= 3; step++ {
			before, batched := rig.store.touches.Load(), rig.store.batched.Load()
			// Past three quarters of the cache: every answer due.
			rig.ahead.Store(int64(time.Duration(step) * (rig.cfg.CheckCache*3/4 + 10*time.Millisecond)))
			for i, c := range cookies {
				if rec := rig.do(c, "/cart", ""); rec.Code != http.StatusOK {
					t.Fatalf("step %d, visitor %d: %d", step, i, rec.Code)
				}
			}
			for deadline := time.Now().Add(5 * time.Second); rig.store.batched.Load()-batched < n; {
				if time.Now().After(deadline) {
					t.Fatalf("step %d: %d answers renewed in batches (%d store calls), want %d in one", step,
						rig.store.batched.Load()-batched, rig.store.touches.Load()-before, n)
				}
				time.Sleep(5 * time.Millisecond)
			}
			if calls := rig.store.touches.Load() - before; calls != 1 {
				t.Errorf("step %d: %d visitors' renewals took %d store calls, want 1", step, n, calls)
			}
			// The gate records the batch's answers as the call returns:
			// give it that moment before the clock moves on.
			time.Sleep(20 * time.Millisecond)
		}
		t.Logf("%d visitors, 4 rounds of requests: %d store calls (%d first checks)", n, rig.store.touches.Load(), first)
	})
}
