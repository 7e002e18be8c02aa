// Package paytest is the conformance suite every pay.Store must pass. An
// adapter's tests call Exercise, once for each database they can reach,
// with a function that opens the store under test.
//
// RunFrozen checks, separately, that a store whose database stops
// answering fails every call with CodeUnavailable within its deadline.
//
// The suite does not assume an empty store: every test uses fresh IDs and
// idempotency keys and looks only at its own rows, so one store (one real
// database) may serve every test. It does assume that nobody else writes
// to the store while a test runs (tests that count rows compare counts
// before and after).
package paytest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stampede-lab/stampede/pay"
)

func run(t *testing.T, newStore func(t *testing.T) pay.Store, parallel bool) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s pay.Store)
	}{
		{"CreateAndGet", testCreateAndGet},
		{"CreateRejectsInvalidInput", testCreateInvalid},
		{"IdempotencyConflictWritesNothing", testIdempotencyConflict},
		{"ExpiredIdempotencyKeyIsReplaced", testExpiredKeyReplaced},
		{"TransitionsAppendHistoryAndOutbox", testTransitions},
		{"StaleTransitionWritesNothing", testStaleTransition},
		{"TransitionCompletesIdempotency", testTransitionCompletes},
		{"ListByStatus", testListByStatus},
		{"ListPaginates", testListPaginates},
		{"FlagReview", testFlagReview},
		{"OutboxPendingAndPublished", testOutbox},
		{"DeleteExpiredIdempotency", testDeleteExpired},
		{"ConcurrentCreateSameKey", testConcurrentCreate},
		{"ConcurrentTransitionOneWins", testConcurrentTransition},
		{"InquiryState", testInquiryState},
		{"ClaimDue", testClaimDue},
		{"ClaimOne", testClaimOne},
		{"ConcurrentClaimsTakeEachOnce", testConcurrentClaims},
		{"DeferInquiry", testDeferInquiry},
		{"Stats", testStats},
		{"AdminReads", testAdminReads},
		{"Ping", testPing},
		{"OneLivePaymentPerOrder", testOneLivePerOrder},
		{"ConcurrentCreateSameOrder", testConcurrentSameOrder},
		{"TextIsPrintableUTF8", testText},
		{"Merchants", testMerchants},
		{"WebhookDeliveriesInPaymentOrder", testDeliveries},
		{"ConcurrentWritersAllCommit", testConcurrentWriters},
		{"FailingWriterFailsAlone", testFailingWriterAlone},
		{"TransitionBatch", testTransitionBatch},
		{"TransitionBatchRefusesInvalid", testTransitionBatchInvalid},
		{"ConcurrentBatchAndSingleOneWins", testConcurrentBatchAndSingle},
		{"ConcurrentRefundsNeverExceed", testConcurrentRefundsNeverExceed},
		{"RefundRules", testRefundRules},
		{"RefundEventsInPaymentOrder", testRefundEventsInPaymentOrder},
		{"ClaimDueRefunds", testClaimDueRefunds},
		{"ListForMerchant", testListForMerchant},
		{"OperationRules", testOperationRules},
		{"ConcurrentCaptureVoidOneRecorded", testConcurrentCaptureVoidOneRecorded},
		{"ClaimDueOperations", testClaimDueOperations},
		{"ExpiredAuthorizations", testExpiredAuthorizations},
		{"MerchantEvents", testMerchantEvents},
		{"CancellationRules", testCancellationRules},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if parallel {
				t.Parallel()
			}
			tc.fn(t, newStore(t))
		})
	}
}

var (
	runTag = fmt.Sprintf("%08x", rand.Uint32())
	keySeq sync.Mutex
	keyN   int
)

// newKey returns an idempotency key unique to this process run.
func newKey(t *testing.T) string {
	keySeq.Lock()
	defer keySeq.Unlock()
	keyN++
	return fmt.Sprintf("test-%s-%s-%d", runTag, t.Name(), keyN)
}

// newPayment returns a valid payment request with a fresh ID.
func newPayment() pay.Payment {
	return pay.Payment{
		ID:         pay.NewID(),
		MerchantID: "6f1c2b0e-8d4a-4c3e-9b7a-1e2d3c4b5a69",
		OrderID:    "order-" + runTag + "-" + pay.NewID(), // one live payment per order

		Amount:   12_000,
		Currency: "KRW",
	}
}

func newIdem(t *testing.T) pay.IdempotencyRecord {
	return pay.IdempotencyRecord{Key: newKey(t), RequestHash: "hash-" + runTag}
}

