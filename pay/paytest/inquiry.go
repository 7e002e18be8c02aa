package paytest

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stampede-lab/stampede/pay"
)

// createDueAt creates a PENDING payment that a reconciler may take over
// from next on.
func createDueAt(t *testing.T, s pay.Store, next time.Time) pay.Payment {
	t.Helper()
	p := newPayment()
	p.NextInquiryAt = next
	p, err := s.CreatePending(context.Background(), p, newIdem(t))
	if err != nil {
		t.Fatalf("CreatePending: %v", err)
	}
	return p
}

// createUnknown creates a payment and moves it to UNKNOWN.
func createUnknown(t *testing.T, s pay.Store) pay.Payment {
	t.Helper()
	p, _ := create(t, s)
	return transition(t, s, p.ID, pay.StatusPending, pay.StatusUnknown, "timeout")
}

// ids returns the IDs of ps.
func ids(ps []pay.Payment) []string {
	out := make([]string, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.ID)
	}
	return out
}

// testInquiryState: a new payment is due at its NextInquiryAt (by default
// DefaultPendingTakeover after creation); UNKNOWN is due at once; a final
// status is never due.
func testInquiryState(t *testing.T, s pay.Store) {
	p, _ := create(t, s)
	if want := p.CreatedAt.Add(pay.DefaultPendingTakeover); !p.NextInquiryAt.Equal(want) || p.Inquiries != 0 {
		t.Fatalf("new payment: next inquiry %v, inquiries %d; want %v, 0", p.NextInquiryAt, p.Inquiries, want)
	}
	if got := get(t, s, p.ID); !got.NextInquiryAt.Equal(p.NextInquiryAt) {
		t.Fatalf("stored next inquiry %v, want %v", got.NextInquiryAt, p.NextInquiryAt)
	}
	before := time.Now().Add(-time.Second)
	u := transition(t, s, p.ID, pay.StatusPending, pay.StatusUnknown, "timeout")
	if u.NextInquiryAt.Before(before) || !u.NextInquiryAt.Equal(u.UpdatedAt) {
		t.Fatalf("UNKNOWN: next inquiry %v, updated %v; want due at once", u.NextInquiryAt, u.UpdatedAt)
	}
	a := transition(t, s, p.ID, pay.StatusUnknown, pay.StatusApproved, "found")
	if !a.NextInquiryAt.IsZero() || !get(t, s, p.ID).NextInquiryAt.IsZero() {
		t.Fatalf("APPROVED: next inquiry %v, want none", a.NextInquiryAt)
	}
}

