package sale

import (
	"context"
	"fmt"
	"strings"

	"github.com/stampede-lab/stampede/fulfilment"
	"github.com/stampede-lab/stampede/institution"
	instclient "github.com/stampede-lab/stampede/institution/client"
	"github.com/stampede-lab/stampede/lab"
	"github.com/stampede-lab/stampede/pay"
)

// order is one of the checkout's orders as the records read it.
type order struct{ id, hold, status, paymentStatus, paymentID string }

// records is every part's record of a sale (the checkout's orders and
// sold holds, the tickets, pay's payments, the institution's ledger),
// read once the sale drained, and the invariants across them.
type records struct {
	seats                    int
	ordersByHold, ordersByID map[string]order
	// soldSeats counts the seats of sold holds; distinct the different
	// seats among them.
	soldSeats, distinct, seatsSoldTwice, oversold int
	tickets                                       []fulfilment.Ticket          // live: a cancelled payment's is revoked
	ticketOf                                      map[string]fulfilment.Ticket // by order
	// ticketMismatch counts paid orders without a ticket and tickets
	// without a paid order.
	ticketMismatch int
	payments       int
	pp             pay.ParityReport
	fp             fulfilment.ParityReport
	// checkoutMismatch counts orders whose status disagrees with their
	// payment's.
	checkoutMismatch      int
	institutionCharges    int
	doubleCharges, parity int
	// chargedNoTicket lists the institution's keys that still hold money
	// (charged, or an authorisation's capture, less its refunds) whose
	// payment's order is not sold with a ticket.
	chargedNoTicket []string
	// closeOut is pay.CloseOut's report of the sale (stampede pay
	// close-out's); closures counts the payments pay's closure pass
	// cancelled.
	closeOut pay.CloseOutReport
	closures int64
}

