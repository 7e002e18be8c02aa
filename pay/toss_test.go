package pay_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stampede-lab/stampede/institution"
	instapi "github.com/stampede-lab/stampede/institution/api"
	instclient "github.com/stampede-lab/stampede/institution/client"
	"github.com/stampede-lab/stampede/internal/httpapi/apitest"
	"github.com/stampede-lab/stampede/pay"
	payapi "github.com/stampede-lab/stampede/pay/api"
	"github.com/stampede-lab/stampede/pay/sqlite"
	"github.com/stampede-lab/stampede/pay/tossconnector"
)

// newTossRig is a payment service with the toss connector in front of
// the institution simulator speaking the toss protocol.
func newTossRig(t *testing.T) (*rig, *instapi.Server) {
	t.Helper()
	const secret = "test_sk_pay_rig_0123456789"
	icfg := instapi.DefaultConfig()
	icfg.AdminToken, icfg.NotFoundWindow = adminToken, 50*time.Millisecond
	icfg.Protocol, icfg.TossSecretKey = instapi.ProtocolToss, secret
	isrv, err := instapi.New(icfg)
	if err != nil {
		t.Fatal(err)
	}
	its := httptest.NewServer(isrv)
	t.Cleanup(func() { isrv.Close(); its.Close() })
	tcfg := tossconnector.DefaultConfig()
	tcfg.SecretKey, tcfg.URL, tcfg.HTTPClient = secret, its.URL, its.Client()
	conn, err := tossconnector.New(tcfg)
	if err != nil {
		t.Fatal(err)
	}
	store, err := sqlite.Open(filepath.Join(t.TempDir(), "pay.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	reg := prometheus.NewRegistry()
	cfg := pay.DefaultConfig()
	cfg.ApprovalTimeout, cfg.ReconcileEvery, cfg.Metrics = 300*time.Millisecond, 50*time.Millisecond, pay.NewMetrics(reg)
	svc, err := pay.NewService(store, conn, cfg)
	if err != nil {
		t.Fatal(err)
	}
	h, err := payapi.New(svc, store, payapi.DefaultConfig(), reg)
	if err != nil {
		t.Fatal(err)
	}
	api := httptest.NewServer(h)
	t.Cleanup(api.Close)
	v := apitest.New(t, payapi.OpenAPI())
	_, key := addMerchant(t, store, merchant)
	admin := instclient.NewClient(its.URL, its.Client()).WithAdminToken(adminToken)
	return &rig{instURL: its.URL, store: store, svc: svc, inst: admin, api: api, reg: reg, v: v, client: v.Client(t), key: key}, isrv
}

// tossPayment is a create body with the widget's payment key.
func tossPayment(order, paymentKey string, amount int64) string {
	return fmt.Sprintf(`{"order_id":%q,"amount":%d,"currency":"KRW","payment_key":%q}`, order, amount, paymentKey)
}

// TestTossPayments: with the toss connector a payment needs the widget's
// payment_key (400 naming it otherwise); its order id is Toss's orderId,
// confirmed once whatever the retries; refunds, partial then the rest,
// cancel it at Toss; an order declined at Toss is paid again only under a
// new order id (409 naming order_id); and a confirm whose answer is lost
// is UNKNOWN until the order's inquiry finds it approved.
func TestTossPayments(t *testing.T) {
	r, sim := newTossRig(t)
	if code, body := r.post(t, pay.NewID(), `{"order_id":"order-toss-1","amount":15000,"currency":"KRW"}`); code != http.StatusBadRequest || body["field"] != "payment_key" {
		t.Fatalf("without payment_key: %d %v, want 400 naming payment_key", code, body)
	}
	key := pay.NewID()
	code, body := r.post(t, key, tossPayment("order-toss-1", "tgen_1", 15000))
	if code != http.StatusCreated || body["status"] != "APPROVED" {
		t.Fatalf("POST = %d %v, want 201 APPROVED", code, body)
	}
	id := body["id"].(string)
	if code, body := r.post(t, key, tossPayment("order-toss-1", "tgen_1", 15000)); code/100 != 2 || body["id"] != id {
		t.Fatalf("replay = %d %v, want the same payment", code, body)
	}
	if code, body := r.post(t, key, tossPayment("order-toss-1", "tgen_other", 15000)); code != http.StatusUnprocessableEntity {
		t.Errorf("the key with another payment_key = %d %v, want 422 (a different request)", code, body)
	}
	if rec := sim.Ledger(); rec.ChargesByKey["order-toss-1"] != 1 {
		t.Fatalf("Toss charges by orderId %v, want order-toss-1 charged once", rec.ChargesByKey)
	}
	if resp, out := r.refundAs(t, "", id, pay.NewID(), `{"amount":5000,"reason":"one seat"}`); resp.StatusCode != http.StatusCreated || out["status"] != "SUCCEEDED" {
		t.Fatalf("partial refund = %d %v, want 201 SUCCEEDED", resp.StatusCode, out)
	}
	if resp, out := r.refundAs(t, "", id, pay.NewID(), `{}`); resp.StatusCode != http.StatusCreated || out["status"] != "SUCCEEDED" {
		t.Fatalf("refund of the rest = %d %v, want 201 SUCCEEDED", resp.StatusCode, out)
	}
	if got := sim.Refunds().RefundedByApproval["order-toss-1"]; got != 15000 {
		t.Errorf("Toss cancelled %d of order-toss-1, want 15000", got)
	}

	if _, err := r.inst.SetBehavior(context.Background(), institution.Behavior{Mode: institution.ModeDecline, HangMS: 0, Idempotent: true, StatusAPI: institution.StatusAPIUp}); err != nil {
		t.Fatal(err)
	}
	if code, body := r.post(t, pay.NewID(), tossPayment("order-toss-2", "tgen_2", 5000)); code != http.StatusCreated || body["status"] != "DECLINED" {
		t.Fatalf("DECLINE: %d %v, want 201 DECLINED", code, body)
	}
	sim.Reset()
	if code, body := r.post(t, pay.NewID(), tossPayment("order-toss-2", "tgen_3", 5000)); code != http.StatusConflict || body["field"] != "order_id" {
		t.Errorf("the declined order again = %d %v, want 409 naming order_id", code, body)
	}

	// A confirm whose answer is lost: UNKNOWN, settled by the order's
	// inquiry, charged once.
	if _, err := r.inst.SetBehavior(context.Background(), institution.Behavior{Mode: institution.ModeHangAfter, HangMS: 2000, Idempotent: true, StatusAPI: institution.StatusAPIUp}); err != nil {
		t.Fatal(err)
	}
	code, body = r.post(t, pay.NewID(), tossPayment("order-toss-3", "tgen_4", 7000))
	if code != http.StatusAccepted || body["status"] != "UNKNOWN" {
		t.Fatalf("HANG_AFTER_PROCESSING: %d %v, want 202 UNKNOWN", code, body)
	}
	if _, err := r.inst.SetBehavior(context.Background(), institution.DefaultBehavior()); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, got := r.get(t, "/v1/payments/"+body["id"].(string)); got["status"] == "APPROVED" {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the lost confirm is still %v, want APPROVED by inquiry", got["status"])
		}
	}
	if n := sim.Ledger().ChargesByKey["order-toss-3"]; n != 1 {
		t.Errorf("order-toss-3 charged %d times, want 1", n)
	}
}

// TestPaymentKeyRefusedByOtherConnectors: the simulator's connector
// takes no payment_key: a request with one is refused, naming it.
func TestPaymentKeyRefusedByOtherConnectors(t *testing.T) {
	r := newRig(t, nil)
	code, body := r.post(t, pay.NewID(), tossPayment("order-sim-1", "tgen_1", 1000))
	if code != http.StatusBadRequest || body["field"] != "payment_key" {
		t.Errorf("payment_key with the simulator connector: %d %v, want 400 naming payment_key", code, body)
	}
}
