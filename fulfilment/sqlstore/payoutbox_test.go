package sqlstore_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stampede-lab/stampede/fulfilment"
	"github.com/stampede-lab/stampede/fulfilment/sqlstore"
	"github.com/stampede-lab/stampede/pay"
	"github.com/stampede-lab/stampede/pay/natspub"
	"github.com/stampede-lab/stampede/pay/sqlite"
)

// TestFromPayOutbox: the rows pay's store writes to its outbox, as the
// relay publishes them (body as is, message id natspub.MsgID), settle
// orders in fulfilment, twice delivered, with exact parity.
func TestFromPayOutbox(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ps, err := sqlite.Open(sqlite.Memory)
	if err != nil {
		t.Fatal(err)
	}
	defer ps.Close()
	final := []pay.Status{pay.StatusApproved, pay.StatusDeclined, pay.StatusFailed, pay.StatusUnknown}
	merchant := pay.NewID()
	for i := range 40 {
		p, err := ps.CreatePending(ctx, pay.Payment{ID: pay.NewID(), MerchantID: merchant, OrderID: fmt.Sprintf("o-%d", i), Amount: int64(100 + i), Currency: "EUR"},
			pay.IdempotencyRecord{Key: fmt.Sprintf("k-%d", i), RequestHash: "h"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ps.Transition(ctx, p.ID, pay.StatusPending, final[i%len(final)], "test"); err != nil {
			t.Fatal(err)
		}
	}
	events, err := ps.PendingOutbox(ctx, 1000)
	if err != nil {
		t.Fatal(err)
	}
	s := open(t, sqlstore.DefaultConfig())
	h, err := fulfilment.NewHandler(s, fulfilment.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	applied := 0
	for range 2 {
		for _, oe := range events {
			ev, err := fulfilment.DecodeEvent(oe.Payload)
			if err != nil {
				t.Fatalf("DecodeEvent(%s): %v", oe.Payload, err)
			}
			if ev.ID() != natspub.MsgID(oe) {
				t.Fatalf("event id %s, relay message id %s", ev.ID(), natspub.MsgID(oe))
			}
			ok, err := h.Handle(ctx, ev)
			if err != nil {
				t.Fatalf("Handle(%s): %v", ev.ID(), err)
			}
			if ok {
				applied++
			}
		}
	}
	payments, err := ps.List(ctx, "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	var records []fulfilment.PaymentRecord
	approved := 0
	for _, p := range payments {
		records = append(records, fulfilment.PaymentRecord{PaymentID: p.ID, MerchantID: p.MerchantID, OrderID: p.OrderID, Status: p.Status})
		if p.Status == pay.StatusApproved {
			approved++
		}
	}
	rep, err := fulfilment.CheckParity(ctx, s, records)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Mismatches() != 0 || rep.Matched != approved || approved != 10 {
		t.Fatalf("parity = %v, want %d matched and nothing else", rep, approved)
	}
	c, err := s.Counts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// 10 approved, 20 released (DECLINED, FAILED), 10 still UNKNOWN.
	if applied != 30 || c.Tickets != 10 || c.Releases != 20 || c.Inbox != int64(len(events)) ||
		c.Orders[fulfilment.OrderTicketed] != 10 || c.Orders[fulfilment.OrderReleased] != 20 {
		t.Fatalf("applied %d, counts %+v; want 30 applied, 10 tickets, 20 releases, %d events", applied, c, len(events))
	}
}