// readRecords reads every part's record of the sale.
func readRecords(ctx context.Context, r *rig, d *dbs, seats int) (*records, error) {
	rec := &records{seats: seats, ordersByHold: map[string]order{}, ordersByID: map[string]order{}, ticketOf: map[string]fulfilment.Ticket{}}

	// The checkout's orders and holds.
	rows, err := d.checkout.QueryContext(ctx, "SELECT id, hold_id, status, payment_status, payment_id FROM checkout_orders WHERE event_id = "+d.q("?", "$1"), r.event)
	if err != nil {
		return nil, fmt.Errorf("sale: reading the checkout's orders: %w", err)
	}
	for rows.Next() {
		var o order
		if err := rows.Scan(&o.id, &o.hold, &o.status, &o.paymentStatus, &o.paymentID); err != nil {
			rows.Close()
			return nil, err
		}
		rec.ordersByHold[o.hold], rec.ordersByID[o.id] = o, o
	}
	rows.Close()
	distinct := map[string]int{}
	rows, err = d.checkout.QueryContext(ctx, "SELECT seats FROM checkout_holds WHERE state = 'sold' AND event_id = "+d.q("?", "$1"), r.event)
	if err != nil {
		return nil, fmt.Errorf("sale: reading the checkout's holds: %w", err)
	}
	for rows.Next() {
		var seats string
		if err := rows.Scan(&seats); err != nil {
			rows.Close()
			return nil, err
		}
		for s := range strings.SplitSeq(seats, ",") {
			if s = strings.TrimSpace(s); s != "" {
				rec.soldSeats++
				distinct[s]++
			}
		}
	}
	rows.Close()
	rec.distinct = len(distinct)
	rec.seatsSoldTwice = rec.soldSeats - len(distinct)
	rec.oversold = rec.seatsSoldTwice + max(0, len(distinct)-seats)

	// The tickets.
	fs, err := openFulfilment(ctx, d)
	if err != nil {
		return nil, err
	}
	defer fs.Close()
	for after := ""; ; {
		page, err := fs.Tickets(ctx, after, 1000)
		if err != nil {
			return nil, fmt.Errorf("sale: reading the tickets: %w", err)
		}
		rec.tickets = append(rec.tickets, page...)
		if len(page) < 1000 {
			break
		}
		after = page[len(page)-1].PaymentID
	}
	for _, t := range rec.tickets {
		rec.ticketOf[t.OrderID] = t
	}
	rec.oversold = max(rec.oversold, len(rec.tickets)-seats)

	// Seats sold against tickets: every paid order has its ticket, every
	// ticket a paid order.
	for _, o := range rec.ordersByID {
		if o.status == "paid" {
			if _, ok := rec.ticketOf[o.id]; !ok {
				rec.ticketMismatch++
			}
		}
	}
	for _, t := range rec.tickets {
		if o, ok := rec.ordersByID[t.OrderID]; !ok || o.status != "paid" {
			rec.ticketMismatch++
		}
	}

	// The institution against pay, pay against the tickets.
	ledger, err := instclient.NewClient(r.instURL, adminClient).WithAdminToken(r.adminToken).Approvals(ctx)
	if err != nil {
		return nil, fmt.Errorf("sale: reading the institution's ledger: %w", err)
	}
	ps, err := openPay(ctx, d)
	if err != nil {
		return nil, err
	}
	defer ps.Close()
	charges := make([]pay.Charge, 0, len(ledger.Records))
	for _, rc := range ledger.Records {
		charges = append(charges, pay.Charge{ExternalKey: rc.ExternalKey, Approved: rc.Status == institution.StatusApproved,
			Amount: rc.Amount, Currency: rc.Currency, Times: rc.Charges})
	}
	if rec.pp, err = pay.Parity(ctx, ps, charges); err != nil {
		return nil, fmt.Errorf("sale: pay parity: %w", err)
	}
	var payments []fulfilment.PaymentRecord
	payStatus := map[string]pay.Status{}
	payKey, payAmount, orderOfKey := map[string]string{}, map[string]int64{}, map[string]string{}
	for after := ""; ; {
		page, err := ps.List(ctx, after, 1000)
		if err != nil {
			return nil, fmt.Errorf("sale: listing payments: %w", err)
		}
		for _, p := range page {
			payments = append(payments, fulfilment.PaymentRecord{PaymentID: p.ID, MerchantID: p.MerchantID, OrderID: p.OrderID, Status: p.Status})
			payStatus[p.ID] = p.Status
			payKey[p.ID], payAmount[p.ID], orderOfKey[p.ExternalKey] = p.ExternalKey, p.Amount, p.OrderID
		}
		if len(page) < 1000 {
			break
		}
		after = page[len(page)-1].ID
	}
	rec.payments = len(payments)
	// The cancelled payments (the checkout's cancellations and pay's
	// closures): their orders do not go on, and their tickets are revoked.
	cancelled := map[string]bool{}
	rows, err = d.pay.QueryContext(ctx, "SELECT payment_id FROM payment_cancellations")
	if err != nil {
		return nil, fmt.Errorf("sale: reading the cancellations: %w", err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return nil, err
		}
		cancelled[id] = true
	}
	rows.Close()
	for i := range payments {
		payments[i].Cancelled = cancelled[payments[i].PaymentID]
	}
	rec.fp = fulfilment.Parity(payments, rec.tickets)
	refunds, err := instclient.NewClient(r.instURL, adminClient).WithAdminToken(r.adminToken).Refunds(ctx)
	if err != nil {
		return nil, fmt.Errorf("sale: reading the institution's refunds: %w", err)
	}
	// The checkout's orders against pay: a failed order's approved payment
	// must have been given back in full (the closure pass).
	for _, o := range rec.ordersByID {
		if o.status == "paid" && payStatus[o.paymentID] != pay.StatusApproved {
			rec.checkoutMismatch++
		}
		if o.status == "failed" && o.paymentID != "" && payStatus[o.paymentID] == pay.StatusApproved &&
			refunds.RefundedByApproval[payKey[o.paymentID]] < payAmount[o.paymentID] {
			rec.checkoutMismatch++
		}
	}
	// Money taken without a ticket, from the institution's ledger: what
	// each key still holds (charged, or captured, less its refunds), and
	// whether its payment's order is sold with a ticket.
	var held []pay.Held
	for _, h := range ledger.Held(refunds) {
		held = append(held, pay.Held{ExternalKey: h.ExternalKey, Amount: h.Amount})
		if h.Amount <= 0 {
			continue
		}
		order := orderOfKey[h.ExternalKey]
		if o, ok := rec.ordersByID[order]; ok && o.status == "paid" {
			if _, ticketed := rec.ticketOf[order]; ticketed {
				continue
			}
		}
		rec.chargedNoTicket = append(rec.chargedNoTicket, h.ExternalKey)
	}
	// The close-out (stampede pay close-out's report) of the sale.
	if rec.closeOut, err = pay.CloseOut(ctx, ps, charges, held, func(order string) (bool, bool) {
		o, ok := rec.ordersByID[order]
		_, ticketed := rec.ticketOf[order]
		return ok && o.status == "paid", ticketed
	}); err != nil {
		return nil, fmt.Errorf("sale: close-out: %w", err)
	}
	if err := d.pay.QueryRowContext(ctx, "SELECT COUNT(*) FROM payment_cancellations WHERE idempotency_key LIKE '%closure:%'").Scan(&rec.closures); err != nil {
		return nil, fmt.Errorf("sale: counting the closures: %w", err)
	}
	rec.institutionCharges = ledger.ChargesTotal
	rec.doubleCharges = ledger.ExtraCharges + len(rec.fp.OrderAlreadyTicketed)
	rec.parity = rec.pp.Mismatches() + rec.fp.Mismatches() + rec.checkoutMismatch + rec.ticketMismatch
	return rec, nil
}