// testClaimDue: a claim takes the due PENDING and UNKNOWN payments, leases
// them until the time given, and leaves the rest.
func testClaimDue(t *testing.T, s pay.Store) {
	ctx := context.Background()
	start := time.Now()
	due := createDueAt(t, s, start.Add(-time.Second))
	later := createDueAt(t, s, start.Add(time.Hour))
	unknown := createUnknown(t, s)
	final, _ := create(t, s)
	transition(t, s, final.ID, pay.StatusPending, pay.StatusApproved, "approved")

	now := time.Now().Add(time.Second)
	until := pay.StoreTime(now.Add(time.Minute))
	got, err := s.ClaimDue(ctx, now, until, 1_000_000)
	if err != nil {
		t.Fatalf("ClaimDue: %v", err)
	}
	claimed := ids(got)
	for _, want := range []string{due.ID, unknown.ID} {
		if !slices.Contains(claimed, want) {
			t.Errorf("ClaimDue missed due payment %s", want)
		}
	}
	for _, not := range []string{later.ID, final.ID} {
		if slices.Contains(claimed, not) {
			t.Errorf("ClaimDue took %s, which is not due", not)
		}
	}
	for _, p := range got {
		if !p.NextInquiryAt.Equal(until) {
			t.Errorf("claimed %s: next inquiry %v, want the lease end %v", p.ID, p.NextInquiryAt, until)
		}
		if p.Status != pay.StatusPending && p.Status != pay.StatusUnknown {
			t.Errorf("claimed %s in status %s", p.ID, p.Status)
		}
	}
	if p := get(t, s, unknown.ID); !p.NextInquiryAt.Equal(until) {
		t.Errorf("stored lease %v, want %v", p.NextInquiryAt, until)
	}
	again, err := s.ClaimDue(ctx, now, until.Add(time.Minute), 1_000_000)
	if err != nil {
		t.Fatalf("ClaimDue again: %v", err)
	}
	if c := ids(again); slices.Contains(c, due.ID) || slices.Contains(c, unknown.ID) {
		t.Errorf("a leased payment was claimed again before its lease ended")
	}
	after, err := s.ClaimDue(ctx, until, until.Add(time.Minute), 1_000_000)
	if err != nil {
		t.Fatalf("ClaimDue after the lease: %v", err)
	}
	if c := ids(after); !slices.Contains(c, due.ID) || !slices.Contains(c, unknown.ID) {
		t.Errorf("a payment whose lease ended was not claimed again")
	}
	createUnknown(t, s)
	createUnknown(t, s)
	if one, err := s.ClaimDue(ctx, time.Now().Add(time.Second), time.Now().Add(time.Minute), 1); err != nil || len(one) != 1 {
		t.Errorf("ClaimDue(limit 1) = %d payments, %v; want 1", len(one), err)
	}
	if _, err := s.ClaimDue(ctx, now, now, 1); pay.ErrorCode(err) != pay.CodeInvalid {
		t.Errorf("ClaimDue with an empty lease = %v, want invalid", err)
	}
	if _, err := s.ClaimDue(ctx, now, until, 0); pay.ErrorCode(err) != pay.CodeInvalid {
		t.Errorf("ClaimDue(limit 0) = %v, want invalid", err)
	}
}

// testClaimOne: one UNKNOWN payment is claimed once per lease; a PENDING
// one is not claimed by a read.
func testClaimOne(t *testing.T, s pay.Store) {
	ctx := context.Background()
	u := createUnknown(t, s)
	now := time.Now().Add(time.Second)
	until := pay.StoreTime(now.Add(time.Minute))
	p, ok, err := s.ClaimOne(ctx, u.ID, now, until)
	if err != nil || !ok || p.ID != u.ID || !p.NextInquiryAt.Equal(until) {
		t.Fatalf("ClaimOne = %+v, %v, %v; want the payment leased until %v", p, ok, err, until)
	}
	if _, ok, err := s.ClaimOne(ctx, u.ID, now, until.Add(time.Minute)); err != nil || ok {
		t.Errorf("ClaimOne during the lease = %v, %v; want not claimed", ok, err)
	}
	if _, ok, err := s.ClaimOne(ctx, u.ID, until, until.Add(time.Minute)); err != nil || !ok {
		t.Errorf("ClaimOne after the lease = %v, %v; want claimed", ok, err)
	}
	pending := createDueAt(t, s, time.Now().Add(-time.Second))
	if _, ok, err := s.ClaimOne(ctx, pending.ID, now, until); err != nil || ok {
		t.Errorf("ClaimOne(PENDING) = %v, %v; want not claimed", ok, err)
	}
	if _, _, err := s.ClaimOne(ctx, pay.NewID(), now, until); !errors.Is(err, pay.ErrNotFound) {
		t.Errorf("ClaimOne(unknown ID) = %v, want ErrNotFound", err)
	}
}

