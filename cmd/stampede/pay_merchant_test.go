package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	instapi "github.com/stampede-lab/stampede/institution/api"
	"github.com/stampede-lab/stampede/pay"
)

// TestPayMerchantCommands: add prints the key once, list shows the
// merchant, webhook prints the signing secret and refuses plain http off
// loopback, revoke revokes, and bad arguments name themselves.
func TestPayMerchantCommands(t *testing.T) {
	t.Setenv(envPostgres, "")
	db := filepath.Join(t.TempDir(), "pay.db")
	id, key := addMerchantCLI(t, db)
	if !strings.HasPrefix(key, "sk_") {
		t.Errorf("api key %q, want an sk_ key", key)
	}
	out, _, err := execute(t, "pay", "merchant", "list", "--sqlite", db)
	if err != nil || !strings.Contains(out, id) || strings.Contains(out, key) {
		t.Fatalf("list = %q, %v; want the merchant, never its key", out, err)
	}
	if _, _, err := execute(t, "pay", "merchant", "webhook", id, "http://example.com/hook", "--sqlite", db); err == nil || !strings.Contains(err.Error(), "URL") {
		t.Errorf("webhook to plain http off loopback = %v, want an error naming URL", err)
	}
	out, _, err = execute(t, "pay", "merchant", "webhook", id, "https://example.com/hook", "--sqlite", db)
	var hook struct {
		Secret string `json:"signing_secret"`
	}
	if err != nil || json.Unmarshal([]byte(out), &hook) != nil || !strings.HasPrefix(hook.Secret, "whsec_") {
		t.Fatalf("webhook = %q, %v; want the signing secret", out, err)
	}
	if _, _, err := execute(t, "pay", "merchant", "add", "bad\x00name", "--sqlite", db); err == nil || !strings.Contains(err.Error(), "NAME") {
		t.Errorf("add with a NUL = %v, want an error naming NAME", err)
	}
	if _, _, err := execute(t, "pay", "merchant", "revoke", pay.NewID(), "--sqlite", db); err == nil {
		t.Error("revoking an unknown merchant succeeded")
	}
	if out, _, err := execute(t, "pay", "merchant", "revoke", id, "--sqlite", db); err != nil || !strings.Contains(out, "revoked") {
		t.Fatalf("revoke = %q, %v", out, err)
	}
	out, _, err = execute(t, "pay", "merchant", "list", "--json", "--sqlite", db)
	if err != nil || !strings.Contains(out, `"revoked_at"`) {
		t.Errorf("list --json after revoke = %q, %v; want revoked_at", out, err)
	}
	if _, _, err := execute(t, "pay", "webhooks", "--resend", pay.NewID(), "--sqlite", db); err == nil || !strings.Contains(err.Error(), "--resend") {
		t.Errorf("--resend of an unknown delivery = %v, want an error naming --resend", err)
	}
}

// TestServePayDeliversWebhooks: serve pay POSTs a merchant's payment
// events to its webhook, signed, in order; pay webhooks lists them
// delivered.
func TestServePayDeliversWebhooks(t *testing.T) {
	icfg := instapi.DefaultConfig()
	icfg.AdminToken = "institution-admin-token-for-tests"
	isrv, err := instapi.New(icfg)
	if err != nil {
		t.Fatal(err)
	}
	its := httptest.NewServer(isrv)
	t.Cleanup(func() { isrv.Close(); its.Close() })

	var (
		mu     sync.Mutex
		events []pay.Event
		secret string
	)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		if err := pay.VerifyWebhook(secret, r.Header.Get(pay.SignatureHeader), body, time.Now(), 5*time.Minute); err != nil {
			t.Errorf("webhook signature: %v", err)
		}
		var b pay.WebhookBody
		var ev pay.Event
		if json.Unmarshal(body, &b) != nil || json.Unmarshal(b.Data, &ev) != nil {
			t.Errorf("webhook body %s", body)
		}
		events = append(events, ev)
	}))
	t.Cleanup(recv.Close)

	db := filepath.Join(t.TempDir(), "pay.db")
	id, key := addMerchantCLI(t, db)
	out, _, err := execute(t, "pay", "merchant", "webhook", id, recv.URL+"/hook", "--sqlite", db)
	var hook struct {
		Secret string `json:"signing_secret"`
	}
	if err != nil || json.Unmarshal([]byte(out), &hook) != nil {
		t.Fatalf("webhook = %q, %v", out, err)
	}
	mu.Lock()
	secret = hook.Secret
	mu.Unlock()
	addr, _ := servePayOn(t, db, its.URL)

	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/payments", strings.NewReader(`{"order_id":"hooked-1","amount":1000,"currency":"KRW"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "hook-key-1")
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST = %d, want 201", resp.StatusCode)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for {
		mu.Lock()
		n := len(events)
		mu.Unlock()
		if n >= 2 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the webhook got %d events in 15s, want 2", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	mu.Lock()
	if events[0].Seq != 1 || events[0].Type != pay.EventCreated || events[1].Seq != 2 || events[1].Status != pay.StatusApproved {
		t.Errorf("events = %+v, want created then APPROVED", events)
	}
	mu.Unlock()
	out, _, err = execute(t, "pay", "webhooks", "--json", "--sqlite", db)
	if err != nil || strings.Count(out, `"delivered"`) != 2 {
		t.Errorf("pay webhooks = %s, %v; want 2 delivered", out, err)
	}
}
