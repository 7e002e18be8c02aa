// Package connectortest is the conformance suite of the payment
// service's connectors (pay.Connector and pay.Refunder) against the
// institution simulator (package institution) speaking the connector's
// protocol: approvals, idempotent repeats, inquiries by the external
// key, full and partial refunds and their inquiries, authorisations with
// their captures and voids (where the connector declares them), and every fault
// mode of the simulator, each of which must come out as the error the
// payment service documents (pay.ErrNotSent, ErrRejected,
// ErrOutcomeUnknown, ErrInquiryUnavailable) or as a verdict.
//
// The connector under test is given with a simulator whose behaviour the
// suite sets (the simulator's own protocol for pay/institutionclient,
// its toss protocol for pay/tossconnector). Stripe's connector is not
// run here: stripe-mock has no fault modes and answers canned objects.
package connectortest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/stampede-lab/stampede/institution"
	"github.com/stampede-lab/stampede/pay"
)

// Connector is what the suite tests.
type Connector interface {
	pay.Connector
	pay.Refunder
}

// Harness is a connector in front of a simulator.
type Harness struct {
	// Connector talks to Sim. Its HTTP client's timeout must be
	// CallTimeout: the hang modes outlast it.
	Connector Connector
	// Unreachable is the same connector pointed at an address where
	// nothing listens.
	Unreachable Connector
	// Sim is the simulator behind Connector; the suite resets it and sets
	// its behaviour.
	Sim *institution.Simulator
	// CallTimeout is the connector's timeout of one request.
	CallTimeout time.Duration
}

// newKey returns a new external key that fits every institution's
// rules (Toss's orderId: 6 to 64 letters, digits, '-', '_').
func newKey(prefix string) string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return prefix + "-" + hex.EncodeToString(b)
}

// approval returns an approval request for a new order; PaymentKey is
// what a widget would have issued (ignored by connectors without one).
func approval(amount int64) pay.ApprovalRequest {
	key := newKey("ord")
	return pay.ApprovalRequest{ExternalKey: key, Amount: amount, Currency: "KRW", PaymentKey: "pk_" + key}
}

// Run runs the suite; newHarness is called once per subtest.
func Run(t *testing.T, newHarness func(t *testing.T) Harness) {
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, Harness)
	}{
		{"ApproveAndInquire", testApprove},
		{"RepeatedApprovalChargesOnce", testRepeat},
		{"NotFound", testNotFound},
		{"Decline", testDecline},
		{"ErrorMode", testErrorMode},
		{"HangBeforeProcessing", testHangBefore},
		{"HangAfterProcessing", testHangAfter},
		{"NotIdempotentInstitution", testNotIdempotent},
		{"StatusAPIDown", testStatusDown},
		{"NotSent", testNotSent},
		{"FullAndPartialRefunds", testRefunds},
		{"RefundFaultModes", testRefundFaults},
		{"AuthorizeCaptureAndVoid", testCaptureVoid},
		{"CaptureAndVoidFaultModes", testCaptureVoidFaults},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.Sim.Reset()
			tc.fn(t, h)
		})
	}
}

// ctx bounds one subtest's calls.
func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

// behave sets the simulator's behaviour from the default.
func behave(t *testing.T, h Harness, change func(*institution.Behavior)) {
	t.Helper()
	b := institution.DefaultBehavior()
	change(&b)
	if err := h.Sim.SetBehavior(b); err != nil {
		t.Fatal(err)
	}
}

// approve approves req and fails the test on an error.
func approve(t *testing.T, h Harness, req pay.ApprovalRequest) pay.Verdict {
	t.Helper()
	v, err := h.Connector.Approve(ctx(t), req)
	if err != nil {
		t.Fatalf("Approve: %v", err)
	}
	return v
}

// inquire asks about key and fails the test on an error.
func inquire(t *testing.T, h Harness, key string) pay.Inquiry {
	t.Helper()
	q, err := h.Connector.Inquire(ctx(t), key)
	if err != nil {
		t.Fatalf("Inquire(%s): %v", key, err)
	}
	return q
}

// record returns the simulator's record of key (zero when none).
func record(h Harness, key string) institution.Record {
	for _, r := range h.Sim.Ledger().Records {
		if r.ExternalKey == key {
			return r
		}
	}
	return institution.Record{}
}

