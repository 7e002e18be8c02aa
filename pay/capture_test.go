package pay_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/institution"
	"github.com/stampede-lab/stampede/internal/httpapi"
	"github.com/stampede-lab/stampede/pay"
	"github.com/stampede-lab/stampede/pay/sqlite"
)

// operate posts to /v1/payments/{id}/{what} (capture or void) with body
// ("" for none) under key.
func (r *rig) operate(t *testing.T, id, what, key, body string) (*http.Response, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, r.api.URL+"/v1/payments/"+id+"/"+what, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	return r.do(t, req)
}

// authorized creates a manual-capture payment of amount through the API
// and checks that it is AUTHORIZED.
func (r *rig) authorized(t *testing.T, amount int64) string {
	t.Helper()
	body := fmt.Sprintf(`{"order_id":"o-%s","amount":%d,"currency":"KRW","capture":"manual"}`, pay.NewID(), amount)
	code, p := r.post(t, pay.NewID(), body)
	if code != http.StatusCreated || p["status"] != "AUTHORIZED" || p["capture"] != "manual" {
		t.Fatalf("POST manual = %d %v, want 201 AUTHORIZED", code, p)
	}
	return p["id"].(string)
}

// operationsAt returns the simulator's captures and voids of approval key.
func (r *rig) operationsAt(t *testing.T, key string) []institution.OperationRecord {
	t.Helper()
	all, err := r.inst.Operations(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []institution.OperationRecord
	for _, o := range all {
		if o.ApprovalKey == key {
			out = append(out, o)
		}
	}
	return out
}

// TestAuthorizeCaptureRefundAndEvents: a manual payment is AUTHORIZED;
// a partial capture makes it APPROVED with the captured amount; a
// replay answers the stored capture; a void afterwards is refused naming
// the state; refunds are bounded by the captured amount; the events feed
// lists the payment's, capture's and refund's events in order, a page at
// a time, and another merchant sees none of them.
func TestAuthorizeCaptureRefundAndEvents(t *testing.T) {
	r := newRig(t, nil)
	id := r.authorized(t, 10_000)
	resp, c := r.operate(t, id, "capture", "cap-1", `{"amount":6000}`)
	if resp.StatusCode != http.StatusCreated || c["status"] != "SUCCEEDED" || c["amount"] != float64(6000) || c["kind"] != "capture" {
		t.Fatalf("capture = %d %v, want 201 SUCCEEDED 6000", resp.StatusCode, c)
	}
	resp, again := r.operate(t, id, "capture", "cap-1", `{"amount":6000}`)
	if resp.StatusCode != http.StatusCreated || again["id"] != c["id"] || resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay = %d %v, want the stored capture", resp.StatusCode, again)
	}
	_, p := r.get(t, "/v1/payments/"+id)
	if p["status"] != "APPROVED" || p["captured"] != float64(6000) {
		t.Fatalf("payment after capture = %v, want APPROVED captured 6000", p)
	}
	resp, v := r.operate(t, id, "void", "void-1", "")
	if resp.StatusCode != http.StatusConflict || v["code"] != string(pay.CodeNotAuthorized) || v["payment_status"] != "APPROVED" {
		t.Fatalf("void after capture = %d %v, want 409 not_authorized naming APPROVED", resp.StatusCode, v)
	}
	if resp, over := r.refundAs(t, "", id, "rf-1", `{"amount":6001}`); resp.StatusCode != http.StatusConflict || over["code"] != string(pay.CodeRefundExceeds) {
		t.Fatalf("refund over the captured amount = %d %v, want 409 refund_exceeds", resp.StatusCode, over)
	}
	if resp, rf := r.refundAs(t, "", id, "rf-2", `{}`); resp.StatusCode != http.StatusCreated || rf["amount"] != float64(6000) {
		t.Fatalf("refund of the rest = %d %v, want 6000", resp.StatusCode, rf)
	}
	if ops := r.operationsAt(t, id); len(ops) != 1 || ops[0].Applied != 1 || ops[0].Amount != 6000 {
		t.Fatalf("institution's operations = %+v, want one capture of 6000", ops)
	}

	// The feed, two at a time: every event of the payment, in seq order.
	var types []string
	cursor := ""
	for range 10 {
		_, page := r.get(t, "/v1/events?limit=2&after="+cursor)
		evs := page["events"].([]any)
		if len(evs) == 0 {
			break
		}
		for _, e := range evs {
			types = append(types, e.(map[string]any)["type"].(string))
		}
		cursor = page["next_cursor"].(string)
	}
	want := "payment.created payment.status_changed capture.created payment.status_changed capture.status_changed refund.created refund.created refund.status_changed"
	if got := strings.Join(types, " "); got != want {
		// The refused refund wrote nothing: only rf-2's events.
		want = "payment.created payment.status_changed capture.created payment.status_changed capture.status_changed refund.created refund.status_changed"
		if got != want {
			t.Fatalf("events = %s\nwant   %s", got, want)
		}
	}
	_, otherKey := addMerchant(t, r.store, "")
	req, _ := http.NewRequest(http.MethodGet, r.api.URL+"/v1/events", nil)
	req.Header.Set("Authorization", "Bearer "+otherKey)
	if resp, page := r.do(t, req); resp.StatusCode != http.StatusOK || len(page["events"].([]any)) != 0 {
		t.Fatalf("another merchant's feed = %d %v, want empty", resp.StatusCode, page)
	}
}

