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

// TestCaptureAndVoidAgainstStripeMock: the authorisation (capture_method
// manual), the capture, the cancel and their inquiries are requests
// stripe-mock accepts (it checks them against Stripe's OpenAPI
// description; its fixtures are stateless, so only refusals are
// checked).
func TestCaptureAndVoidAgainstStripeMock(t *testing.T) {
	c := newConnector(t, testenv.URL(t, testenv.StripeMockURL))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	key := pay.NewID()
	if _, err := c.Authorize(ctx, pay.ApprovalRequest{ExternalKey: key, Amount: 5000, Currency: "USD"}); err != nil {
		t.Fatalf("Authorize: %v", err)
	}
	for _, kind := range []pay.OperationKind{pay.OpCapture, pay.OpVoid} {
		req := pay.OperationRequest{ExternalKey: pay.NewID(), PaymentKey: key, Currency: "USD"}
		var err error
		if kind == pay.OpCapture {
			req.Amount = 3000
			_, err = c.Capture(ctx, req)
		} else {
			_, err = c.Void(ctx, req)
		}
		if err != nil && !errors.Is(err, pay.ErrOutcomeUnknown) {
			t.Fatalf("%s: %v", kind, err)
		}
		if _, err := c.InquireOperation(ctx, kind, req.ExternalKey, key); err != nil {
			t.Fatalf("InquireOperation(%s): %v", kind, err)
		}
	}
	if caps := c.Capabilities(); !caps.ManualCapture || !caps.Void {
		t.Fatalf("capabilities %s", caps)
	}
}

// TestCaptureAndVoidSendTheirOwnKeys: the authorisation asks for
// capture_method manual; a capture and a void each go out once under
// their own Idempotency-Key, with the amount to capture; their verdicts
// are read from the PaymentIntent's status, and an inquiry reads it too.
func TestCaptureAndVoidSendTheirOwnKeys(t *testing.T) {
	var (
		mu     sync.Mutex
		status = "requires_capture"
		seen   []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, r.Method+" "+r.URL.Path+" "+r.Header.Get("Idempotency-Key")+" "+string(body))
		switch {
		case strings.HasSuffix(r.URL.Path, "/capture"):
			status = "succeeded"
		case strings.HasSuffix(r.URL.Path, "/cancel"):
			status = "canceled"
		}
		w.Header().Set("Content-Type", "application/json")
		pi := `{"id":"pi_1","object":"payment_intent","status":"` + status + `","amount":5000,"currency":"usd","metadata":{"stampede_key":"k-1"}}`
		if strings.HasSuffix(r.URL.Path, "/search") {
			_, _ = io.WriteString(w, `{"object":"search_result","data":[`+pi+`],"has_more":false}`)
			return
		}
		_, _ = io.WriteString(w, pi)
	}))
	defer srv.Close()
	c := newConnector(t, srv.URL)
	ctx := context.Background()
	if v, err := c.Authorize(ctx, pay.ApprovalRequest{ExternalKey: "k-1", Amount: 5000, Currency: "USD"}); err != nil || !v.Approved {
		t.Fatalf("Authorize = %+v, %v", v, err)
	}
	if q, err := c.InquireOperation(ctx, pay.OpCapture, "cap-1", "k-1"); err != nil || q.Found || !q.Definitive {
		t.Fatalf("inquiry before the capture = %+v, %v; want not found", q, err)
	}
	v, err := c.Capture(ctx, pay.OperationRequest{ExternalKey: "cap-1", PaymentKey: "k-1", Amount: 3000, Currency: "USD"})
	if err != nil || !v.Succeeded {
		t.Fatalf("Capture = %+v, %v", v, err)
	}
	if q, err := c.InquireOperation(ctx, pay.OpCapture, "cap-1", "k-1"); err != nil || !q.Found || !q.Succeeded {
		t.Fatalf("inquiry after the capture = %+v, %v; want found, succeeded", q, err)
	}
	if v, err := c.Void(ctx, pay.OperationRequest{ExternalKey: "void-1", PaymentKey: "k-1", Currency: "USD"}); err != nil || !v.Succeeded {
		t.Fatalf("Void = %+v, %v", v, err)
	}
	mu.Lock()
	defer mu.Unlock()
	var create, capture, cancelReq string
	for _, s := range seen {
		switch {
		case strings.HasPrefix(s, "POST /v1/payment_intents/pi_1/capture"):
			capture = s
		case strings.HasPrefix(s, "POST /v1/payment_intents/pi_1/cancel"):
			cancelReq = s
		case strings.HasPrefix(s, "POST /v1/payment_intents "):
			create = s
		}
	}
	if !strings.Contains(create, "capture_method=manual") || !strings.Contains(create, "stampede-approval-k-1") {
		t.Errorf("authorisation %q: want capture_method=manual under the approval key", create)
	}
	if !strings.Contains(capture, "stampede-capture-cap-1") || !strings.Contains(capture, "amount_to_capture=3000") {
		t.Errorf("capture %q: want its own key and amount_to_capture=3000", capture)
	}
	if !strings.Contains(cancelReq, "stampede-void-void-1") {
		t.Errorf("cancel %q: want its own key", cancelReq)
	}
}
