package waitroom

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"
)

// viewStore is a Store that answers what a Service's refresh, admitters
// and views ask and counts the views read; any other call panics (the
// nil embedded Store).
type viewStore struct {
	Store
	mu    sync.Mutex
	views map[string]int
}

func (s *viewStore) Rooms(context.Context) ([]string, error) { return []string{"a", "b"}, nil }
func (s *viewStore) Config(context.Context, string) (RoomConfig, error) {
	cfg := DefaultRoomConfig()
	cfg.AdmitInterval = time.Minute
	return cfg, nil
}
func (s *viewStore) Stats(context.Context, string) (RoomStats, error) { return RoomStats{}, nil }
func (s *viewStore) Admit(context.Context, string) (AdmitResult, error) {
	return AdmitResult{}, nil
}
func (s *viewStore) NextExpiry(context.Context, string) (time.Time, bool, error) {
	return time.Time{}, false, nil
}
func (s *viewStore) View(_ context.Context, room string) (RoomView, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.views[room]++
	return RoomView{Phase: PhaseOpen, Waiting: 1000, AdmittedTotal: int64(s.views[room]), Ordered: true}, nil
}

// TestViewRefreshedPerRoom: an instance reads each room's view once per
// ViewRefresh, one store call per room, and serves the latest.
func TestViewRefreshedPerRoom(t *testing.T) {
	store := &viewStore{views: map[string]int{}}
	cfg := DefaultServiceConfig()
	cfg.ViewRefresh, cfg.RoomRefresh, cfg.RateWindow = 50*time.Millisecond, time.Hour, time.Hour
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	svc, err := NewService(store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		svc.Run(ctx)
	}()
	time.Sleep(520 * time.Millisecond)
	v, fresh := svc.View("a")
	cancel()
	<-done
	store.mu.Lock()
	defer store.mu.Unlock()
	for _, room := range []string{"a", "b"} {
		// 10 refreshes in 500 ms, and the first at once; a loaded
		// machine may miss a few ticks.
		if n := store.views[room]; n < 5 || n > 12 {
			t.Errorf("room %s: %d views read in 520 ms at a 50 ms refresh, want about 11", room, n)
		}
	}
	if !fresh || v.AdmittedTotal < 5 {
		t.Errorf("View(a) = %+v, %v; want the latest view, fresh", v, fresh)
	}
}

// TestPollAfterGrowsWithDistance: the suggested poll interval grows with
// the distance to the head of the line, from MinPoll near it to MaxPoll
// far back, measured rate or not.
func TestPollAfterGrowsWithDistance(t *testing.T) {
	cfg := DefaultServiceConfig()
	svc, err := NewService(&viewStore{views: map[string]int{}}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, rate := range []float64{0, 50} {
		if rate > 0 {
			r := svc.rate("r")
			now := time.Now()
			r.sample(now.Add(-10*time.Second), 0, 0)
			r.sample(now, int64(rate*10), int64(rate*10))
		}
		prev := time.Duration(0)
		for _, pos := range []int64{0, 10, 100, 1_000, 10_000, 100_000, 1_000_000} {
			_, poll := svc.Estimate(Ticket{Room: "r", State: StateWaiting, Position: pos})
			if poll < prev || poll < cfg.MinPoll || poll > cfg.MaxPoll {
				t.Errorf("rate %v, position %d: poll after %v (previous %v), want growing within [%v, %v]", rate, pos, poll, prev, cfg.MinPoll, cfg.MaxPoll)
			}
			prev = poll
		}
		if _, near := svc.Estimate(Ticket{Room: "r", State: StateWaiting, Position: 1}); near != cfg.MinPoll {
			t.Errorf("rate %v: near the head poll after %v, want %v", rate, near, cfg.MinPoll)
		}
		if prev != cfg.MaxPoll {
			t.Errorf("rate %v: a million back polls after %v, want %v", rate, prev, cfg.MaxPoll)
		}
	}
}
