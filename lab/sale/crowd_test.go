package sale

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
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

// TestBuyerSentBackJoinsAgain: a gate that answers a hold with 503 and
// the room to join (the admission is gone) sends an open room's buyer
// back to the queue with a new join, who then buys, its join time its
// first join's; in a closed room the buyer is told it is sold out and
// does not join again; a buyer sent back every time gives up after
// maxRejoins joins again.
func TestBuyerSentBackJoinsAgain(t *testing.T) {
	for _, tc := range []struct {
		name          string
		closed        bool
		sendBack      int64 // holds answered 503 "join" before one succeeds
		joins         int64
		end           string
		rejoins       int64
		keysDifferent bool
	}{
		{"open room", false, 1, 2, endTicket, 1, true},
		{"closed room", true, 1, 1, endSoldOut, 0, false},
		{"sent back every time", false, 100, maxRejoins + 1, endFailed, maxRejoins + 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var joins, holds atomic.Int64
			var keys sync.Map
			c := &crowd{hc: http.DefaultClient, opened: time.Now()}
			gate := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch {
				case r.Method == http.MethodPost && r.URL.Path == "/v1/rooms/r/tickets":
					n := joins.Add(1)
					keys.Store(r.Header.Get("Idempotency-Key"), true)
					w.WriteHeader(http.StatusCreated)
					fmt.Fprintf(w, `{"user_id":"u%d","state":"admitted","ticket_token":"t%d","admission_token":"a%d"}`, n, n, n)
				case r.Method == http.MethodPost && r.URL.Path == "/v1/events/e/holds":
					if holds.Add(1) <= tc.sendBack {
						// The room closes sold out as the admission goes.
						c.closed.Store(tc.closed)
						w.Header().Set("Content-Type", "application/problem+json")
						w.WriteHeader(http.StatusServiceUnavailable)
						fmt.Fprint(w, `{"code":"unavailable","room":"r","join":"/v1/rooms/r/tickets"}`)
						return
					}
					w.WriteHeader(http.StatusCreated)
					fmt.Fprint(w, `{"id":"h","state":"held"}`)
				case r.Method == http.MethodPost && r.URL.Path == "/v1/holds/h/purchase":
					fmt.Fprint(w, `{"id":"o","status":"paid","payment_id":"p","payment_status":"APPROVED"}`)
				default:
					w.WriteHeader(http.StatusNoContent)
				}
			}))
			defer gate.Close()
			c.r = &rig{gateURLs: []string{gate.URL}, room: "r", event: "e"}
			b := &buyer{ip: "10.0.0.1"}
			before := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			c.run(ctx, b)
			n := 0
			keys.Range(func(any, any) bool { n++; return true })
			if joins.Load() != tc.joins || b.end != tc.end || c.rejoins.Load() != tc.rejoins {
				t.Errorf("joins %d, end %q (%s), rejoins %d; want %d, %q, %d", joins.Load(), b.end, b.why, c.rejoins.Load(), tc.joins, tc.end, tc.rejoins)
			}
			if tc.keysDifferent && int64(n) != tc.joins {
				t.Errorf("%d Idempotency-Keys for %d joins: each join again must be a new join", n, tc.joins)
			}
			if b.joinedAt.Sub(before) > time.Second {
				t.Errorf("join time %s after the start: want the first join's", b.joinedAt.Sub(before))
			}
		})
	}
}

// TestBuyerWithoutAdmissionStopsWatchingItsOrder: a gate that answers the
// order's polls 503 with the room to join and a Retry-After of 300 s (the
// admission is gone) ends the buyer at once, its order left to the final
// accounting, instead of sleeping past its patience; the same answer to
// the purchase fails the buyer.
func TestBuyerWithoutAdmissionStopsWatchingItsOrder(t *testing.T) {
	for _, tc := range []struct {
		name     string
		purchase int
		end      string
	}{
		{"order polls", http.StatusAccepted, endOrderPending},
		{"purchase", http.StatusServiceUnavailable, endFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gone := func(w http.ResponseWriter) {
				w.Header().Set("Retry-After", "300")
				w.WriteHeader(http.StatusServiceUnavailable)
				fmt.Fprint(w, `{"code":"unavailable","room":"r","join":"/v1/rooms/r/tickets"}`)
			}
			gate := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch {
				case r.Method == http.MethodPost && r.URL.Path == "/v1/rooms/r/tickets":
					w.WriteHeader(http.StatusCreated)
					fmt.Fprint(w, `{"user_id":"u","state":"admitted","ticket_token":"t","admission_token":"a"}`)
				case r.Method == http.MethodPost && r.URL.Path == "/v1/events/e/holds":
					w.WriteHeader(http.StatusCreated)
					fmt.Fprint(w, `{"id":"h","state":"held"}`)
				case r.Method == http.MethodPost && r.URL.Path == "/v1/holds/h/purchase":
					if tc.purchase != http.StatusAccepted {
						gone(w)
						return
					}
					w.WriteHeader(http.StatusAccepted)
					fmt.Fprint(w, `{"id":"o","status":"pending","payment_id":"p","payment_status":"UNKNOWN"}`)
				case r.URL.Path == "/v1/orders/o":
					gone(w)
				default:
					w.WriteHeader(http.StatusNoContent)
				}
			}))
			defer gate.Close()
			c := &crowd{r: &rig{gateURLs: []string{gate.URL}, room: "r", event: "e"}, hc: gate.Client(), opened: time.Now()}
			b := &buyer{ip: "10.0.0.1"}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			start := time.Now()
			c.run(ctx, b)
			if b.end != tc.end || time.Since(start) > 5*time.Second {
				t.Errorf("end %q (%s) after %s; want %q within 5 s", b.end, b.why, time.Since(start).Round(time.Millisecond), tc.end)
			}
		})
	}
}