// arrivals counts the requests that reached the simulator for key.
func arrivals(h Harness, key string) int {
	n := 0
	for _, a := range h.Sim.Arrivals().Arrivals {
		if a.ExternalKey == key {
			n++
		}
	}
	return n
}

// notFound checks an inquiry's answer for a key the institution has no
// record of: not found, and either not definitive or with a window.
func notFound(t *testing.T, q pay.Inquiry, what string) {
	t.Helper()
	if q.Found || (q.Definitive && q.NotFoundWindow <= 0) {
		t.Errorf("%s: inquiry %+v, want not found (definitive only with a not-found window)", what, q)
	}
}

func testApprove(t *testing.T, h Harness) {
	req := approval(15000)
	if v := approve(t, h, req); !v.Approved {
		t.Fatalf("Approve = %+v, want approved", v)
	}
	if r := record(h, req.ExternalKey); r.Charges != 1 || r.Amount != 15000 {
		t.Errorf("the simulator's record %+v, want one charge of 15000", r)
	}
	if q := inquire(t, h, req.ExternalKey); !q.Found || !q.Approved || !q.Definitive {
		t.Errorf("Inquire = %+v, want found, approved, definitive", q)
	}
}

func testRepeat(t *testing.T, h Harness) {
	req := approval(5000)
	for i := range 3 {
		if v := approve(t, h, req); !v.Approved {
			t.Fatalf("Approve #%d = %+v, want approved", i+1, v)
		}
	}
	if r := record(h, req.ExternalKey); r.Charges != 1 || r.Requests != 3 {
		t.Errorf("three approvals of one key: record %+v, want 3 requests and one charge", r)
	}
}

func testNotFound(t *testing.T, h Harness) {
	notFound(t, inquire(t, h, newKey("never")), "a key never sent")
}

func testDecline(t *testing.T, h Harness) {
	behave(t, h, func(b *institution.Behavior) { b.Mode = institution.ModeDecline })
	req := approval(5000)
	if v := approve(t, h, req); v.Approved {
		t.Fatalf("DECLINE: Approve = %+v, want declined", v)
	}
	if q := inquire(t, h, req.ExternalKey); !q.Found || q.Approved || !q.Definitive {
		t.Errorf("DECLINE: Inquire = %+v, want found, declined, definitive", q)
	}
	if r := record(h, req.ExternalKey); r.Charges != 0 {
		t.Errorf("DECLINE: %d charges", r.Charges)
	}
}

// sendsAgain is how many requests a lost approval makes at most: one,
// unless the connector declares idempotent approvals.
func sendsAgain(h Harness) bool { return h.Connector.Capabilities().IdempotentApproval }

// checkResends checks the arrivals of a key whose answers were lost: one
// without idempotent approvals; with them, possibly more.
func checkResends(t *testing.T, h Harness, key, mode string) {
	t.Helper()
	n := arrivals(h, key)
	if n < 1 || (!sendsAgain(h) && n != 1) {
		t.Errorf("%s: %d requests reached the institution; a connector without idempotent approvals sends a lost one once", mode, n)
	}
}

func testErrorMode(t *testing.T, h Harness) {
	behave(t, h, func(b *institution.Behavior) { b.Mode = institution.ModeError })
	req := approval(5000)
	_, err := h.Connector.Approve(ctx(t), req)
	if !errors.Is(err, pay.ErrOutcomeUnknown) {
		t.Fatalf("ERROR: Approve error %v, want ErrOutcomeUnknown (a 5xx does not promise nothing happened)", err)
	}
	checkResends(t, h, req.ExternalKey, "ERROR")
	notFound(t, inquire(t, h, req.ExternalKey), "ERROR")
}

func testHangBefore(t *testing.T, h Harness) {
	behave(t, h, func(b *institution.Behavior) {
		b.Mode, b.HangMS = institution.ModeHangBefore, (20 * h.CallTimeout).Milliseconds()
	})
	req := approval(5000)
	_, err := h.Connector.Approve(ctx(t), req)
	if !errors.Is(err, pay.ErrOutcomeUnknown) {
		t.Fatalf("HANG_BEFORE_PROCESSING: Approve error %v, want ErrOutcomeUnknown", err)
	}
	checkResends(t, h, req.ExternalKey, "HANG_BEFORE_PROCESSING")
	if r := record(h, req.ExternalKey); r.Requests != 0 {
		t.Errorf("HANG_BEFORE_PROCESSING recorded %+v", r)
	}
	notFound(t, inquire(t, h, req.ExternalKey), "HANG_BEFORE_PROCESSING")
}