// TestConcurrentCaptureAndVoidOneWins: 20 captures and voids of one
// authorisation at once, each under its own key: exactly one succeeds,
// every other is refused 409 (operation_exists or not_authorized), and
// the institution carried out exactly one operation on it.
func TestConcurrentCaptureAndVoidOneWins(t *testing.T) {
	r := newRig(t, func(c *pay.Config) { c.ApprovalTimeout = 5 * time.Second })
	id := r.authorized(t, 10_000)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		won      []string
		refused  int
		unexpect []string
	)
	for i := range 20 {
		what := "capture"
		if i%2 == 1 {
			what = "void"
		}
		wg.Go(func() {
			resp, body := r.operate(t, id, what, fmt.Sprintf("k-%d", i), "")
			mu.Lock()
			defer mu.Unlock()
			switch {
			case resp.StatusCode == http.StatusCreated && body["status"] == "SUCCEEDED":
				won = append(won, what)
			case resp.StatusCode == http.StatusConflict &&
				(body["code"] == string(pay.CodeOperationExists) || body["code"] == string(pay.CodeNotAuthorized)):
				refused++
			default:
				unexpect = append(unexpect, fmt.Sprintf("%s: %d %v", what, resp.StatusCode, body))
			}
		})
	}
	wg.Wait()
	if len(won) != 1 || refused != 19 || len(unexpect) != 0 {
		t.Fatalf("won %v, refused %d, other %v; want exactly one winner", won, refused, unexpect)
	}
	ops := r.operationsAt(t, id)
	if len(ops) != 1 || ops[0].Applied != 1 || ops[0].Kind != won[0] {
		t.Fatalf("institution's operations = %+v, want the one %s", ops, won[0])
	}
	_, p := r.get(t, "/v1/payments/"+id)
	if want := map[string]string{"capture": "APPROVED", "void": "VOIDED"}[won[0]]; p["status"] != want {
		t.Fatalf("payment = %v, want %s", p["status"], want)
	}
}