func create(t *testing.T, s pay.Store) (pay.Payment, pay.IdempotencyRecord) {
	t.Helper()
	idem := newIdem(t)
	p, err := s.CreatePending(context.Background(), newPayment(), idem)
	if err != nil {
		t.Fatalf("CreatePending: %v", err)
	}
	return p, idem
}

func get(t *testing.T, s pay.Store, id string) pay.Payment {
	t.Helper()
	p, err := s.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("Get(%s): %v", id, err)
	}
	return p
}

func transition(t *testing.T, s pay.Store, id string, from, to pay.Status, reason string) pay.Payment {
	t.Helper()
	p, err := s.Transition(context.Background(), id, from, to, reason)
	if err != nil {
		t.Fatalf("Transition(%s, %s→%s): %v", id, from, to, err)
	}
	return p
}

// pending returns every unpublished outbox row.
func pending(t *testing.T, s pay.Store) []pay.OutboxEvent {
	t.Helper()
	evs, err := s.PendingOutbox(context.Background(), 1_000_000)
	if err != nil {
		t.Fatalf("PendingOutbox: %v", err)
	}
	return evs
}

// outboxOf returns the unpublished outbox rows of payment id.
func outboxOf(t *testing.T, s pay.Store, id string) []pay.OutboxEvent {
	t.Helper()
	var out []pay.OutboxEvent
	for _, e := range pending(t, s) {
		if e.PaymentID == id {
			out = append(out, e)
		}
	}
	return out
}

// all returns every payment, paging through List.
func all(t *testing.T, s pay.Store, page int) []pay.Payment {
	t.Helper()
	var out []pay.Payment
	after := ""
	for {
		ps, err := s.List(context.Background(), after, page)
		if err != nil {
			t.Fatalf("List(%q, %d): %v", after, page, err)
		}
		if len(ps) > page {
			t.Fatalf("List(%q, %d) returned %d payments", after, page, len(ps))
		}
		out = append(out, ps...)
		if len(ps) < page {
			return out
		}
		after = ps[len(ps)-1].ID
	}
}

func decodeEvent(t *testing.T, e pay.OutboxEvent) pay.Event {
	t.Helper()
	var ev pay.Event
	if err := json.Unmarshal(e.Payload, &ev); err != nil {
		t.Fatalf("outbox row %d: payload %q is not an Event: %v", e.ID, e.Payload, err)
	}
	return ev
}

// samePayment reports the first difference between two payments.
func samePayment(a, b pay.Payment) error {
	switch {
	case a.ID != b.ID || a.MerchantID != b.MerchantID || a.OrderID != b.OrderID || a.Amount != b.Amount ||
		a.Currency != b.Currency || a.Status != b.Status || a.ExternalKey != b.ExternalKey ||
		a.IdempotencyKey != b.IdempotencyKey || a.ManualReview != b.ManualReview || a.ReviewReason != b.ReviewReason:
		return fmt.Errorf("fields differ:\n%+v\n%+v", a, b)
	case !a.CreatedAt.Equal(b.CreatedAt) || !a.UpdatedAt.Equal(b.UpdatedAt):
		return fmt.Errorf("times differ: created %v / %v, updated %v / %v", a.CreatedAt, b.CreatedAt, a.UpdatedAt, b.UpdatedAt)
	case len(a.History) != len(b.History):
		return fmt.Errorf("history lengths differ: %d / %d", len(a.History), len(b.History))
	}
	for i := range a.History {
		x, y := a.History[i], b.History[i]
		if x.From != y.From || x.To != y.To || x.Reason != y.Reason || !x.At.Equal(y.At) {
			return fmt.Errorf("history[%d] differs: %+v / %+v", i, x, y)
		}
	}
	return nil
}

