package checkout_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-lab/stampede/checkout"
)

// lostFirstAnswer is a Payer whose first Pay loses its answer (after
// reaching pay when reach is set) and which answers every later Pay 401,
// as pay does when it checks a retry's admission before it can see the
// first attempt's key and the buyer's admission has ended meanwhile.
type lostFirstAnswer struct {
	checkout.Payer
	reach bool
	calls atomic.Int32
}

func (l *lostFirstAnswer) Pay(ctx context.Context, req checkout.PaymentRequest) (checkout.Payment, error) {
	if l.calls.Add(1) == 1 {
		if l.reach {
			if _, err := l.Payer.Pay(ctx, req); err != nil {
				return checkout.Payment{}, err
			}
		}
		return checkout.Payment{}, context.DeadlineExceeded
	}
	return checkout.Payment{}, &checkout.RejectedError{Code: "unauthorized", Status: http.StatusUnauthorized, Message: "the admission has ended"}
}

// TestRefusedRetryIsNoProofOfNoPayment: a purchase whose first answer was
// lost is retried and the retry refused; the checkout asks pay for the
// order's payment instead of releasing the seats. When the first attempt
// made it (approved), the order is paid; when it made nothing, the seats
// go back only once three pay timeouts have passed since the order began.
func TestRefusedRetryIsNoProofOfNoPayment(t *testing.T) {
	t.Parallel()
	p := startPay(t, 3*time.Second)
	for _, reach := range []bool{true, false} {
		payer := &lostFirstAnswer{reach: reach}
		r := newRig(t, sqliteFile(t), p, func(c *checkout.Config) {
			payer.Payer, c.Payer = c.Payer, payer
			c.PayTimeout = 300 * time.Millisecond
		})
		r.createEvent(t, "gig", 1)
		adm := admissionToken("ida", time.Now().Add(time.Minute))
		h := r.hold(t, "gig", "ida", adm, 1)
		hold := h.body["id"].(string)
		if o := r.purchase(t, hold, "ida", adm); o.status != http.StatusAccepted || o.body["status"] != "pending" {
			t.Fatalf("reach %v: purchase with a lost answer = %d %v, want 202 pending", reach, o.status, o.body)
		}
		o := r.purchase(t, hold, "ida", adm)
		if reach {
			if o.status != http.StatusOK || o.body["status"] != "paid" {
				t.Fatalf("a refused retry of a payment the first attempt made = %d %v, want the order paid", o.status, o.body)
			}
			if e := r.event(t, "gig"); e["sold"] != 1.0 {
				t.Fatalf("event after the paid order: %v", e)
			}
			continue
		}
		if o.status != http.StatusAccepted || o.body["status"] != "pending" {
			t.Fatalf("a refused retry at once, no payment found = %d %v, want still pending (the first attempt may be in flight)", o.status, o.body)
		}
		time.Sleep(3 * 300 * time.Millisecond)
		if o := r.purchase(t, hold, "ida", adm); o.body["status"] == "pending" || o.body["status"] == "paid" {
			t.Fatalf("a refused retry three pay timeouts on, no payment = %d %v, want the order ended", o.status, o.body)
		}
		if e := r.event(t, "gig"); e["held"] != 0.0 || e["sold"] != 0.0 {
			t.Fatalf("event after the refused order: %v, want the seat back", e)
		}
	}
}
