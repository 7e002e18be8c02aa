package pay_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-lab/stampede/pay"
)

// backlogInquiry is how long the status API of the backlog runs takes.
const backlogInquiry = 20 * time.Millisecond

// runBacklog writes n UNKNOWN payments (every other one charged at the
// institution, the others never sent), and times one reconciliation pass
// with inquiries concurrent inquiries against a status API that takes
// backlogInquiry. The pass must settle all of them. It returns the time
// taken and the ideal n × backlogInquiry ÷ inquiries.
func runBacklog(tb testing.TB, store pay.Store, n, inquiries int) (took, ideal time.Duration) {
	tb.Helper()
	inst := newSimInst(tb, time.Millisecond, func(s *simInst) { s.statusDelay = backlogInquiry })
	ctx := context.Background()
	for i := range n {
		p := unknownPayment(tb, store, i)
		if i%2 == 0 {
			if _, err := inst.adapter.Approve(ctx, pay.ApprovalRequest{ExternalKey: p.ExternalKey, Amount: p.Amount, Currency: p.Currency}); err != nil {
				tb.Fatal(err)
			}
		}
	}
	time.Sleep(5 * time.Millisecond) // past the institution's not-found window
	cfg := pay.DefaultConfig()
	cfg.Logger, cfg.InquiryConcurrency = quiet(), inquiries
	// A lease longer than any pass on a loaded machine: this measures one
	// pass, in which every payment is claimed once.
	cfg.ClaimLease = 10 * time.Minute
	svc, err := pay.NewService(store, inst.adapter, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	before := inst.inquiries.Load()
	// A benchmark's timer runs for the pass alone.
	bench, _ := tb.(*testing.B)
	if bench != nil {
		bench.StartTimer()
	}
	start := time.Now()
	res, err := svc.Pass(ctx)
	took = time.Since(start)
	if bench != nil {
		bench.StopTimer()
	}
	if err != nil || res.Settled != n || res.Claimed != n {
		tb.Fatalf("Pass = %+v, %v; want all %d claimed once and settled", res, err, n)
	}
	if asked := inst.inquiries.Load() - before; asked != int64(n) {
		tb.Fatalf("%d inquiries for %d payments, want one each", asked, n)
	}
	st, err := store.Stats(ctx)
	if err != nil || st.Unknown != 0 || st.Pending != 0 {
		tb.Fatalf("after the pass: %+v, %v; want nothing unsettled", st, err)
	}
	if rep := inst.parity(tb, store); rep.Mismatches() != 0 || rep.Matched != (n+1)/2 {
		tb.Fatalf("parity: %s; want %d matched", rep, (n+1)/2)
	}
	return took, time.Duration(n) * backlogInquiry / time.Duration(inquiries)
}

// TestBacklogSettlesInOnePass: 2,000 UNKNOWN payments settle in one pass,
// within twice the time their inquiries take at 16 at once. Skipped with
// -short; BenchmarkBacklog runs the 10,000 of the issue.
func TestBacklogSettlesInOnePass(t *testing.T) {
	if testing.Short() {
		t.Skip("a backlog of 2,000 payments: skipped with -short")
	}
	if raceEnabled {
		t.Skip("a throughput measurement: meaningless under the race detector")
	}
	took, ideal := runBacklog(t, openSQLite(t), 2000, 16)
	ratio := float64(took) / float64(ideal)
	t.Logf("2000 UNKNOWN payments, 16 inquiries at once, 20 ms each: settled in %s, ideal %s, ratio %.2f", took.Round(time.Millisecond), ideal, ratio)
	if ratio > 2 {
		t.Errorf("ratio %.2f, want at most 2", ratio)
	}
}

// BenchmarkBacklog times one reconciliation pass over a backlog of n
// UNKNOWN payments (n=2000 and the n=10000) with 16 inquiries at
// once against a status API that takes 20 ms, on SQLite and, with
// STAMPEDE_POSTGRES_URL set, on PostgreSQL. It reports the time over the
// concurrency bound n × 20 ms ÷ 16, measured in the same run, as "x-bound"
// (the target is ≤ 1.2), and the pass's time as "settle_s". Writing the
// backlog is not timed. Run with -benchtime 1x, e.g.
//
//	go test -run '^$' -bench 'Backlog/.*/n=2000' -benchtime 1x -count 6 ./pay/
func BenchmarkBacklog(b *testing.B) {
	stores := []struct {
		name string
		open func(b *testing.B) pay.Store
	}{
		{"sqlite", func(b *testing.B) pay.Store { return openSQLite(b) }},
		{"postgres", func(b *testing.B) pay.Store {
			raw, schema := pgURL(b)
			return openPG(b, raw, schema, "", 10*time.Second)
		}},
	}
	for _, st := range stores {
		b.Run(st.name, func(b *testing.B) {
			for _, n := range []int{2000, 10_000} {
				b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
					var took, bound time.Duration
					for range b.N {
						b.StopTimer()
						store := st.open(b)
						t, i := runBacklog(b, store, n, 16)
						took, bound = took+t, bound+i
					}
					b.ReportMetric(float64(took)/float64(bound), "x-bound")
					b.ReportMetric(took.Seconds()/float64(b.N), "settle_s")
				})
			}
		})
	}
}

