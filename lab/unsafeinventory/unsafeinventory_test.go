package unsafeinventory_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-lab/stampede/checkout"
	"github.com/stampede-lab/stampede/checkout/sqlstore"
	"github.com/stampede-lab/stampede/internal/testenv"
	"github.com/stampede-lab/stampede/lab/unsafeinventory"
	"github.com/stampede-lab/stampede/protocol"
)

// barrier holds the first n callers until all n arrived (or a few
// seconds passed); later callers pass.
type barrier struct {
	n       int
	arrived atomic.Int32
	release chan struct{}
	once    sync.Once
}

func newBarrier(n int) *barrier { return &barrier{n: n, release: make(chan struct{})} }

func (b *barrier) wait(ctx context.Context) {
	if int(b.arrived.Add(1)) >= b.n {
		b.once.Do(func() { close(b.release) })
	}
	select {
	case <-b.release:
	case <-time.After(5 * time.Second):
	case <-ctx.Done():
	}
}

func sqliteFile(t *testing.T) *sqlstore.Store {
	cfg := sqlstore.DefaultConfig()
	cfg.SQLitePath = filepath.Join(t.TempDir(), "checkout.db")
	cfg.OpTimeout = time.Minute
	return open(t, cfg)
}

func postgresSchema(t *testing.T) *sqlstore.Store {
	cfg := sqlstore.DefaultConfig()
	cfg.PostgresURL = testenv.URL(t, testenv.PostgresURL)
	cfg.Schema = fmt.Sprintf("unsafe_inventory_test_%d", time.Now().UnixNano())
	cfg.MaxConns, cfg.OpTimeout = 16, time.Minute
	return open(t, cfg)
}

func open(t *testing.T, cfg sqlstore.Config) *sqlstore.Store {
	t.Helper()
	s, err := sqlstore.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// sale has buyers concurrent buyers hold one seat each of a new event of
// seats seats, and pays for every hold it got; it returns the holds
// paid for, how many seats were sold more than once, and the event.
func sale(t *testing.T, s checkout.Store, seats, buyers int) (paid, twice int, e checkout.Event) {
	t.Helper()
	ctx := context.Background()
	now := time.Now().UTC()
	if _, err := s.CreateEvent(ctx, checkout.Event{ID: "concert", Seats: seats, Price: 100, Currency: "EUR", CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		holds []checkout.Hold
		wg    sync.WaitGroup
	)
	for i := range buyers {
		wg.Go(func() {
			h := checkout.Hold{ID: fmt.Sprintf("h-%d", i), EventID: "concert", User: fmt.Sprintf("u-%d", i), Amount: 100, Currency: "EUR",
				State: checkout.HoldHeld, ExpiresAt: now.Add(time.Hour), CreatedAt: now, UpdatedAt: now}
			got, err := s.Hold(ctx, h, 1)
			if _, soldOut := errors.AsType[*checkout.SoldOutError](err); err != nil && !soldOut {
				t.Errorf("Hold %d: %v", i, err)
			}
			if err == nil {
				mu.Lock()
				holds = append(holds, got)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	holders := map[int]int{}
	for _, h := range holds {
		o := checkout.Order{ID: "o-" + h.ID, HoldID: h.ID, EventID: h.EventID, User: h.User, Seats: h.Seats, Amount: h.Amount,
			Currency: h.Currency, Status: checkout.OrderPending, IdempotencyKey: "k-" + h.ID, CreatedAt: now, UpdatedAt: now}
		if _, err := s.StartOrder(ctx, o, now); err != nil {
			t.Fatalf("StartOrder(%s): %v", h.ID, err)
		}
		if got, err := s.Settle(ctx, o.ID, true, "p-"+h.ID, protocol.StatusApproved, "", now); err != nil || got.Status != checkout.OrderPaid {
			t.Fatalf("Settle(%s) = %v, %v; want paid", o.ID, got.Status, err)
		}
		paid++
		for _, no := range h.Seats {
			if holders[no]++; holders[no] == 2 {
				twice++
			}
		}
	}
	e, err := s.Event(ctx, "concert")
	if err != nil {
		t.Fatal(err)
	}
	return paid, twice, e
}

// testOversells: with the race forced by a barrier between its read and
// its write, the unsafe inventory sells more seats than exist and sells
// seats twice, where the real store, the same sale, sells each seat once.
// (The sale lab's checker must see this.)
func testOversells(t *testing.T, open func(t *testing.T) *sqlstore.Store) {
	paid, twice, e := sale(t, unsafeinventory.New(open(t), newBarrier(150).wait), 100, 250)
	t.Logf("unsafe inventory: %d holds paid for 100 seats, %d seats sold more than once, event %+v", paid, twice, e)
	if paid <= 100 || twice == 0 || e.Sold <= 100 {
		t.Fatalf("the unsafe path did not oversell: %d paid, %d seats sold twice, %d sold", paid, twice, e.Sold)
	}
	paid, twice, e = sale(t, open(t), 100, 250)
	if paid != 100 || twice != 0 || e.Sold != 100 || e.SeatsLeft != 0 {
		t.Fatalf("the guarded store: %d paid, %d seats sold twice, event %+v; want 100 sold once each", paid, twice, e)
	}
}

func TestOversellsSQLite(t *testing.T) {
	t.Parallel()
	testOversells(t, sqliteFile)
}

func TestOversellsPostgres(t *testing.T) {
	t.Parallel()
	testOversells(t, postgresSchema)
}
