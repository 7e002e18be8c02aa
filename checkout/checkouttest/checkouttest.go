// Package checkouttest is the conformance suite every checkout.Store must
// pass: an adapter's tests call Exercise, once for each database they can
// reach, with a function that opens the store under test.
//
// It pins the checkout's one rule (no seat sold twice, no more seats sold
// than exist) under concurrent holds, each seat's single holder, the
// life of holds and orders (held, paying, sold or released; pending, paid
// or failed, with the payment's status), the expiry sweep, and the errors
// a store answers with.
//
// The suite does not assume an empty store: every test uses fresh event,
// hold and order ids and looks only at its own rows (the tests of the
// sweeps and of pending orders work at times long past, which no other
// test uses), so one database may serve every test.
package checkouttest

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/checkout"
	"github.com/stampede-lab/stampede/protocol"
)

// Options tune Exercise.
type Options struct {
	// Parallel runs the suite's tests in parallel with each other; every
	// test uses fresh ids, so they may share one database.
	Parallel bool
}

// Exercise runs the suite. open returns a store for one test (the suite
// closes it in some tests, so a test that shares a database needs a store
// of its own on it); open owns the stores (close them with t.Cleanup).
func Exercise(t *testing.T, open func(t *testing.T) checkout.Store, opts Options) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s checkout.Store)
	}{
		{"CreateAndReadEvent", testEvent},
		{"HoldTakesTheLowestFreeSeats", testHold},
		{"NoOversellUnderConcurrency", testNoOversell},
		{"OneHolderPerSeatWhileSeatsChurn", testChurn},
		{"OrderLifecycle", testOrderLifecycle},
		{"PaidOrderSellsTheSeats", testPaid},
		{"ExpiredHoldCannotBeOrdered", testExpiredHold},
		{"PendingOrders", testPendingOrders},
		{"ReleaseExpired", testReleaseExpired},
		{"ConcurrentReleaseExpiredReleasesOnce", testConcurrentRelease},
		{"ClosedStoreIsUnavailable", testClosed},
		{"Ping", func(t *testing.T, s checkout.Store) {
			if err := s.Ping(context.Background()); err != nil {
				t.Fatalf("Ping: %v", err)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if opts.Parallel {
				t.Parallel()
			}
			tc.fn(t, open(t))
		})
	}
}

// longAgo returns a time in 2001, a different one for every call, for the
// tests whose queries span every event (the sweep, pending orders): no
// other test writes such times.
func longAgo() time.Time {
	return time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(rand.IntN(1_000_000)) * time.Minute)
}

// createEvent stores a fresh event of seats seats and returns it.
func createEvent(t *testing.T, s checkout.Store, seats int) checkout.Event {
	t.Helper()
	e, err := s.CreateEvent(context.Background(), checkout.Event{ID: "e-" + uuid.NewString(), Seats: seats, Price: 150,
		Currency: "KRW", CreatedAt: time.Now()})
	if err != nil {
		t.Fatalf("CreateEvent: %v", err)
	}
	return e
}

// newHold returns a hold of event for a fresh user, expiring a minute
// after now.
func newHold(event string, now time.Time) checkout.Hold {
	return checkout.Hold{ID: uuid.NewString(), EventID: event, User: "u-" + uuid.NewString()[:8], Amount: 150, Currency: "KRW",
		State: checkout.HoldHeld, ExpiresAt: now.Add(time.Minute), CreatedAt: now, UpdatedAt: now}
}

// hold holds n seats of event at now, or fails the test.
func hold(t *testing.T, s checkout.Store, event string, n int, now time.Time) checkout.Hold {
	t.Helper()
	h, err := s.Hold(context.Background(), newHold(event, now), n)
	if err != nil {
		t.Fatalf("Hold(%d): %v", n, err)
	}
	return h
}