func testHangAfter(t *testing.T, h Harness) {
	behave(t, h, func(b *institution.Behavior) {
		b.Mode, b.HangMS = institution.ModeHangAfter, (20 * h.CallTimeout).Milliseconds()
	})
	req := approval(5000)
	_, err := h.Connector.Approve(ctx(t), req)
	if !errors.Is(err, pay.ErrOutcomeUnknown) {
		t.Fatalf("HANG_AFTER_PROCESSING: Approve error %v, want ErrOutcomeUnknown", err)
	}
	checkResends(t, h, req.ExternalKey, "HANG_AFTER_PROCESSING")
	if r := record(h, req.ExternalKey); r.Charges != 1 {
		t.Errorf("HANG_AFTER_PROCESSING with an idempotent institution: record %+v, want one charge whatever was sent again", r)
	}
	if q := inquire(t, h, req.ExternalKey); !q.Found || !q.Approved || !q.Definitive {
		t.Errorf("HANG_AFTER_PROCESSING: Inquire = %+v, want the charge found", q)
	}
}

// testNotIdempotent: with the simulator's idempotency off, every request
// that reaches processing charges; a connector that does not declare
// idempotent approvals therefore never sends a lost one again.
func testNotIdempotent(t *testing.T, h Harness) {
	behave(t, h, func(b *institution.Behavior) {
		b.Mode, b.HangMS, b.Idempotent = institution.ModeHangAfter, (20 * h.CallTimeout).Milliseconds(), false
	})
	req := approval(5000)
	if _, err := h.Connector.Approve(ctx(t), req); !errors.Is(err, pay.ErrOutcomeUnknown) {
		t.Fatalf("Approve error %v, want ErrOutcomeUnknown", err)
	}
	r := record(h, req.ExternalKey)
	if r.Charges != arrivals(h, req.ExternalKey) || (!sendsAgain(h) && r.Charges != 1) {
		t.Errorf("idempotent off: %d charges for %d requests; want one request unless the connector declares idempotent approvals",
			r.Charges, arrivals(h, req.ExternalKey))
	}
}

func testStatusDown(t *testing.T, h Harness) {
	req := approval(5000)
	approve(t, h, req)
	behave(t, h, func(b *institution.Behavior) { b.StatusAPI = institution.StatusAPIDown })
	if _, err := h.Connector.Inquire(ctx(t), req.ExternalKey); !errors.Is(err, pay.ErrInquiryUnavailable) {
		t.Errorf("status API down: Inquire error %v, want ErrInquiryUnavailable", err)
	}
	if _, err := h.Connector.Inquire(ctx(t), newKey("never")); !errors.Is(err, pay.ErrInquiryUnavailable) {
		t.Errorf("status API down: Inquire of an unknown key: %v, want ErrInquiryUnavailable, never not found", err)
	}
	if _, err := h.Connector.InquireRefund(ctx(t), newKey("ref"), req.ExternalKey); !errors.Is(err, pay.ErrInquiryUnavailable) {
		t.Errorf("status API down: InquireRefund error %v, want ErrInquiryUnavailable", err)
	}
}

func testNotSent(t *testing.T, h Harness) {
	req := approval(5000)
	if _, err := h.Unreachable.Approve(ctx(t), req); !errors.Is(err, pay.ErrNotSent) {
		t.Errorf("unreachable: Approve error %v, want ErrNotSent", err)
	}
	if _, err := h.Unreachable.Refund(ctx(t), pay.RefundRequest{ExternalKey: newKey("ref"), PaymentKey: req.ExternalKey, Amount: 1, Currency: "KRW"}); !errors.Is(err, pay.ErrNotSent) {
		t.Errorf("unreachable: Refund error %v, want ErrNotSent", err)
	}
	if _, err := h.Unreachable.Inquire(ctx(t), req.ExternalKey); !errors.Is(err, pay.ErrInquiryUnavailable) {
		t.Errorf("unreachable: Inquire error %v, want ErrInquiryUnavailable", err)
	}
}

