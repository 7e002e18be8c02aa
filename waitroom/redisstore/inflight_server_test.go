package redisstore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-lab/stampede/internal/tcpproxy"
	"github.com/stampede-lab/stampede/waitroom"
	"github.com/stampede-lab/stampede/waitroom/redisstore"
)

// proxiedStore returns an auto-pipelining Store with opTimeout on an
// embedded server behind a TCP proxy the test can freeze; all closed when
// the test ends.
func proxiedStore(t *testing.T, opTimeout time.Duration) (*redisstore.Store, *tcpproxy.Proxy) {
	t.Helper()
	e, err := redisstore.StartEmbedded()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	p, err := tcpproxy.Start(e.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	cfg := redisstore.Config{AutoPipeline: true, OpTimeout: opTimeout}
	opts := &redis.Options{Addr: p.Addr()}
	cfg.ApplyTimeouts(opts)
	client := redis.NewClient(opts)
	// The proxy thaws before the client closes (cleanups run last first).
	t.Cleanup(func() { p.Thaw(); client.Close() })
	s, err := redisstore.NewWithConfig(client, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s, p
}

// TestStalledServerGetsNoMoreThanTheBound: while the server does not
// answer (a proxy holds every byte), a crowd of joins gets at most the
// joins' share of the in-flight bound sent; the rest are refused at once
// as unavailable, without reaching the server, and a poll still has a
// place. Once the server answers again, exactly the joins sent have
// joined, the places are all given back, and joins go through again.
func TestStalledServerGetsNoMoreThanTheBound(t *testing.T) {
	const opTimeout = 300 * time.Millisecond
	s, p := proxiedStore(t, opTimeout)
	ctx := context.Background()
	rc := waitroom.DefaultRoomConfig()
	rc.Capacity = 1
	if err := s.Configure(ctx, "r", rc); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Join(ctx, "r", "first"); err != nil { // loads the script
		t.Fatal(err)
	}
	_, limit, _ := redisstore.Inflight(s)

	p.Freeze()
	const crowd = 1000
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		refused  int
		slowest  time.Duration
		timedOut int
	)
	for i := range crowd {
		wg.Go(func() {
			start := time.Now()
			_, err := s.Join(ctx, "r", fmt.Sprintf("u%d", i))
			took := time.Since(start)
			if waitroom.ErrorCode(err) != waitroom.CodeUnavailable {
				t.Errorf("join while the server is stalled = %v, want unavailable", err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if took < opTimeout/2 {
				refused++
				slowest = max(slowest, took)
			} else {
				timedOut++
			}
		})
	}
	wg.Wait()
	share := int(float64(limit) * 0.75)
	if timedOut > share {
		t.Errorf("%d joins were sent to the stalled server, want at most the joins' share %d of the limit %d", timedOut, share, limit)
	}
	if refused < crowd-share {
		t.Errorf("%d joins refused at once, want at least %d", refused, crowd-share)
	}
	t.Logf("limit %d: %d joins sent and timed out, %d refused at once (slowest refusal %s)", limit, timedOut, refused, slowest)
	inFlight, _, _ := redisstore.Inflight(s)
	if inFlight != timedOut {
		t.Errorf("%d scripts counted in flight, want the %d sent: an abandoned script counts until the server answers", inFlight, timedOut)
	}
	// A poll still finds a place beside the joins.
	pollCtx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err := s.Ticket(pollCtx, "r", "first")
	cancel()
	if waitroom.ErrorCode(err) != waitroom.CodeUnavailable {
		t.Fatalf("poll while stalled = %v, want a timeout", err)
	}
	if _, _, r := redisstore.Inflight(s); r != int64(refused) {
		t.Errorf("the poll was refused (%d refusals, %d joins refused): the joins must leave it a place", r, refused)
	}

	p.Thaw()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if n, _, _ := redisstore.Inflight(s); n == 0 {
			break
		}
		if time.Now().After(deadline) {
			n, _, _ := redisstore.Inflight(s)
			t.Fatalf("%d scripts still counted in flight 5 s after the server answers again", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	v, err := s.View(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(1 + timedOut); v.Waiting+v.AdmittedTotal != want {
		t.Errorf("the room has %d waiting and %d admitted, want %d users in all: the first and the joins sent, none refused",
			v.Waiting, v.AdmittedTotal, want)
	}
	if _, err := s.Join(ctx, "r", "after"); err != nil {
		t.Errorf("join after the server answers again = %v", err)
	}
	if _, l, _ := redisstore.Inflight(s); l >= limit {
		t.Errorf("limit %d after timeouts, want below the %d it started at", l, limit)
	}
}

// TestCallerLeavingDoesNotLowerTheBound: a caller that leaves before the
// server answers (its request closed, not its deadline passed) says
// nothing of the server: the bound stays.
func TestCallerLeavingDoesNotLowerTheBound(t *testing.T) {
	s, p := proxiedStore(t, time.Second)
	ctx := context.Background()
	if err := s.Configure(ctx, "r", waitroom.DefaultRoomConfig()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Join(ctx, "r", "u"); err != nil {
		t.Fatal(err)
	}
	_, before, _ := redisstore.Inflight(s)
	p.Freeze()
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			cctx, cancel := context.WithCancel(ctx)
			time.AfterFunc(10*time.Millisecond, cancel)
			if _, err := s.Ticket(cctx, "r", "u"); err == nil {
				t.Error("a poll answered while the server was stalled")
			}
		})
	}
	wg.Wait()
	time.Sleep(20 * time.Millisecond)
	p.Thaw()
	for n := 1; n > 0; time.Sleep(10 * time.Millisecond) {
		n, _, _ = redisstore.Inflight(s)
	}
	if _, after, _ := redisstore.Inflight(s); after != before {
		t.Fatalf("bound %d after 20 callers left, want %d as before", after, before)
	}
}
