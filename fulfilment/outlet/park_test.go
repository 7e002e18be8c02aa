package outlet_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dispatchjs "github.com/stampede-lab/stampede/dispatch/natskeyed"
	"github.com/stampede-lab/stampede/fulfilment/outlet"
)

// TestRefusalParksTheKeyOthersFlow: the endpoint refuses one payment's
// second event with 422. That event is sent once and parked with the
// payment's later events, which are not sent; every other payment is
// delivered in full, in order. Once the endpoint accepts it, a redrive
// delivers the parked events in order.
//
// It runs on an embedded nats-server, and on the real one named by
// STAMPEDE_NATS_URL when set.
func TestRefusalParksTheKeyOthersFlow(t *testing.T) {
	t.Run("embedded", func(t *testing.T) { refusalParks(t, embedded(t)) })
	if url := os.Getenv("STAMPEDE_NATS_URL"); url != "" {
		t.Run("real", func(t *testing.T) { refusalParks(t, url) })
	}
}

func refusalParks(t *testing.T, url string) {
	var (
		mu     sync.Mutex
		got    = map[string][]string{} // payment -> event ids, in the order accepted
		sent   = map[string]int{}      // event id -> requests
		refuse atomic.Bool
	)
	refuse.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(outlet.HeaderIdempotencyKey)
		mu.Lock()
		defer mu.Unlock()
		sent[id]++
		if id == "pay_bad-2" && refuse.Load() {
			http.Error(w, `{"error":"unknown order"}`, http.StatusUnprocessableEntity)
			return
		}
		p := id[:len(id)-2]
		got[p] = append(got[p], id)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()

	s := newStreamOn(t, url, 2)
	s.cfg.MaxAttempts = 5
	o, err := outlet.New(testConfig(srv.URL, nil))
	if err != nil {
		t.Fatal(err)
	}
	c := s.consume(o.Deliver)
	payments := []string{"pay_bad", "pay_a", "pay_b", "pay_c", "pay_d"}
	s.publish(payments, 1, 4)
	want := func(p string, n int) []string {
		var ids []string
		for i := 1; i <= n; i++ {
			ids = append(ids, fmt.Sprintf("%s-%d", p, i))
		}
		return ids
	}
	waitUntil(t, 10*time.Second, "other payments delivered and the key parked", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, p := range payments[1:] {
			if len(got[p]) < 4 {
				return false
			}
		}
		return c.Stats().Parked >= 3
	})
	pk, err := dispatchjs.OpenParking(context.Background(), s.js, s.cfg)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := pk.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if len(keys) != 1 || keys[0].Key != "pay_bad" || keys[0].Events != 3 || keys[0].FirstID != "pay_bad-2" {
		t.Errorf("parked %+v, want pay_bad with 3 events from pay_bad-2", keys)
	}
	if sent["pay_bad-2"] != 1 || sent["pay_bad-3"] != 0 || sent["pay_bad-4"] != 0 {
		t.Errorf("requests %v: want pay_bad-2 sent once (a 422 is not retried) and its later events not at all", sent)
	}
	for _, p := range payments[1:] {
		if !slices.Equal(got[p], want(p, 4)) {
			t.Errorf("%s delivered %v, want %v", p, got[p], want(p, 4))
		}
	}
	mu.Unlock()

	refuse.Store(false) // the receiver's team fixed it
	if err := pk.Redrive(context.Background(), "pay_bad"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if left, err := pk.Wait(ctx, []string{"pay_bad"}); err != nil || len(left) > 0 {
		t.Fatalf("redrive: left %v, %v", left, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(got["pay_bad"], want("pay_bad", 4)) {
		t.Errorf("pay_bad delivered %v after the redrive, want %v", got["pay_bad"], want("pay_bad", 4))
	}
}
