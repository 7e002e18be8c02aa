package sqlstore

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stampede-lab/stampede/checkout"
	"github.com/stampede-lab/stampede/internal/testenv"
)

// errRollback ends a transaction that only looked.
var errRollback = errors.New("rolled back")

// planStore opens a store on dialect ("sqlite" or "postgres"), creates an
// event of seats seats and holds taken of them, lowest first, as a sale
// under way leaves it.
func planStore(t testing.TB, dialect string, seats, taken int) (*Store, string) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.OpTimeout = time.Minute
	switch dialect {
	case "sqlite":
		cfg.SQLitePath = filepath.Join(t.TempDir(), "checkout.db")
	default:
		cfg.PostgresURL = testenv.URL(t, testenv.PostgresURL)
		cfg.Schema = fmt.Sprintf("checkout_plan_%d", time.Now().UnixNano())
	}
	ctx := context.Background()
	s, err := Open(ctx, cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	if cfg.Schema != "" {
		t.Cleanup(func() {
			err := s.db.Update(context.Background(), func(ctx context.Context, tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, "DROP SCHEMA "+cfg.Schema+" CASCADE")
				return err
			})
			if err != nil {
				t.Errorf("drop schema %s: %v", cfg.Schema, err)
			}
		})
	}
	now := time.Now()
	e, err := s.CreateEvent(ctx, checkout.Event{ID: "plan", Seats: seats, Price: 100, Currency: "KRW", CreatedAt: now})
	if err != nil {
		t.Fatalf("CreateEvent: %v", err)
	}
	for taken > 0 {
		n := min(taken, 1000)
		h := checkout.Hold{ID: fmt.Sprintf("h%d", taken), EventID: e.ID, User: "u", Amount: 100, Currency: "KRW",
			State: checkout.HoldHeld, ExpiresAt: now.Add(time.Hour), CreatedAt: now, UpdatedAt: now}
		if _, err := s.Hold(ctx, h, n); err != nil {
			t.Fatalf("Hold(%d): %v", n, err)
		}
		taken -= n
	}
	return s, e.ID
}

// TestClaimSeatsSkipsNothingSQLite: with 19,000 of 20,000 seats taken, the
// claim of the next seat reads the free seats' partial index, not the
// seats in order from the first (the primary key), which steps over every
// seat already taken: a hold would cost more with every seat sold.
func TestClaimSeatsSkipsNothingSQLite(t *testing.T) {
	s, event := planStore(t, "sqlite", 20_000, 19_000)
	var plan []string
	err := s.db.Update(context.Background(), func(ctx context.Context, tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, "EXPLAIN QUERY PLAN "+s.q.claimSeats, "h", event, 1)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				return err
			}
			plan = append(plan, detail)
		}
		return rows.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("plan: %s", strings.Join(plan, " | "))
	if !strings.Contains(strings.Join(plan, "\n"), "INDEX checkout_seats_free") {
		t.Errorf("the claim of free seats does not read checkout_seats_free: %s", strings.Join(plan, " | "))
	}
}

// TestClaimSeatsSkipsNothingPostgres: with 19,000 of 20,000 seats
// taken since the event was created (the statistics are CreateEvent's,
// as between two runs of autovacuum in a sale), claiming the next seat
// filters out no row, with the plan made for the statement's parameters
// and with the generic plan a prepared statement may switch to (EXPLAIN
// ANALYZE of the claim, rolled back).
func TestClaimSeatsSkipsNothingPostgres(t *testing.T) {
	s, event := planStore(t, "postgres", 20_000, 19_000)
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		var raw []byte
		err := s.db.Update(context.Background(), func(ctx context.Context, tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, "SET LOCAL plan_cache_mode = "+mode); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, "PREPARE claim AS "+s.q.claimSeats); err != nil {
				return err
			}
			err := tx.QueryRowContext(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE claim('h', '"+event+"', 1)").Scan(&raw)
			if _, derr := tx.ExecContext(ctx, "DEALLOCATE claim"); err == nil {
				err = derr
			}
			if err != nil {
				return err
			}
			return errRollback
		})
		if !errors.Is(err, errRollback) {
			t.Fatal(err)
		}
		var doc []struct {
			Plan planNode `json:"Plan"`
		}
		if err := json.Unmarshal(raw, &doc); err != nil || len(doc) != 1 {
			t.Fatalf("EXPLAIN: %v: %s", err, raw)
		}
		var compact bytes.Buffer
		_ = json.Compact(&compact, raw)
		t.Logf("%s: %s", mode, compact.Bytes())
		if n := doc[0].Plan.removed(); n > 0 {
			t.Errorf("%s: claiming one seat threw away %.0f rows: it reads seats it does not claim", mode, n)
		}
	}
}

// planNode is a node of a PostgreSQL plan with the rows it read and
// threw away: filtered out, by a join's filter or an index's recheck.
type planNode struct {
	Removed     float64    `json:"Rows Removed by Filter"`
	JoinRemoved float64    `json:"Rows Removed by Join Filter"`
	Rechecked   float64    `json:"Rows Removed by Index Recheck"`
	Plans       []planNode `json:"Plans"`
}

// removed sums the rows thrown away by p and its children.
func (p planNode) removed() float64 {
	n := p.Removed + p.JoinRemoved + p.Rechecked
	for _, c := range p.Plans {
		n += c.removed()
	}
	return n
}

// BenchmarkHoldCost measures one hold of one seat (the store's Hold: the
// guard, the claim of the lowest free seat, the hold's row) on an event
// of 100,000 seats with 1,000 taken and with 90,000 taken, on SQLite and,
// with STAMPEDE_POSTGRES_URL, on PostgreSQL. Metrics: us/hold-1k,
// us/hold-90k and x-90k-vs-1k (flat is 1: a hold costs no more with every
// seat sold).
func BenchmarkHoldCost(b *testing.B) {
	for _, dialect := range []string{"sqlite", "postgres"} {
		b.Run(dialect, func(b *testing.B) {
			var per [2]float64
			for i, taken := range []int{1_000, 90_000} {
				s, event := planStore(b, dialect, 100_000, taken)
				now := time.Now()
				b.ResetTimer()
				start := time.Now()
				for n := range b.N {
					h := checkout.Hold{ID: fmt.Sprintf("b%d-%d", i, n), EventID: event, User: "u", Amount: 100, Currency: "KRW",
						State: checkout.HoldHeld, ExpiresAt: now.Add(time.Hour), CreatedAt: now, UpdatedAt: now}
					if _, err := s.Hold(context.Background(), h, 1); err != nil {
						b.Fatal(err)
					}
				}
				per[i] = float64(time.Since(start).Microseconds()) / float64(b.N)
				b.StopTimer()
			}
			b.ReportMetric(per[0], "us/hold-1k")
			b.ReportMetric(per[1], "us/hold-90k")
			b.ReportMetric(per[1]/per[0], "x-90k-vs-1k")
			b.ReportMetric(0, "ns/op")
		})
	}
}