// orderOf returns a pending order of h.
func orderOf(h checkout.Hold, now time.Time) checkout.Order {
	return checkout.Order{ID: uuid.NewString(), HoldID: h.ID, EventID: h.EventID, User: h.User, Seats: h.Seats,
		Amount: h.Amount, Currency: h.Currency, Status: checkout.OrderPending,
		IdempotencyKey: "k-" + h.ID, CreatedAt: now, UpdatedAt: now}
}

// startOrder starts an order of h at now, or fails the test.
func startOrder(t *testing.T, s checkout.Store, h checkout.Hold, now time.Time) checkout.Order {
	t.Helper()
	o, err := s.StartOrder(context.Background(), orderOf(h, now), now)
	if err != nil {
		t.Fatalf("StartOrder: %v", err)
	}
	return o
}

// event reads an event, or fails the test.
func event(t *testing.T, s checkout.Store, id string) checkout.Event {
	t.Helper()
	e, err := s.Event(context.Background(), id)
	if err != nil {
		t.Fatalf("Event(%s): %v", id, err)
	}
	return e
}

// isState reports whether err is a *checkout.StateError of state want.
func isState(err error, want checkout.HoldState) bool {
	se, ok := errors.AsType[*checkout.StateError](err)
	return ok && se.State == want
}

// storeTime is t as a store keeps it: UTC, to the microsecond.
func storeTime(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

func testEvent(t *testing.T, s checkout.Store) {
	ctx := context.Background()
	at := time.Now().Add(-time.Hour)
	want := checkout.Event{ID: "e-" + uuid.NewString(), Seats: 7, Price: 990, Currency: "EUR", CreatedAt: at}
	got, err := s.CreateEvent(ctx, want)
	if err != nil {
		t.Fatalf("CreateEvent: %v", err)
	}
	want.SeatsLeft, want.CreatedAt = 7, storeTime(at)
	if got != want {
		t.Errorf("CreateEvent = %+v, want %+v", got, want)
	}
	if read := event(t, s, want.ID); read != want {
		t.Errorf("Event = %+v, want %+v", read, want)
	}
	if _, err := s.CreateEvent(ctx, want); stampede.CodeOf(err) != stampede.Conflict {
		t.Errorf("CreateEvent of an existing id = %v, want a conflict", err)
	}
	if _, err := s.Event(ctx, "e-"+uuid.NewString()); !errors.Is(err, checkout.ErrNotFound) {
		t.Errorf("Event of an unknown id = %v, want ErrNotFound", err)
	}
}

func testHold(t *testing.T, s checkout.Store) {
	ctx, now := context.Background(), time.Now()
	e := createEvent(t, s, 3)
	want := newHold(e.ID, now)
	h, err := s.Hold(ctx, want, 2)
	if err != nil || !slices.Equal(h.Seats, []int{1, 2}) {
		t.Fatalf("Hold(2) = %v, %v; want seats [1 2]", h.Seats, err)
	}
	got, err := s.GetHold(ctx, h.ID)
	if err != nil {
		t.Fatalf("GetHold: %v", err)
	}
	if got.ID != want.ID || got.EventID != e.ID || got.User != want.User || !slices.Equal(got.Seats, []int{1, 2}) ||
		got.Amount != want.Amount || got.Currency != want.Currency || got.State != checkout.HoldHeld ||
		!got.ExpiresAt.Equal(storeTime(want.ExpiresAt)) || !got.CreatedAt.Equal(storeTime(now)) {
		t.Errorf("GetHold = %+v, want %+v with seats [1 2]", got, want)
	}
	if _, err := s.Hold(ctx, newHold(e.ID, now), 2); err == nil {
		t.Error("Hold(2) of 1 seat left succeeded")
	} else if so, ok := errors.AsType[*checkout.SoldOutError](err); !ok || so.Left != 1 || so.Held != 2 {
		t.Errorf("Hold(2) of 1 seat left = %+v, want a SoldOutError with 1 left and 2 held", err)
	}
	if h3 := hold(t, s, e.ID, 1, now); !slices.Equal(h3.Seats, []int{3}) {
		t.Errorf("Hold(1) = seats %v, want [3]", h3.Seats)
	}
	if ev := event(t, s, e.ID); ev.SeatsLeft != 0 || ev.Sold != 0 || ev.Held() != 3 {
		t.Errorf("event = %+v, want 3 held, 0 left", ev)
	}
	if _, err := s.Hold(ctx, newHold("e-"+uuid.NewString(), now), 1); !errors.Is(err, checkout.ErrNotFound) {
		t.Errorf("Hold of an unknown event = %v, want ErrNotFound", err)
	}
	if _, err := s.GetHold(ctx, uuid.NewString()); !errors.Is(err, checkout.ErrNotFound) {
		t.Errorf("GetHold of an unknown id = %v, want ErrNotFound", err)
	}
}

// testNoOversell: concurrent holds of 1 to 3 seats never take more seats
// than exist, never give one seat to two holds, and keep seats_left
// exact.
func testNoOversell(t *testing.T, s checkout.Store) {
	const seats, buyers = 50, 200
	e := createEvent(t, s, seats)
	var (
		mu    sync.Mutex
		held  = map[int]int{}
		taken int
		wg    sync.WaitGroup
	)
	for i := range buyers {
		wg.Go(func() {
			h, err := s.Hold(context.Background(), newHold(e.ID, time.Now()), 1+i%3)
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
				held[n]++
			}
		})
	}
	wg.Wait()
	for n, k := range held {
		if k != 1 || n < 1 || n > seats {
			t.Errorf("seat %d held %d times", n, k)
		}
	}
	ev := event(t, s, e.ID)
	if taken > seats || ev.SeatsLeft != seats-taken || taken < seats-2 {
		t.Fatalf("took %d seats of %d; event %+v", taken, seats, ev)
	}
}