// put writes the records' metrics and details into m and extra and
// returns the invariants they break.
func (rec *records) put(m lab.Metrics, extra map[string]any) []string {
	var broken []string
	m["tickets"] = float64(len(rec.tickets))
	m["seats_sold"] = float64(rec.soldSeats)
	m["oversold"] = float64(rec.oversold)
	m["seats_sold_twice"] = float64(rec.seatsSoldTwice)
	if rec.oversold > 0 {
		broken = append(broken, fmt.Sprintf("oversold: %d seats (%d sold twice, %d distinct seats sold of %d)", rec.oversold, rec.seatsSoldTwice, rec.distinct, rec.seats))
	}
	if rec.soldSeats != len(rec.tickets) {
		broken = append(broken, fmt.Sprintf("seats sold %d ≠ tickets %d", rec.soldSeats, len(rec.tickets)))
	}
	m["charged_without_ticket"] = float64(len(rec.chargedNoTicket))
	if len(rec.chargedNoTicket) > 0 {
		extra["charged_without_ticket"] = rec.chargedNoTicket
		broken = append(broken, fmt.Sprintf("%d buyers charged without a ticket", len(rec.chargedNoTicket)))
	}
	m["closures"] = float64(rec.closures)
	m["double_charges"] = float64(rec.doubleCharges)
	m["parity_mismatches"] = float64(rec.parity)
	m["institution_charges"] = float64(rec.institutionCharges)
	m["payments"] = float64(rec.payments)
	extra["pay_parity"] = rec.pp.String()
	extra["ticket_parity"] = rec.fp.String()
	extra["checkout_vs_pay_mismatches"] = rec.checkoutMismatch
	extra["orders_vs_tickets_mismatches"] = rec.ticketMismatch
	if rec.doubleCharges > 0 {
		broken = append(broken, fmt.Sprintf("%d double charges", rec.doubleCharges))
	}
	if rec.parity > 0 {
		broken = append(broken, fmt.Sprintf("parity: %d mismatches (institution/pay: %s; pay/tickets: %s; checkout/pay %d; orders/tickets %d)",
			rec.parity, rec.pp.String(), rec.fp.String(), rec.checkoutMismatch, rec.ticketMismatch))
	}
	return broken
}

// putCloseOut writes the close-out's differences into m and extra and
// returns them as a broken invariant, leaving out a sold order's
// payment refunded on purpose (refunded, by payment ID: the soak refunds
// paid orders without the checkout taking the seats back).
func (rec *records) putCloseOut(m lab.Metrics, extra map[string]any, refunded map[string]bool) []string {
	var diffs []pay.Difference
	for _, d := range rec.closeOut.Differences {
		if d.Kind == "sold_without_money" && refunded[d.PaymentID] {
			continue
		}
		diffs = append(diffs, d)
	}
	m["close_out_differences"] = float64(len(diffs))
	extra["close_out"] = rec.closeOut.String()
	if len(diffs) == 0 {
		return nil
	}
	extra["close_out_differences"] = diffs
	return []string{fmt.Sprintf("close-out: %d differences (%s)", len(diffs), rec.closeOut.String())}
}
