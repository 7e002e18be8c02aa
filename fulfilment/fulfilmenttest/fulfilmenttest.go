// Package fulfilmenttest is the conformance suite every fulfilment.Store
// passes, run through a fulfilment.Handler: an adapter's tests call
// Exercise, once for each database they can reach, with a function that
// opens the store under test.
//
// Events are built as the payment service writes them (pay.NewEvent) and
// read back with fulfilment.DecodeEvent, so the suite also pins the wire
// format between pay's outbox and fulfilment.
//
// The suite does not assume an empty store: every test uses fresh payment,
// merchant and order ids and looks only at its own rows, so one database
// may serve every test.
package fulfilmenttest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/fulfilment"
	"github.com/stampede-lab/stampede/internal/httpapi"
	"github.com/stampede-lab/stampede/pay"
)

// Options tune Exercise.
type Options struct {
	// Parallel runs the suite's tests in parallel with each other; every
	// test uses fresh ids, so they may share one database.
	Parallel bool
}

// Exercise runs the suite. open returns a new store for one test (the
// suite closes it in some tests), which may be on a database other tests
// use too; open owns the stores (close them with t.Cleanup).
func Exercise(t *testing.T, open func(t *testing.T) fulfilment.Store, opts Options) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s fulfilment.Store)
	}{
		{"RedeliveredEventIsSkipped", testRedelivered},
		{"ConcurrentDeliveriesApplyOnce", testConcurrentDeliveries},
		{"TwoApprovedPaymentsOfOneOrderIssueOneTicket", testTwoApproved},
		{"ConcurrentApprovedPaymentsOfOneOrderIssueOneTicket", testConcurrentTwoApproved},
		{"DeclinedThenApprovedRetry", testDeclinedThenApproved},
		{"StaleEventIsIgnored", testStale},
		{"StaleEpochIsFenced", testFenced},
		{"NonTerminalEventsHaveNoEffect", testNonTerminal},
		{"CancellationRevokesTheTicket", testCancellationRevokes},
		{"FailedRevocationWritesNothing", testFailedRevocation},
		{"FailureMidTransactionWritesNothing", testFailureMidTransaction},
		{"ClosedStoreIsUnavailable", testClosed},
		{"ManyPaymentsKeepParity", testManyPayments},
		{"TicketsPaginate", testTicketsPaginate},
		{"Ping", func(t *testing.T, s fulfilment.Store) {
			if err := s.Ping(context.Background()); err != nil {
				t.Fatalf("Ping: %v", err)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if opts.Parallel {
				t.Parallel()
			}
			tc.fn(t, open(t))
		})
	}
}

// newPayment returns a payment of a fresh merchant and order.
func newPayment() pay.Payment {
	return pay.Payment{
		ID: pay.NewID(), MerchantID: pay.NewID(), OrderID: fmt.Sprintf("order-%08x", rand.Uint32()),
		Amount: 12_000, Currency: "KRW", Status: pay.StatusPending,
	}
}

// retry returns a new payment of p's order, as a buyer retrying after a
// decline makes.
func retry(p pay.Payment) pay.Payment {
	q := newPayment()
	q.MerchantID, q.OrderID = p.MerchantID, p.OrderID
	return q
}

// event returns the seq-th event of p with status st, as pay writes it
// and fulfilment reads it.
func event(t testing.TB, p pay.Payment, seq int64, st pay.Status) fulfilment.Event {
	t.Helper()
	typ, from := pay.EventStatusChanged, pay.StatusPending
	if st == pay.StatusPending {
		typ, from = pay.EventCreated, ""
	}
	p.Status = st
	oe := pay.NewEvent(typ, p, seq, from, "test", time.Now().UTC())
	ev, err := fulfilment.DecodeEvent(oe.Payload)
	if err != nil {
		t.Fatalf("DecodeEvent(%s): %v", oe.Payload, err)
	}
	return ev
}

