package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/internal/httpapi"
	"github.com/stampede-lab/stampede/pay"
	"github.com/stampede-lab/stampede/pay/paytest"
	"github.com/stampede-lab/stampede/pay/sqlite"
)

func open(t *testing.T, path string) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(path)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestConformanceFile runs the suite on a fresh database file per test,
// the tests in parallel.
func TestConformanceFile(t *testing.T) {
	t.Parallel()
	paytest.Exercise(t, func(t *testing.T) pay.Store {
		return open(t, filepath.Join(t.TempDir(), "pay.db"))
	}, paytest.Options{Parallel: true})
}

// TestConformanceSharedFile runs the suite on one database file shared by
// every test, as a real database is.
func TestConformanceSharedFile(t *testing.T) {
	t.Parallel()
	s := open(t, filepath.Join(t.TempDir(), "pay.db"))
	paytest.Exercise(t, func(*testing.T) pay.Store { return s }, paytest.Options{})
}

// TestConformanceMemory runs the suite on a fresh in-memory database per
// test, the tests in parallel.
func TestConformanceMemory(t *testing.T) {
	t.Parallel()
	paytest.Exercise(t, func(t *testing.T) pay.Store { return open(t, sqlite.Memory) }, paytest.Options{Parallel: true})
}

// TestClosedStoreIsUnavailable: every call on a closed store fails with
// CodeUnavailable.
func TestClosedStoreIsUnavailable(t *testing.T) {
	s, err := sqlite.Open(filepath.Join(t.TempDir(), "pay.db"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
	ctx := context.Background()
	p := pay.Payment{ID: pay.NewID(), MerchantID: pay.NewID(), OrderID: "o", Amount: 1, Currency: "USD"}
	_, errCreate := s.CreatePending(ctx, p, pay.IdempotencyRecord{Key: "k"})
	_, errGet := s.Get(ctx, p.ID)
	_, errList := s.List(ctx, "", 10)
	_, errOutbox := s.PendingOutbox(ctx, 10)
	for name, err := range map[string]error{
		"Ping": s.Ping(ctx), "CreatePending": errCreate, "Get": errGet, "List": errList, "PendingOutbox": errOutbox,
	} {
		if pay.ErrorCode(err) != pay.CodeUnavailable || httpapi.StatusOf(pay.MapError(err)) != 503 {
			t.Errorf("%s on a closed store = %v, want unavailable (503)", name, err)
		}
	}
}

// TestReopenKeepsDataAndMigratesOnce: opening an existing file applies no
// migration twice and finds the data.
func TestReopenKeepsDataAndMigratesOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pay.db")
	s, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.CreatePending(context.Background(),
		pay.Payment{ID: pay.NewID(), MerchantID: pay.NewID(), OrderID: "o-1", Amount: 500, Currency: "EUR"},
		pay.IdempotencyRecord{Key: "reopen", RequestHash: "h"})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	again := open(t, path)
	got, err := again.Get(context.Background(), p.ID)
	if err != nil || got.Amount != 500 || len(got.History) != 1 {
		t.Fatalf("after reopening: %+v, %v", got, err)
	}
}

// TestTwoStoresOnOneFile: two stores on one file (as two processes would
// be) race to create with one idempotency key; BEGIN IMMEDIATE and the busy
// timeout let exactly one win and nobody fail with SQLITE_BUSY.
func TestTwoStoresOnOneFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "pay.db")
	stores := []*sqlite.Store{open(t, path), open(t, path)}
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		ok, confl int
	)
	for i := range 20 {
		wg.Go(func() {
			p := pay.Payment{ID: pay.NewID(), MerchantID: pay.NewID(), OrderID: "o", Amount: 1, Currency: "JPY"}
			_, err := stores[i%2].CreatePending(context.Background(), p, pay.IdempotencyRecord{Key: "shared", RequestHash: "h"})
			var c *pay.IdempotencyConflict
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case errors.As(err, &c):
				confl++
			default:
				t.Errorf("CreatePending: %v", err)
			}
		})
	}
	wg.Wait()
	if ok != 1 || confl != 19 {
		t.Fatalf("%d succeeded, %d conflicted; want 1 and 19", ok, confl)
	}
}

