package checkout_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-lab/stampede/checkout"
	"github.com/stampede-lab/stampede/institution"
)

// lostCapture is a Payer whose first Capture reaches pay and loses its
// answer; declineCapture answers every Capture FAILED without calling pay,
// as a declined capture would.
type lostCapture struct {
	checkout.Payer
	captures       atomic.Int32
	declineCapture bool
}

func (l *lostCapture) Capture(ctx context.Context, id, key string) (checkout.OperationStatus, error) {
	if l.declineCapture {
		return checkout.OperationFailed, nil
	}
	if l.captures.Add(1) == 1 {
		if _, err := l.Payer.Capture(ctx, id, key); err != nil {
			return "", err
		}
		return "", context.DeadlineExceeded
	}
	return l.Payer.Capture(ctx, id, key)
}

// TestManualCaptureChargesOnlyASale: with --capture manual the purchase
// authorises and the checkout captures before the seats are sold. A
// capture whose answer was lost is asked again under its key (one
// capture at the institution, never a void); a declined capture voids the
// authorisation and gives the seats back: nobody is charged without a
// sold seat.
func TestManualCaptureChargesOnlyASale(t *testing.T) {
	t.Parallel()
	p := startPay(t, 3*time.Second)
	for _, decline := range []bool{false, true} {
		payer := &lostCapture{declineCapture: decline}
		r := newRig(t, sqliteFile(t), p, func(c *checkout.Config) {
			payer.Payer, c.Payer = c.Payer, payer
			c.Capture = checkout.CaptureManual
		})
		r.createEvent(t, "gig", 1)
		adm := admissionToken("ida", time.Now().Add(time.Minute))
		hold := r.hold(t, "gig", "ida", adm, 1).body["id"].(string)
		o := r.purchase(t, hold, "ida", adm)
		if !decline {
			if o.status != http.StatusAccepted || o.body["status"] != "pending" {
				t.Fatalf("a purchase whose capture answer was lost = %d %v, want 202 pending", o.status, o.body)
			}
			o = r.purchase(t, hold, "ida", adm)
			if o.status != http.StatusOK || o.body["status"] != "paid" {
				t.Fatalf("asked again = %d %v, want paid", o.status, o.body)
			}
			if e := r.event(t, "gig"); e["sold"] != 1.0 {
				t.Fatalf("event: %v, want the seat sold", e)
			}
		} else {
			if o.status != http.StatusOK || o.body["status"] != "failed" {
				t.Fatalf("a purchase whose capture was declined = %d %v, want failed", o.status, o.body)
			}
			if e := r.event(t, "gig"); e["held"] != 0.0 || e["sold"] != 0.0 {
				t.Fatalf("event: %v, want the seat back", e)
			}
		}
		pid := o.body["payment_id"].(string)
		ops, err := p.ledger.Operations(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var captures, voids int
		for _, op := range ops {
			if op.ApprovalKey != pid && op.ExternalKey != pid {
				continue
			}
			switch op.Kind {
			case institution.OpCapture:
				captures += op.Applied
			case institution.OpVoid:
				voids += op.Applied
			}
		}
		if want := [2]int{1, 0}; decline {
			want = [2]int{0, 1}
			if captures != want[0] || voids != want[1] {
				t.Fatalf("declined: institution captured %d, voided %d; want %v", captures, voids, want)
			}
		} else if captures != want[0] || voids != want[1] {
			t.Fatalf("institution captured %d, voided %d; want %v", captures, voids, want)
		}
	}
}