// refundEvent returns the seq-th event of APPROVED payment p: the
// creation of a refund of all of it, under the payment's cancellation
// key when cancellation is true (pay carrying out a cancellation) and
// under a key of the merchant's otherwise, as pay writes it.
func refundEvent(t testing.TB, p pay.Payment, seq int64, cancellation bool) fulfilment.Event {
	t.Helper()
	p.Status = pay.StatusApproved
	key := pay.ScopedKey(p.MerchantID, "refund-"+pay.NewID())
	if cancellation {
		key = pay.ScopedKey(p.MerchantID, pay.CancelKey(p.ID))
	}
	r := pay.Refund{ID: pay.NewID(), PaymentID: p.ID, MerchantID: p.MerchantID, Amount: p.Amount, Currency: p.Currency,
		Status: pay.RefundPending, IdempotencyKey: key}
	oe := pay.NewRefundEvent(pay.EventRefundCreated, p, r, seq, "", pay.ReasonCreated, time.Now().UTC())
	ev, err := fulfilment.DecodeEvent(oe.Payload)
	if err != nil {
		t.Fatalf("DecodeEvent(%s): %v", oe.Payload, err)
	}
	if ev.Refund == nil || ev.Refund.Cancellation != cancellation {
		t.Fatalf("refund event %s: refund %+v, want cancellation %v", oe.Payload, ev.Refund, cancellation)
	}
	return ev
}

func newHandler(t testing.TB, s fulfilment.Store) *fulfilment.Handler {
	t.Helper()
	h, err := fulfilment.NewHandler(s, fulfilment.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// process processes ev and checks its outcome.
func process(t testing.TB, h *fulfilment.Handler, ev fulfilment.Event, want fulfilment.Outcome) {
	t.Helper()
	got, err := h.Process(context.Background(), ev)
	if err != nil {
		t.Fatalf("Process(%s %s): %v", ev.ID(), ev.Status, err)
	}
	if got != want {
		t.Fatalf("Process(%s %s) = %s, want %s", ev.ID(), ev.Status, got, want)
	}
}

func wantInbox(t testing.TB, s fulfilment.Store, ev fulfilment.Event, want fulfilment.Outcome) {
	t.Helper()
	e, err := s.Inbox(context.Background(), ev.ID())
	if err != nil {
		t.Fatalf("Inbox(%s): %v", ev.ID(), err)
	}
	if e.EventID != ev.ID() || e.PaymentID != ev.PaymentID || e.Seq != ev.Seq || e.Outcome != want || e.ProcessedAt.IsZero() {
		t.Fatalf("Inbox(%s) = %+v, want outcome %s", ev.ID(), e, want)
	}
}

func wantOrder(t testing.TB, s fulfilment.Store, p pay.Payment, state fulfilment.OrderState, by string) {
	t.Helper()
	o, err := s.Order(context.Background(), p.MerchantID, p.OrderID)
	if err != nil {
		t.Fatalf("Order(%s): %v", p.OrderID, err)
	}
	if o.State != state || o.PaymentID != by || o.MerchantID != p.MerchantID || o.OrderID != p.OrderID {
		t.Fatalf("Order(%s) = %+v, want %s by %s", p.OrderID, o, state, by)
	}
}

func wantTicket(t testing.TB, s fulfilment.Store, p pay.Payment, by pay.Payment) fulfilment.Ticket {
	t.Helper()
	tk, err := s.Ticket(context.Background(), p.MerchantID, p.OrderID)
	if err != nil {
		t.Fatalf("Ticket(%s): %v", p.OrderID, err)
	}
	if tk.PaymentID != by.ID || tk.EventID == "" || tk.ID == "" || tk.Amount != by.Amount || tk.Currency != by.Currency || tk.IssuedAt.IsZero() {
		t.Fatalf("Ticket(%s) = %+v, want one issued for payment %s", p.OrderID, tk, by.ID)
	}
	return tk
}

func wantNotFound(t testing.TB, what string, err error) {
	t.Helper()
	if !errors.Is(err, fulfilment.ErrNotFound) {
		t.Fatalf("%s = %v, want ErrNotFound", what, err)
	}
}

func wantReleases(t testing.TB, s fulfilment.Store, p pay.Payment, by ...pay.Payment) {
	t.Helper()
	rs, err := s.Releases(context.Background(), p.MerchantID, p.OrderID)
	if err != nil {
		t.Fatalf("Releases(%s): %v", p.OrderID, err)
	}
	var got, want []string
	for _, r := range rs {
		got = append(got, r.PaymentID)
		if r.EventID == "" || r.ReleasedAt.IsZero() || (r.Status != pay.StatusDeclined && r.Status != pay.StatusFailed) {
			t.Errorf("release %+v is incomplete", r)
		}
	}
	for _, q := range by {
		want = append(want, q.ID)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("Releases(%s) by payments %v, want %v", p.OrderID, got, want)
	}
}

// testRedelivered: a redelivered event is skipped: nothing applied twice.
func testRedelivered(t *testing.T, s fulfilment.Store) {
	h, ctx := newHandler(t, s), context.Background()
	p := newPayment()
	created, approved := event(t, p, 1, pay.StatusPending), event(t, p, 2, pay.StatusApproved)
	process(t, h, created, fulfilment.OutcomeNoEffect)
	applied, err := h.Handle(ctx, approved)
	if err != nil || !applied {
		t.Fatalf("first Handle(APPROVED) = %v, %v; want applied", applied, err)
	}
	first := wantTicket(t, s, p, p)
	for range 3 {
		applied, err := h.Handle(ctx, approved)
		if err != nil || applied {
			t.Fatalf("Handle(APPROVED) again = %v, %v; want skipped", applied, err)
		}
		process(t, h, created, fulfilment.OutcomeDuplicate)
	}
	process(t, h, approved, fulfilment.OutcomeDuplicate)
	if again := wantTicket(t, s, p, p); again != first {
		t.Fatalf("ticket changed on redelivery: %+v, then %+v", first, again)
	}
	wantInbox(t, s, approved, fulfilment.OutcomeTicketIssued)
	wantInbox(t, s, created, fulfilment.OutcomeNoEffect)
	wantOrder(t, s, p, fulfilment.OrderTicketed, p.ID)
	wantReleases(t, s, p)

	// The same for a release.
	q := newPayment()
	declined := event(t, q, 2, pay.StatusDeclined)
	process(t, h, declined, fulfilment.OutcomeReleased)
	process(t, h, declined, fulfilment.OutcomeDuplicate)
	wantReleases(t, s, q, q)
	wantOrder(t, s, q, fulfilment.OrderReleased, q.ID)
}

// race runs fn n times at once (released together) and returns how many
// reported applied; every call must succeed.
func race(t *testing.T, n int, fn func(i int) (bool, error)) int {
	t.Helper()
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		applied int
		start   = make(chan struct{})
	)
	for i := range n {
		wg.Go(func() {
			<-start
			ok, err := fn(i)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Errorf("delivery %d: %v", i, err)
			}
			if ok {
				applied++
			}
		})
	}
	close(start)
	wg.Wait()
	return applied
}

