package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	dispatchjs "github.com/stampede-lab/stampede/dispatch/natskeyed"
	"github.com/stampede-lab/stampede/fulfilment/worker"
	"github.com/stampede-lab/stampede/internal/httpapi"
	"github.com/stampede-lab/stampede/pay/natspub"
)

// TestAdminListsParkedKeys parks one key on a real consumer (embedded
// nats-server) and reads GET /v1/parked: without the token or with a
// wrong one 401, past AdminFailures wrong ones 429 even with the right
// token, and with it the parked key, its reason and its events.
func TestAdminListsParkedKeys(t *testing.T) {
	ctx := context.Background()
	emb, err := natspub.StartEmbedded(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Close()
	nc, err := nats.Connect(emb.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := natsjs.New(nc)
	cfg := dispatchjs.DefaultConfig()
	cfg.Stream, cfg.Subject, cfg.Durable, cfg.Partitions = "ADMINTEST", "admintest", "w", 1
	cfg.MaxAttempts, cfg.NakDelay, cfg.MaxNakDelay = 2, 10*time.Millisecond, 20*time.Millisecond
	cfg.Logger = slog.New(slog.DiscardHandler)
	if _, err := js.CreateStream(ctx, dispatchjs.StreamConfig(cfg.Stream, cfg.Subject, cfg.Partitions)); err != nil {
		t.Fatal(err)
	}
	c, err := dispatchjs.New(ctx, js, cfg, func(ctx context.Context, e dispatchjs.Event) error {
		if e.Key == "pay-bad" {
			return errors.New("the ticket service refused it")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, k := range []string{"pay-bad", "pay-ok", "pay-bad"} {
		if _, err := js.Publish(ctx, "admintest."+k, []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	pk, err := dispatchjs.OpenParking(ctx, js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	api, err := httpapi.New(httpapi.Config{Name: "worker", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	const token = "worker-admin-token-0123"
	worker.RegisterAdmin(api, pk, token)
	srv := httptest.NewServer(api)
	defer srv.Close()
	get := func(auth string) (int, worker.Parked) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1/parked", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var p worker.Parked
		if resp.StatusCode == http.StatusOK {
			if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
				t.Fatal(err)
			}
		}
		return resp.StatusCode, p
	}
	var p worker.Parked
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var code int
		if code, p = get("Bearer " + token); code != http.StatusOK {
			t.Fatalf("GET /v1/parked with the token = %d", code)
		}
		if p.Events >= 2 || time.Now().After(deadline) {
			break
		}
	}
	if len(p.Keys) != 1 || p.Keys[0].Key != "pay-bad" || p.Keys[0].Events != 2 || p.Events != 2 ||
		p.Keys[0].Reason != "the ticket service refused it" || p.Keys[0].Attempts != 2 {
		t.Fatalf("parked = %+v, want pay-bad with its 2 events, 2 attempts and the handler's reason", p)
	}
	for _, auth := range []string{"", "Bearer nope", "Basic " + token} {
		if code, _ := get(auth); code != http.StatusUnauthorized {
			t.Errorf("GET /v1/parked with %q = %d, want 401", auth, code)
		}
	}
	for range worker.AdminFailures {
		get("Bearer wrong")
	}
	if code, _ := get("Bearer " + token); code != http.StatusTooManyRequests {
		t.Errorf("the right token after %d wrong ones = %d, want 429", worker.AdminFailures, code)
	}
}
