package dispatch

import "testing"

func TestLedgerCountsOvertakingItems(t *testing.T) {
	l := NewLedger()
	a0, a1, a2 := l.Submit("a"), l.Submit("a"), l.Submit("a")
	b0 := l.Submit("b")

	l.Start("a", a0)
	l.Start("a", a1) // overlap: a0 still running
	l.Done("a", a1)  // violation: a1 completes before a0
	l.Done("a", a0)
	l.Start("a", a2)
	l.Done("a", a2) // in order again
	l.Start("b", b0)
	l.Done("b", b0)

	got := l.Key("a")
	want := KeyReport{Submitted: 3, Completed: 3, Violations: 1, Overlaps: 1}
	if got != want {
		t.Fatalf("Key(a) = %+v, want %+v", got, want)
	}
	rep := l.Report()
	if rep.Keys != 2 || rep.OrderedKeys != 1 || rep.Violations != 1 || rep.Completed != 4 || rep.Vacuous() {
		t.Fatalf("Report() = %+v", rep)
	}
}

func TestLedgerOneViolationPerOvertakingItem(t *testing.T) {
	l := NewLedger()
	for range 4 {
		l.Submit("k")
	}
	// 3 completes first, then 2, then 1, then 0: items 3, 2 and 1 each
	// overtook at least one earlier item.
	for seq := uint64(3); ; seq-- {
		l.Start("k", seq)
		l.Done("k", seq)
		if seq == 0 {
			break
		}
	}
	if got := l.Key("k"); got.Violations != 3 || got.Outstanding() != 0 {
		t.Fatalf("Key(k) = %+v, want 3 violations and nothing outstanding", got)
	}
}

func TestLedgerDuplicatesAndLostItems(t *testing.T) {
	l := NewLedger()
	s0, _ := l.Submit("k"), l.Submit("k")
	l.Done("k", s0)
	l.Done("k", s0) // reported twice
	got := l.Key("k")
	if got.Duplicates != 1 || got.Completed != 1 || got.Outstanding() != 1 {
		t.Fatalf("Key(k) = %+v, want 1 duplicate, 1 completed, 1 outstanding", got)
	}
}

func TestLedgerVacuousWhenNoKeyRepeats(t *testing.T) {
	l := NewLedger()
	for _, k := range []string{"a", "b", "c"} {
		s := l.Submit(k)
		l.Start(k, s)
		l.Done(k, s)
	}
	if rep := l.Report(); !rep.Vacuous() {
		t.Fatalf("Report() = %+v, want vacuous: no key had two items", rep)
	}
	if rep := NewLedger().Report(); !rep.Vacuous() {
		t.Fatal("an empty ledger's order check must be vacuous")
	}
}

// TestLedgerCountsAReorderBehindALostItem constructs a reorder whose
// earlier item never completes at all, interleaved with a key that stays
// in order: the overtaking item is a violation, the lost one is
// outstanding, and the other key is not blamed.
func TestLedgerCountsAReorderBehindALostItem(t *testing.T) {
	l := NewLedger()
	a0 := l.Submit("a")
	b0 := l.Submit("b")
	a1 := l.Submit("a")
	b1 := l.Submit("b")
	_ = a0 // submitted, never started nor completed

	l.Done("b", b0)
	l.Done("a", a1) // a1 completes while a0 is still outstanding
	l.Done("b", b1)

	if got, want := l.Key("a"), (KeyReport{Submitted: 2, Completed: 1, Violations: 1}); got != want {
		t.Errorf("Key(a) = %+v, want %+v", got, want)
	}
	if got := l.Key("a").Outstanding(); got != 1 {
		t.Errorf("Key(a).Outstanding() = %d, want 1 (a0 was lost)", got)
	}
	if got, want := l.Key("b"), (KeyReport{Submitted: 2, Completed: 2}); got != want {
		t.Errorf("Key(b) = %+v, want %+v", got, want)
	}
	if rep := l.Report(); rep.Violations != 1 || rep.Outstanding() != 1 || rep.OrderedKeys != 2 {
		t.Errorf("Report() = %+v, want 1 violation, 1 outstanding, 2 ordered keys", rep)
	}
}
