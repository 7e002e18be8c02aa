package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/checkout"
	"github.com/stampede-lab/stampede/checkout/sqlstore"
	"github.com/stampede-lab/stampede/internal/httpapi"
	"github.com/stampede-lab/stampede/internal/testenv"
	"github.com/stampede-lab/stampede/pay"
	"github.com/stampede-lab/stampede/pay/sqlite"
)

func open(t *testing.T, cfg sqlstore.Config) *sqlstore.Store {
	t.Helper()
	s, err := sqlstore.Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func file(path string) sqlstore.Config {
	cfg := sqlstore.DefaultConfig()
	cfg.SQLitePath, cfg.OpTimeout = path, time.Minute
	return cfg
}

// stores are the databases every test runs on.
func stores(t *testing.T) map[string]func(t *testing.T) *sqlstore.Store {
	return map[string]func(t *testing.T) *sqlstore.Store{
		"memory": func(t *testing.T) *sqlstore.Store { return open(t, file(sqlstore.Memory)) },
		"file":   func(t *testing.T) *sqlstore.Store { return open(t, file(filepath.Join(t.TempDir(), "c.db"))) },
		"postgres": func(t *testing.T) *sqlstore.Store {
			cfg := file("")
			cfg.PostgresURL = testenv.URL(t, testenv.PostgresURL)
			cfg.Schema, cfg.MaxConns = fmt.Sprintf("checkout_store_%d", time.Now().UnixNano()), 16
			return open(t, cfg)
		},
	}
}

func newHold(event string, now time.Time) checkout.Hold {
	return checkout.Hold{ID: uuid.NewString(), EventID: event, User: "u", Amount: 1, Currency: "KRW", State: checkout.HoldHeld,
		ExpiresAt: now.Add(time.Minute), CreatedAt: now, UpdatedAt: now}
}

func createEvent(t *testing.T, s checkout.Store, id string, seats int) {
	t.Helper()
	if _, err := s.CreateEvent(context.Background(), checkout.Event{ID: id, Seats: seats, Price: 1, Currency: "KRW", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
}

// TestGuard: concurrent holds of 1 to 3 seats never take more seats than
// exist, never give one seat to two holds, and keep seats_left exact.
func TestGuard(t *testing.T) {
	t.Parallel()
	for name, mk := range stores(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := mk(t)
			createEvent(t, s, "e", 50)
			var (
				mu    sync.Mutex
				seats = map[int]int{}
				taken int
				wg    sync.WaitGroup
			)
			for i := range 200 {
				wg.Go(func() {
					h, err := s.Hold(context.Background(), newHold("e", time.Now()), 1+i%3)
					if _, ok := errors.AsType[*checkout.SoldOutError](err); ok {
						return
					}
					if err != nil {
						t.Errorf("Hold: %v", err)
						return
					}
					mu.Lock()
					defer mu.Unlock()
					taken += len(h.Seats)
					for _, n := range h.Seats {
						seats[n]++
					}
				})
			}
			wg.Wait()
			for n, k := range seats {
				if k != 1 || n < 1 || n > 50 {
					t.Errorf("seat %d held %d times", n, k)
				}
			}
			e, err := s.Event(context.Background(), "e")
			if err != nil || taken > 50 || e.SeatsLeft != 50-taken || taken < 48 {
				t.Fatalf("took %d seats; event %+v, %v", taken, e, err)
			}
		})
	}
}

// TestLifecycle: a failed order gives the seats back (the next hold gets
// the same seats), a paid one sells them, a second StartOrder is a
// StateError, expired holds are released once.
func TestLifecycle(t *testing.T) {
	t.Parallel()
	for name, mk := range stores(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx, now := context.Background(), time.Now()
			s := mk(t)
			createEvent(t, s, "e", 3)
			h, err := s.Hold(ctx, newHold("e", now), 2)
			if err != nil || fmt.Sprint(h.Seats) != "[1 2]" {
				t.Fatalf("Hold = %v, %v", h.Seats, err)
			}
			o := checkout.Order{ID: uuid.NewString(), HoldID: h.ID, EventID: "e", User: "u", Seats: h.Seats, Amount: 2, Currency: "KRW",
				Status: checkout.OrderPending, IdempotencyKey: "k-" + h.ID, CreatedAt: now, UpdatedAt: now}
			if _, err := s.StartOrder(ctx, o, now); err != nil {
				t.Fatal(err)
			}
			o2 := o
			o2.ID, o2.IdempotencyKey = uuid.NewString(), "other"
			if _, err := s.StartOrder(ctx, o2, now); !isState(err, checkout.HoldPaying) {
				t.Fatalf("second StartOrder = %v, want StateError paying", err)
			}
			if got, err := s.RecordPayment(ctx, o.ID, "p1", pay.StatusUnknown, now); err != nil || got.PaymentStatus != pay.StatusUnknown {
				t.Fatalf("RecordPayment = %+v, %v", got, err)
			}
			if got, err := s.Settle(ctx, o.ID, false, "p1", pay.StatusDeclined, "declined", now); err != nil || got.Status != checkout.OrderFailed {
				t.Fatalf("Settle failed = %+v, %v", got, err)
			}
			if got, err := s.Settle(ctx, o.ID, true, "p1", pay.StatusApproved, "", now); err != nil || got.Status != checkout.OrderFailed {
				t.Fatalf("Settle of an ended order = %+v, %v; want it unchanged", got, err)
			}
			if e, _ := s.Event(ctx, "e"); e.SeatsLeft != 3 || e.Sold != 0 {
				t.Fatalf("after failed: %+v", e)
			}
			h2, err := s.Hold(ctx, newHold("e", now), 3)
			if err != nil || fmt.Sprint(h2.Seats) != "[1 2 3]" {
				t.Fatalf("Hold after release = %v, %v", h2.Seats, err)
			}
			o3 := checkout.Order{ID: uuid.NewString(), HoldID: h2.ID, EventID: "e", User: "u", Seats: h2.Seats, Amount: 3, Currency: "KRW",
				Status: checkout.OrderPending, IdempotencyKey: "k-" + h2.ID, CreatedAt: now, UpdatedAt: now}
			if _, err := s.StartOrder(ctx, o3, now); err != nil {
				t.Fatal(err)
			}
			if got, err := s.Settle(ctx, o3.ID, true, "p2", pay.StatusApproved, "", now); err != nil || got.Status != checkout.OrderPaid {
				t.Fatalf("Settle paid = %+v, %v", got, err)
			}
			if e, _ := s.Event(ctx, "e"); e.SeatsLeft != 0 || e.Sold != 3 || e.Held() != 0 {
				t.Fatalf("after paid: %+v", e)
			}
			if hs, _ := s.GetHold(ctx, h2.ID); hs.State != checkout.HoldSold {
				t.Fatalf("hold after paid: %+v", hs)
			}

			// Expiry.
			createEvent(t, s, "f", 2)
			x, _ := s.Hold(ctx, newHold("f", now), 2)
			if n, err := s.ReleaseExpired(ctx, "", now.Add(2*time.Minute), 10); err != nil || n != 1 {
				t.Fatalf("ReleaseExpired = %d, %v", n, err)
			}
			if n, _ := s.ReleaseExpired(ctx, "f", now.Add(2*time.Minute), 10); n != 0 {
				t.Fatalf("released twice: %d", n)
			}
			if hx, _ := s.GetHold(ctx, x.ID); hx.State != checkout.HoldReleased || hx.Reason != "expired" {
				t.Fatalf("expired hold: %+v", hx)
			}
			if _, err := s.StartOrder(ctx, checkout.Order{ID: uuid.NewString(), HoldID: x.ID, IdempotencyKey: "x"}, now); !isState(err, checkout.HoldReleased) {
				t.Fatalf("StartOrder of a released hold = %v", err)
			}
			if e, _ := s.Event(ctx, "f"); e.SeatsLeft != 2 {
				t.Fatalf("after expiry: %+v", e)
			}
		})
	}
}