// testChurn: buyers hold a seat, order it and fail, over and over, while
// others hold for good: every seat has one live holder at most, and the
// counters come out exact.
func testChurn(t *testing.T, s checkout.Store) {
	const seats = 10
	ctx := context.Background()
	e := createEvent(t, s, seats)
	var (
		mu   sync.Mutex
		kept []checkout.Hold
		wg   sync.WaitGroup
	)
	for w := range 8 {
		wg.Go(func() {
			for range 5 {
				now := time.Now()
				h, err := s.Hold(ctx, newHold(e.ID, now), 1)
				if _, ok := errors.AsType[*checkout.SoldOutError](err); ok {
					continue
				}
				if err != nil {
					t.Errorf("Hold: %v", err)
					return
				}
				if w%2 == 0 { // keep it
					mu.Lock()
					kept = append(kept, h)
					mu.Unlock()
					continue
				}
				o, err := s.StartOrder(ctx, orderOf(h, now), now)
				if err == nil {
					_, err = s.Settle(ctx, o.ID, false, "p-"+o.ID, protocol.StatusDeclined, "declined", now)
				}
				if err != nil {
					t.Errorf("order and fail: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	holders := map[int]string{}
	for _, h := range kept {
		for _, n := range h.Seats {
			if other, ok := holders[n]; ok {
				t.Errorf("seat %d held by %s and %s", n, other, h.ID)
			}
			holders[n] = h.ID
		}
	}
	if ev := event(t, s, e.ID); ev.SeatsLeft != seats-len(kept) || ev.Held() != len(kept) || ev.Sold != 0 {
		t.Fatalf("%d holds kept; event %+v", len(kept), ev)
	}
}

func testOrderLifecycle(t *testing.T, s checkout.Store) {
	ctx, now := context.Background(), time.Now()
	e := createEvent(t, s, 3)
	h := hold(t, s, e.ID, 2, now)
	o := startOrder(t, s, h, now)
	if got, err := s.GetHold(ctx, h.ID); err != nil || got.State != checkout.HoldPaying {
		t.Fatalf("hold after StartOrder = %+v, %v; want paying", got, err)
	}
	o2 := orderOf(h, now)
	if _, err := s.StartOrder(ctx, o2, now); !isState(err, checkout.HoldPaying) {
		t.Fatalf("second StartOrder = %v, want a StateError paying", err)
	}
	if _, err := s.GetOrder(ctx, o2.ID); !errors.Is(err, checkout.ErrNotFound) {
		t.Errorf("the refused order = %v, want ErrNotFound", err)
	}
	for name, get := range map[string]func() (checkout.Order, error){
		"GetOrder":    func() (checkout.Order, error) { return s.GetOrder(ctx, o.ID) },
		"OrderOfHold": func() (checkout.Order, error) { return s.OrderOfHold(ctx, h.ID) },
	} {
		got, err := get()
		if err != nil || got.ID != o.ID || got.HoldID != h.ID || !slices.Equal(got.Seats, h.Seats) || got.Status != checkout.OrderPending ||
			got.IdempotencyKey != o.IdempotencyKey || !got.CreatedAt.Equal(storeTime(now)) {
			t.Errorf("%s = %+v, %v; want %+v", name, got, err, o)
		}
	}
	later := now.Add(time.Second)
	got, err := s.RecordPayment(ctx, o.ID, "p1", protocol.StatusUnknown, later)
	if err != nil || got.PaymentID != "p1" || got.PaymentStatus != protocol.StatusUnknown || got.Status != checkout.OrderPending ||
		!got.UpdatedAt.Equal(storeTime(later)) {
		t.Fatalf("RecordPayment = %+v, %v; want pending with p1 UNKNOWN", got, err)
	}
	got, err = s.Settle(ctx, o.ID, false, "p1", protocol.StatusDeclined, "declined", later)
	if err != nil || got.Status != checkout.OrderFailed || got.PaymentStatus != protocol.StatusDeclined || got.Reason != "declined" {
		t.Fatalf("Settle failed = %+v, %v", got, err)
	}
	if got, err := s.Settle(ctx, o.ID, true, "p1", protocol.StatusApproved, "", later); err != nil || got.Status != checkout.OrderFailed {
		t.Fatalf("Settle of an ended order = %+v, %v; want it unchanged", got, err)
	}
	if got, err := s.RecordPayment(ctx, o.ID, "p9", protocol.StatusPending, later); err != nil || got.PaymentID != "p1" {
		t.Fatalf("RecordPayment on an ended order = %+v, %v; want it unchanged", got, err)
	}
	if hs, err := s.GetHold(ctx, h.ID); err != nil || hs.State != checkout.HoldReleased || hs.Reason != "declined" {
		t.Fatalf("hold of the failed order = %+v, %v; want released (declined)", hs, err)
	}
	if ev := event(t, s, e.ID); ev.SeatsLeft != 3 || ev.Sold != 0 {
		t.Fatalf("event after the failed order = %+v; want every seat back", ev)
	}
	if again := hold(t, s, e.ID, 3, now); !slices.Equal(again.Seats, []int{1, 2, 3}) {
		t.Errorf("Hold after the release = %v, want [1 2 3]", again.Seats)
	}
	if _, err := s.GetOrder(ctx, uuid.NewString()); !errors.Is(err, checkout.ErrNotFound) {
		t.Errorf("GetOrder of an unknown id = %v, want ErrNotFound", err)
	}
	if _, err := s.OrderOfHold(ctx, uuid.NewString()); !errors.Is(err, checkout.ErrNotFound) {
		t.Errorf("OrderOfHold of an unknown hold = %v, want ErrNotFound", err)
	}
}

func testPaid(t *testing.T, s checkout.Store) {
	ctx, now := context.Background(), time.Now()
	e := createEvent(t, s, 4)
	h := hold(t, s, e.ID, 3, now)
	o := startOrder(t, s, h, now)
	got, err := s.Settle(ctx, o.ID, true, "p2", protocol.StatusApproved, "", now)
	if err != nil || got.Status != checkout.OrderPaid || got.PaymentID != "p2" || got.PaymentStatus != protocol.StatusApproved {
		t.Fatalf("Settle paid = %+v, %v", got, err)
	}
	if got, err := s.Settle(ctx, o.ID, false, "p2", protocol.StatusFailed, "failed", now); err != nil || got.Status != checkout.OrderPaid {
		t.Fatalf("Settle of a paid order = %+v, %v; want it unchanged", got, err)
	}
	if hs, err := s.GetHold(ctx, h.ID); err != nil || hs.State != checkout.HoldSold {
		t.Fatalf("hold after paid = %+v, %v; want sold", hs, err)
	}
	if ev := event(t, s, e.ID); ev.SeatsLeft != 1 || ev.Sold != 3 || ev.Held() != 0 {
		t.Fatalf("event after paid = %+v; want 3 sold, 1 left", ev)
	}
	if _, err := s.StartOrder(ctx, orderOf(h, now), now); !isState(err, checkout.HoldSold) {
		t.Fatalf("StartOrder of a sold hold = %v, want a StateError sold", err)
	}
	// The seats sold stay sold: an expiry sweep does not touch them.
	if n, err := s.ReleaseExpired(ctx, e.ID, now.Add(time.Hour), 10); err != nil || n != 0 {
		t.Fatalf("ReleaseExpired after paid = %d, %v; want 0", n, err)
	}
}

func testExpiredHold(t *testing.T, s checkout.Store) {
	ctx, now := context.Background(), time.Now()
	e := createEvent(t, s, 2)
	h := hold(t, s, e.ID, 2, now)
	_, err := s.StartOrder(ctx, orderOf(h, now), h.ExpiresAt)
	se, ok := errors.AsType[*checkout.StateError](err)
	if !ok || se.State != checkout.HoldHeld || !se.Expired {
		t.Fatalf("StartOrder at the hold's expiry = %v, want a StateError held and expired", err)
	}
	if got, err := s.GetHold(ctx, h.ID); err != nil || got.State != checkout.HoldHeld {
		t.Fatalf("hold after the refused order = %+v, %v; want still held", got, err)
	}
}

func testPendingOrders(t *testing.T, s checkout.Store) {
	ctx := context.Background()
	base := longAgo()
	e := createEvent(t, s, 5)
	var orders []checkout.Order
	for i := range 3 {
		at := base.Add(time.Duration(i) * time.Second)
		orders = append(orders, startOrder(t, s, hold(t, s, e.ID, 1, at), at))
	}
	if _, err := s.Settle(ctx, orders[1].ID, true, "p", protocol.StatusApproved, "", base.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	got, err := s.PendingOrders(ctx, base.Add(10*time.Second), 100)
	if err != nil {
		t.Fatalf("PendingOrders: %v", err)
	}
	var mine []string
	for _, o := range got {
		if o.EventID == e.ID {
			mine = append(mine, o.ID)
		}
	}
	if want := []string{orders[0].ID, orders[2].ID}; !slices.Equal(mine, want) {
		t.Errorf("PendingOrders = %v, want the pending ones oldest first %v", mine, want)
	}
	if got, err := s.PendingOrders(ctx, base.Add(-time.Second), 100); err != nil || slices.ContainsFunc(got, func(o checkout.Order) bool { return o.EventID == e.ID }) {
		t.Errorf("PendingOrders before the first = %v, %v; want none of this test's", got, err)
	}
	if got, err := s.PendingOrders(ctx, base.Add(10*time.Second), 1); err != nil || len(got) != 1 {
		t.Errorf("PendingOrders limit 1 = %d orders, %v", len(got), err)
	}
}

func testReleaseExpired(t *testing.T, s checkout.Store) {
	ctx := context.Background()
	base := longAgo()
	e, f := createEvent(t, s, 4), createEvent(t, s, 2)
	e1, e2 := hold(t, s, e.ID, 1, base), hold(t, s, e.ID, 2, base.Add(time.Second))
	paying := hold(t, s, e.ID, 1, base)
	startOrder(t, s, paying, base)
	f1 := hold(t, s, f.ID, 2, base)
	late := base.Add(10 * time.Minute)

	if n, err := s.ReleaseExpired(ctx, e.ID, base, 10); err != nil || n != 0 {
		t.Fatalf("ReleaseExpired before any expiry = %d, %v; want 0", n, err)
	}
	if n, err := s.ReleaseExpired(ctx, e.ID, late, 1); err != nil || n != 1 {
		t.Fatalf("ReleaseExpired limit 1 = %d, %v; want 1", n, err)
	}
	if got, _ := s.GetHold(ctx, e1.ID); got.State != checkout.HoldReleased || got.Reason != "expired" {
		t.Errorf("the first hold to expire = %+v, want released (expired)", got)
	}
	if got, _ := s.GetHold(ctx, f1.ID); got.State != checkout.HoldHeld {
		t.Errorf("a hold of another event = %+v, want still held", got)
	}
	if n, err := s.ReleaseExpired(ctx, "", late, 100); err != nil || n != 2 {
		t.Fatalf("ReleaseExpired of every event = %d, %v; want 2", n, err)
	}
	if n, err := s.ReleaseExpired(ctx, "", late, 100); err != nil || n != 0 {
		t.Fatalf("ReleaseExpired again = %d, %v; want 0", n, err)
	}
	for _, h := range []checkout.Hold{e2, f1} {
		if got, _ := s.GetHold(ctx, h.ID); got.State != checkout.HoldReleased || got.Reason != "expired" {
			t.Errorf("hold %s = %+v, want released (expired)", h.ID, got)
		}
	}
	if got, _ := s.GetHold(ctx, paying.ID); got.State != checkout.HoldPaying {
		t.Errorf("the hold being paid for = %+v, want still paying (its payment may yet be approved)", got)
	}
	if ev := event(t, s, e.ID); ev.SeatsLeft != 3 || ev.Held() != 1 {
		t.Errorf("event after the sweep = %+v, want 3 left and the paying seat held", ev)
	}
	if ev := event(t, s, f.ID); ev.SeatsLeft != 2 {
		t.Errorf("other event after the sweep = %+v, want every seat back", ev)
	}
	if _, err := s.StartOrder(ctx, orderOf(e1, base), base); !isState(err, checkout.HoldReleased) {
		t.Errorf("StartOrder of a released hold = %v, want a StateError released", err)
	}
}

// testConcurrentRelease: sweepers racing over the same expired holds
// release each once and give each seat back once.
func testConcurrentRelease(t *testing.T, s checkout.Store) {
	ctx := context.Background()
	base := longAgo()
	e := createEvent(t, s, 12)
	for range 6 {
		hold(t, s, e.ID, 2, base)
	}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		released int
	)
	for range 4 {
		wg.Go(func() {
			n, err := s.ReleaseExpired(ctx, e.ID, base.Add(time.Hour), 100)
			if err != nil {
				t.Errorf("ReleaseExpired: %v", err)
			}
			mu.Lock()
			released += n
			mu.Unlock()
		})
	}
	wg.Wait()
	if ev := event(t, s, e.ID); released != 6 || ev.SeatsLeft != 12 {
		t.Fatalf("sweepers released %d holds (want 6); event %+v, want 12 left", released, ev)
	}
}

func testClosed(t *testing.T, s checkout.Store) {
	ctx := context.Background()
	e := createEvent(t, s, 1)
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
	_, errEvent := s.Event(ctx, e.ID)
	_, errHold := s.Hold(ctx, newHold(e.ID, time.Now()), 1)
	_, errPending := s.PendingOrders(ctx, time.Now(), 1)
	for name, err := range map[string]error{"Ping": s.Ping(ctx), "Event": errEvent, "Hold": errHold, "PendingOrders": errPending} {
		if stampede.ClassOf(err) != stampede.Unavailable {
			t.Errorf("%s on a closed store = %v, want unavailable", name, err)
		}
	}
}
