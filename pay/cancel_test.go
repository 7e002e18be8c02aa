package pay_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stampede-lab/stampede/institution"
	"github.com/stampede-lab/stampede/internal/httpapi"
	"github.com/stampede-lab/stampede/pay"
)

// unknownPayment creates a payment of amount (body: manual capture when
// manual) while the institution hangs in mode, and checks that it is
// answered 202 UNKNOWN; the institution is left hanging.
func (r *rig) unknownPayment(t *testing.T, mode institution.Mode, amount int64, manual bool) string {
	t.Helper()
	r.behave(t, institution.Behavior{Mode: mode, HangMS: 1000, Idempotent: true, StatusAPI: institution.StatusAPIUp})
	body := payment("o-"+pay.NewID(), amount)
	if manual {
		body = body[:len(body)-1] + `,"capture":"manual"}`
	}
	code, p := r.post(t, pay.NewID(), body)
	if code != http.StatusAccepted || p["status"] != "UNKNOWN" {
		t.Fatalf("POST against a hung institution = %d %v, want 202 UNKNOWN", code, p)
	}
	return p["id"].(string)
}

// cancellation returns the cancellation member of a payment's JSON.
func cancellationOf(t *testing.T, p map[string]any) map[string]any {
	t.Helper()
	c, ok := p["cancellation"].(map[string]any)
	if !ok {
		t.Fatalf("the payment shows no cancellation: %v", p)
	}
	return c
}

