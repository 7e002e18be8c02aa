package pay_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stampede-lab/stampede/institution"
	"github.com/stampede-lab/stampede/internal/httpapi"
	"github.com/stampede-lab/stampede/pay"
)

// refundAs posts a refund of payment id with body under key, with the
// API key apiKey ("" for the rig's).
func (r *rig) refundAs(t *testing.T, apiKey, id, key, body string) (*http.Response, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, r.api.URL+"/v1/payments/"+id+"/refunds", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	if apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+apiKey)
	}
	return r.do(t, req)
}

// approvedPayment creates an APPROVED payment of amount through the API.
func (r *rig) approvedPayment(t *testing.T, amount int64) string {
	t.Helper()
	code, body := r.post(t, pay.NewID(), payment("o-"+pay.NewID(), amount))
	if code != http.StatusCreated || body["status"] != "APPROVED" {
		t.Fatalf("POST = %d %v, want 201 APPROVED", code, body)
	}
	return body["id"].(string)
}

// TestRefundFullPartialAndReplayed: partial refunds, then the rest with
// no amount; one more is refused naming the amount; a repeated key
// answers the stored refund; the listing sums them; the institution
// refunded exactly the amount.
func TestRefundFullPartialAndReplayed(t *testing.T) {
	r := newRig(t, slowOK)
	id := r.approvedPayment(t, 10_000)
	resp, first := r.refundAs(t, "", id, "rf-1", `{"amount":3000,"reason":"requested_by_customer"}`)
	if resp.StatusCode != http.StatusCreated || first["status"] != "SUCCEEDED" || first["amount"] != float64(3000) {
		t.Fatalf("partial refund = %d %v, want 201 SUCCEEDED 3000", resp.StatusCode, first)
	}
	resp, again := r.refundAs(t, "", id, "rf-1", `{"amount":3000,"reason":"requested_by_customer"}`)
	if resp.StatusCode != http.StatusCreated || again["id"] != first["id"] || resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay = %d %v, want the stored refund", resp.StatusCode, again)
	}
	if resp, body := r.refundAs(t, "", id, "rf-1", `{"amount":2000}`); resp.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("same key, another body = %d %v, want 422", resp.StatusCode, body)
	}
	resp, rest := r.refundAs(t, "", id, "rf-2", `{}`)
	if resp.StatusCode != http.StatusCreated || rest["amount"] != float64(7000) {
		t.Fatalf("refund of the rest = %d %v, want 7000", resp.StatusCode, rest)
	}
	resp, over := r.refundAs(t, "", id, "rf-3", `{"amount":1}`)
	if resp.StatusCode != http.StatusConflict || over["code"] != string(pay.CodeRefundExceeds) || over["field"] != "amount" {
		t.Fatalf("refund over the amount = %d %v, want 409 refund_exceeds naming amount", resp.StatusCode, over)
	}
	_, list := r.get(t, "/v1/payments/"+id+"/refunds")
	if list["refunded"] != float64(10_000) || len(list["refunds"].([]any)) != 2 {
		t.Fatalf("listing = %v", list)
	}
	ledger, err := r.inst.Refunds(context.Background())
	if err != nil || ledger.RefundedByApproval[id] != 10_000 || ledger.DoubleRefundedKeys != 0 {
		t.Fatalf("institution refunded %+v, %v; want 10000 once", ledger, err)
	}
}

// TestConcurrentRefundsNeverExceedOverHTTP: 50 partial refunds of one
// payment at once, each with its own key: what the institution refunded
// never passes the amount and equals what pay says it refunded; every
// refund not made is refused 409 refund_exceeds.
func TestConcurrentRefundsNeverExceedOverHTTP(t *testing.T) {
	// A generous timeout: on a loaded machine the point is the sum, not
	// the speed.
	r := newRig(t, func(c *pay.Config) { c.ApprovalTimeout = 5 * time.Second })
	id := r.approvedPayment(t, 10_000)
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		succeeded int
		refused   int
		other     []string
	)
	for i := range 50 {
		wg.Go(func() {
			resp, body := r.refundAs(t, "", id, fmt.Sprintf("c-%d", i), `{"amount":700}`)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case resp.StatusCode == http.StatusCreated && body["status"] == "SUCCEEDED":
				succeeded++
			case resp.StatusCode == http.StatusConflict && body["code"] == string(pay.CodeRefundExceeds):
				refused++
			default:
				other = append(other, fmt.Sprintf("%d %v", resp.StatusCode, body["status"]))
			}
		})
	}
	wg.Wait()
	ledger, err := r.inst.Refunds(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	_, list := r.get(t, "/v1/payments/"+id+"/refunds")
	refunded := int64(list["refunded"].(float64))
	if got := ledger.RefundedByApproval[id]; got > 10_000 || got != refunded || got != int64(succeeded)*700 || ledger.OverRefunded != 0 {
		t.Fatalf("institution refunded %d, pay says %d, %d answers SUCCEEDED (of 700); want equal and at most 10000", got, refunded, succeeded)
	}
	if len(other) == 0 && (succeeded != 14 || refused != 36) {
		t.Fatalf("%d refunds, %d refused; want 14 (9800 of 10000) and 36", succeeded, refused)
	}
	t.Logf("%d SUCCEEDED, %d refused, others %v; institution refunded %d of 10000", succeeded, refused, other, ledger.RefundedByApproval[id])
}