func testCreateAndGet(t *testing.T, s pay.Store) {
	ctx := context.Background()
	req := newPayment()
	req.MerchantID = "6F1C2B0E-8D4A-4C3E-9B7A-1E2D3C4B5A69" // stored lower-case
	idem := newIdem(t)
	before := time.Now().Add(-time.Second)
	p, err := s.CreatePending(ctx, req, idem)
	if err != nil {
		t.Fatalf("CreatePending: %v", err)
	}
	if p.ID != req.ID || p.Status != pay.StatusPending || p.ExternalKey != req.ID || p.IdempotencyKey != idem.Key ||
		p.MerchantID != "6f1c2b0e-8d4a-4c3e-9b7a-1e2d3c4b5a69" || p.Amount != req.Amount || p.Currency != req.Currency {
		t.Errorf("created payment = %+v", p)
	}
	if p.CreatedAt.Before(before) || !p.UpdatedAt.Equal(p.CreatedAt) || p.CreatedAt.Location() != time.UTC {
		t.Errorf("created at %v, updated at %v; want now, equal, UTC", p.CreatedAt, p.UpdatedAt)
	}
	if len(p.History) != 1 || p.History[0].From != "" || p.History[0].To != pay.StatusPending || p.History[0].Reason != pay.ReasonCreated {
		t.Errorf("history = %+v, want one created entry", p.History)
	}
	got := get(t, s, p.ID)
	if err := samePayment(got, p); err != nil {
		t.Errorf("Get differs from CreatePending's result: %v", err)
	}

	rec, err := s.Idempotency(ctx, idem.Key)
	if err != nil {
		t.Fatalf("Idempotency: %v", err)
	}
	if rec.Key != idem.Key || rec.RequestHash != idem.RequestHash || rec.PaymentID != p.ID ||
		rec.State != pay.IdempotencyInFlight ||
		!rec.ExpiresAt.Equal(rec.CreatedAt.Add(pay.DefaultIdempotencyTTL)) {
		t.Errorf("idempotency record = %+v", rec)
	}

	evs := outboxOf(t, s, p.ID)
	if len(evs) != 1 || evs[0].Seq != 1 || evs[0].Type != pay.EventCreated || evs[0].PublishedAt != nil {
		t.Fatalf("outbox = %+v, want one unpublished %s row with seq 1", evs, pay.EventCreated)
	}
	ev := decodeEvent(t, evs[0])
	if ev.PaymentID != p.ID || ev.Status != pay.StatusPending || ev.Seq != 1 || ev.Amount != p.Amount || ev.Type != pay.EventCreated {
		t.Errorf("event = %+v", ev)
	}

	// The same payment ID under another key: a conflict, and the new
	// key's record is not kept.
	other := newIdem(t)
	dup := req
	dup.OrderID += "-2" // another order: the payment ID is what collides
	if _, err := s.CreatePending(ctx, dup, other); pay.ErrorCode(err) != pay.CodeConflict {
		t.Errorf("CreatePending with an existing payment ID = %v, want conflict", err)
	}
	if _, err := s.Idempotency(ctx, other.Key); !errors.Is(err, pay.ErrNotFound) {
		t.Errorf("a failed CreatePending left its idempotency record: %v", err)
	}
	if evs := outboxOf(t, s, p.ID); len(evs) != 1 {
		t.Errorf("a failed CreatePending wrote to the outbox: %+v", evs)
	}

	if _, err := s.Get(ctx, pay.NewID()); !errors.Is(err, pay.ErrNotFound) || pay.ErrorCode(err) != pay.CodeNotFound {
		t.Errorf("Get(unknown) = %v, want ErrNotFound", err)
	}
	if _, err := s.Idempotency(ctx, newKey(t)); !errors.Is(err, pay.ErrNotFound) {
		t.Errorf("Idempotency(unknown) = %v, want ErrNotFound", err)
	}
}

func testCreateInvalid(t *testing.T, s pay.Store) {
	ctx := context.Background()
	cases := []struct {
		field string
		edit  func(p *pay.Payment, r *pay.IdempotencyRecord)
	}{
		{"merchant_id", func(p *pay.Payment, _ *pay.IdempotencyRecord) { p.MerchantID = "merchant-1" }},
		{"order_id", func(p *pay.Payment, _ *pay.IdempotencyRecord) { p.OrderID = "" }},
		{"amount", func(p *pay.Payment, _ *pay.IdempotencyRecord) { p.Amount = 0 }},
		{"currency", func(p *pay.Payment, _ *pay.IdempotencyRecord) { p.Currency = "XYZ" }},
		{"id", func(p *pay.Payment, _ *pay.IdempotencyRecord) { p.ID = "not-a-uuid" }},
		{"Idempotency-Key", func(_ *pay.Payment, r *pay.IdempotencyRecord) { r.Key = "" }},
	}
	for _, c := range cases {
		p, idem := newPayment(), newIdem(t)
		c.edit(&p, &idem)
		_, err := s.CreatePending(ctx, p, idem)
		var pe *pay.Error
		if !errors.As(err, &pe) || pe.Code != pay.CodeInvalid || pe.Field != c.field {
			t.Errorf("CreatePending with a bad %s = %v, want invalid naming the field", c.field, err)
			continue
		}
		if _, err := s.Get(ctx, p.ID); !errors.Is(err, pay.ErrNotFound) {
			t.Errorf("a rejected payment (bad %s) was stored: %v", c.field, err)
		}
	}
}