// refund asks for a refund and fails the test on an error.
func refund(t *testing.T, h Harness, req pay.RefundRequest) pay.RefundVerdict {
	t.Helper()
	v, err := h.Connector.Refund(ctx(t), req)
	if err != nil {
		t.Fatalf("Refund %+v: %v", req, err)
	}
	return v
}

// refunded is what the simulator refunded of an approval.
func refunded(h Harness, key string) int64 { return h.Sim.Refunds().RefundedByApproval[key] }

func testRefunds(t *testing.T, h Harness) {
	caps := h.Connector.Capabilities()
	if !caps.Refund || !caps.PartialRefund {
		t.Skipf("capabilities %s: no partial refunds", caps)
	}
	pa := approval(10000)
	approve(t, h, pa)
	r1 := pay.RefundRequest{ExternalKey: newKey("ref"), PaymentKey: pa.ExternalKey, Amount: 3000, Currency: "KRW", Reason: "one seat returned"}
	if v := refund(t, h, r1); !v.Succeeded {
		t.Fatalf("partial refund: %+v, want succeeded", v)
	}
	if v := refund(t, h, r1); !v.Succeeded {
		t.Fatalf("the same refund again: %+v, want its first answer", v)
	}
	if got := refunded(h, pa.ExternalKey); got != 3000 {
		t.Fatalf("refunded %d after one refund sent twice, want 3000", got)
	}
	r2 := pay.RefundRequest{ExternalKey: newKey("ref"), PaymentKey: pa.ExternalKey, Amount: 7000, Currency: "KRW"}
	if v := refund(t, h, r2); !v.Succeeded {
		t.Fatalf("refund of the rest: %+v, want succeeded", v)
	}
	over := pay.RefundRequest{ExternalKey: newKey("ref"), PaymentKey: pa.ExternalKey, Amount: 1, Currency: "KRW"}
	if v, err := h.Connector.Refund(ctx(t), over); (err == nil && v.Succeeded) || (err != nil && !errors.Is(err, pay.ErrRejected)) {
		t.Errorf("refund beyond the amount: %+v, %v; want declined or ErrRejected", v, err)
	}
	if got := refunded(h, pa.ExternalKey); got != 10000 {
		t.Errorf("refunded %d, want the payment's 10000", got)
	}
	for _, r := range []pay.RefundRequest{r1, r2} {
		q, err := h.Connector.InquireRefund(ctx(t), r.ExternalKey, pa.ExternalKey)
		if err != nil || !q.Found || !q.Succeeded || !q.Definitive {
			t.Errorf("InquireRefund(%s) = %+v, %v; want found, succeeded, definitive", r.ExternalKey, q, err)
		}
	}
	q, err := h.Connector.InquireRefund(ctx(t), newKey("ref"), pa.ExternalKey)
	if err != nil || q.Found || (q.Definitive && q.NotFoundWindow <= 0) {
		t.Errorf("InquireRefund of a refund never sent = %+v, %v; want not found", q, err)
	}
	// A full refund of another payment.
	pb := approval(4000)
	approve(t, h, pb)
	if v := refund(t, h, pay.RefundRequest{ExternalKey: newKey("ref"), PaymentKey: pb.ExternalKey, Amount: 4000, Currency: "KRW"}); !v.Succeeded {
		t.Errorf("full refund: %+v", v)
	}
	if q := inquire(t, h, pb.ExternalKey); !q.Found || !q.Approved {
		t.Errorf("a refunded payment's inquiry = %+v, want found and approved (a refund does not undo the approval)", q)
	}
}

