package fulfilment

import (
	"context"
	"fmt"
	"slices"

	"github.com/stampede-lab/stampede/protocol"
)

// PaymentRecord is what Parity needs of a payment: its id and status
// and, to tell a double approval from a lost event, its order.
type PaymentRecord struct {
	PaymentID  string
	MerchantID string // optional
	OrderID    string // optional
	Status     protocol.PaymentStatus
	// Cancelled is true when the payment has a cancellation (the
	// merchant's, or pay's closure): its order does not go on, so it
	// holds no live ticket (its ticket, if one was issued, is revoked).
	Cancelled bool
}

// ParityReport compares the live tickets with the APPROVED payments.
// Exact parity is one ticket per APPROVED payment that was not cancelled,
// none for a cancelled one, and no other ticket: every list empty. Lists
// hold payment ids, sorted.
type ParityReport struct {
	// Matched counts APPROVED payments with exactly one ticket, theirs.
	Matched int `json:"matched"`
	// Cancelled counts APPROVED payments cancelled and without a live
	// ticket, as they should be.
	Cancelled int `json:"cancelled"`
	// CancelledTicketed: a live ticket whose payment was cancelled (its
	// ticket was not revoked).
	CancelledTicketed []string `json:"cancelled_ticketed"`
	// MissingTicket: APPROVED, no ticket (its event not processed yet, or
	// lost).
	MissingTicket []string `json:"missing_ticket"`
	// OrderAlreadyTicketed: APPROVED, no ticket, because another payment
	// of the same order holds the order's ticket: a double charge to
	// refund.
	OrderAlreadyTicketed []string `json:"order_already_ticketed"`
	// NotApproved: a ticket whose payment is not APPROVED.
	NotApproved []string `json:"not_approved"`
	// UnknownPayment: a ticket whose payment is not in the list.
	UnknownPayment []string `json:"unknown_payment"`
	// Duplicate: a payment with more than one ticket.
	Duplicate []string `json:"duplicate"`
}

// Mismatches counts every disagreement.
func (r ParityReport) Mismatches() int {
	return len(r.MissingTicket) + len(r.OrderAlreadyTicketed) + len(r.NotApproved) + len(r.UnknownPayment) + len(r.Duplicate) +
		len(r.CancelledTicketed)
}

// String summarises the report in one line.
func (r ParityReport) String() string {
	return fmt.Sprintf("matched %d, cancelled %d, missing ticket %d, order already ticketed %d, not approved %d, unknown payment %d, duplicate %d, cancelled with a ticket %d",
		r.Matched, r.Cancelled, len(r.MissingTicket), len(r.OrderAlreadyTicketed), len(r.NotApproved), len(r.UnknownPayment), len(r.Duplicate),
		len(r.CancelledTicketed))
}

// Parity compares live tickets with payments. A payment listed twice
// counts once, with its last status.
func Parity(payments []PaymentRecord, tickets []Ticket) ParityReport {
	byPayment := make(map[string]PaymentRecord, len(payments))
	for _, p := range payments {
		byPayment[p.PaymentID] = p
	}
	ticketsOf := make(map[string]int, len(tickets))
	ticketedOrder := make(map[[2]string]bool, len(tickets))
	for _, t := range tickets {
		ticketsOf[t.PaymentID]++
		ticketedOrder[[2]string{t.MerchantID, t.OrderID}] = true
	}
	var r ParityReport
	for id, p := range byPayment {
		n := ticketsOf[id]
		switch {
		case p.Cancelled && n > 0:
			r.CancelledTicketed = append(r.CancelledTicketed, id)
		case p.Cancelled && p.Status == protocol.StatusApproved:
			r.Cancelled++
		case p.Status == protocol.StatusApproved && n == 0:
			if p.OrderID != "" && ticketedOrder[[2]string{p.MerchantID, p.OrderID}] {
				r.OrderAlreadyTicketed = append(r.OrderAlreadyTicketed, id)
			} else {
				r.MissingTicket = append(r.MissingTicket, id)
			}
		case p.Status == protocol.StatusApproved && n == 1:
			r.Matched++
		case n > 0 && p.Status != protocol.StatusApproved:
			r.NotApproved = append(r.NotApproved, id)
		}
		if n > 1 {
			r.Duplicate = append(r.Duplicate, id)
		}
	}
	for id := range ticketsOf {
		if _, ok := byPayment[id]; !ok {
			r.UnknownPayment = append(r.UnknownPayment, id)
		}
	}
	for _, l := range [][]string{r.MissingTicket, r.OrderAlreadyTicketed, r.NotApproved, r.UnknownPayment, r.Duplicate, r.CancelledTicketed} {
		slices.Sort(l)
	}
	return r
}

// CheckParity reads every ticket of store and compares them with
// payments (see Parity).
func CheckParity(ctx context.Context, store Store, payments []PaymentRecord) (ParityReport, error) {
	const page = 500
	var all []Ticket
	after := ""
	for {
		ts, err := store.Tickets(ctx, after, page)
		if err != nil {
			return ParityReport{}, err
		}
		all = append(all, ts...)
		if len(ts) < page {
			break
		}
		after = ts[len(ts)-1].PaymentID
	}
	return Parity(payments, all), nil
}
