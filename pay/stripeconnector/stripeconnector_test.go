package stripeconnector_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/internal/testenv"
	"github.com/stampede-lab/stampede/pay"
	"github.com/stampede-lab/stampede/pay/stripeconnector"
)

// newConnector returns a connector on url with a test key.
func newConnector(t *testing.T, url string) *stripeconnector.Connector {
	t.Helper()
	cfg := stripeconnector.DefaultConfig()
	cfg.SecretKey, cfg.URL = "sk_test_123", url
	c, err := stripeconnector.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestAgainstStripeMock: every request the connector sends (approval,
// inquiry, refund, refund inquiry) is one stripe-mock, which checks each
// against Stripe's OpenAPI description, accepts.
func TestAgainstStripeMock(t *testing.T) {
	c := newConnector(t, testenv.URL(t, testenv.StripeMockURL))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	key := pay.NewID()
	if _, err := c.Approve(ctx, pay.ApprovalRequest{ExternalKey: key, Amount: 5000, Currency: "USD"}); err != nil {
		t.Fatalf("Approve: %v", err)
	}
	if _, err := c.Inquire(ctx, key); err != nil {
		t.Fatalf("Inquire: %v", err)
	}
	refund := pay.NewID()
	if _, err := c.Refund(ctx, pay.RefundRequest{ExternalKey: refund, PaymentKey: key, Amount: 1000, Currency: "USD"}); err != nil {
		t.Fatalf("Refund: %v", err)
	}
	if _, err := c.InquireRefund(ctx, refund, key); err != nil {
		t.Fatalf("InquireRefund: %v", err)
	}
	if caps := c.Capabilities(); !caps.IdempotentApproval || !caps.Refund || !caps.PartialRefund {
		t.Fatalf("capabilities %s", caps)
	}
}

// TestLostApprovalIsSentAgainWithTheSameKey: Stripe keeps an
// Idempotency-Key, so an approval answered 500 is sent again under the
// same key (and the metadata names our key); a card error is a decline,
// an invalid request a rejection, and a second 500 an unknown outcome.
func TestLostApprovalIsSentAgainWithTheSameKey(t *testing.T) {
	var (
		mu     sync.Mutex
		keys   []string
		bodies []string
		answer = []int{500, 200}
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		bodies = append(bodies, string(body))
		code := 500
		if len(answer) > 0 {
			code, answer = answer[0], answer[1:]
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch code {
		case 200:
			_, _ = io.WriteString(w, `{"id":"pi_1","object":"payment_intent","status":"succeeded","amount":5000,"currency":"usd"}`)
		case 402:
			w.WriteHeader(402)
			_, _ = io.WriteString(w, `{"error":{"type":"card_error","code":"card_declined","message":"Your card was declined."}}`)
		case 400:
			w.WriteHeader(400)
			_, _ = io.WriteString(w, `{"error":{"type":"invalid_request_error","message":"bad"}}`)
		default:
			w.WriteHeader(500)
			_, _ = io.WriteString(w, `{"error":{"type":"api_error","message":"boom"}}`)
		}
	}))
	defer srv.Close()
	c := newConnector(t, srv.URL)
	ctx := context.Background()
	v, err := c.Approve(ctx, pay.ApprovalRequest{ExternalKey: "k-1", Amount: 5000, Currency: "USD"})
	if err != nil || !v.Approved {
		t.Fatalf("Approve after a 500 = %+v, %v; want approved", v, err)
	}
	if len(keys) != 2 || keys[0] != keys[1] || keys[0] != "stampede-approval-k-1" || !strings.Contains(bodies[0], "metadata[stampede_key]=k-1") {
		t.Fatalf("requests: keys %q, body %q; want two under one key with the key in metadata", keys, bodies[0])
	}
	for _, tc := range []struct {
		codes []int
		check func(pay.Verdict, error) bool
		want  string
	}{
		{[]int{402}, func(v pay.Verdict, err error) bool { return err == nil && !v.Approved }, "declined"},
		{[]int{400}, func(_ pay.Verdict, err error) bool { return errors.Is(err, pay.ErrRejected) }, "rejected"},
		{[]int{500, 500}, func(_ pay.Verdict, err error) bool { return errors.Is(err, pay.ErrOutcomeUnknown) }, "unknown"},
	} {
		mu.Lock()
		answer = tc.codes
		mu.Unlock()
		v, err := c.Approve(ctx, pay.ApprovalRequest{ExternalKey: "k-" + tc.want, Amount: 5000, Currency: "USD"})
		if !tc.check(v, err) {
			t.Errorf("answers %v: %+v, %v; want %s", tc.codes, v, err, tc.want)
		}
	}
}

// TestBadKeysAreRefused: a missing or publishable key is refused before
// anything is sent, naming the environment variable.
func TestBadKeysAreRefused(t *testing.T) {
	for _, key := range []string{"", "pk_test_123", "sk_test 123"} {
		cfg := stripeconnector.DefaultConfig()
		cfg.SecretKey = key
		_, err := stripeconnector.New(cfg)
		if f := stampede.FieldErrors(err); len(f) == 0 || f[0].Field != "STAMPEDE_STRIPE_SECRET_KEY" {
			t.Errorf("key %q: %v, want an error naming STAMPEDE_STRIPE_SECRET_KEY", key, err)
		}
	}
}