// TestLostCaptureAnswerSettledByInquiry: the institution captures but
// the answer is lost (held past the timeout): the capture is UNKNOWN
// (202), the payment still AUTHORIZED and held (a void is refused); a
// reconciliation pass asks (never sends it again) and settles it
// SUCCEEDED, the payment APPROVED. The institution got one capture
// request.
func TestLostCaptureAnswerSettledByInquiry(t *testing.T) {
	r := newRig(t, nil)
	id := r.authorized(t, 5000)
	r.behave(t, institution.Behavior{Mode: institution.ModeHangAfter, HangMS: 1000, Idempotent: true, StatusAPI: institution.StatusAPIUp})
	resp, c := r.operate(t, id, "capture", "cap-lost", "")
	if resp.StatusCode != http.StatusAccepted || c["status"] != "UNKNOWN" {
		t.Fatalf("capture with a lost answer = %d %v, want 202 UNKNOWN", resp.StatusCode, c)
	}
	if resp, v := r.operate(t, id, "void", "void-x", ""); resp.StatusCode != http.StatusConflict || v["code"] != string(pay.CodeOperationExists) {
		t.Fatalf("void while the capture is UNKNOWN = %d %v, want 409 operation_exists", resp.StatusCode, v)
	}
	r.behave(t, institution.Behavior{Mode: institution.ModeNormal, Idempotent: true, StatusAPI: institution.StatusAPIUp})
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := r.svc.OperationPass(context.Background()); err != nil {
			t.Fatal(err)
		}
		_, list := r.get(t, "/v1/payments/"+id+"/operations")
		ops := list["operations"].([]any)
		if st := ops[0].(map[string]any)["status"]; st == "SUCCEEDED" {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("capture still %v", st)
		}
		time.Sleep(20 * time.Millisecond)
	}
	_, p := r.get(t, "/v1/payments/"+id)
	if p["status"] != "APPROVED" || p["captured"] != float64(5000) {
		t.Fatalf("payment = %v, want APPROVED captured 5000", p)
	}
	arrivals, err := r.inst.Arrivals(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	sent := 0
	for _, a := range arrivals.Arrivals {
		if a.Path == "/v1/captures" {
			sent++
		}
	}
	if ops := r.operationsAt(t, id); sent != 1 || len(ops) != 1 || ops[0].Applied != 1 {
		t.Fatalf("institution got %d capture requests, operations %+v; want one", sent, ops)
	}
}

// TestAuthWindowVoidsUncapturedAuthorizations: an authorisation older
// than the window is voided by the pass (once: a second pass does
// nothing); a younger one is left alone.
func TestAuthWindowVoidsUncapturedAuthorizations(t *testing.T) {
	const window = 400 * time.Millisecond
	r := newRig(t, func(c *pay.Config) { c.AuthWindow = window })
	old := r.authorized(t, 3000)
	time.Sleep(window + 100*time.Millisecond)
	young := r.authorized(t, 3000)
	for i, want := range []int{1, 0} {
		n, err := r.svc.AuthWindowPass(context.Background())
		if err != nil || n != want {
			t.Fatalf("pass %d voided %d, %v; want %d", i, n, err, want)
		}
	}
	if _, p := r.get(t, "/v1/payments/"+old); p["status"] != "VOIDED" {
		t.Fatalf("old authorisation = %v, want VOIDED", p["status"])
	}
	if _, p := r.get(t, "/v1/payments/"+young); p["status"] != "AUTHORIZED" {
		t.Fatalf("young authorisation = %v, want AUTHORIZED", p["status"])
	}
	if ops := r.operationsAt(t, old); len(ops) != 1 || ops[0].Kind != institution.OpVoid || ops[0].Applied != 1 {
		t.Fatalf("institution's operations = %+v, want one void", ops)
	}
}

