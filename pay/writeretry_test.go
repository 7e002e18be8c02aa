package pay_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-lab/stampede/pay"
	payapi "github.com/stampede-lab/stampede/pay/api"
)

// flakyStore fails the next `fails` status changes as unavailable.
type flakyStore struct {
	pay.Store
	fails atomic.Int64
}

// Transition implements pay.Store.
func (f *flakyStore) Transition(ctx context.Context, id string, from, to pay.Status, reason string) (pay.Payment, error) {
	if f.fails.Add(-1) >= 0 {
		return pay.Payment{}, pay.Unavailable(errors.New("the database is down"))
	}
	return f.Store.Transition(ctx, id, from, to, reason)
}

// fakeClock is a clock that only sleeps move.
type fakeClock struct {
	mu    sync.Mutex
	now   time.Time
	slept []time.Duration
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Sleep(_ context.Context, d time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	c.slept = append(c.slept, d)
	return nil
}

func (c *fakeClock) Advance(d time.Duration) { _ = c.Sleep(context.Background(), d) }

// writeRetryRig is a service on a flaky SQLite store, with a fake clock
// that starts now, in front of a charging institution.
func writeRetryRig(t *testing.T) (*pay.Service, *flakyStore, *fakeClock, *simInst) {
	inst := newSimInst(t, 100*time.Millisecond, nil)
	store := &flakyStore{Store: openSQLite(t)}
	clock := &fakeClock{now: time.Now()}
	cfg := pay.DefaultConfig()
	cfg.Logger, cfg.Now, cfg.Sleep = quiet(), clock.Now, clock.Sleep
	svc, err := pay.NewService(store, inst.adapter, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return svc, store, clock, inst
}

var retryReq = pay.CreateRequest{MerchantID: merchant, OrderID: "retry-1", Amount: 4200, Currency: "KRW"}

// TestOutcomeWriteIsRetried: the database fails the write after the
// institution approved; the write is retried with backoff and the client
// gets the approval.
func TestOutcomeWriteIsRetried(t *testing.T) {
	svc, store, clock, _ := writeRetryRig(t)
	store.fails.Store(3)
	resp, err := createAnswer(svc, context.Background(), "retry-key", retryReq)
	if err != nil || resp.Code != http.StatusCreated {
		t.Fatalf("Create = %d %s, %v; want 201 after the write was retried", resp.Code, resp.Body, err)
	}
	var v payapi.View
	if err := json.Unmarshal(resp.Body, &v); err != nil || v.Status != pay.StatusApproved {
		t.Fatalf("answer %s, %v; want APPROVED", resp.Body, err)
	}
	if want := []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 40 * time.Millisecond}; !slices.Equal(clock.slept, want) {
		t.Errorf("backoff %v, want %v", clock.slept, want)
	}
	again, err := createAnswer(svc, context.Background(), "retry-key", retryReq)
	if err != nil || again.Code != resp.Code || string(again.Body) != string(resp.Body) {
		t.Errorf("the key answers %d %s, %v; want the same answer", again.Code, again.Body, err)
	}
}

// TestUnwrittenOutcomeIsSettledByTheReconciler: the database fails every
// write for longer than WriteRetryFor; the request fails (503) and the
// payment stays PENDING. No reconciliation pass touches it before its
// approval must have ended; after that, one settles it from the
// institution's status, and the key answers with the settled payment.
func TestUnwrittenOutcomeIsSettledByTheReconciler(t *testing.T) {
	svc, store, clock, inst := writeRetryRig(t)
	store.fails.Store(1 << 30)
	start := clock.Now()
	_, err := createAnswer(svc, context.Background(), "lost-key", retryReq)
	if pay.ErrorCode(err) != pay.CodeUnavailable {
		t.Fatalf("Create with the database down = %v, want unavailable", err)
	}
	if spent := clock.Now().Sub(start); spent < pay.DefaultConfig().WriteRetryFor || spent > pay.DefaultConfig().WriteRetryFor+time.Second {
		t.Errorf("retried for %s, want about WriteRetryFor (%s)", spent, pay.DefaultConfig().WriteRetryFor)
	}
	store.fails.Store(0)
	if _, err := createAnswer(svc, context.Background(), "lost-key", retryReq); pay.ErrorCode(err) != pay.CodeConflict {
		t.Fatalf("the key before settlement = %v, want 409 in flight", err)
	}
	// The retries took longer than the approval timeout plus margin on
	// the fake clock; the institution answered at once. Settle it.
	if res, err := svc.Pass(context.Background()); err != nil || res.TakenOver != 1 || res.Settled != 1 {
		t.Fatalf("Pass = %+v, %v; want the payment taken over and settled", res, err)
	}
	resp, err := createAnswer(svc, context.Background(), "lost-key", retryReq)
	var v payapi.View
	if err != nil || resp.Code != http.StatusCreated || json.Unmarshal(resp.Body, &v) != nil || v.Status != pay.StatusApproved {
		t.Fatalf("the key after settlement = %d %s, %v; want 201 APPROVED", resp.Code, resp.Body, err)
	}
	if rep := inst.parity(t, store); rep.Mismatches() != 0 || rep.Matched != 1 {
		t.Errorf("parity: %s", rep)
	}
}

// TestFreshPendingIsNotTakenOver: a PENDING payment whose approval may
// still be running (another instance's) is left alone by a pass until
// its approval timeout plus the margin has passed on the clock.
func TestFreshPendingIsNotTakenOver(t *testing.T) {
	svc, store, clock, _ := writeRetryRig(t)
	cfg := pay.DefaultConfig()
	p, err := store.CreatePending(context.Background(), pay.Payment{ID: pay.NewID(), MerchantID: merchant, OrderID: "fresh", Amount: 100, Currency: "KRW",
		NextInquiryAt: clock.Now().Add(cfg.ApprovalTimeout + cfg.TakeoverMargin)}, pay.IdempotencyRecord{Key: "fresh-key"})
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(cfg.ApprovalTimeout + cfg.TakeoverMargin - time.Millisecond)
	if res, err := svc.Pass(context.Background()); err != nil || res.Claimed != 0 {
		t.Fatalf("Pass before the takeover time = %+v, %v; want nothing claimed", res, err)
	}
	clock.Advance(time.Millisecond)
	if res, err := svc.Pass(context.Background()); err != nil || res.TakenOver != 1 {
		t.Fatalf("Pass at the takeover time = %+v, %v; want the payment taken over", res, err)
	}
	if got, _ := store.Get(context.Background(), p.ID); got.Status == pay.StatusPending {
		t.Fatalf("still PENDING after the takeover")
	}
}

// answer is what the merchant API sends for a create request: the
// status it picks, the body it renders and whether it is a replay.
type answer struct {
	Code     int
	Body     []byte
	Replayed bool
}

// createAnswer calls svc.Create and renders its payment as the merchant
// API does: 201 once final, 202 before, the payment without its history.
func createAnswer(svc *pay.Service, ctx context.Context, key string, req pay.CreateRequest) (answer, error) {
	p, replayed, err := svc.Create(ctx, key, req)
	if err != nil {
		return answer{}, err
	}
	code, body, err := payapi.CreatedResponse(p)
	return answer{Code: code, Body: body, Replayed: replayed}, err
}
