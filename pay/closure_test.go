package pay_test

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-lab/stampede/institution"
	"github.com/stampede-lab/stampede/internal/httpapi"
	"github.com/stampede-lab/stampede/pay"
	"github.com/stampede-lab/stampede/pay/sqlite"
)

// confirm posts POST /v1/payments/{id}/confirm with body.
func (r *rig) confirm(t *testing.T, id, body string) (*http.Response, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, r.api.URL+"/v1/payments/"+id+"/confirm", strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	return r.do(t, req)
}

// TestClosureCancelsUnconfirmedPaymentsOnce: past the closure window, an
// APPROVED payment nobody confirmed is refunded in full and an
// AUTHORIZED one voided, each once at the institution however many
// passes run at once; confirmed payments and younger ones are left alone;
// a closed payment can no longer be confirmed.
func TestClosureCancelsUnconfirmedPaymentsOnce(t *testing.T) {
	const window = time.Minute
	// The clock jumps past the window: no sleep, and a slow machine cannot
	// age the young payment past it.
	var skew atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	scfg := sqlite.DefaultConfig()
	scfg.Path, scfg.Now = filepath.Join(t.TempDir(), "pay.db"), now
	store, err := sqlite.OpenConfig(context.Background(), scfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	r := newRigOn(t, store, newInstitution(t), func(c *pay.Config) {
		slowOK(c)
		c.CloseAfter, c.Now = window, now
	})
	confirmedApproved, lateApproved := r.approvedPayment(t, 4000), r.approvedPayment(t, 5000)
	confirmedAuth, lateAuth := r.authorized(t, 3000), r.authorized(t, 2000)
	for _, id := range []string{confirmedApproved, confirmedAuth} {
		if resp, c := r.confirm(t, id, ""); resp.StatusCode != http.StatusOK || c["payment_id"] != id {
			t.Fatalf("confirm %s = %d %v", id, resp.StatusCode, c)
		}
	}
	// Confirming again answers the first confirmation.
	_, first := r.confirm(t, confirmedApproved, "")
	if resp, again := r.confirm(t, confirmedApproved, `{}`); resp.StatusCode != http.StatusOK || again["confirmed_at"] != first["confirmed_at"] {
		t.Fatalf("confirm again = %d %v, want %v", resp.StatusCode, again, first)
	}
	skew.Store(int64(window + time.Second))
	young := r.approvedPayment(t, 1000)

	var wg sync.WaitGroup
	var mu sync.Mutex
	total := 0
	for range 4 {
		wg.Go(func() {
			n, err := r.svc.ClosurePass(context.Background())
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			total += n
			mu.Unlock()
		})
	}
	wg.Wait()
	if total != 2 {
		t.Fatalf("the passes closed %d payments, want 2", total)
	}
	if n, err := r.svc.ClosurePass(context.Background()); err != nil || n != 0 {
		t.Fatalf("a later pass closed %d, %v; want 0", n, err)
	}
	if _, err := r.svc.CancellationPass(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{confirmedApproved: "APPROVED", lateApproved: "APPROVED", confirmedAuth: "AUTHORIZED", lateAuth: "VOIDED", young: "APPROVED"}
	for id, st := range want {
		if _, p := r.get(t, "/v1/payments/"+id); p["status"] != st {
			t.Errorf("payment %s = %v, want %s", id, p["status"], st)
		}
	}
	ledger, err := r.inst.Refunds(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if ledger.RefundedByApproval[lateApproved] != 5000 || ledger.RefundedByApproval[confirmedApproved] != 0 ||
		ledger.RefundedByApproval[young] != 0 || ledger.DoubleRefundedKeys != 0 {
		t.Fatalf("institution refunded %+v; want the late approval's 5000 once, nothing else", ledger.RefundedByApproval)
	}
	if ops := r.operationsAt(t, lateAuth); len(ops) != 1 || ops[0].Kind != institution.OpVoid || ops[0].Applied != 1 {
		t.Fatalf("institution's operations on the late authorisation = %+v, want one void", ops)
	}
	if ops := r.operationsAt(t, confirmedAuth); len(ops) != 0 {
		t.Fatalf("institution's operations on the confirmed authorisation = %+v, want none", ops)
	}
	// The closure's refund says why, in its event.
	_, refunds := r.get(t, "/v1/payments/"+lateApproved+"/refunds")
	if rs := refunds["refunds"].([]any); len(rs) != 1 || !strings.HasPrefix(rs[0].(map[string]any)["reason"].(string), pay.ReasonClosure) {
		t.Fatalf("refunds of the late approval = %v, want one with the closure's reason", refunds)
	}
	if got := counterSum(t, r, "stampede_pay_closures_total"); got != 2 {
		t.Fatalf("stampede_pay_closures_total = %v, want 2", got)
	}
	// A closed payment's order can no longer be confirmed.
	if resp, body := r.confirm(t, lateApproved, ""); resp.StatusCode != http.StatusConflict || body["code"] != string(pay.CodeCancelExists) {
		t.Fatalf("confirm a closed payment = %d %v, want 409 %s", resp.StatusCode, body, pay.CodeCancelExists)
	}
}

// TestConfirmBadInput: bad input on the confirmation endpoint is a 4xx
// problem naming the field; a payment in another status is 409 with its
// status.
func TestConfirmBadInput(t *testing.T) {
	r := newRig(t, nil)
	id := r.approvedPayment(t, 1000)
	r.behave(t, institution.Behavior{Mode: institution.ModeDecline, StatusAPI: institution.StatusAPIUp})
	code, declined := r.post(t, pay.NewID(), payment("o-"+pay.NewID(), 1000))
	if code != http.StatusCreated || declined["status"] != "DECLINED" {
		t.Fatalf("declined payment = %d %v", code, declined)
	}
	cases := []struct {
		name, id, body string
		code           int
		field          string
	}{
		{"bad id", "nope", "", 400, "id"},
		{"a body member", id, `{"amount":5}`, 400, "amount"},
		{"unknown payment", pay.NewID(), "", 404, ""},
	}
	for _, tc := range cases {
		resp, body := r.confirm(t, tc.id, tc.body)
		if resp.StatusCode != tc.code || resp.Header.Get("Content-Type") != httpapi.ProblemContentType || (body["field"] != nil && body["field"] != tc.field) || (tc.field != "" && body["field"] != tc.field) {
			t.Errorf("%s: %d %v, want a %d problem naming %q", tc.name, resp.StatusCode, body, tc.code, tc.field)
		}
	}
	resp, body := r.confirm(t, declined["id"].(string), "")
	if resp.StatusCode != http.StatusConflict || body["code"] != string(pay.CodeNotConfirmable) || body["payment_status"] != "DECLINED" {
		t.Fatalf("confirm a declined payment = %d %v, want 409 %s", resp.StatusCode, body, pay.CodeNotConfirmable)
	}
}

// counterSum sums the series of counter name in the rig's registry.
func counterSum(t *testing.T, r *rig, name string) float64 {
	t.Helper()
	mfs, err := r.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}