func testIdempotencyConflict(t *testing.T, s pay.Store) {
	ctx := context.Background()
	first, idem := create(t, s)
	payments, outbox := len(all(t, s, 1000)), len(pending(t, s))

	second := newPayment()
	again := idem
	again.RequestHash = "another-hash"
	_, err := s.CreatePending(ctx, second, again)
	var conflict *pay.IdempotencyConflict
	if !errors.As(err, &conflict) {
		t.Fatalf("CreatePending with a used key = %v, want *IdempotencyConflict", err)
	}
	if pay.ErrorCode(err) != pay.CodeConflict {
		t.Errorf("ErrorCode = %s, want conflict", pay.ErrorCode(err))
	}
	r := conflict.Record
	if r.Key != idem.Key || r.PaymentID != first.ID || r.RequestHash != idem.RequestHash || r.State != pay.IdempotencyInFlight {
		t.Errorf("conflict record = %+v, want the first request's", r)
	}
	if _, err := s.Get(ctx, second.ID); !errors.Is(err, pay.ErrNotFound) {
		t.Errorf("the conflicting payment was stored: %v", err)
	}
	if n := len(all(t, s, 1000)); n != payments {
		t.Errorf("payments: %d before, %d after the conflict", payments, n)
	}
	if n := len(pending(t, s)); n != outbox {
		t.Errorf("outbox rows: %d before, %d after the conflict", outbox, n)
	}
	if rec, err := s.Idempotency(ctx, idem.Key); err != nil || rec.PaymentID != first.ID || rec.RequestHash != idem.RequestHash {
		t.Errorf("record after the conflict = %+v, %v; want it unchanged", rec, err)
	}
	if p := get(t, s, first.ID); len(p.History) != 1 {
		t.Errorf("first payment's history = %+v", p.History)
	}
}

func testExpiredKeyReplaced(t *testing.T, s pay.Store) {
	ctx := context.Background()
	base := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	idem := newIdem(t)
	idem.CreatedAt, idem.ExpiresAt = base, base.Add(time.Hour)
	first, err := s.CreatePending(ctx, newPayment(), idem)
	if err != nil {
		t.Fatal(err)
	}
	// Still live at base+30m.
	early := idem
	early.CreatedAt, early.ExpiresAt = base.Add(30*time.Minute), base.Add(2*time.Hour)
	var conflict *pay.IdempotencyConflict
	if _, err := s.CreatePending(ctx, newPayment(), early); !errors.As(err, &conflict) {
		t.Fatalf("reuse of a live key = %v, want a conflict", err)
	}
	// Expired at base+1h.
	late := idem
	late.RequestHash = "new-hash"
	late.CreatedAt, late.ExpiresAt = base.Add(time.Hour), base.Add(3*time.Hour)
	second, err := s.CreatePending(ctx, newPayment(), late)
	if err != nil {
		t.Fatalf("reuse of an expired key = %v, want it replaced", err)
	}
	rec, err := s.Idempotency(ctx, idem.Key)
	if err != nil || rec.PaymentID != second.ID || rec.RequestHash != "new-hash" || !rec.ExpiresAt.Equal(late.ExpiresAt) {
		t.Errorf("record = %+v, %v; want the new request's", rec, err)
	}
	if got := get(t, s, first.ID); got.Status != pay.StatusPending {
		t.Errorf("the first payment = %+v, want it kept", got)
	}
}