// TestConfigValidateNamesFields: every invalid field is reported by name.
func TestConfigValidateNamesFields(t *testing.T) {
	if err := sqlite.DefaultConfig().Validate(); err != nil {
		t.Fatalf("DefaultConfig().Validate() = %v", err)
	}
	err := sqlite.Config{Path: "a?b", BusyTimeout: -1}.Validate()
	var got []string
	for _, e := range stampede.FieldErrors(err) {
		got = append(got, e.Field)
	}
	if want := []string{"sqlite", "busy_timeout", "max_read_conns", "db_timeout", "now"}; !slices.Equal(got, want) {
		t.Errorf("Validate() = %v, fields %v; want every bad field named as its flag: %v", err, got, want)
	}
	if _, err := sqlite.OpenConfig(context.Background(), sqlite.Config{}); err == nil {
		t.Error("OpenConfig with an empty Config succeeded")
	}
}

// TestFrozenIsUnavailable: while another process holds the write lock,
// every write fails with CodeUnavailable within the operation timeout
// (reads go on: WAL), and the store writes again once the lock is gone.
func TestFrozenIsUnavailable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := sqlite.DefaultConfig()
	cfg.Path, cfg.OpTimeout = filepath.Join(t.TempDir(), "pay.db"), 300*time.Millisecond
	s, err := sqlite.OpenConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	other, err := sql.Open("sqlite", cfg.Path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })
	conn, err := other.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	exec := func(q string) {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Errorf("%s: %v", q, err)
		}
	}
	paytest.RunFrozen(t, paytest.Frozen{
		Store:       s,
		OpTimeout:   cfg.OpTimeout,
		Freeze:      func() { exec("BEGIN IMMEDIATE") },
		Thaw:        func() { exec("ROLLBACK") },
		ReadsAnswer: true,
	})
}

