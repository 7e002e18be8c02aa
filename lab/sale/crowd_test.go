package sale

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// TestBotHonoursRetryAfter: a bot set to 50 joins a second against a gate
// that answers every join 429 with Retry-After: 1 sends one join a second
// at most, not fifty; against a gate that answers 201 it keeps its rate.
func TestBotHonoursRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		status   int
		min, max int64
	}{
		{http.StatusTooManyRequests, 1, 3},
		{http.StatusServiceUnavailable, 1, 3},
		{http.StatusCreated, 40, 200},
	} {
		var joins atomic.Int64
		gate := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			joins.Add(1)
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(tc.status)
		}))
		c := &crowd{r: &rig{gateURLs: []string{gate.URL}, room: "r"}, cfg: Config{BotRate: 50}, hc: gate.Client()}
		ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
		c.bot(ctx, 0)
		cancel()
		gate.Close()
		if n := joins.Load(); n < tc.min || n > tc.max {
			t.Errorf("answered %d: %d joins in 1.5 s at 50/s, want %d to %d", tc.status, n, tc.min, tc.max)
		}
	}
}

// TestRetryWait: the wait grows with the failures, and is never shorter
// than Retry-After (seconds or an HTTP date).
func TestRetryWait(t *testing.T) {
	seq := backoff.Start()
	var last time.Duration
	for range 6 {
		last = retryWait(seq, answer{header: http.Header{}}, nil)
	}
	if last < 4*time.Second {
		t.Errorf("the 6th wait = %s, want at least 4 s (250 ms doubling, equal jitter)", last)
	}
	h := http.Header{}
	h.Set("Retry-After", "7")
	if d := retryWait(backoff.Start(), answer{header: h}, nil); d < 7*time.Second {
		t.Errorf("wait with Retry-After: 7 = %s, want at least 7 s", d)
	}
	h.Set("Retry-After", time.Now().Add(5*time.Second).UTC().Format(http.TimeFormat))
	if d := retryWait(backoff.Start(), answer{header: h}, nil); d < 3*time.Second {
		t.Errorf("wait with Retry-After in 5 s as a date = %s, want about 4-5 s", d)
	}
}

// TestUnfinishedCountsHoldingBuyersByAnswer: the progress line counts the
// buyers still trying to hold a seat by their latest answer, so that a
// tail of buyers retrying says why.
func TestUnfinishedCountsHoldingBuyersByAnswer(t *testing.T) {
	admitted := time.Now()
	c := &crowd{buyers: []*buyer{
		{user: "a", admittedAt: admitted, holdAnswer: "503 unavailable"},
		{user: "b", admittedAt: admitted, holdAnswer: "503 unavailable"},
		{user: "c", admittedAt: admitted, holdAnswer: "409 sold_out"},
		{user: "d", admittedAt: admitted},
		{user: "e", admittedAt: admitted, holdID: "h"},
		{user: "f", end: endTicket},
		{},
	}}
	got := c.unfinished()
	want := "joining 1, waiting 0, holding 4, paying 1 (holding, latest answer: 409 sold_out ×1, 503 unavailable ×2, none yet ×1)"
	if got != want {
		t.Fatalf("unfinished() = %q\nwant          %q", got, want)
	}
}