func testTransitions(t *testing.T, s pay.Store) {
	p, _ := create(t, s)
	u := transition(t, s, p.ID, pay.StatusPending, pay.StatusUnknown, "timeout")
	if u.Status != pay.StatusUnknown || len(u.History) != 2 || u.UpdatedAt.Before(p.UpdatedAt) {
		t.Fatalf("after PENDING→UNKNOWN: %+v", u)
	}
	a := transition(t, s, p.ID, pay.StatusUnknown, pay.StatusApproved, "inquiry: approved")
	want := []pay.StatusChange{
		{From: "", To: pay.StatusPending, Reason: pay.ReasonCreated},
		{From: pay.StatusPending, To: pay.StatusUnknown, Reason: "timeout"},
		{From: pay.StatusUnknown, To: pay.StatusApproved, Reason: "inquiry: approved"},
	}
	got := get(t, s, p.ID)
	if err := samePayment(got, a); err != nil {
		t.Errorf("Get differs from Transition's result: %v", err)
	}
	if len(got.History) != len(want) {
		t.Fatalf("history = %+v, want %d entries", got.History, len(want))
	}
	for i, w := range want {
		h := got.History[i]
		if h.From != w.From || h.To != w.To || h.Reason != w.Reason {
			t.Errorf("history[%d] = %+v, want %+v", i, h, w)
		}
		if i > 0 && h.At.Before(got.History[i-1].At) {
			t.Errorf("history[%d] at %v is before history[%d] at %v", i, h.At, i-1, got.History[i-1].At)
		}
	}
	if got.Status != pay.StatusApproved || !got.Status.Terminal() {
		t.Errorf("status = %s", got.Status)
	}

	evs := outboxOf(t, s, p.ID)
	if len(evs) != 3 {
		t.Fatalf("outbox = %+v, want 3 rows", evs)
	}
	types := []string{pay.EventCreated, pay.EventStatusChanged, pay.EventStatusChanged}
	for i, e := range evs {
		if e.Seq != int64(i+1) || e.Type != types[i] {
			t.Errorf("outbox[%d] = seq %d type %s, want seq %d type %s", i, e.Seq, e.Type, i+1, types[i])
		}
		if i > 0 && e.ID <= evs[i-1].ID {
			t.Errorf("outbox IDs not increasing: %d after %d", e.ID, evs[i-1].ID)
		}
		ev := decodeEvent(t, e)
		if ev.Seq != e.Seq || ev.Status != want[i].To || ev.From != want[i].From || ev.Reason != want[i].Reason {
			t.Errorf("outbox[%d] payload = %+v, want the change %+v", i, ev, want[i])
		}
	}
}

func testStaleTransition(t *testing.T, s pay.Store) {
	ctx := context.Background()
	p, _ := create(t, s)
	_, err := s.Transition(ctx, p.ID, pay.StatusUnknown, pay.StatusApproved, "late answer")
	if !errors.Is(err, pay.ErrStaleStatus) || pay.ErrorCode(err) != pay.CodeConflict {
		t.Fatalf("Transition from the wrong status = %v, want ErrStaleStatus", err)
	}
	if got := get(t, s, p.ID); got.Status != pay.StatusPending || len(got.History) != 1 || !got.UpdatedAt.Equal(p.UpdatedAt) {
		t.Errorf("after a failed CAS: %+v, want it unchanged", got)
	}
	if evs := outboxOf(t, s, p.ID); len(evs) != 1 {
		t.Errorf("outbox after a failed CAS = %+v, want only the created row", evs)
	}
	if _, err := s.Transition(ctx, pay.NewID(), pay.StatusPending, pay.StatusApproved, "x"); !errors.Is(err, pay.ErrNotFound) {
		t.Errorf("Transition(unknown) = %v, want ErrNotFound", err)
	}
	transition(t, s, p.ID, pay.StatusPending, pay.StatusDeclined, "declined")
	for _, c := range []struct{ from, to pay.Status }{
		{pay.StatusDeclined, pay.StatusApproved}, // terminal
		{pay.StatusPending, pay.StatusPending},
		{pay.StatusUnknown, pay.StatusPending},
		{pay.StatusPending, "SETTLED"},
	} {
		if _, err := s.Transition(ctx, p.ID, c.from, c.to, "x"); pay.ErrorCode(err) != pay.CodeInvalid {
			t.Errorf("Transition %s→%s = %v, want invalid", c.from, c.to, err)
		}
	}
	if got := get(t, s, p.ID); got.Status != pay.StatusDeclined || len(got.History) != 2 {
		t.Errorf("after illegal transitions: %+v", got)
	}
}

func testTransitionCompletes(t *testing.T, s pay.Store) {
	ctx := context.Background()
	p, idem := create(t, s)
	transition(t, s, p.ID, pay.StatusPending, pay.StatusUnknown, "timeout")
	rec, err := s.Idempotency(ctx, idem.Key)
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != pay.IdempotencyCompleted || rec.PaymentID != p.ID {
		t.Fatalf("record after Transition = %+v, want completed", rec)
	}
	// A later transition leaves it completed.
	transition(t, s, p.ID, pay.StatusUnknown, pay.StatusApproved, "inquiry")
	if again, _ := s.Idempotency(ctx, idem.Key); again.State != pay.IdempotencyCompleted || again.PaymentID != p.ID {
		t.Errorf("record after a second Transition = %+v, want it completed", again)
	}
}