// testConcurrentClaims: claims racing over the same due payments take
// each one once.
func testConcurrentClaims(t *testing.T, s pay.Store) {
	ctx := context.Background()
	mine := map[string]bool{}
	for range 30 {
		mine[createUnknown(t, s).ID] = true
	}
	now := time.Now().Add(time.Second)
	until := now.Add(time.Hour)
	var (
		mu   sync.Mutex
		seen = map[string]int{}
		wg   sync.WaitGroup
	)
	for range 6 {
		wg.Go(func() {
			for {
				got, err := s.ClaimDue(ctx, now, until, 4)
				if err != nil {
					if pay.ErrorCode(err) == pay.CodeUnavailable {
						continue // SQLite: a busy writer; try again
					}
					t.Errorf("ClaimDue: %v", err)
					return
				}
				if len(got) == 0 {
					return
				}
				mu.Lock()
				for _, p := range got {
					seen[p.ID]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for id := range mine {
		if seen[id] != 1 {
			t.Errorf("payment %s was claimed %d times, want once", id, seen[id])
		}
	}
}

// testDeferInquiry: an inconclusive inquiry is counted and moves the next
// one; a payment no longer in the status given is left alone.
func testDeferInquiry(t *testing.T, s pay.Store) {
	ctx := context.Background()
	u := createUnknown(t, s)
	next := pay.StoreTime(time.Now().Add(time.Hour))
	for i := 1; i <= 2; i++ {
		p, err := s.DeferInquiry(ctx, u.ID, pay.StatusUnknown, next)
		if err != nil || p.Inquiries != i || !p.NextInquiryAt.Equal(next) {
			t.Fatalf("DeferInquiry #%d = %d inquiries, next %v, %v; want %d, %v", i, p.Inquiries, p.NextInquiryAt, err, i, next)
		}
	}
	if got := get(t, s, u.ID); got.Inquiries != 2 || !got.NextInquiryAt.Equal(next) {
		t.Errorf("stored: %d inquiries, next %v", got.Inquiries, got.NextInquiryAt)
	}
	if _, err := s.DeferInquiry(ctx, u.ID, pay.StatusPending, next); !errors.Is(err, pay.ErrStaleStatus) {
		t.Errorf("DeferInquiry in the wrong status = %v, want ErrStaleStatus", err)
	}
	if _, err := s.DeferInquiry(ctx, pay.NewID(), pay.StatusUnknown, next); !errors.Is(err, pay.ErrNotFound) {
		t.Errorf("DeferInquiry(unknown ID) = %v, want ErrNotFound", err)
	}
	if _, err := s.DeferInquiry(ctx, u.ID, pay.StatusApproved, next); pay.ErrorCode(err) != pay.CodeInvalid {
		t.Errorf("DeferInquiry(APPROVED) = %v, want invalid", err)
	}
}

// testStats: the counts follow creations, transitions and flags; the
// outbox lag is the age of the oldest unpublished row.
func testStats(t *testing.T, s pay.Store) {
	ctx := context.Background()
	stats := func() pay.Stats {
		t.Helper()
		st, err := s.Stats(ctx)
		if err != nil {
			t.Fatalf("Stats: %v", err)
		}
		return st
	}
	before := stats()
	a, _ := create(t, s)
	b, _ := create(t, s)
	transition(t, s, b.ID, pay.StatusPending, pay.StatusUnknown, "timeout")
	if err := s.FlagReview(ctx, b.ID, "look"); err != nil {
		t.Fatal(err)
	}
	after := stats()
	if after.Pending != before.Pending+1 || after.Unknown != before.Unknown+1 || after.Flagged != before.Flagged+1 {
		t.Errorf("Stats went from %+v to %+v; want one more PENDING, UNKNOWN and flagged", before, after)
	}
	if after.OldestUnpublished.IsZero() || after.OldestUnpublished.After(a.CreatedAt) {
		t.Errorf("oldest unpublished %v, want at or before %v", after.OldestUnpublished, a.CreatedAt)
	}
	if lag := after.OutboxLag(after.OldestUnpublished.Add(3 * time.Second)); lag != 3*time.Second {
		t.Errorf("OutboxLag = %v, want 3s", lag)
	}
	transition(t, s, a.ID, pay.StatusPending, pay.StatusDeclined, "declined")
	if st := stats(); st.Pending != before.Pending {
		t.Errorf("after settling: %d PENDING, want %d", st.Pending, before.Pending)
	}
	var ids []int64
	for _, e := range pending(t, s) {
		ids = append(ids, e.ID)
	}
	if err := s.MarkPublished(ctx, ids, time.Now()); err != nil {
		t.Fatal(err)
	}
	if st := stats(); !st.OldestUnpublished.IsZero() || st.OutboxLag(time.Now()) != 0 {
		t.Errorf("with everything published: oldest %v, want none", st.OldestUnpublished)
	}
}
