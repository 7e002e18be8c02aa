package fulfilment_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/stampede-lab/stampede/fulfilment"
	"github.com/stampede-lab/stampede/pay"
)

func TestParity(t *testing.T) {
	const m = "merchant"
	rec := func(id, order string, st pay.Status) fulfilment.PaymentRecord {
		return fulfilment.PaymentRecord{PaymentID: id, MerchantID: m, OrderID: order, Status: st}
	}
	tk := func(payment, order string) fulfilment.Ticket {
		return fulfilment.Ticket{ID: "t-" + payment, PaymentID: payment, MerchantID: m, OrderID: order}
	}
	payments := []fulfilment.PaymentRecord{
		rec("a", "o1", pay.StatusApproved),           // matched
		rec("b", "o2", pay.StatusDeclined),           // no ticket: fine
		rec("c", "o2", pay.StatusApproved),           // the retry of o2: matched
		rec("d", "o3", pay.StatusApproved),           // no ticket: missing
		rec("e", "o1", pay.StatusApproved),           // o1's ticket is a's: double approval
		rec("f", "o4", pay.StatusUnknown),            // has a ticket: not approved
		rec("g", "o5", pay.StatusApproved),           // two tickets: duplicate
		{PaymentID: "h", Status: pay.StatusApproved}, // no order known, no ticket: missing
		rec("i", "o6", pay.StatusFailed),
		{PaymentID: "j", MerchantID: m, OrderID: "o7", Status: pay.StatusApproved, Cancelled: true}, // cancelled, ticket revoked: fine
		{PaymentID: "k", MerchantID: m, OrderID: "o8", Status: pay.StatusApproved, Cancelled: true}, // cancelled, live ticket
	}
	tickets := []fulfilment.Ticket{tk("a", "o1"), tk("c", "o2"), tk("f", "o4"), tk("g", "o5"), tk("g", "o5b"), tk("z", "o9"), tk("k", "o8")}
	got := fulfilment.Parity(payments, tickets)
	want := fulfilment.ParityReport{
		Matched: 2, MissingTicket: []string{"d", "h"}, OrderAlreadyTicketed: []string{"e"},
		NotApproved: []string{"f"}, UnknownPayment: []string{"z"}, Duplicate: []string{"g"},
		Cancelled: 1, CancelledTicketed: []string{"k"},
	}
	if got.Matched != want.Matched || !slices.Equal(got.MissingTicket, want.MissingTicket) ||
		!slices.Equal(got.OrderAlreadyTicketed, want.OrderAlreadyTicketed) || !slices.Equal(got.NotApproved, want.NotApproved) ||
		!slices.Equal(got.UnknownPayment, want.UnknownPayment) || !slices.Equal(got.Duplicate, want.Duplicate) ||
		got.Cancelled != want.Cancelled || !slices.Equal(got.CancelledTicketed, want.CancelledTicketed) {
		t.Fatalf("Parity = %+v\nwant    %+v", got, want)
	}
	if got.Mismatches() != 7 {
		t.Errorf("Mismatches() = %d, want 7", got.Mismatches())
	}
	if s := got.String(); !strings.Contains(s, "matched 2") || !strings.Contains(s, "duplicate 1") {
		t.Errorf("String() = %q", s)
	}
}

// TestParityExact: one ticket per APPROVED payment and no other is exact,
// whatever the other payments are.
func TestParityExact(t *testing.T) {
	var (
		payments []fulfilment.PaymentRecord
		tickets  []fulfilment.Ticket
	)
	for i, st := range []pay.Status{pay.StatusApproved, pay.StatusDeclined, pay.StatusFailed, pay.StatusUnknown, pay.StatusPending, pay.StatusApproved} {
		id := string(rune('a' + i))
		payments = append(payments, fulfilment.PaymentRecord{PaymentID: id, Status: st})
		if st == pay.StatusApproved {
			tickets = append(tickets, fulfilment.Ticket{PaymentID: id, OrderID: id})
		}
	}
	if r := fulfilment.Parity(payments, tickets); r.Mismatches() != 0 || r.Matched != 2 {
		t.Fatalf("Parity = %+v, want exact with 2 matched", r)
	}
	if r := fulfilment.Parity(nil, nil); r.Mismatches() != 0 || r.Matched != 0 {
		t.Fatalf("Parity of nothing = %+v", r)
	}
}