// settle runs reconciliation passes (payments, then cancellations) until
// payment id is no longer UNKNOWN, for up to 5 s.
func (r *rig) settle(t *testing.T, id string) pay.Payment {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := r.svc.Reconcile(ctx); err != nil {
			t.Fatal(err)
		}
		p, err := r.svc.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if p.Status != pay.StatusUnknown {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("payment %s still UNKNOWN", id)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestCancelUnknownIsRefundedOnceItSettlesApproved: a payment whose
// approval answer was lost is cancelled: the cancellation is recorded and
// shown (202 REQUESTED), replayed under its key, refused under another;
// while the status API is down nothing is done; once the inquiry finds
// the payment approved, four reconcilers racing carry it out as one full
// refund, which the institution made once.
func TestCancelUnknownIsRefundedOnceItSettlesApproved(t *testing.T) {
	r := newRig(t, nil)
	ctx := context.Background()
	id := r.unknownPayment(t, institution.ModeHangAfter, 8_000, false)
	// The status API goes down (a GET would settle the payment
	// otherwise): the payment stays UNKNOWN and the cancellation waits.
	r.behave(t, institution.Behavior{Mode: institution.ModeNormal, Idempotent: true, StatusAPI: institution.StatusAPIDown})

	resp, body := r.operate(t, id, "cancel", "cancel-1", `{"reason":"event cancelled"}`)
	if resp.StatusCode != http.StatusAccepted || body["status"] != "UNKNOWN" || cancellationOf(t, body)["status"] != "REQUESTED" ||
		cancellationOf(t, body)["code"] != pay.ReasonCancelRequested {
		t.Fatalf("cancel of an UNKNOWN payment = %d %v, want 202 with a REQUESTED cancellation", resp.StatusCode, body)
	}
	resp, again := r.operate(t, id, "cancel", "cancel-1", `{"reason":"event cancelled"}`)
	if resp.StatusCode != http.StatusAccepted || resp.Header.Get("Idempotent-Replayed") != "true" || cancellationOf(t, again)["status"] != "REQUESTED" {
		t.Fatalf("replay = %d %v, want the stored cancellation", resp.StatusCode, again)
	}
	if resp, body := r.operate(t, id, "cancel", "cancel-1", `{"reason":"other"}`); resp.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("same key, another reason = %d %v, want 422", resp.StatusCode, body)
	}
	if resp, body := r.operate(t, id, "cancel", "cancel-2", ``); resp.StatusCode != http.StatusConflict || body["code"] != string(pay.CodeCancelExists) {
		t.Fatalf("a second cancellation = %d %v, want 409 cancellation_exists", resp.StatusCode, body)
	}
	_, got := r.get(t, "/v1/payments/"+id)
	if got["status"] != "UNKNOWN" || cancellationOf(t, got)["status"] != "REQUESTED" {
		t.Fatalf("GET shows %v, want the REQUESTED cancellation", got["cancellation"])
	}

	if _, err := r.svc.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := r.svc.CancellationPass(ctx); err != nil || n != 0 {
		t.Fatalf("CancellationPass while UNKNOWN = %d, %v; want 0", n, err)
	}
	r.behave(t, institution.Behavior{Mode: institution.ModeNormal, Idempotent: true, StatusAPI: institution.StatusAPIUp})
	if p := r.settle(t, id); p.Status != pay.StatusApproved {
		t.Fatalf("settled %s, want APPROVED", p.Status)
	}

	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			if _, err := r.svc.CancellationPass(ctx); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if _, err := r.svc.CancellationPass(ctx); err != nil {
		t.Fatal(err)
	}
	_, got = r.get(t, "/v1/payments/"+id)
	c := cancellationOf(t, got)
	if c["status"] != "CARRIED_OUT" || c["action"] != "refund" || c["code"] != pay.ReasonCancelRefund {
		t.Fatalf("after settling: %v, want CARRIED_OUT by a refund", c)
	}
	_, list := r.get(t, "/v1/payments/"+id+"/refunds")
	refunds := list["refunds"].([]any)
	if len(refunds) != 1 || refunds[0].(map[string]any)["id"] != c["action_id"] || refunds[0].(map[string]any)["status"] != "SUCCEEDED" ||
		list["refunded"] != float64(8_000) {
		t.Fatalf("refunds = %v, want the cancellation's one refund of 8000 SUCCEEDED", list)
	}
	ledger, err := r.inst.Refunds(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ledger.Records) != 1 || ledger.Records[0].Requests != 1 || ledger.RefundedByApproval[id] != 8_000 {
		t.Fatalf("the institution saw %+v, want one refund request of 8000", ledger)
	}
}

// TestCancelUnknownAuthorizationIsVoided: a manual-capture payment whose
// answer was lost is cancelled; once the inquiry finds it AUTHORIZED the
// cancellation voids it, once.
func TestCancelUnknownAuthorizationIsVoided(t *testing.T) {
	r := newRig(t, nil)
	ctx := context.Background()
	id := r.unknownPayment(t, institution.ModeHangAfter, 6_000, true)
	if resp, body := r.operate(t, id, "cancel", "cv-1", ``); resp.StatusCode != http.StatusAccepted || cancellationOf(t, body)["status"] != "REQUESTED" {
		t.Fatalf("cancel = %d %v, want 202 REQUESTED", resp.StatusCode, body)
	}
	r.behave(t, institution.Behavior{Mode: institution.ModeNormal, Idempotent: true, StatusAPI: institution.StatusAPIUp})
	if p := r.settle(t, id); p.Status != pay.StatusAuthorized {
		t.Fatalf("settled %s, want AUTHORIZED", p.Status)
	}
	for range 2 {
		if _, err := r.svc.CancellationPass(ctx); err != nil {
			t.Fatal(err)
		}
	}
	_, got := r.get(t, "/v1/payments/"+id)
	c := cancellationOf(t, got)
	if got["status"] != "VOIDED" || c["status"] != "CARRIED_OUT" || c["action"] != "void" {
		t.Fatalf("after settling: %v, want VOIDED by the cancellation's void", got)
	}
	if ops := r.operationsAt(t, id); len(ops) != 1 || ops[0].Kind != "void" {
		t.Fatalf("the institution has %+v, want one void", ops)
	}
}

// TestCancelUnknownThatNeverHappenedCloses: the approval was never
// processed; after the not-found window the payment is FAILED and the
// cancellation closes with nothing sent.
func TestCancelUnknownThatNeverHappenedCloses(t *testing.T) {
	r := newRig(t, nil)
	ctx := context.Background()
	id := r.unknownPayment(t, institution.ModeHangBefore, 4_000, false)
	if resp, body := r.operate(t, id, "cancel", "cn-1", `{}`); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("cancel = %d %v, want 202", resp.StatusCode, body)
	}
	r.behave(t, institution.Behavior{Mode: institution.ModeNormal, Idempotent: true, StatusAPI: institution.StatusAPIUp})
	if p := r.settle(t, id); p.Status != pay.StatusFailed {
		t.Fatalf("settled %s, want FAILED", p.Status)
	}
	if n, err := r.svc.CancellationPass(ctx); err != nil || n != 1 {
		t.Fatalf("CancellationPass = %d, %v; want 1 closed", n, err)
	}
	_, got := r.get(t, "/v1/payments/"+id)
	if c := cancellationOf(t, got); c["status"] != "CLOSED" || c["action"] != "none" || c["code"] != pay.ReasonCancelNothing {
		t.Fatalf("cancellation = %v, want CLOSED with nothing to do", c)
	}
	if ledger, _ := r.inst.Refunds(ctx); len(ledger.Records) != 0 {
		t.Fatalf("the institution has refunds %+v, want none", ledger.Records)
	}
}