// testConcurrentDeliveries: deliveries of one event racing each other
// (two consumers after a redelivery, a stuck handler overtaken) apply it
// once.
func testConcurrentDeliveries(t *testing.T, s fulfilment.Store) {
	h, ctx := newHandler(t, s), context.Background()
	for _, st := range []pay.Status{pay.StatusApproved, pay.StatusDeclined, pay.StatusFailed} {
		for range 5 {
			p := newPayment()
			ev := event(t, p, 2, st)
			if n := race(t, 8, func(int) (bool, error) { return h.Handle(ctx, ev) }); n != 1 {
				t.Fatalf("%s delivered 8 times at once: applied %d times, want 1", st, n)
			}
			if st == pay.StatusApproved {
				wantTicket(t, s, p, p)
				wantInbox(t, s, ev, fulfilment.OutcomeTicketIssued)
			} else {
				wantReleases(t, s, p, p)
				wantInbox(t, s, ev, fulfilment.OutcomeReleased)
			}
		}
	}
}

// testTwoApproved: the decision for two APPROVED payments of one order
// (pay allows one live payment per order, so the second is a double
// charge): the first processed gets the order's one ticket, the second
// none (OutcomeAlreadyTicketed), and parity lists the second for a refund.
func testTwoApproved(t *testing.T, s fulfilment.Store) {
	h := newHandler(t, s)
	a := newPayment()
	b := retry(a)
	process(t, h, event(t, a, 2, pay.StatusApproved), fulfilment.OutcomeTicketIssued)
	evB := event(t, b, 2, pay.StatusApproved)
	process(t, h, evB, fulfilment.OutcomeAlreadyTicketed)
	process(t, h, evB, fulfilment.OutcomeDuplicate)
	wantTicket(t, s, a, a)
	wantInbox(t, s, evB, fulfilment.OutcomeAlreadyTicketed)
	wantOrder(t, s, a, fulfilment.OrderTicketed, a.ID)

	rep, err := fulfilment.CheckParity(context.Background(), s, []fulfilment.PaymentRecord{
		{PaymentID: a.ID, MerchantID: a.MerchantID, OrderID: a.OrderID, Status: pay.StatusApproved},
		{PaymentID: b.ID, MerchantID: b.MerchantID, OrderID: b.OrderID, Status: pay.StatusApproved},
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Matched != 1 || !slices.Equal(rep.OrderAlreadyTicketed, []string{b.ID}) || len(rep.MissingTicket) != 0 {
		t.Fatalf("parity = %+v; want a matched and b listed as order already ticketed", rep)
	}
}

// testConcurrentTwoApproved: APPROVED events of different payments of one
// order racing each other issue one ticket.
func testConcurrentTwoApproved(t *testing.T, s fulfilment.Store) {
	h, ctx := newHandler(t, s), context.Background()
	for range 5 {
		first := newPayment()
		ps := []pay.Payment{first}
		for range 5 {
			ps = append(ps, retry(first))
		}
		n := race(t, len(ps), func(i int) (bool, error) {
			return h.Handle(ctx, event(t, ps[i], 2, pay.StatusApproved))
		})
		if n != 1 {
			t.Fatalf("%d APPROVED payments of one order at once: %d tickets issued, want 1", len(ps), n)
		}
		tk, err := s.Ticket(ctx, first.MerchantID, first.OrderID)
		if err != nil {
			t.Fatal(err)
		}
		wantOrder(t, s, first, fulfilment.OrderTicketed, tk.PaymentID)
	}
}

// testDeclinedThenApproved: an order whose first payment is declined is
// released; the retry's APPROVED issues its ticket; a failed attempt seen
// after that releases nothing.
func testDeclinedThenApproved(t *testing.T, s fulfilment.Store) {
	h := newHandler(t, s)
	a := newPayment()
	b, c := retry(a), retry(a)
	evA := event(t, a, 2, pay.StatusDeclined)
	process(t, h, evA, fulfilment.OutcomeReleased)
	wantOrder(t, s, a, fulfilment.OrderReleased, a.ID)
	wantReleases(t, s, a, a)
	_, err := s.Ticket(context.Background(), a.MerchantID, a.OrderID)
	wantNotFound(t, "Ticket after DECLINED", err)

	process(t, h, event(t, b, 1, pay.StatusPending), fulfilment.OutcomeNoEffect)
	process(t, h, event(t, b, 2, pay.StatusApproved), fulfilment.OutcomeTicketIssued)
	wantOrder(t, s, a, fulfilment.OrderTicketed, b.ID)
	wantTicket(t, s, a, b)
	process(t, h, evA, fulfilment.OutcomeDuplicate)

	// A third attempt that failed, seen late (another payment, another
	// key: no order between them): the ticket stands.
	evC := event(t, c, 2, pay.StatusFailed)
	process(t, h, evC, fulfilment.OutcomeReleaseSuperseded)
	wantInbox(t, s, evC, fulfilment.OutcomeReleaseSuperseded)
	wantOrder(t, s, a, fulfilment.OrderTicketed, b.ID)
	wantReleases(t, s, a, a)
	wantTicket(t, s, a, b)

	rep, err := fulfilment.CheckParity(context.Background(), s, []fulfilment.PaymentRecord{
		{PaymentID: a.ID, Status: pay.StatusDeclined}, {PaymentID: b.ID, Status: pay.StatusApproved},
		{PaymentID: c.ID, Status: pay.StatusFailed},
	})
	if err != nil {
		t.Fatal(err)
	}
	// Other tests' tickets may share the store: look at ours only.
	rep.UnknownPayment = nil
	if rep.Matched != 1 || rep.Mismatches() != 0 {
		t.Fatalf("parity = %+v, want exact", rep)
	}
}

// testStale: an event overtaken by a later one of its payment is recorded
// and ignored: a DECLINED after the APPROVED never releases the ticket.
func testStale(t *testing.T, s fulfilment.Store) {
	h := newHandler(t, s)
	p := newPayment()
	process(t, h, event(t, p, 3, pay.StatusApproved), fulfilment.OutcomeTicketIssued)
	for _, ev := range []fulfilment.Event{
		event(t, p, 2, pay.StatusDeclined),
		event(t, p, 3, pay.StatusDeclined), // a different body under a processed id: the inbox wins
		event(t, p, 1, pay.StatusPending),
	} {
		want := fulfilment.OutcomeStale
		if ev.Seq == 3 {
			want = fulfilment.OutcomeDuplicate
		}
		process(t, h, ev, want)
	}
	wantInbox(t, s, event(t, p, 2, pay.StatusDeclined), fulfilment.OutcomeStale)
	wantInbox(t, s, event(t, p, 1, pay.StatusPending), fulfilment.OutcomeStale)
	process(t, h, event(t, p, 2, pay.StatusDeclined), fulfilment.OutcomeDuplicate)
	wantTicket(t, s, p, p)
	wantOrder(t, s, p, fulfilment.OrderTicketed, p.ID)
	wantReleases(t, s, p)

	// A terminal event overtaking UNKNOWN: the late UNKNOWN changes
	// nothing, and neither does a late APPROVED of a declined payment.
	q := newPayment()
	process(t, h, event(t, q, 3, pay.StatusDeclined), fulfilment.OutcomeReleased)
	process(t, h, event(t, q, 2, pay.StatusUnknown), fulfilment.OutcomeStale)
	process(t, h, event(t, q, 2, pay.StatusApproved), fulfilment.OutcomeDuplicate)
	process(t, h, event(t, q, 1, pay.StatusApproved), fulfilment.OutcomeStale)
	_, err := s.Ticket(context.Background(), q.MerchantID, q.OrderID)
	wantNotFound(t, "Ticket of a declined payment after stale events", err)
	wantOrder(t, s, q, fulfilment.OrderReleased, q.ID)
}

// testNonTerminal: PENDING and UNKNOWN are recorded and touch no order.
func testNonTerminal(t *testing.T, s fulfilment.Store) {
	h := newHandler(t, s)
	p := newPayment()
	for seq, st := range []pay.Status{pay.StatusPending, pay.StatusUnknown} {
		ev := event(t, p, int64(seq+1), st)
		process(t, h, ev, fulfilment.OutcomeNoEffect)
		wantInbox(t, s, ev, fulfilment.OutcomeNoEffect)
	}
	_, err := s.Order(context.Background(), p.MerchantID, p.OrderID)
	wantNotFound(t, "Order after PENDING and UNKNOWN", err)
	process(t, h, event(t, p, 3, pay.StatusApproved), fulfilment.OutcomeTicketIssued)
	wantTicket(t, s, p, p)
}

// testCancellationRevokesTheTicket: a plain refund leaves the ticket
// alone; the first event of a cancellation's refund moves the ticket to
// the revocations and marks the order revoked, once; a later approval of
// the same order issues no second ticket.
func testCancellationRevokes(t *testing.T, s fulfilment.Store) {
	ctx := context.Background()
	h := newHandler(t, s)
	before, err := s.Counts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p := newPayment()
	process(t, h, event(t, p, 2, pay.StatusApproved), fulfilment.OutcomeTicketIssued)
	issued := wantTicket(t, s, p, p)
	process(t, h, refundEvent(t, p, 3, false), fulfilment.OutcomeNoEffect)
	wantTicket(t, s, p, p)
	wantOrder(t, s, p, fulfilment.OrderTicketed, p.ID)

	cancel := refundEvent(t, p, 4, true)
	process(t, h, cancel, fulfilment.OutcomeTicketRevoked)
	wantInbox(t, s, cancel, fulfilment.OutcomeTicketRevoked)
	_, err = s.Ticket(ctx, p.MerchantID, p.OrderID)
	wantNotFound(t, "Ticket after its revocation", err)
	wantOrder(t, s, p, fulfilment.OrderRevoked, p.ID)
	rv, err := s.Revocation(ctx, p.MerchantID, p.OrderID)
	if err != nil || rv.Ticket != issued || rv.RevokeEventID != cancel.ID() || rv.RevokedAt.IsZero() {
		t.Fatalf("Revocation = %+v, %v; want ticket %+v revoked by %s", rv, err, issued, cancel.ID())
	}
	process(t, h, cancel, fulfilment.OutcomeDuplicate)
	process(t, h, refundEvent(t, p, 5, true), fulfilment.OutcomeNoEffect) // the refund's next event
	q := retry(p)
	process(t, h, event(t, q, 2, pay.StatusApproved), fulfilment.OutcomeAlreadyTicketed)
	_, err = s.Ticket(ctx, p.MerchantID, p.OrderID)
	wantNotFound(t, "Ticket of a revoked order after another approval", err)

	// A cancellation of a payment whose order holds no ticket of its own
	// (declined, or never ticketed) changes nothing.
	d := newPayment()
	process(t, h, event(t, d, 2, pay.StatusDeclined), fulfilment.OutcomeReleased)
	process(t, h, refundEvent(t, d, 3, true), fulfilment.OutcomeNoEffect)
	wantOrder(t, s, d, fulfilment.OrderReleased, d.ID)
	_, err = s.Revocation(ctx, d.MerchantID, d.OrderID)
	wantNotFound(t, "Revocation of an order never ticketed", err)

	after, err := s.Counts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.Revoked < before.Revoked+1 {
		t.Errorf("Counts().Revoked = %d, was %d: want the revocation counted", after.Revoked, before.Revoked)
	}
}

// testFailedRevocation: a revocation whose transaction fails after its
// writes leaves the ticket live and the order ticketed; the redelivery
// revokes it.
func testFailedRevocation(t *testing.T, s fulfilment.Store) {
	ctx := context.Background()
	h := newHandler(t, s)
	for _, at := range []string{"RevokeTicket", "SaveOrder", "SetOutcome"} {
		p := newPayment()
		process(t, h, event(t, p, 2, pay.StatusApproved), fulfilment.OutcomeTicketIssued)
		cancel := refundEvent(t, p, 3, true)
		applied, err := newHandler(t, failing{Store: s, at: at}).Handle(ctx, cancel)
		if applied || !fulfilment.Retryable(err) {
			t.Fatalf("failing at %s: Handle = %v, %v; want a retryable error", at, applied, err)
		}
		wantTicket(t, s, p, p)
		wantOrder(t, s, p, fulfilment.OrderTicketed, p.ID)
		_, err = s.Revocation(ctx, p.MerchantID, p.OrderID)
		wantNotFound(t, "Revocation after a failed transaction", err)
		process(t, h, cancel, fulfilment.OutcomeTicketRevoked)
		wantOrder(t, s, p, fulfilment.OrderRevoked, p.ID)
	}
}

// failing wraps a Store; its transactions fail at one step, after the
// step itself has run.
type failing struct {
	fulfilment.Store
	at string
}

var errInjected = fulfilment.Unavailable(errors.New("injected failure"))

func (f failing) Update(ctx context.Context, fn func(ctx context.Context, tx fulfilment.Tx) error) error {
	return f.Store.Update(ctx, func(ctx context.Context, tx fulfilment.Tx) error {
		return fn(ctx, failingTx{Tx: tx, at: f.at})
	})
}

type failingTx struct {
	fulfilment.Tx
	at string
}

func (f failingTx) fail(step string, err error) error {
	if err == nil && step == f.at {
		return errInjected
	}
	return err
}

func (f failingTx) IssueTicket(ctx context.Context, t fulfilment.Ticket) error {
	return f.fail("IssueTicket", f.Tx.IssueTicket(ctx, t))
}

func (f failingTx) RecordRelease(ctx context.Context, r fulfilment.Release) error {
	return f.fail("RecordRelease", f.Tx.RecordRelease(ctx, r))
}

func (f failingTx) RevokeTicket(ctx context.Context, merchantID, orderID, eventID string, now time.Time) (fulfilment.Revocation, error) {
	r, err := f.Tx.RevokeTicket(ctx, merchantID, orderID, eventID, now)
	return r, f.fail("RevokeTicket", err)
}

func (f failingTx) SaveOrder(ctx context.Context, o fulfilment.Order) error {
	return f.fail("SaveOrder", f.Tx.SaveOrder(ctx, o))
}

func (f failingTx) SetOutcome(ctx context.Context, id string, o fulfilment.Outcome) error {
	return f.fail("SetOutcome", f.Tx.SetOutcome(ctx, id, o))
}

// testFailureMidTransaction: a transaction that fails after some of its
// writes (the store went away mid-way) leaves none of them: no inbox
// entry, no ticket or release, no order, no progress; the error is
// retryable (503), and the next delivery applies the event once.
func testFailureMidTransaction(t *testing.T, s fulfilment.Store) {
	ctx := context.Background()
	h := newHandler(t, s)
	for _, c := range []struct {
		at string
		st pay.Status
	}{
		{"IssueTicket", pay.StatusApproved}, {"SaveOrder", pay.StatusApproved}, {"SetOutcome", pay.StatusApproved},
		{"RecordRelease", pay.StatusDeclined}, {"SaveOrder", pay.StatusFailed}, {"SetOutcome", pay.StatusDeclined},
	} {
		p := newPayment()
		ev := event(t, p, 2, c.st)
		broken := newHandler(t, failing{Store: s, at: c.at})
		applied, err := broken.Handle(ctx, ev)
		if applied || !fulfilment.Retryable(err) || httpapi.StatusOf(err) != http.StatusServiceUnavailable {
			t.Fatalf("%s failing at %s: Handle = %v, %v; want a retryable 503", c.st, c.at, applied, err)
		}
		_, err = s.Inbox(ctx, ev.ID())
		wantNotFound(t, "Inbox after a failed transaction", err)
		_, err = s.Order(ctx, p.MerchantID, p.OrderID)
		wantNotFound(t, "Order after a failed transaction", err)
		_, err = s.Ticket(ctx, p.MerchantID, p.OrderID)
		wantNotFound(t, "Ticket after a failed transaction", err)
		wantReleases(t, s, p)
		// The redelivery applies it; had the payment's progress been
		// kept, it would be stale.
		want := fulfilment.OutcomeTicketIssued
		if c.st != pay.StatusApproved {
			want = fulfilment.OutcomeReleased
		}
		process(t, h, ev, want)
	}
}

// testClosed: a store that cannot answer fails with CodeUnavailable (503)
// and the handler reports it as retryable.
func testClosed(t *testing.T, s fulfilment.Store) {
	ctx := context.Background()
	h := newHandler(t, s)
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	p := newPayment()
	ev := event(t, p, 2, pay.StatusApproved)
	applied, err := h.Handle(ctx, ev)
	if applied || !fulfilment.Retryable(err) || httpapi.StatusOf(err) != http.StatusServiceUnavailable {
		t.Fatalf("Handle on a closed store = %v, %v; want a retryable 503", applied, err)
	}
	_, errInbox := s.Inbox(ctx, ev.ID())
	_, errOrder := s.Order(ctx, p.MerchantID, p.OrderID)
	_, errTickets := s.Tickets(ctx, "", 10)
	_, errCounts := s.Counts(ctx)
	for name, err := range map[string]error{"Ping": s.Ping(ctx), "Inbox": errInbox, "Order": errOrder, "Tickets": errTickets, "Counts": errCounts} {
		if stampede.CodeOf(err) != stampede.Unavailable {
			t.Errorf("%s on a closed store = %v, want unavailable", name, err)
		}
	}
}

// testManyPayments: many payments, each delivered in order by its own
// key with duplicates, keys concurrently; some orders are retried after a
// decline. The tickets match the APPROVED payments exactly.
func testManyPayments(t *testing.T, s fulfilment.Store) {
	ctx := context.Background()
	h := newHandler(t, s)
	rng := rand.New(rand.NewPCG(1, 2))
	merchant := pay.NewID()
	type script struct {
		p      pay.Payment
		events []fulfilment.Event
	}
	var (
		scripts  []script
		records  []fulfilment.PaymentRecord
		approved int
		released int
	)
	for i := range 120 {
		p := newPayment()
		p.MerchantID, p.OrderID = merchant, fmt.Sprintf("order-%d", i)
		attempts := []pay.Payment{p}
		if i%4 == 0 { // declined, then retried
			attempts = append(attempts, retry(p))
		}
		for j, q := range attempts {
			final := []pay.Status{pay.StatusApproved, pay.StatusDeclined, pay.StatusFailed}[rng.IntN(3)]
			if len(attempts) == 2 {
				final = []pay.Status{pay.StatusDeclined, pay.StatusApproved}[j]
			}
			statuses := []pay.Status{pay.StatusPending}
			if rng.IntN(3) == 0 {
				statuses = append(statuses, pay.StatusUnknown)
			}
			statuses = append(statuses, final)
			sc := script{p: q}
			for k, st := range statuses {
				ev := event(t, q, int64(k+1), st)
				sc.events = append(sc.events, ev)
				if rng.IntN(3) == 0 { // redelivered
					sc.events = append(sc.events, ev)
				}
			}
			scripts = append(scripts, sc)
			records = append(records, fulfilment.PaymentRecord{PaymentID: q.ID, MerchantID: q.MerchantID, OrderID: q.OrderID, Status: final})
			switch final {
			case pay.StatusApproved:
				approved++
			default:
				released++
			}
		}
	}
	// The declined attempt of a retried order is delivered before its
	// retry, as a buyer retries after seeing the decline.
	var wg sync.WaitGroup
	next := make(chan script)
	for range 8 {
		wg.Go(func() {
			for sc := range next {
				for _, ev := range sc.events {
					if _, err := h.Handle(ctx, ev); err != nil {
						t.Errorf("Handle(%s): %v", ev.ID(), err)
					}
				}
			}
		})
	}
	for i := 0; i < len(scripts); {
		// A retried order's two attempts go to one worker, in order.
		if i+1 < len(scripts) && scripts[i+1].p.OrderID == scripts[i].p.OrderID {
			both := scripts[i]
			both.events = append(slices.Clone(both.events), scripts[i+1].events...)
			next <- both
			i += 2
			continue
		}
		next <- scripts[i]
		i++
	}
	close(next)
	wg.Wait()

	var ours []fulfilment.Ticket
	after := ""
	for {
		page, err := s.Tickets(ctx, after, 50)
		if err != nil {
			t.Fatal(err)
		}
		for _, tk := range page {
			if tk.MerchantID == merchant {
				ours = append(ours, tk)
			}
		}
		if len(page) < 50 {
			break
		}
		after = page[len(page)-1].PaymentID
	}
	rep := fulfilment.Parity(records, ours)
	if rep.Mismatches() != 0 || rep.Matched != approved || len(ours) != approved {
		t.Fatalf("parity = %v (%d tickets); want %d matched and nothing else", rep, len(ours), approved)
	}
	for _, sc := range scripts {
		last := sc.events[len(sc.events)-1]
		if last.Status == pay.StatusApproved {
			continue
		}
		rs, err := s.Releases(ctx, merchant, sc.p.OrderID)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(rs, func(r fulfilment.Release) bool { return r.PaymentID == sc.p.ID }) {
			t.Errorf("payment %s ended %s but released nothing", sc.p.ID, last.Status)
		}
	}
	t.Logf("%d payments: %d tickets, %d releases", len(records), len(ours), released)
}

// testTicketsPaginate: Tickets pages in payment id order without gaps or
// repeats, and Counts moves with it.
func testTicketsPaginate(t *testing.T, s fulfilment.Store) {
	ctx := context.Background()
	h := newHandler(t, s)
	before, err := s.Counts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for range 7 {
		p := newPayment()
		ids = append(ids, p.ID)
		process(t, h, event(t, p, 2, pay.StatusApproved), fulfilment.OutcomeTicketIssued)
	}
	var seen []string
	after := ""
	for {
		page, err := s.Tickets(ctx, after, 3)
		if err != nil {
			t.Fatal(err)
		}
		for _, tk := range page {
			if tk.PaymentID <= after {
				t.Fatalf("Tickets after %q returned %s: out of order", after, tk.PaymentID)
			}
			after = tk.PaymentID
			if slices.Contains(ids, tk.PaymentID) {
				seen = append(seen, tk.PaymentID)
			}
		}
		if len(page) < 3 {
			break
		}
	}
	slices.Sort(ids)
	if !slices.Equal(seen, ids) {
		t.Fatalf("paged through tickets of %v, want %v", seen, ids)
	}
	if _, err := s.Tickets(ctx, "", 0); stampede.CodeOf(err) != stampede.Invalid {
		t.Errorf("Tickets with limit 0 = %v, want invalid", err)
	}
	got, err := s.Counts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got.Tickets < before.Tickets+7 || got.Inbox < before.Inbox+7 || got.Orders[fulfilment.OrderTicketed] < before.Orders[fulfilment.OrderTicketed]+7 {
		t.Fatalf("Counts went from %+v to %+v, want at least 7 more tickets, events and ticketed orders", before, got)
	}
}

// testFenced: a worker paused while its partition moved to another (epoch
// 9) wakes and processes an event with its old epoch 5: ErrFenced, nothing
// written, and the new owner applies the event. Another partition has its
// own epoch, and an event without an epoch is not fenced.
func testFenced(t *testing.T, s fulfilment.Store) {
	h := newHandler(t, s)
	ctx := context.Background()
	part := int(rand.Int32N(1 << 30))
	at := func(ev fulfilment.Event, partition int, epoch uint64) fulfilment.Event {
		ev.Partition, ev.Epoch = partition, epoch
		return ev
	}
	a, b, c, d, e := newPayment(), newPayment(), newPayment(), newPayment(), newPayment()
	process(t, h, at(event(t, a, 1, pay.StatusApproved), part, 5), fulfilment.OutcomeTicketIssued)
	process(t, h, at(event(t, b, 1, pay.StatusApproved), part, 9), fulfilment.OutcomeTicketIssued)
	late := at(event(t, c, 1, pay.StatusApproved), part, 5)
	if out, err := h.Process(ctx, late); !errors.Is(err, fulfilment.ErrFenced) {
		t.Fatalf("Process(epoch 5 after 9) = %s, %v; want ErrFenced", out, err)
	}
	if _, err := s.Inbox(ctx, late.ID()); !errors.Is(err, fulfilment.ErrNotFound) {
		t.Fatalf("Inbox of the fenced event: %v, want ErrNotFound (nothing written)", err)
	}
	if _, err := s.Ticket(ctx, c.MerchantID, c.OrderID); !errors.Is(err, fulfilment.ErrNotFound) {
		t.Fatalf("Ticket of the fenced event's order: %v, want ErrNotFound", err)
	}
	process(t, h, at(event(t, c, 1, pay.StatusApproved), part, 9), fulfilment.OutcomeTicketIssued)
	process(t, h, at(event(t, d, 1, pay.StatusApproved), part+1, 1), fulfilment.OutcomeTicketIssued)
	process(t, h, event(t, e, 1, pay.StatusApproved), fulfilment.OutcomeTicketIssued)
	wantTicket(t, s, c, c)
}