func testListByStatus(t *testing.T, s pay.Store) {
	ctx := context.Background()
	// Creation times in the far past, newest first, so that "oldest first"
	// is not insertion order and comes before every other test's rows.
	base := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	var ids []string // oldest first
	for i := range 5 {
		req := newPayment()
		req.CreatedAt = base.Add(time.Duration(5-i) * time.Minute)
		p, err := s.CreatePending(ctx, req, newIdem(t))
		if err != nil {
			t.Fatal(err)
		}
		ids = append([]string{p.ID}, ids...)
	}
	transition(t, s, ids[1], pay.StatusPending, pay.StatusDeclined, "declined")
	transition(t, s, ids[3], pay.StatusPending, pay.StatusDeclined, "declined")

	ps, err := s.ListByStatus(ctx, pay.StatusPending, 1_000_000)
	if err != nil {
		t.Fatal(err)
	}
	var mine []string
	for i, p := range ps {
		if p.Status != pay.StatusPending {
			t.Errorf("ListByStatus(PENDING) returned a %s payment", p.Status)
		}
		if len(p.History) != 0 {
			t.Errorf("ListByStatus returned history: %+v", p.History)
		}
		if i > 0 && p.CreatedAt.Before(ps[i-1].CreatedAt) {
			t.Errorf("ListByStatus not oldest first: %v after %v", p.CreatedAt, ps[i-1].CreatedAt)
		}
		if slices.Contains(ids, p.ID) {
			mine = append(mine, p.ID)
		}
	}
	if want := []string{ids[0], ids[2], ids[4]}; !slices.Equal(mine, want) {
		t.Errorf("ListByStatus(PENDING) has %v of this test's payments, want %v", mine, want)
	}
	if first, err := s.ListByStatus(ctx, pay.StatusPending, 1); err != nil || len(first) != 1 || first[0].ID != ps[0].ID {
		t.Errorf("ListByStatus(PENDING, 1) = %v, %v; want the oldest", first, err)
	}
	declined, err := s.ListByStatus(ctx, pay.StatusDeclined, 1_000_000)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range declined {
		if p.ID == ids[1] || p.ID == ids[3] {
			n++
		}
	}
	if n != 2 {
		t.Errorf("ListByStatus(DECLINED) has %d of this test's 2 declined payments", n)
	}
	if _, err := s.ListByStatus(ctx, pay.StatusPending, 0); pay.ErrorCode(err) != pay.CodeInvalid {
		t.Errorf("ListByStatus with limit 0 = %v, want invalid", err)
	}
	if _, err := s.ListByStatus(ctx, "SETTLED", 10); pay.ErrorCode(err) != pay.CodeInvalid {
		t.Errorf("ListByStatus(SETTLED) = %v, want invalid", err)
	}
}

func testListPaginates(t *testing.T, s pay.Store) {
	ctx := context.Background()
	var ids []string
	for range 7 {
		p, _ := create(t, s)
		ids = append(ids, p.ID)
	}
	whole := all(t, s, 1_000_000)
	paged := all(t, s, 2)
	if len(paged) != len(whole) {
		t.Fatalf("paging by 2 gave %d payments, one page gave %d", len(paged), len(whole))
	}
	for i, p := range paged {
		if i > 0 && p.ID <= paged[i-1].ID {
			t.Fatalf("List not ordered by ID: %s after %s", p.ID, paged[i-1].ID)
		}
		if p.ID != whole[i].ID || len(p.History) != 0 {
			t.Fatalf("page entry %d = %+v, want %s without history", i, p, whole[i].ID)
		}
	}
	for _, id := range ids {
		if !slices.ContainsFunc(paged, func(p pay.Payment) bool { return p.ID == id }) {
			t.Errorf("List is missing %s", id)
		}
	}
	slices.Sort(ids)
	after, err := s.List(ctx, ids[2], 1_000_000)
	if err != nil {
		t.Fatal(err)
	}
	if len(after) == 0 || after[0].ID <= ids[2] {
		t.Errorf("List(after %s) starts at %v", ids[2], after)
	}
	for _, p := range after {
		if p.ID <= ids[2] {
			t.Errorf("List(after %s) returned %s", ids[2], p.ID)
		}
	}
}

