package tossconnector_test

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stampede-lab/stampede"
	instapi "github.com/stampede-lab/stampede/institution/api"
	"github.com/stampede-lab/stampede/pay"
	"github.com/stampede-lab/stampede/pay/connectortest"
	"github.com/stampede-lab/stampede/pay/tossconnector"
)

const (
	secretKey = "test_sk_simulator0123456789"
	timeout   = 100 * time.Millisecond
)

// newSimulator starts the simulator speaking the toss protocol; wrap, if
// set, sees every request before the simulator.
func newSimulator(t *testing.T, wrap func(http.Handler) http.Handler) (*instapi.Server, string) {
	t.Helper()
	cfg := instapi.DefaultConfig()
	cfg.AdminToken, cfg.NotFoundWindow = "institution-admin-token-for-tests", 50*time.Millisecond
	cfg.Protocol, cfg.TossSecretKey = instapi.ProtocolToss, secretKey
	srv, err := instapi.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var h http.Handler = srv
	if wrap != nil {
		h = wrap(h)
	}
	ts := httptest.NewServer(h)
	t.Cleanup(func() { srv.Close(); ts.Close() })
	return srv, ts.URL
}

// newConnector returns a connector on url with key.
func newConnector(t *testing.T, url, key string) *tossconnector.Connector {
	t.Helper()
	cfg := tossconnector.DefaultConfig()
	cfg.SecretKey, cfg.URL, cfg.NotFoundWindow = key, url, 100*time.Millisecond
	cfg.HTTPClient = &http.Client{Timeout: timeout}
	c, err := tossconnector.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestConformance runs the connector suite against the simulator's toss
// protocol: every fault mode comes out as the documented error.
func TestConformance(t *testing.T) {
	connectortest.Run(t, func(t *testing.T) connectortest.Harness {
		srv, url := newSimulator(t, nil)
		return connectortest.Harness{
			Connector:   newConnector(t, url, secretKey),
			Unreachable: newConnector(t, "http://127.0.0.1:1", secretKey),
			Sim:         srv.Simulator,
			CallTimeout: timeout,
		}
	})
}

// TestWireFormat: what the connector sends is Toss's API: Basic
// authentication with the secret key and a colon, the confirm's body and
// Idempotency-Key, the inquiry by order id, and a cancel of the
// paymentKey under the refund's own key whose reason carries the mark
// that finds it again.
func TestWireFormat(t *testing.T) {
	type sent struct{ method, path, auth, key, body string }
	var (
		mu  sync.Mutex
		got []sent
	)
	_, url := newSimulator(t, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(strings.NewReader(string(b)))
			mu.Lock()
			got = append(got, sent{r.Method, r.URL.Path, r.Header.Get("Authorization"), r.Header.Get("Idempotency-Key"), string(b)})
			mu.Unlock()
			next.ServeHTTP(w, r)
		})
	})
	c := newConnector(t, url, secretKey)
	ctx := context.Background()
	if v, err := c.Approve(ctx, pay.ApprovalRequest{ExternalKey: "order-123", Amount: 15000, Currency: "KRW", PaymentKey: "tgen_abc"}); err != nil || !v.Approved {
		t.Fatalf("Approve = %+v, %v", v, err)
	}
	if v, err := c.Refund(ctx, pay.RefundRequest{ExternalKey: "r-1", PaymentKey: "order-123", Amount: 5000, Currency: "KRW", Reason: "seat returned"}); err != nil || !v.Succeeded {
		t.Fatalf("Refund = %+v, %v", v, err)
	}
	auth := "Basic " + base64.StdEncoding.EncodeToString([]byte(secretKey+":"))
	want := []sent{
		{"POST", "/v1/payments/confirm", auth, "stampede-approval-order-123", `{"amount":15000,"orderId":"order-123","paymentKey":"tgen_abc"}`},
		{"GET", "/v1/payments/orders/order-123", auth, "", ""},
		{"POST", "/v1/payments/tgen_abc/cancel", auth, "stampede-refund-r-1", `{"cancelAmount":5000,"cancelReason":"seat returned [stampede-refund:r-1]"}`},
	}
	if len(got) != len(want) {
		t.Fatalf("requests %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("request %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}

// TestWrongSecretKeyIsRejected: the simulator checks the Basic
// credentials; a wrong key is a rejection (401 UNAUTHORIZED_KEY: nothing
// was processed), and its inquiry is unavailable, never "not found".
func TestWrongSecretKeyIsRejected(t *testing.T) {
	srv, url := newSimulator(t, nil)
	c := newConnector(t, url, "test_sk_wrong")
	ctx := context.Background()
	_, err := c.Approve(ctx, pay.ApprovalRequest{ExternalKey: "order-401", Amount: 1000, Currency: "KRW", PaymentKey: "pk"})
	if !errors.Is(err, pay.ErrRejected) || !strings.Contains(err.Error(), "UNAUTHORIZED_KEY") {
		t.Errorf("Approve with a wrong key: %v, want ErrRejected naming UNAUTHORIZED_KEY", err)
	}
	if n := srv.Ledger().Keys; n != 0 {
		t.Errorf("the simulator recorded %d approvals", n)
	}
	if _, err := c.Inquire(ctx, "order-401"); !errors.Is(err, pay.ErrInquiryUnavailable) {
		t.Errorf("Inquire with a wrong key: %v, want ErrInquiryUnavailable", err)
	}
}

// TestCheckCreate: the create request must carry the widget's payment
// key, a Toss orderId and KRW; each bad field is named.
func TestCheckCreate(t *testing.T) {
	c := newConnector(t, "http://127.0.0.1:1", secretKey)
	if err := c.CheckCreate("order-123", "KRW", "tgen_abc"); err != nil {
		t.Fatalf("a good request: %v", err)
	}
	var fields []string
	for _, e := range stampede.FieldErrors(c.CheckCreate("ord/1", "USD", "")) {
		fields = append(fields, e.Field)
	}
	if strings.Join(fields, ",") != "order_id,currency,payment_key" {
		t.Errorf("bad fields %v, want order_id, currency, payment_key", fields)
	}
}

// TestBadKeysAreRefused: a missing key, a client key or one with a space
// is refused before anything is sent, naming the environment variable.
func TestBadKeysAreRefused(t *testing.T) {
	for _, key := range []string{"", "test_ck_123", "sk_test_123", "test_sk 123"} {
		cfg := tossconnector.DefaultConfig()
		cfg.SecretKey = key
		_, err := tossconnector.New(cfg)
		if f := stampede.FieldErrors(err); len(f) == 0 || f[0].Field != tossconnector.EnvSecretKey {
			t.Errorf("key %q: %v, want an error naming %s", key, err, tossconnector.EnvSecretKey)
		}
	}
}