// TestCaptureVoidAndEventsBadInput: bad input on every new endpoint and
// field is a 4xx problem naming the field, never a 500.
func TestCaptureVoidAndEventsBadInput(t *testing.T) {
	r := newRig(t, nil)
	id := r.authorized(t, 1000)
	cases := []struct {
		name, method, path, key, body string
		code                          int
		field                         string
	}{
		{"capture: zero amount", "POST", "/v1/payments/" + id + "/capture", "b1", `{"amount":0}`, 400, "amount"},
		{"capture: negative amount", "POST", "/v1/payments/" + id + "/capture", "b2", `{"amount":-5}`, 400, "amount"},
		{"capture: amount a string", "POST", "/v1/payments/" + id + "/capture", "b3", `{"amount":"5"}`, 400, "amount"},
		{"capture: unknown field", "POST", "/v1/payments/" + id + "/capture", "b4", `{"amount":5,"x":1}`, 400, "x"},
		{"capture: duplicate field", "POST", "/v1/payments/" + id + "/capture", "b5", `{"amount":5,"amount":6}`, 400, "amount"},
		{"capture: over the authorisation", "POST", "/v1/payments/" + id + "/capture", "b6", `{"amount":1001}`, 409, "amount"},
		{"capture: no key", "POST", "/v1/payments/" + id + "/capture", "", `{}`, 400, "Idempotency-Key"},
		{"capture: bad id", "POST", "/v1/payments/nope/capture", "b7", `{}`, 400, "id"},
		{"void: a body member", "POST", "/v1/payments/" + id + "/void", "b8", `{"amount":5}`, 400, "amount"},
		{"void: no key", "POST", "/v1/payments/" + id + "/void", "", ``, 400, "Idempotency-Key"},
		{"void: bad id", "POST", "/v1/payments/x/void", "b9", ``, 400, "id"},
		{"create: bad capture", "POST", "/v1/payments", "b10", `{"order_id":"bc","amount":5,"currency":"KRW","capture":"later"}`, 400, "capture"},
		{"create: capture not a string", "POST", "/v1/payments", "b11", `{"order_id":"bc","amount":5,"currency":"KRW","capture":1}`, 400, "capture"},
		{"events: bad cursor", "GET", "/v1/events?after=abc", "", "", 400, "after"},
		{"events: negative cursor", "GET", "/v1/events?after=-1", "", "", 400, "after"},
		{"events: zero limit", "GET", "/v1/events?limit=0", "", "", 400, "limit"},
		{"events: big limit", "GET", "/v1/events?limit=101", "", "", 400, "limit"},
		{"events: unknown parameter", "GET", "/v1/events?since=1", "", "", 400, "since"},
		{"events: repeated parameter", "GET", "/v1/events?limit=1&limit=2", "", "", 400, "limit"},
		{"operations: bad id", "GET", "/v1/payments/x/operations", "", "", 400, "id"},
	}
	for _, tc := range cases {
		req, _ := http.NewRequest(tc.method, r.api.URL+tc.path, strings.NewReader(tc.body))
		if tc.body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if tc.key != "" {
			req.Header.Set("Idempotency-Key", tc.key)
		}
		resp, body := r.do(t, req)
		if resp.StatusCode != tc.code || resp.Header.Get("Content-Type") != httpapi.ProblemContentType || body["field"] != tc.field {
			t.Errorf("%s: %d %v, want a %d problem naming %s", tc.name, resp.StatusCode, body, tc.code, tc.field)
		}
	}
	// Nothing above moved the authorisation.
	if _, p := r.get(t, "/v1/payments/"+id); p["status"] != "AUTHORIZED" {
		t.Fatalf("payment = %v, want AUTHORIZED", p["status"])
	}
}

// TestManualCaptureRefusedWithoutTheCapability: a connector that does
// not declare manual capture refuses "capture": "manual" before
// anything is written, naming capture.
func TestManualCaptureRefusedWithoutTheCapability(t *testing.T) {
	store, err := sqlite.Open(sqlite.Memory)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	svc, err := pay.NewService(store, approveAll{}, pay.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = svc.Create(context.Background(), "k", pay.CreateRequest{MerchantID: merchant, OrderID: "o", Amount: 5, Currency: "KRW", Capture: pay.CaptureManual})
	if e := stampede.As(err); e == nil || e.Code != pay.CodeNotSupported || e.Field != "capture" {
		t.Fatalf("manual capture without the capability: %v, want not_supported naming capture", err)
	}
	if ps, err := store.List(context.Background(), "", 10); err != nil || len(ps) != 0 {
		t.Fatalf("payments written: %v, %v; want none", ps, err)
	}
}

// approveAll is an Institution without capabilities that approves
// everything.
type approveAll struct{}

func (approveAll) Approve(context.Context, pay.ApprovalRequest) (pay.Verdict, error) {
	return pay.Verdict{Approved: true}, nil
}

func (approveAll) Inquire(context.Context, string) (pay.Inquiry, error) {
	return pay.Inquiry{}, pay.ErrInquiryUnavailable
}