// TestNoStarvation: 500 UNKNOWN payments flagged for review and backing
// off (their next inquiry an hour away) do not keep the 501st, due now,
// from being asked about in the first pass: a pass claims what is due,
// whatever else waits.
func TestNoStarvation(t *testing.T) {
	store := openSQLite(t)
	inst := newSimInst(t, time.Millisecond, nil)
	ctx := context.Background()
	later := time.Now().Add(time.Hour)
	for i := range 500 {
		p := unknownPayment(t, store, i)
		if err := store.FlagReview(ctx, p.ID, "review: still UNKNOWN"); err != nil {
			t.Fatal(err)
		}
		if _, err := store.DeferInquiry(ctx, p.ID, pay.StatusUnknown, later); err != nil {
			t.Fatal(err)
		}
	}
	last := unknownPayment(t, store, 500)
	if _, err := inst.adapter.Approve(ctx, pay.ApprovalRequest{ExternalKey: last.ExternalKey, Amount: last.Amount, Currency: last.Currency}); err != nil {
		t.Fatal(err)
	}
	cfg := pay.DefaultConfig()
	cfg.Logger = quiet()
	svc, err := pay.NewService(store, inst.adapter, cfg)
	if err != nil {
		t.Fatal(err)
	}
	res, err := svc.Pass(ctx)
	if err != nil || res.Claimed != 1 || res.Settled != 1 {
		t.Fatalf("Pass = %+v, %v; want only the due payment claimed, and settled", res, err)
	}
	if p, _ := store.Get(ctx, last.ID); p.Status != pay.StatusApproved {
		t.Fatalf("the 501st payment is %s, want APPROVED", p.Status)
	}
	if n := inst.inquiries.Load(); n != 1 {
		t.Errorf("%d inquiries, want 1", n)
	}
}

// batchSpy is a store whose TransitionBatch is counted and, with fail
// set, fails as a whole without writing anything.
type batchSpy struct {
	pay.Store
	bt       pay.BatchTransitioner
	fail     bool
	calls    atomic.Int64
	requests atomic.Int64
}

func (s *batchSpy) TransitionBatch(ctx context.Context, reqs []pay.TransitionRequest) ([]error, error) {
	s.calls.Add(1)
	s.requests.Add(int64(len(reqs)))
	if s.fail {
		return nil, pay.Unavailable(errors.New("the batch's transaction failed"))
	}
	return s.bt.TransitionBatch(ctx, reqs)
}

// TestPassWritesOutcomesInBatches: a pass writes the outcomes that settle
// payments through the store's TransitionBatch, each payment once, with
// one status change and one outbox row for it; when every batch fails as
// a whole, the same outcomes are written one by one and nothing is lost.
func TestPassWritesOutcomesInBatches(t *testing.T) {
	for _, fail := range []bool{false, true} {
		t.Run(fmt.Sprintf("batches fail=%t", fail), func(t *testing.T) {
			const n = 100
			raw := openSQLite(t)
			store := &batchSpy{Store: raw, bt: raw, fail: fail}
			inst := newSimInst(t, time.Millisecond, func(s *simInst) { s.statusDelay = time.Millisecond })
			ctx := context.Background()
			ids := make([]string, n)
			for i := range n {
				p := unknownPayment(t, store, i)
				ids[i] = p.ID
				if i%2 == 0 {
					if _, err := inst.adapter.Approve(ctx, pay.ApprovalRequest{ExternalKey: p.ExternalKey, Amount: p.Amount, Currency: p.Currency}); err != nil {
						t.Fatal(err)
					}
				}
			}
			time.Sleep(5 * time.Millisecond) // past the institution's not-found window
			cfg := pay.DefaultConfig()
			cfg.Logger = quiet()
			svc, err := pay.NewService(store, inst.adapter, cfg)
			if err != nil {
				t.Fatal(err)
			}
			res, err := svc.Pass(ctx)
			if err != nil || res.Claimed != n || res.Settled != n {
				t.Fatalf("Pass = %+v, %v; want all %d claimed and settled", res, err, n)
			}
			if store.calls.Load() == 0 || store.requests.Load() != n {
				t.Errorf("%d batches of %d transitions in all; want the %d outcomes in batches", store.calls.Load(), store.requests.Load(), n)
			}
			for i, id := range ids {
				p, err := store.Get(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				want := pay.StatusFailed
				if i%2 == 0 {
					want = pay.StatusApproved
				}
				if p.Status != want || len(p.History) != 3 {
					t.Fatalf("payment %d: %s with %d history entries; want %s with 3", i, p.Status, len(p.History), want)
				}
			}
			evs, err := store.PendingOutbox(ctx, 10*n)
			if err != nil {
				t.Fatal(err)
			}
			if len(evs) != 3*n {
				t.Errorf("%d outbox rows, want 3 per payment (%d)", len(evs), 3*n)
			}
			if rep := inst.parity(t, store); rep.Mismatches() != 0 || rep.Matched != n/2 {
				t.Fatalf("parity: %s; want %d matched", rep, n/2)
			}
		})
	}
}