// TestLostRefundAnswerIsUnknownThenSettled: the institution refunds and
// hangs: the refund is UNKNOWN (202), never sent again, and the
// reconciler settles it SUCCEEDED by inquiry; while UNKNOWN it holds its
// amount. A refund held before processing ends FAILED after the
// not-found window, and its amount is free again.
func TestLostRefundAnswerIsUnknownThenSettled(t *testing.T) {
	r := newRig(t, nil)
	ctx := context.Background()
	id := r.approvedPayment(t, 5_000)
	r.behave(t, institution.Behavior{Mode: institution.ModeHangAfter, HangMS: 1000, StatusAPI: institution.StatusAPIUp})
	resp, body := r.refundAs(t, "", id, "lost-1", `{"amount":5000}`)
	if resp.StatusCode != http.StatusAccepted || body["status"] != "UNKNOWN" {
		t.Fatalf("refund against a hung institution = %d %v, want 202 UNKNOWN", resp.StatusCode, body)
	}
	r.behave(t, institution.Behavior{Mode: institution.ModeNormal, StatusAPI: institution.StatusAPIUp})
	if resp, over := r.refundAs(t, "", id, "lost-2", `{"amount":1}`); resp.StatusCode != http.StatusConflict {
		t.Fatalf("refund while one is UNKNOWN for the whole amount = %d %v, want 409", resp.StatusCode, over)
	}
	if resp, _ := r.refundAs(t, "", id, "lost-1", `{"amount":5000}`); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("retry of the UNKNOWN refund's key = %d, want 202 (the stored refund, not sent again)", resp.StatusCode)
	}
	if _, err := r.svc.RefundPass(ctx); err != nil {
		t.Fatal(err)
	}
	_, list := r.get(t, "/v1/payments/"+id+"/refunds")
	refunds := list["refunds"].([]any)
	if len(refunds) != 1 || refunds[0].(map[string]any)["status"] != "SUCCEEDED" {
		t.Fatalf("after the inquiry: %v, want SUCCEEDED", list)
	}
	ledger, _ := r.inst.Refunds(ctx)
	if len(ledger.Records) != 1 || ledger.Records[0].Requests != 1 {
		t.Fatalf("the institution saw %+v, want one refund request", ledger.Records)
	}

	id2 := r.approvedPayment(t, 5_000)
	r.behave(t, institution.Behavior{Mode: institution.ModeHangBefore, HangMS: 1000, StatusAPI: institution.StatusAPIUp})
	if resp, body := r.refundAs(t, "", id2, "lost-3", `{"amount":5000}`); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("refund held before processing = %d %v, want 202", resp.StatusCode, body)
	}
	r.behave(t, institution.Behavior{Mode: institution.ModeNormal, StatusAPI: institution.StatusAPIUp})
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := r.svc.RefundPass(ctx); err != nil {
			t.Fatal(err)
		}
		_, list := r.get(t, "/v1/payments/"+id2+"/refunds")
		if st := list["refunds"].([]any)[0].(map[string]any)["status"]; st == "FAILED" {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("refund still %v after the not-found window", st)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if resp, body := r.refundAs(t, "", id2, "lost-4", `{"amount":5000}`); resp.StatusCode != http.StatusCreated || body["status"] != "SUCCEEDED" {
		t.Fatalf("refund after the FAILED one = %d %v, want 201 SUCCEEDED", resp.StatusCode, body)
	}
}