// TestTakesOverAPreGooseDatabase: a database made by the hand-written
// migration code that came before goose (the same schema, recorded in
// schema_migrations) opens with its data, gets the same schema as a new
// database, and is recorded as migrated.
func TestTakesOverAPreGooseDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	body, err := os.ReadFile("migrations/0001_init.sql")
	if err != nil {
		t.Fatal(err)
	}
	// What the old code ran: the same statements, without IF NOT EXISTS.
	legacy := strings.NewReplacer(" IF NOT EXISTS", "", "-- +goose Up", "").Replace(string(body))
	path := filepath.Join(t.TempDir(), "old.db")
	db, err := sql.Open("sqlite", path+"?_pragma=foreign_keys(1)")
	if err != nil {
		t.Fatal(err)
	}
	id, merchant := pay.NewID(), pay.NewID()
	for _, q := range []string{
		`CREATE TABLE schema_migrations (version TEXT PRIMARY KEY, applied_at INTEGER NOT NULL)`,
		legacy,
		`INSERT INTO schema_migrations (version, applied_at) VALUES ('0001_init', 0)`,
		`INSERT INTO payments (id, merchant_id, order_id, amount, currency, status, external_key, idempotency_key,
			created_at, updated_at, event_seq) VALUES ('` + id + `', '` + merchant + `', 'o-old', 700, 'EUR', 'UNKNOWN', '` + id + `', 'old-key', 1000000, 2000000, 2)`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%.40s...: %v", q, err)
		}
	}
	db.Close()

	s := open(t, path)
	got, err := s.Get(ctx, id)
	if err != nil || got.Amount != 700 || got.Status != pay.StatusUnknown || !got.UpdatedAt.Equal(time.Unix(2, 0)) {
		t.Fatalf("the old payment after the take-over: %+v, %v", got, err)
	}
	if _, err := s.Transition(ctx, id, pay.StatusUnknown, pay.StatusApproved, "inquiry"); err != nil {
		t.Fatalf("Transition of the old payment: %v", err)
	}
	if _, err := s.CreatePending(ctx, pay.Payment{ID: pay.NewID(), MerchantID: merchant, OrderID: "o-new", Amount: 1, Currency: "EUR"},
		pay.IdempotencyRecord{Key: "new-key", RequestHash: "h"}); err != nil {
		t.Fatalf("CreatePending after the take-over: %v", err)
	}
	s.Close()

	fresh := filepath.Join(t.TempDir(), "new.db")
	open(t, fresh).Close()
	if old, new := schema(t, path), schema(t, fresh); !slices.Equal(old, new) {
		t.Errorf("schema taken over:\n%s\nschema of a new database:\n%s", strings.Join(old, "\n"), strings.Join(new, "\n"))
	}
	db, err = sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM goose_db_version WHERE version_id = 1 AND is_applied`).Scan(&n); err != nil || n != 1 {
		t.Errorf("goose_db_version has migration 1 %d times (%v), want once", n, err)
	}
}

// schema returns the definitions of the store's tables and indexes.
func schema(t *testing.T, path string) []string {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT type, name, coalesce(sql, '') FROM sqlite_master
		WHERE name NOT IN ('schema_migrations', 'goose_db_version', 'sqlite_sequence') AND name NOT LIKE 'sqlite_autoindex_%'
		ORDER BY type, name`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var typ, name, def string
		if err := rows.Scan(&typ, &name, &def); err != nil {
			t.Fatal(err)
		}
		out = append(out, typ+" "+name+": "+def)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(out) < 9 {
		t.Fatalf("schema of %s has %d objects: %v", path, len(out), out)
	}
	return out
}

// TestConcurrentOpenMigratesOnce: processes opening a new file together
// all open it, and each migration is applied and recorded once.
func TestConcurrentOpenMigratesOnce(t *testing.T) {
	t.Parallel()
	for range 5 {
		path := filepath.Join(t.TempDir(), "pay.db")
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				s, err := sqlite.Open(path)
				if err != nil {
					t.Errorf("Open: %v", err)
					return
				}
				s.Close()
			})
		}
		wg.Wait()
		db, err := sql.Open("sqlite", path)
		if err != nil {
			t.Fatal(err)
		}
		var n int
		err = db.QueryRow(`SELECT count(*) FROM goose_db_version WHERE version_id = 1`).Scan(&n)
		db.Close()
		if err != nil || n != 1 {
			t.Fatalf("goose_db_version records migration 1 %d times (%v), want once", n, err)
		}
	}
}

// TestCrashSafety: every payment answered as committed under group commit
// is in a copy of the database files taken while the writers run, which
// is what a crash of the process leaves (synchronous NORMAL: a commit is
// in the WAL file when it returns).
func TestCrashSafety(t *testing.T) {
	dir := t.TempDir()
	s := open(t, filepath.Join(dir, "pay.db"))
	paytest.CrashSafety(t, s, func(t *testing.T) pay.Store {
		crash := t.TempDir()
		// A reader's snapshot keeps the WAL from being restarted and
		// checkpoints from copying later commits into the main file
		// while the two files are copied, so that the copy is what one
		// instant holds, as a crash leaves it. The WAL first: the main
		// file holds nothing newer than the snapshot.
		db, err := sql.Open("sqlite", filepath.Join(dir, "pay.db")+"?_pragma=query_only(1)")
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		tx, err := db.Begin()
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback() //nolint:errcheck // read-only
		var n int
		if err := tx.QueryRow(`SELECT COUNT(*) FROM payments`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"pay.db-wal", "pay.db"} {
			b, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(crash, name), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return open(t, filepath.Join(crash, "pay.db"))
	})
}
