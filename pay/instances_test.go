package pay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stampede-lab/stampede/pay"
)

// TestTwoInstancesOnePostgres: two services share one PostgreSQL. While A
// is mid-approval on a burst of payments (a quarter of which time out and
// become UNKNOWN), B is restarted. No payment of A's is flipped by B while
// A is alive; no payment is asked about by two instances at once (the
// institution counts inquiries in flight per key), though both
// reconcilers and reads on both instances go after the UNKNOWN ones; all
// settle and parity is clean.
func TestTwoInstancesOnePostgres(t *testing.T) {
	raw, schema := pgURL(t)
	inst := newSimInst(t, 2*time.Second, func(s *simInst) {
		s.approveDelay = func(n int64) time.Duration {
			if n%4 == 0 {
				return 1200 * time.Millisecond // past the approval timeout, within the not-found window
			}
			return 300 * time.Millisecond
		}
		s.statusDelay = 10 * time.Millisecond
	})
	cfg := pay.DefaultConfig()
	cfg.ApprovalTimeout, cfg.TakeoverMargin, cfg.ReconcileEvery = time.Second, 500*time.Millisecond, 50*time.Millisecond
	cfg.InquiryTimeout, cfg.ClaimLease, cfg.InquiryConcurrency, cfg.Logger = 500*time.Millisecond, 2*time.Second, 4, quiet()
	type instance struct {
		svc   *pay.Service
		store pay.Store
		stop  func()
	}
	start := func() instance {
		store := openPG(t, raw, schema, "", 10*time.Second)
		svc, err := pay.NewService(store, inst.adapter, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return instance{svc, store, runService(t, svc)}
	}
	a, b := start(), start()

	const n = 60
	ids := make([]string, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			resp, err := createAnswer(a.svc, context.Background(), fmt.Sprint("two-key-", i),
				pay.CreateRequest{MerchantID: merchant, OrderID: fmt.Sprint("two-", i), Amount: int64(500 + i), Currency: "KRW"})
			if err != nil {
				errs <- fmt.Errorf("payment %d: %w", i, err)
				return
			}
			var v struct{ ID string }
			if err := json.Unmarshal(resp.Body, &v); err != nil {
				errs <- err
				return
			}
			ids[i] = v.ID
		})
	}
	// B restarts while A's approvals are in flight.
	time.Sleep(100 * time.Millisecond)
	b.stop()
	b.store.Close()
	b = start()
	if took, err := b.svc.Recover(context.Background()); err != nil || took != 0 {
		t.Errorf("the restarted instance's Recover = %d, %v; want no payment of the live instance taken over", took, err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	// Reads on both instances go after every payment while both
	// reconcilers run.
	readers := sync.WaitGroup{}
	for _, svc := range []*pay.Service{a.svc, b.svc, a.svc, b.svc} {
		readers.Go(func() {
			for range 5 {
				for _, id := range ids {
					if id != "" {
						_, _ = svc.Get(context.Background(), id)
					}
				}
			}
		})
	}
	readers.Wait()
	waitSettled(t, a.store, 15*time.Second)

	unknown := 0
	for _, id := range ids {
		if id == "" {
			continue
		}
		p, err := a.store.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range p.History {
			if pay.ReasonCode(h.Reason) == pay.ReasonRecovered {
				t.Errorf("payment %s was taken over while its instance was alive: %+v", id, h)
			}
			if h.To == pay.StatusUnknown {
				unknown++
			}
		}
	}
	if m := inst.maxPerKey(); m > 1 {
		t.Errorf("%d inquiries about one key at once, want at most 1", m)
	}
	rep := inst.parity(t, a.store)
	if rep.Mismatches() != 0 {
		t.Errorf("parity: %s", rep)
	}
	t.Logf("%d payments through instance A while B restarted: %d went UNKNOWN, %d inquiries in all, at most %d at once per key; none taken over; parity: %s",
		n, unknown, inst.inquiries.Load(), inst.maxPerKey(), rep)
	if unknown == 0 {
		t.Errorf("no payment went UNKNOWN: the test exercised no inquiry")
	}
}

// slowInsert is a store whose CreatePending takes delay before it writes,
// as a busy database's pool does.
type slowInsert struct {
	pay.Store
	delay time.Duration
}

func (s slowInsert) CreatePending(ctx context.Context, p pay.Payment, r pay.IdempotencyRecord) (pay.Payment, error) {
	time.Sleep(s.delay)
	return s.Store.CreatePending(ctx, p, r)
}

// TestApprovalEndsWithinOwnership: the first approval call ends by the
// payment's creation plus ApprovalTimeout, however long recording it took,
// so that no call is in flight once another instance may take the
// payment over; a payment recorded after its whole timeout is not sent at
// all (FAILED, nothing charged).
func TestApprovalEndsWithinOwnership(t *testing.T) {
	inst := newSimInst(t, 2*time.Second, func(s *simInst) {
		s.approveDelay = func(int64) time.Duration { return 2 * time.Second }
	})
	cfg := pay.DefaultConfig()
	cfg.ApprovalTimeout, cfg.TakeoverMargin, cfg.Logger = time.Second, 500*time.Millisecond, quiet()
	for _, c := range []struct {
		delay time.Duration
		want  pay.Status
	}{
		{600 * time.Millisecond, pay.StatusUnknown}, // sent, cut at creation + 1 s
		{1100 * time.Millisecond, pay.StatusFailed}, // never sent
	} {
		svc, err := pay.NewService(slowInsert{openSQLite(t), c.delay}, inst.adapter, cfg)
		if err != nil {
			t.Fatal(err)
		}
		before, start := inst.approvals.Load(), time.Now()
		p, _, err := svc.Create(context.Background(), fmt.Sprint("own-", c.delay), pay.CreateRequest{MerchantID: merchant, OrderID: fmt.Sprint("own-", c.delay), Amount: 100, Currency: "KRW"})
		if err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		if p.Status != c.want || took >= cfg.ApprovalTimeout+cfg.TakeoverMargin {
			t.Errorf("recorded after %s: %s after %s, want %s before the takeover at %s", c.delay, p.Status, took, c.want, cfg.ApprovalTimeout+cfg.TakeoverMargin)
		}
		if sent := inst.approvals.Load() - before; (c.want == pay.StatusFailed) != (sent == 0) {
			t.Errorf("recorded after %s: %d approval requests reached the institution", c.delay, sent)
		}
	}
}