func testRefundFaults(t *testing.T, h Harness) {
	if !h.Connector.Capabilities().Refund {
		t.Skip("no refunds")
	}
	pa := approval(10000)
	approve(t, h, pa)
	hang := (20 * h.CallTimeout).Milliseconds()
	for _, tc := range []struct {
		mode institution.Mode
		// want checks the refund's answer; found is whether its
		// inquiry must then find it succeeded.
		want  func(pay.RefundVerdict, error) bool
		what  string
		found bool
	}{
		{institution.ModeDecline, func(v pay.RefundVerdict, err error) bool { return err == nil && !v.Succeeded }, "declined", false},
		{institution.ModeError, func(_ pay.RefundVerdict, err error) bool { return errors.Is(err, pay.ErrOutcomeUnknown) }, "ErrOutcomeUnknown", false},
		{institution.ModeHangBefore, func(_ pay.RefundVerdict, err error) bool { return errors.Is(err, pay.ErrOutcomeUnknown) }, "ErrOutcomeUnknown", false},
		{institution.ModeHangAfter, func(_ pay.RefundVerdict, err error) bool { return errors.Is(err, pay.ErrOutcomeUnknown) }, "ErrOutcomeUnknown", true},
	} {
		behave(t, h, func(b *institution.Behavior) { b.Mode, b.HangMS = tc.mode, hang })
		r := pay.RefundRequest{ExternalKey: newKey("ref"), PaymentKey: pa.ExternalKey, Amount: 1000, Currency: "KRW"}
		v, err := h.Connector.Refund(ctx(t), r)
		if !tc.want(v, err) {
			t.Errorf("%s: Refund = %+v, %v; want %s", tc.mode, v, err, tc.what)
		}
		behave(t, h, func(*institution.Behavior) {})
		q, err := h.Connector.InquireRefund(ctx(t), r.ExternalKey, pa.ExternalKey)
		if err != nil || (q.Found && q.Succeeded) != tc.found {
			t.Errorf("%s: InquireRefund = %+v, %v; want a succeeded refund found: %v", tc.mode, q, err, tc.found)
		}
	}
	if got := refunded(h, pa.ExternalKey); got != 1000 {
		t.Errorf("refunded %d, want only HANG_AFTER_PROCESSING's 1000", got)
	}
}

// capturer returns h's connector as a pay.Capturer, or skips the test
// when it does not declare manual capture and void.
func capturer(t *testing.T, h Harness) pay.Capturer {
	t.Helper()
	c, ok := h.Connector.(pay.Capturer)
	caps := h.Connector.Capabilities()
	if !caps.ManualCapture || !caps.Void {
		if ok {
			t.Fatalf("%s implements pay.Capturer without declaring manual_capture and void", h.Connector.Name())
		}
		t.Skip("no manual capture")
	}
	if !ok {
		t.Fatalf("%s declares manual_capture and void but is no pay.Capturer", h.Connector.Name())
	}
	return c
}

// authorize authorises req and fails the test unless it is approved.
func authorize(t *testing.T, c pay.Capturer, req pay.ApprovalRequest) {
	t.Helper()
	if v, err := c.Authorize(ctx(t), req); err != nil || !v.Approved {
		t.Fatalf("Authorize = %+v, %v; want approved", v, err)
	}
}

func testCaptureVoid(t *testing.T, h Harness) {
	c := capturer(t, h)
	pa := approval(10000)
	authorize(t, c, pa)
	if r := record(h, pa.ExternalKey); r.Status != institution.StatusAuthorized || r.Charges != 0 {
		t.Fatalf("after the authorisation the institution has %+v, want AUTHORIZED, nothing charged", r)
	}
	if q := inquire(t, h, pa.ExternalKey); !q.Found || !q.Approved {
		t.Errorf("an authorisation's inquiry = %+v, want found and approved", q)
	}
	capKey := newKey("cap")
	q, err := c.InquireOperation(ctx(t), pay.OpCapture, capKey, pa.ExternalKey)
	if err != nil {
		t.Fatal(err)
	}
	if q.Found || (q.Definitive && q.NotFoundWindow <= 0) {
		t.Errorf("inquiry of a capture never sent = %+v, want not found", q)
	}
	v, err := c.Capture(ctx(t), pay.OperationRequest{ExternalKey: capKey, PaymentKey: pa.ExternalKey, Amount: 6000, Currency: "KRW"})
	if err != nil || !v.Succeeded {
		t.Fatalf("Capture = %+v, %v; want succeeded", v, err)
	}
	if r := record(h, pa.ExternalKey); r.Status != institution.StatusApproved || r.Captured != 6000 || r.Charges != 1 {
		t.Errorf("after the capture the institution has %+v, want APPROVED, 6000 captured once", r)
	}
	if q, err := c.InquireOperation(ctx(t), pay.OpCapture, capKey, pa.ExternalKey); err != nil || !q.Found || !q.Succeeded {
		t.Errorf("the capture's inquiry = %+v, %v; want found, succeeded", q, err)
	}
	// A void of a captured payment is refused, nothing done.
	if _, err := c.Void(ctx(t), pay.OperationRequest{ExternalKey: newKey("void"), PaymentKey: pa.ExternalKey, Currency: "KRW"}); !errors.Is(err, pay.ErrRejected) {
		t.Errorf("a void after the capture: %v, want ErrRejected", err)
	}

	pb := approval(5000)
	authorize(t, c, pb)
	voidKey := newKey("void")
	if v, err := c.Void(ctx(t), pay.OperationRequest{ExternalKey: voidKey, PaymentKey: pb.ExternalKey, Currency: "KRW"}); err != nil || !v.Succeeded {
		t.Fatalf("Void = %+v, %v; want succeeded", v, err)
	}
	if r := record(h, pb.ExternalKey); r.Status != institution.StatusVoided || r.Charges != 0 {
		t.Errorf("after the void the institution has %+v, want VOIDED, nothing charged", r)
	}
	if q, err := c.InquireOperation(ctx(t), pay.OpVoid, voidKey, pb.ExternalKey); err != nil || !q.Found || !q.Succeeded {
		t.Errorf("the void's inquiry = %+v, %v; want found, succeeded", q, err)
	}
}