// TestRefundBadInputNamesTheField: every mistake is a 4xx problem naming
// what is wrong, never a 500.
func TestRefundBadInputNamesTheField(t *testing.T) {
	r := newRig(t, slowOK)
	id := r.approvedPayment(t, 1_000)
	code, pending := r.post(t, pay.NewID(), payment("o-d", 10))
	_ = code
	r.behave(t, institution.Behavior{Mode: institution.ModeDecline, StatusAPI: institution.StatusAPIUp})
	_, declined := r.post(t, pay.NewID(), payment("o-decl", 10))
	r.behave(t, institution.Behavior{Mode: institution.ModeNormal, StatusAPI: institution.StatusAPIUp})
	_ = pending
	cases := []struct {
		id, key, body string
		code          int
		field, pcode  string
	}{
		{id, "", `{}`, 400, "Idempotency-Key", "invalid"},
		{id, "k1", `{"amount":-1}`, 400, "amount", "invalid"},
		{id, "k2", `{"amount":0}`, 400, "amount", "invalid"},
		{id, "k3", `{"amount":"5"}`, 400, "amount", "invalid"},
		{id, "k4", `{"amount":5,"tip":1}`, 400, "tip", "invalid"},
		{id, "k5", `{"reason":""}`, 400, "reason", "invalid"},
		{id, "k6", `{"reason":"a\u0000b"}`, 400, "reason", "invalid"},
		{id, "k7", `{"amount":2000}`, 409, "amount", string(pay.CodeRefundExceeds)},
		{"not-a-uuid", "k8", `{}`, 400, "id", "invalid"},
		{pay.NewID(), "k9", `{}`, 404, "", "not_found"},
		{declined["id"].(string), "k10", `{}`, 409, "", string(pay.CodeNotRefundable)},
	}
	for _, tc := range cases {
		resp, body := r.refundAs(t, "", tc.id, tc.key, tc.body)
		if resp.StatusCode != tc.code || resp.Header.Get("Content-Type") != httpapi.ProblemContentType ||
			body["code"] != tc.pcode || (tc.field != "" && body["field"] != tc.field) {
			t.Errorf("refund %s %s = %d %v, want a %d %s problem naming %q", tc.key, tc.body, resp.StatusCode, body, tc.code, tc.pcode, tc.field)
		}
	}
	for _, q := range []string{"limit=0", "limit=x", "status=NOPE", "created_after=yesterday", "cursor=%%%", "cursor=abc", "color=red", "limit=1&limit=2",
		"created_after=2026-01-02T00:00:00Z&created_before=2026-01-01T00:00:00Z"} {
		resp, body := r.get(t, "/v1/payments?"+q)
		v, _ := url.ParseQuery(q)
		if resp.StatusCode != 400 || body["code"] != "invalid" || body["field"] == nil {
			t.Errorf("GET /v1/payments?%s = %d %v, want 400 naming a parameter (%v)", q, resp.StatusCode, body, v)
		}
	}
}

// TestMerchantListingIsScoped: GET /v1/payments lists the key's
// merchant's payments only, pages by cursor, and filters; merchant B
// sees none of A's payments and cannot read or refund them.
func TestMerchantListingIsScoped(t *testing.T) {
	r := newRig(t, slowOK)
	_, bKey := addMerchant(t, r.store, "")
	var ids []string
	for range 3 {
		ids = append(ids, r.approvedPayment(t, 100))
	}
	var got []string
	path := "/v1/payments?limit=2"
	for path != "" {
		resp, body := r.get(t, path)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s = %d %v", path, resp.StatusCode, body)
		}
		for _, p := range body["payments"].([]any) {
			got = append(got, p.(map[string]any)["id"].(string))
		}
		path = ""
		if c, ok := body["next_cursor"].(string); ok {
			path = "/v1/payments?limit=2&cursor=" + url.QueryEscape(c)
		}
	}
	if strings.Join(got, ",") != strings.Join(ids, ",") {
		t.Fatalf("listing = %v, want %v", got, ids)
	}
	_, one := r.get(t, "/v1/payments?status=APPROVED&order_id=nope")
	if len(one["payments"].([]any)) != 0 {
		t.Fatalf("filtered listing = %v, want none", one)
	}
	req, _ := http.NewRequest(http.MethodGet, r.api.URL+"/v1/payments", nil)
	req.Header.Set("Authorization", "Bearer "+bKey)
	resp, theirs := r.do(t, req)
	if resp.StatusCode != http.StatusOK || len(theirs["payments"].([]any)) != 0 {
		t.Fatalf("B's listing = %d %v, want none of A's", resp.StatusCode, theirs)
	}
	req, _ = http.NewRequest(http.MethodGet, r.api.URL+"/v1/payments/"+ids[0]+"/refunds", nil)
	req.Header.Set("Authorization", "Bearer "+bKey)
	if resp, body := r.do(t, req); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("B listing A's refunds = %d %v, want 404", resp.StatusCode, body)
	}
	if resp, body := r.refundAs(t, bKey, ids[0], "b-refund", `{}`); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("B refunding A's payment = %d %v, want 404", resp.StatusCode, body)
	}
}

// slowOK gives the rig's calls a timeout a loaded machine does not reach:
// for the tests whose point is not a timeout.
func slowOK(c *pay.Config) { c.ApprovalTimeout = 5 * time.Second }