// TestCancelSettledPaymentAtOnce: an APPROVED payment's cancellation is
// carried out in the request (200), a DECLINED one's closes.
func TestCancelSettledPaymentAtOnce(t *testing.T) {
	r := newRig(t, slowOK)
	id := r.approvedPayment(t, 3_000)
	resp, body := r.operate(t, id, "cancel", "cs-1", `{"reason":"changed my mind"}`)
	if c := cancellationOf(t, body); resp.StatusCode != http.StatusOK || c["status"] != "CARRIED_OUT" || c["action"] != "refund" {
		t.Fatalf("cancel of an APPROVED payment = %d %v, want 200 CARRIED_OUT by a refund", resp.StatusCode, body)
	}
	_, list := r.get(t, "/v1/payments/"+id+"/refunds")
	if list["refunded"] != float64(3_000) {
		t.Fatalf("refunds = %v, want 3000", list)
	}
	r.behave(t, institution.Behavior{Mode: institution.ModeDecline, StatusAPI: institution.StatusAPIUp})
	_, declined := r.post(t, pay.NewID(), payment("o-cd", 10))
	resp, body = r.operate(t, declined["id"].(string), "cancel", "cs-2", ``)
	if c := cancellationOf(t, body); resp.StatusCode != http.StatusOK || c["status"] != "CLOSED" {
		t.Fatalf("cancel of a DECLINED payment = %d %v, want 200 CLOSED", resp.StatusCode, body)
	}
}

// TestCancelBadInputNamesTheField: every mistake is a 4xx problem naming
// what is wrong, never a 500.
func TestCancelBadInputNamesTheField(t *testing.T) {
	r := newRig(t, slowOK)
	id := r.approvedPayment(t, 1_000)
	long := make([]byte, pay.MaxCancelReasonLen+1)
	for i := range long {
		long[i] = 'x'
	}
	cases := []struct {
		id, key, body string
		code          int
		field, pcode  string
	}{
		{id, "", `{}`, 400, "Idempotency-Key", "invalid"},
		{id, "b1", `{"reason":""}`, 400, "reason", "invalid"},
		{id, "b2", `{"reason":"a\u0000b"}`, 400, "reason", "invalid"},
		{id, "b3", `{"reason":5}`, 400, "reason", "invalid"},
		{id, "b4", `{"reason":"x","amount":1}`, 400, "amount", "invalid"},
		{id, "b5", `{"reason":"` + string(long) + `"}`, 400, "reason", "invalid"},
		{"not-a-uuid", "b6", `{}`, 400, "id", "invalid"},
		{pay.NewID(), "b7", `{}`, 404, "", "not_found"},
	}
	for _, tc := range cases {
		resp, body := r.operate(t, tc.id, "cancel", tc.key, tc.body)
		if resp.StatusCode != tc.code || resp.Header.Get("Content-Type") != httpapi.ProblemContentType ||
			body["code"] != tc.pcode || (tc.field != "" && body["field"] != tc.field) {
			t.Errorf("cancel %q %s = %d %v, want a %d %s problem naming %q", tc.key, tc.body, resp.StatusCode, body, tc.code, tc.pcode, tc.field)
		}
	}
}