func testCaptureVoidFaults(t *testing.T, h Harness) {
	c := capturer(t, h)
	hang := (20 * h.CallTimeout).Milliseconds()
	for _, tc := range []struct {
		mode  institution.Mode
		want  func(pay.RefundVerdict, error) bool
		what  string
		found bool // the inquiry then finds it carried out
	}{
		{institution.ModeDecline, func(v pay.RefundVerdict, err error) bool { return err == nil && !v.Succeeded }, "declined", false},
		{institution.ModeError, func(_ pay.RefundVerdict, err error) bool { return errors.Is(err, pay.ErrOutcomeUnknown) }, "ErrOutcomeUnknown", false},
		{institution.ModeHangBefore, func(_ pay.RefundVerdict, err error) bool { return errors.Is(err, pay.ErrOutcomeUnknown) }, "ErrOutcomeUnknown", false},
		{institution.ModeHangAfter, func(_ pay.RefundVerdict, err error) bool { return errors.Is(err, pay.ErrOutcomeUnknown) }, "ErrOutcomeUnknown", true},
	} {
		for _, kind := range []pay.OperationKind{pay.OpCapture, pay.OpVoid} {
			pa := approval(3000)
			authorize(t, c, pa)
			behave(t, h, func(b *institution.Behavior) { b.Mode, b.HangMS = tc.mode, hang })
			req := pay.OperationRequest{ExternalKey: newKey(string(kind)), PaymentKey: pa.ExternalKey, Currency: "KRW"}
			var (
				v   pay.RefundVerdict
				err error
			)
			if kind == pay.OpCapture {
				req.Amount = 3000
				v, err = c.Capture(ctx(t), req)
			} else {
				v, err = c.Void(ctx(t), req)
			}
			if !tc.want(v, err) {
				t.Errorf("%s %s = %+v, %v; want %s", tc.mode, kind, v, err, tc.what)
			}
			behave(t, h, func(b *institution.Behavior) { b.StatusAPI = institution.StatusAPIDown })
			if _, err := c.InquireOperation(ctx(t), kind, req.ExternalKey, pa.ExternalKey); !errors.Is(err, pay.ErrInquiryUnavailable) {
				t.Errorf("%s %s: inquiry with the status API down: %v, want ErrInquiryUnavailable", tc.mode, kind, err)
			}
			behave(t, h, func(*institution.Behavior) {})
			q, err := c.InquireOperation(ctx(t), kind, req.ExternalKey, pa.ExternalKey)
			if err != nil || (q.Found && q.Succeeded) != tc.found {
				t.Errorf("%s %s: inquiry = %+v, %v; want carried out: %v", tc.mode, kind, q, err, tc.found)
			}
		}
	}
	// Unreachable: not sent.
	if u, ok := h.Unreachable.(pay.Capturer); ok {
		_, err := u.Capture(ctx(t), pay.OperationRequest{ExternalKey: newKey("cap"), PaymentKey: newKey("ord"), Amount: 1, Currency: "KRW"})
		if !errors.Is(err, pay.ErrNotSent) {
			t.Errorf("capture to an unreachable institution: %v, want ErrNotSent", err)
		}
	}
}
