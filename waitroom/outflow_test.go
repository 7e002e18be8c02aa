package waitroom

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestOutflowControllerAIMD feeds the controller constructed intervals: a
// well checkout keeps the room's limit; a high p99, failures or UNKNOWN
// share halve the rate down to the floor, never below; recovery adds a
// tenth of the limit an interval back up to the limit, never above; too
// few samples say nothing.
func TestOutflowControllerAIMD(t *testing.T) {
	c, err := NewOutflowController(DefaultOutflowConfig())
	if err != nil {
		t.Fatal(err)
	}
	well := Health{Requests: 100, P99: 200 * time.Millisecond, Payments: 50}
	limit := 600
	step := func(h Health, want int, wantWhy string) {
		t.Helper()
		got, why, _ := c.Step(h, limit)
		if got != want || !strings.Contains(why, wantWhy) {
			t.Fatalf("Step(%+v) = %d %q, want %d and a reason with %q", h, got, why, want, wantWhy)
		}
	}
	step(well, 600, "limit")
	step(Health{Requests: 100, P99: 3 * time.Second}, 300, "p99 3s over 1s")
	step(Health{Requests: 100, Failures: 10, P99: time.Millisecond}, 150, "failures 10%")
	step(Health{Requests: 5, Payments: 20, Unknown: 5}, 75, "UNKNOWN payments 25%")
	step(Health{Payments: 20, Unknown: 20}, 60, "UNKNOWN") // the floor: a tenth of 600
	step(Health{Payments: 20, Unknown: 20}, 60, "UNKNOWN")
	step(Health{Requests: 3, P99: time.Hour, Payments: 2, Unknown: 2}, 120, "recovering") // too few samples: no evidence
	for want := 180; want <= 600; want += 60 {
		step(well, want, "")
	}
	step(well, 600, "at the room's limit")
	// A lower limit takes effect at once.
	limit = 100
	step(well, 100, "")
	if _, _, changed := c.Step(well, 100); changed {
		t.Error("a second step at the same rate reports a change")
	}
}

// TestOutflowConfigValidate names every bad field at once.
func TestOutflowConfigValidate(t *testing.T) {
	err := OutflowConfig{}.Validate()
	for _, f := range []string{"outflow_p99", "outflow_max_failures", "outflow_max_unknown", "outflow_min_samples", "outflow_decrease", "outflow_increase", "outflow_floor"} {
		if err == nil || !strings.Contains(err.Error(), f) {
			t.Errorf("Validate of the zero config = %v, want it to name %s", err, f)
		}
	}
	if err := DefaultOutflowConfig().Validate(); err != nil {
		t.Errorf("the default config: %v", err)
	}
}

// outflowStore is a Store that records the adaptive rates set.
type outflowStore struct {
	Store
	set []int
}

func (s *outflowStore) SetOutflow(_ context.Context, _ string, n int, _ string) error {
	s.set = append(s.set, n)
	return nil
}

func (s *outflowStore) Outflow(context.Context, string) (int, string, error) { return 0, "", nil }

// TestServiceSteersOutflow: the signals a gate and pay's metrics report
// reach the controller through the service's window, and the rate goes to
// the store every step (a change also to OnOutflow).
func TestServiceSteersOutflow(t *testing.T) {
	st := &outflowStore{}
	cfg := DefaultServiceConfig()
	oc := DefaultOutflowConfig()
	cfg.Outflow, cfg.Logger = &oc, slog.New(slog.NewTextHandler(io.Discard, nil))
	var hooked []int
	cfg.OnOutflow = func(_ string, n int, _ string) { hooked = append(hooked, n) }
	svc, err := NewService(st, cfg)
	if err != nil {
		t.Fatal(err)
	}
	room := RoomConfig{MaxAdmissionsPerMinute: 600}
	svc.ObservePayments("r", 100, 0) // the base
	for range 30 {
		svc.ObserveUpstream("r", 2*time.Second, false)
	}
	svc.ObservePayments("r", 110, 1)
	svc.steerOutflow(context.Background(), "r", room)
	svc.ObservePayments("r", 120, 9) // 8 of 10 new payments UNKNOWN
	svc.steerOutflow(context.Background(), "r", room)
	svc.ObservePayments("r", 5, 0) // pay restarted: counting starts again
	svc.steerOutflow(context.Background(), "r", room)
	if want := []int{300, 150, 210}; !equalInts(st.set, want) || !equalInts(hooked, want) {
		t.Errorf("rates set %v, hooked %v; want %v", st.set, hooked, want)
	}
	svc.steerOutflow(context.Background(), "r", RoomConfig{}) // no limit: left alone
	if len(st.set) != 3 {
		t.Errorf("a room without a limit got a rate: %v", st.set)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
