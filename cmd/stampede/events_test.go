package main

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	dispatchjs "github.com/stampede-lab/stampede/dispatch/natskeyed"
)

// TestEventsParkedAndRedrive runs a keyed consumer whose handler fails
// every event of key "bad" until healed, then the command line: events
// parked lists the key with its three events, events redrive --key waits
// until they ran, in order, once each, and the key is no longer listed.
func TestEventsParkedAndRedrive(t *testing.T) {
	_, nc := startNATS(t, t.TempDir())
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cfg := dispatchjs.DefaultConfig()
	cfg.Stream, cfg.Subject, cfg.Durable, cfg.Partitions = "EVT", "evt", "w", 2
	cfg.MaxAttempts, cfg.NakDelay, cfg.MaxNakDelay = 2, 20*time.Millisecond, 100*time.Millisecond
	cfg.PinnedTTL, cfg.PullExpiry = 2*time.Second, time.Second
	// Not slog.Default: each command line run below points it at its own
	// buffer.
	cfg.Logger = slog.New(slog.DiscardHandler)
	if _, err := js.CreateStream(ctx, dispatchjs.StreamConfig(cfg.Stream, cfg.Subject, cfg.Partitions)); err != nil {
		t.Fatal(err)
	}
	var healed atomic.Bool
	var mu sync.Mutex
	var order []string
	good := make(chan struct{}, 100)
	c, err := dispatchjs.New(ctx, js, cfg, func(ctx context.Context, e dispatchjs.Event) error {
		if e.Key == "bad" && !healed.Load() {
			return errors.New("fulfilment refused it")
		}
		mu.Lock()
		order = append(order, e.Key+":"+string(e.Data))
		mu.Unlock()
		good <- struct{}{}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i, k := range []string{"bad", "ok", "bad", "ok", "bad"} {
		if _, err := js.Publish(ctx, "evt."+k, []byte{byte('0' + i)}); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		select {
		case <-good:
		case <-time.After(10 * time.Second):
			t.Fatal("the other key's events did not run")
		}
	}
	common := []string{"--nats", nc.ConnectedUrl(), "--stream", "EVT", "--durable", "w"}
	var listed []dispatchjs.ParkedKey
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, _, err := execute(t, append([]string{"events", "parked", "--json"}, common...)...)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(out), &listed); err != nil {
			t.Fatalf("events parked --json: %v\n%s", err, out)
		}
		if len(listed) == 1 && listed[0].Events == 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(listed) != 1 || listed[0].Key != "bad" || listed[0].Events != 3 || listed[0].Attempts != 2 || listed[0].Reason != "fulfilment refused it" {
		t.Fatalf("events parked: %+v; want key bad with 3 events after 2 attempts", listed)
	}
	out, _, err := execute(t, append([]string{"events", "parked"}, common...)...)
	if err != nil || !strings.Contains(out, "bad") || !strings.Contains(out, "fulfilment refused it") {
		t.Errorf("events parked (table): %v\n%s", err, out)
	}
	if _, _, err := execute(t, append([]string{"events", "redrive", "--key", "nope"}, common...)...); err == nil || !strings.Contains(err.Error(), "not parked") {
		t.Errorf("redrive of a key not parked: %v", err)
	}
	if _, _, err := execute(t, append([]string{"events", "redrive"}, common...)...); err == nil {
		t.Error("redrive without --key or --all: no error")
	}
	healed.Store(true)
	if _, errOut, err := execute(t, append([]string{"events", "redrive", "--key", "bad", "--wait", "10s"}, common...)...); err != nil {
		t.Fatalf("events redrive: %v\n%s", err, errOut)
	}
	out, _, _ = execute(t, append([]string{"events", "parked", "--json"}, common...)...)
	if strings.TrimSpace(out) != "[]" {
		t.Errorf("events parked after the redrive: %s", out)
	}
	mu.Lock()
	defer mu.Unlock()
	want := "ok:1 ok:3 bad:0 bad:2 bad:4"
	if got := strings.Join(order, " "); got != want {
		t.Errorf("handled %s, want %s", got, want)
	}
}
