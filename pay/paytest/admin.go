package paytest

import (
	"context"
	"slices"
	"testing"

	"github.com/stampede-lab/stampede/pay"
)

// testAdminReads: ListFlagged pages the flagged payments by ID, and
// CountByStatus counts every status, for a store that implements
// pay.AdminStore. Counts are compared before and after, so that stores
// shared with other tests pass.
func testAdminReads(t *testing.T, s pay.Store) {
	as, ok := s.(pay.AdminStore)
	if !ok {
		t.Skipf("%T does not implement pay.AdminStore", s)
	}
	ctx := context.Background()
	counts := func() map[pay.Status]int {
		t.Helper()
		c, err := as.CountByStatus(ctx)
		if err != nil {
			t.Fatalf("CountByStatus: %v", err)
		}
		return c
	}
	flagged := func() []string {
		t.Helper()
		var out []string
		for after := ""; ; {
			page, err := as.ListFlagged(ctx, after, 2)
			if err != nil {
				t.Fatalf("ListFlagged: %v", err)
			}
			for _, p := range page {
				if !p.ManualReview || p.ReviewReason == "" || len(p.History) != 0 {
					t.Errorf("ListFlagged gave %+v: want flagged, with its reason, without history", p)
				}
				out = append(out, p.ID)
			}
			if len(page) < 2 {
				return out
			}
			after = page[len(page)-1].ID
		}
	}
	before, beforeFlagged := counts(), flagged()
	var mine []string
	for i := range 3 {
		p, _ := create(t, s)
		if i > 0 {
			transition(t, s, p.ID, pay.StatusPending, pay.StatusApproved, "approved")
			if err := s.FlagReview(ctx, p.ID, "check it"); err != nil {
				t.Fatal(err)
			}
			mine = append(mine, p.ID)
		}
	}
	after, afterFlagged := counts(), flagged()
	if after[pay.StatusPending] != before[pay.StatusPending]+1 || after[pay.StatusApproved] != before[pay.StatusApproved]+2 {
		t.Errorf("CountByStatus went from %v to %v; want one more PENDING and two more APPROVED", before, after)
	}
	if !slices.IsSorted(afterFlagged) {
		t.Errorf("ListFlagged is not ordered by ID: %v", afterFlagged)
	}
	for _, id := range mine {
		if !slices.Contains(afterFlagged, id) {
			t.Errorf("ListFlagged lacks the flagged payment %s", id)
		}
	}
	if len(afterFlagged) < len(beforeFlagged)+2 {
		t.Errorf("ListFlagged went from %d to %d payments, want at least 2 more", len(beforeFlagged), len(afterFlagged))
	}
	if _, err := as.ListFlagged(ctx, "", 0); err == nil {
		t.Error("ListFlagged(limit 0) succeeded, want an invalid limit")
	}
}