func testFlagReview(t *testing.T, s pay.Store) {
	ctx := context.Background()
	p, _ := create(t, s)
	transition(t, s, p.ID, pay.StatusPending, pay.StatusUnknown, "timeout")
	if err := s.FlagReview(ctx, p.ID, "unknown for too long"); err != nil {
		t.Fatal(err)
	}
	got := get(t, s, p.ID)
	if !got.ManualReview || got.ReviewReason != "unknown for too long" || got.Status != pay.StatusUnknown || len(got.History) != 2 {
		t.Errorf("after FlagReview: %+v", got)
	}
	evs := outboxOf(t, s, p.ID)
	if len(evs) != 3 || evs[2].Type != pay.EventReviewFlagged || evs[2].Seq != 3 {
		t.Fatalf("outbox = %+v, want a third, %s row", evs, pay.EventReviewFlagged)
	}
	if ev := decodeEvent(t, evs[2]); !ev.ManualReview || ev.Reason != "unknown for too long" || ev.Status != pay.StatusUnknown {
		t.Errorf("review event = %+v", ev)
	}
	// The next status change continues the payment's sequence.
	transition(t, s, p.ID, pay.StatusUnknown, pay.StatusApproved, "inquiry")
	if evs := outboxOf(t, s, p.ID); len(evs) != 4 || evs[3].Seq != 4 {
		t.Errorf("outbox after the review = %+v, want seq 4 next", evs)
	}
	if err := s.FlagReview(ctx, pay.NewID(), "x"); !errors.Is(err, pay.ErrNotFound) {
		t.Errorf("FlagReview(unknown) = %v, want ErrNotFound", err)
	}
	if err := s.FlagReview(ctx, p.ID, ""); pay.ErrorCode(err) != pay.CodeInvalid {
		t.Errorf("FlagReview without a reason = %v, want invalid", err)
	}
}

func testOutbox(t *testing.T, s pay.Store) {
	ctx := context.Background()
	// Publish whatever earlier tests left, so this test sees only its own.
	for evs := pending(t, s); len(evs) > 0; evs = pending(t, s) {
		ids := make([]int64, len(evs))
		for i, e := range evs {
			ids[i] = e.ID
		}
		if err := s.MarkPublished(ctx, ids, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	a, _ := create(t, s)
	b, _ := create(t, s)
	transition(t, s, a.ID, pay.StatusPending, pay.StatusUnknown, "timeout")
	transition(t, s, b.ID, pay.StatusPending, pay.StatusApproved, "approved")
	transition(t, s, a.ID, pay.StatusUnknown, pay.StatusDeclined, "inquiry")

	evs := pending(t, s)
	want := []struct {
		id  string
		seq int64
	}{{a.ID, 1}, {b.ID, 1}, {a.ID, 2}, {b.ID, 2}, {a.ID, 3}}
	if len(evs) != len(want) {
		t.Fatalf("PendingOutbox = %d rows, want %d: %+v", len(evs), len(want), evs)
	}
	for i, w := range want {
		e := evs[i]
		if e.PaymentID != w.id || e.Seq != w.seq || e.PublishedAt != nil || e.CreatedAt.IsZero() {
			t.Errorf("row %d = %+v, want payment %s seq %d", i, e, w.id, w.seq)
		}
		if i > 0 && e.ID <= evs[i-1].ID {
			t.Errorf("PendingOutbox not ordered by ID: %d after %d", e.ID, evs[i-1].ID)
		}
	}
	two, err := s.PendingOutbox(ctx, 2)
	if err != nil || len(two) != 2 || two[0].ID != evs[0].ID || two[1].ID != evs[1].ID {
		t.Fatalf("PendingOutbox(2) = %+v, %v; want the first two", two, err)
	}
	if err := s.MarkPublished(ctx, []int64{two[0].ID, two[1].ID}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkPublished(ctx, []int64{two[0].ID, 1 << 60}, time.Now()); err != nil {
		t.Errorf("MarkPublished again, and of an unknown ID = %v", err)
	}
	if err := s.MarkPublished(ctx, nil, time.Now()); err != nil {
		t.Errorf("MarkPublished(nil) = %v", err)
	}
	rest := pending(t, s)
	if len(rest) != 3 || rest[0].ID != evs[2].ID {
		t.Fatalf("after publishing two, PendingOutbox = %+v, want the last three", rest)
	}
	if _, err := s.PendingOutbox(ctx, 0); pay.ErrorCode(err) != pay.CodeInvalid {
		t.Errorf("PendingOutbox(0) = %v, want invalid", err)
	}
}

func testDeleteExpired(t *testing.T, s pay.Store) {
	ctx := context.Background()
	// Records from 1999: expired before any other test's.
	base := time.Date(1999, 1, 1, 0, 0, 0, 0, time.UTC)
	short, long := newIdem(t), newIdem(t)
	short.CreatedAt, short.ExpiresAt = base, base.Add(time.Hour)
	long.CreatedAt, long.ExpiresAt = base, base.Add(3*time.Hour)
	for _, r := range []pay.IdempotencyRecord{short, long} {
		if _, err := s.CreatePending(ctx, newPayment(), r); err != nil {
			t.Fatal(err)
		}
	}
	n, err := s.DeleteExpiredIdempotency(ctx, base.Add(time.Hour)) // ExpiresAt <= now
	if err != nil || n != 1 {
		t.Fatalf("DeleteExpiredIdempotency = %d, %v; want 1", n, err)
	}
	if _, err := s.Idempotency(ctx, short.Key); !errors.Is(err, pay.ErrNotFound) {
		t.Errorf("the expired record is still there: %v", err)
	}
	if _, err := s.Idempotency(ctx, long.Key); err != nil {
		t.Errorf("the live record was deleted: %v", err)
	}
	if n, err := s.DeleteExpiredIdempotency(ctx, base.Add(2*time.Hour)); err != nil || n != 0 {
		t.Errorf("second DeleteExpiredIdempotency = %d, %v; want 0", n, err)
	}
	if n, err := s.DeleteExpiredIdempotency(ctx, base.Add(4*time.Hour)); err != nil || n != 1 {
		t.Errorf("DeleteExpiredIdempotency after the long one expired = %d, %v; want 1", n, err)
	}
}

func testConcurrentCreate(t *testing.T, s pay.Store) {
	ctx := context.Background()
	const n = 10
	idem := newIdem(t)
	payments, outbox := len(all(t, s, 1000)), len(pending(t, s))
	reqs := make([]pay.Payment, n)
	for i := range reqs {
		reqs[i] = newPayment()
	}
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			_, errs[i] = s.CreatePending(ctx, reqs[i], idem)
		})
	}
	close(start)
	wg.Wait()
	winner := -1
	for i, err := range errs {
		var conflict *pay.IdempotencyConflict
		switch {
		case err == nil:
			if winner >= 0 {
				t.Fatalf("two CreatePending calls with one key succeeded: %d and %d", winner, i)
			}
			winner = i
		case !errors.As(err, &conflict):
			t.Errorf("CreatePending %d = %v, want success or *IdempotencyConflict", i, err)
		}
	}
	if winner < 0 {
		t.Fatal("no CreatePending succeeded")
	}
	for i, err := range errs {
		var conflict *pay.IdempotencyConflict
		if errors.As(err, &conflict) && conflict.Record.PaymentID != reqs[winner].ID {
			t.Errorf("conflict %d names payment %s, want the winner %s", i, conflict.Record.PaymentID, reqs[winner].ID)
		}
		if _, err := s.Get(ctx, reqs[i].ID); (i == winner) != (err == nil) {
			t.Errorf("Get(request %d) = %v (winner %d)", i, err, winner)
		}
	}
	if got := len(all(t, s, 1000)); got != payments+1 {
		t.Errorf("payments: %d before, %d after; want exactly one more", payments, got)
	}
	if got := len(pending(t, s)); got != outbox+1 {
		t.Errorf("outbox rows: %d before, %d after; want exactly one more", outbox, got)
	}
}