// TestCancelRefundDeclinedIsMadeAgain: the institution declines the
// refunds that carry out a cancellation of an APPROVED payment (it
// declines everything for a while): the cancellation stays REQUESTED and
// each pass after the pause (doubled at each decline) makes the next
// refund under the next key, until one succeeds; the money is refunded
// once, in full. Before, the first declined refund closed the
// cancellation and the buyer's money stayed taken for an order that does
// not go on.
func TestCancelRefundDeclinedIsMadeAgain(t *testing.T) {
	const pause = 150 * time.Millisecond
	r := newRig(t, func(c *pay.Config) { slowOK(c); c.CancelRetry = pause })
	ctx := context.Background()
	id := r.approvedPayment(t, 4_000)
	r.behave(t, institution.Behavior{Mode: institution.ModeDecline, StatusAPI: institution.StatusAPIUp})
	resp, body := r.operate(t, id, "cancel", "cd-1", ``)
	if c := cancellationOf(t, body); resp.StatusCode != http.StatusAccepted || c["status"] != "REQUESTED" {
		t.Fatalf("cancel while refunds are declined = %d %v, want 202 REQUESTED", resp.StatusCode, body)
	}
	if n, err := r.svc.CancellationPass(ctx); err != nil || n != 0 {
		t.Fatalf("a pass within the pause = %d, %v; want 0", n, err)
	}
	refunds := func() []any {
		_, list := r.get(t, "/v1/payments/"+id+"/refunds")
		return list["refunds"].([]any)
	}
	if l := refunds(); len(l) != 1 {
		t.Fatalf("refunds within the pause = %v, want the one declined", l)
	}
	time.Sleep(pause + 50*time.Millisecond)
	if n, err := r.svc.CancellationPass(ctx); err != nil || n != 0 {
		t.Fatalf("a pass after the pause, still declining = %d, %v; want 0", n, err)
	}
	if l := refunds(); len(l) != 2 {
		t.Fatalf("refunds after one pause = %v, want two declined", l)
	}
	r.behave(t, institution.Behavior{Mode: institution.ModeNormal, StatusAPI: institution.StatusAPIUp})
	if n, err := r.svc.CancellationPass(ctx); err != nil || n != 0 {
		t.Fatalf("a pass within the doubled pause = %d, %v; want 0", n, err)
	}
	time.Sleep(2*pause + 50*time.Millisecond)
	if n, err := r.svc.CancellationPass(ctx); err != nil || n != 1 {
		t.Fatalf("a pass after the doubled pause = %d, %v; want the cancellation carried out", n, err)
	}
	_, got := r.get(t, "/v1/payments/"+id)
	c := cancellationOf(t, got)
	if c["status"] != "CARRIED_OUT" || c["action"] != "refund" || got["manual_review"] == true {
		t.Fatalf("after the institution recovered: %v, want CARRIED_OUT by a refund, no review", got)
	}
	_, list := r.get(t, "/v1/payments/"+id+"/refunds")
	if list["refunded"] != float64(4_000) || len(list["refunds"].([]any)) != 3 {
		t.Fatalf("refunds = %v, want two declined and one of 4000", list)
	}
	ledger, err := r.inst.Refunds(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ledger.RefundedByApproval[id] != 4_000 {
		t.Fatalf("the institution refunded %d, want 4000 once", ledger.RefundedByApproval[id])
	}
}

// TestCancelRefundDeclinedForGoodIsFlagged: after MaxCancelRefunds
// declined refunds the cancellation is closed as carried out and the
// payment flagged for a person to look at; carrying it out again (a
// crash before the close) makes no further refund.
func TestCancelRefundDeclinedForGoodIsFlagged(t *testing.T) {
	r := newRig(t, func(c *pay.Config) { slowOK(c); c.CancelRetry = 10 * time.Millisecond })
	ctx := context.Background()
	id := r.approvedPayment(t, 2_000)
	r.behave(t, institution.Behavior{Mode: institution.ModeDecline, StatusAPI: institution.StatusAPIUp})
	r.operate(t, id, "cancel", "cdg-1", ``)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := r.svc.CancellationPass(ctx); err != nil {
			t.Fatal(err)
		}
		_, got := r.get(t, "/v1/payments/"+id)
		if cancellationOf(t, got)["status"] != "REQUESTED" {
			if got["manual_review"] != true || cancellationOf(t, got)["status"] != "CARRIED_OUT" {
				t.Fatalf("after every refund declined: %v, want CARRIED_OUT and flagged for review", got)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the cancellation is still REQUESTED after 5 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// A carrying out that crashed after the last decline, before closing,
	// and runs again makes no further refund.
	c, ok, err := r.svc.CancellationOf(ctx, id)
	if err != nil || !ok {
		t.Fatalf("CancellationOf = %v, %v", ok, err)
	}
	c.Status = pay.CancelRequested
	time.Sleep(400 * time.Millisecond) // past any pause (10 ms doubled four times)
	if _, err := r.svc.CarryOut(ctx, c); err != nil {
		t.Fatalf("CarryOut again: %v", err)
	}
	_, list := r.get(t, "/v1/payments/"+id+"/refunds")
	if n := len(list["refunds"].([]any)); n != pay.MaxCancelRefunds || list["refunded"] != float64(0) {
		t.Fatalf("refunds = %v, want %d declined", list, pay.MaxCancelRefunds)
	}
}