func isState(err error, want checkout.HoldState) bool {
	se, ok := errors.AsType[*checkout.StateError](err)
	return ok && se.State == want
}

// TestErrors: unknown rows are ErrNotFound, a duplicate event a conflict,
// sold out a SoldOutError, a closed store unavailable.
func TestErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := open(t, sqlstore.DefaultConfig())
	if _, err := s.Event(ctx, "nope"); !errors.Is(err, checkout.ErrNotFound) {
		t.Errorf("Event = %v", err)
	}
	if _, err := s.GetOrder(ctx, "nope"); !errors.Is(err, checkout.ErrNotFound) {
		t.Errorf("GetOrder = %v", err)
	}
	if _, err := s.Hold(ctx, newHold("nope", time.Now()), 1); !errors.Is(err, checkout.ErrNotFound) {
		t.Errorf("Hold of an unknown event = %v", err)
	}
	createEvent(t, s, "e", 1)
	if _, err := s.CreateEvent(ctx, checkout.Event{ID: "e", Seats: 1, Price: 1, Currency: "KRW"}); stampede.CodeOf(err) != stampede.Conflict {
		t.Errorf("duplicate event = %v", err)
	}
	if _, err := s.Hold(ctx, newHold("e", time.Now()), 2); err == nil {
		t.Errorf("Hold of 2 of 1 seat succeeded")
	} else if so, ok := errors.AsType[*checkout.SoldOutError](err); !ok || so.Left != 1 {
		t.Errorf("Hold of 2 of 1 seat = %v", err)
	}
	s.Close()
	if _, err := s.Event(ctx, "e"); httpapi.StatusOf(err) != 503 {
		t.Errorf("closed store = %v, want 503", err)
	}
}

// TestBesidePayOnce: checkout's tables and migrations live beside pay's
// in one file, in their own version table, applied once by processes
// opening the file together.
func TestBesidePayOnce(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "stampede.db")
	ps, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ps.Close()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			s, err := sqlstore.Open(context.Background(), file(path))
			if err != nil {
				t.Errorf("Open: %v", err)
				return
			}
			s.Close()
		})
	}
	wg.Wait()
	if _, err := ps.List(context.Background(), "", 1); err != nil {
		t.Fatalf("pay's store after checkout migrated the file: %v", err)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM ` + sqlstore.VersionTable + ` WHERE version_id = 1`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%s records migration 1 %d times (%v), want once", sqlstore.VersionTable, n, err)
	}
}