func testConcurrentTransition(t *testing.T, s pay.Store) {
	ctx := context.Background()
	p, _ := create(t, s)
	targets := []pay.Status{pay.StatusApproved, pay.StatusDeclined, pay.StatusUnknown, pay.StatusFailed}
	const n = 10
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			_, errs[i] = s.Transition(ctx, p.ID, pay.StatusPending, targets[i%len(targets)], fmt.Sprintf("racer %d", i))
		})
	}
	close(start)
	wg.Wait()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil:
			if winner >= 0 {
				t.Fatalf("two transitions from PENDING won: %d and %d", winner, i)
			}
			winner = i
		case !errors.Is(err, pay.ErrStaleStatus):
			t.Errorf("Transition %d = %v, want success or ErrStaleStatus", i, err)
		}
	}
	if winner < 0 {
		t.Fatal("no transition won")
	}
	got := get(t, s, p.ID)
	if got.Status != targets[winner%len(targets)] || len(got.History) != 2 || got.History[1].Reason != fmt.Sprintf("racer %d", winner) {
		t.Errorf("after the race: %+v, want the winner's (%d) change only", got, winner)
	}
	if evs := outboxOf(t, s, p.ID); len(evs) != 2 || evs[1].Seq != 2 {
		t.Errorf("outbox after the race = %+v, want 2 rows", evs)
	}
}

func testPing(t *testing.T, s pay.Store) {
	if err := s.Ping(context.Background()); err != nil {
		t.Fatalf("Ping: %v", err)
	}
}
