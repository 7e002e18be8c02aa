package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/fulfilment"
	"github.com/stampede-lab/stampede/fulfilment/fulfilmenttest"
	"github.com/stampede-lab/stampede/fulfilment/sqlstore"
	"github.com/stampede-lab/stampede/internal/httpapi"
	"github.com/stampede-lab/stampede/internal/testenv"
	"github.com/stampede-lab/stampede/pay"
	"github.com/stampede-lab/stampede/pay/sqlite"
)

func open(t *testing.T, cfg sqlstore.Config) *sqlstore.Store {
	t.Helper()
	s, err := sqlstore.Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func sqliteFile(path string) sqlstore.Config {
	cfg := sqlstore.DefaultConfig()
	cfg.SQLitePath = path
	return cfg
}

// TestSQLiteMemory runs the suite on a fresh in-memory database per test.
func TestSQLiteMemory(t *testing.T) {
	t.Parallel()
	fulfilmenttest.Exercise(t, func(t *testing.T) fulfilment.Store { return open(t, sqlstore.DefaultConfig()) }, fulfilmenttest.Options{})
}

// TestSQLiteSharedFile runs the suite on one database file, a new store
// (and connections) per test, as processes sharing a file would.
func TestSQLiteSharedFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "fulfilment.db")
	fulfilmenttest.Exercise(t, func(t *testing.T) fulfilment.Store { return open(t, sqliteFile(path)) }, fulfilmenttest.Options{})
}

// TestSQLiteBesidePay: fulfilment's tables and migrations live beside
// pay's in one file, each with its own goose version table.
func TestSQLiteBesidePay(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "stampede.db")
	ps, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ps.Close() })
	fulfilmenttest.Exercise(t, func(t *testing.T) fulfilment.Store { return open(t, sqliteFile(path)) }, fulfilmenttest.Options{})
	if _, err := ps.List(context.Background(), "", 1); err != nil {
		t.Fatalf("pay store after fulfilment migrated the file: %v", err)
	}
	ps.Close()
	if _, err := sqlite.Open(path); err != nil {
		t.Fatalf("pay reopens the shared file: %v", err)
	}
}

// TestTwoStoresOnOneFile: two stores on one file (two processes) deliver
// the same events at once; each applies once, no SQLITE_BUSY escapes.
func TestTwoStoresOnOneFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "fulfilment.db")
	var stores []*fulfilment.Handler
	for range 2 {
		h, err := fulfilment.NewHandler(open(t, sqliteFile(path)), fulfilment.DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		stores = append(stores, h)
	}
	ctx := context.Background()
	for range 10 {
		ev := approved(t)
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			applied int
		)
		for i := range 6 {
			wg.Go(func() {
				ok, err := stores[i%2].Handle(ctx, ev)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					t.Errorf("Handle: %v", err)
				}
				if ok {
					applied++
				}
			})
		}
		wg.Wait()
		if applied != 1 {
			t.Fatalf("applied %d times, want 1", applied)
		}
	}
}

// TestReopenMigratesOnce: a file opened again keeps its data, and
// processes opening a new file together record each migration once.
func TestReopenMigratesOnce(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "fulfilment.db")
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			s, err := sqlstore.Open(context.Background(), sqliteFile(path))
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
	defer db.Close()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM ` + sqlstore.VersionTable + ` WHERE version_id = 1`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("%s records migration 1 %d times, want once", sqlstore.VersionTable, n)
	}
}

// TestSQLiteFrozenIsUnavailable: while another process holds the write
// lock, Handle fails within the operation timeout with a retryable 503 and
// writes nothing; once the lock is gone, the redelivery applies.
func TestSQLiteFrozenIsUnavailable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := sqliteFile(filepath.Join(t.TempDir(), "fulfilment.db"))
	cfg.OpTimeout = 300 * time.Millisecond
	s := open(t, cfg)
	h, err := fulfilment.NewHandler(s, fulfilment.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	other, err := sql.Open("sqlite", cfg.SQLitePath)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	conn, err := other.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	ev := approved(t)
	start := time.Now()
	applied, err := h.Handle(ctx, ev)
	took := time.Since(start)
	if applied || !fulfilment.Retryable(err) || httpapi.StatusOf(err) != 503 {
		t.Fatalf("Handle while the write lock is held = %v, %v; want a retryable 503", applied, err)
	}
	if limit := cfg.OpTimeout + time.Second; took > limit {
		t.Fatalf("Handle took %s while frozen, want at most %s", took, limit)
	}
	if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Inbox(ctx, ev.ID()); !errors.Is(err, fulfilment.ErrNotFound) {
		t.Fatalf("Inbox after the frozen attempt = %v, want not found", err)
	}
	if applied, err := h.Handle(ctx, ev); err != nil || !applied {
		t.Fatalf("Handle after the thaw = %v, %v; want applied", applied, err)
	}
}

// TestUnreachablePostgresIsUnavailable: a server that refuses connections
// is CodeUnavailable. Runs without a database.
func TestUnreachablePostgresIsUnavailable(t *testing.T) {
	t.Parallel()
	cfg := sqlstore.DefaultConfig()
	cfg.PostgresURL = "postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=2"
	_, err := sqlstore.Open(context.Background(), cfg)
	if stampede.CodeOf(err) != stampede.Unavailable {
		t.Fatalf("Open on a closed port = %v, want unavailable", err)
	}
}

// freshSchema returns a schema of this test, dropped when it ends.
func freshSchema(t *testing.T, url string) string {
	t.Helper()
	schema := fmt.Sprintf("fulfilment_test_%016x", rand.Uint64())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	return schema
}

func postgresConfig(url, schema string) sqlstore.Config {
	cfg := sqlstore.DefaultConfig()
	cfg.PostgresURL, cfg.Schema, cfg.MaxConns = url, schema, 10
	return cfg
}

// TestPostgres runs the suite on STAMPEDE_POSTGRES_URL, in a schema of its
// own, a new store (and pool) per test.
func TestPostgres(t *testing.T) {
	t.Parallel()
	url := testenv.URL(t, testenv.PostgresURL)
	schema := freshSchema(t, url)
	fulfilmenttest.Exercise(t, func(t *testing.T) fulfilment.Store { return open(t, postgresConfig(url, schema)) }, fulfilmenttest.Options{})
}

// TestPostgresConcurrentOpenMigratesOnce: instances starting together on
// an empty schema all open, and each migration is recorded once.
func TestPostgresConcurrentOpenMigratesOnce(t *testing.T) {
	t.Parallel()
	url := testenv.URL(t, testenv.PostgresURL)
	schema := freshSchema(t, url)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() { open(t, postgresConfig(url, schema)) })
	}
	wg.Wait()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var n int
	if err := c.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{schema, sqlstore.VersionTable}.Sanitize()+` WHERE version_id = 1`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("%s records migration 1 %d times, want once", sqlstore.VersionTable, n)
	}
}

// TestPostgresFrozenIsUnavailable: while another session holds the inbox
// locked, Handle fails within the operation timeout with a retryable 503
// and writes nothing; once the lock is gone, the redelivery applies.
func TestPostgresFrozenIsUnavailable(t *testing.T) {
	t.Parallel()
	url := testenv.URL(t, testenv.PostgresURL)
	cfg := postgresConfig(url, freshSchema(t, url))
	cfg.OpTimeout = 300 * time.Millisecond
	s := open(t, cfg)
	h, err := fulfilment.NewHandler(s, fulfilment.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	lock, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lock.Exec(ctx, `LOCK TABLE `+pgx.Identifier{cfg.Schema, "inbox"}.Sanitize()+` IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	ev := approved(t)
	start := time.Now()
	applied, err := h.Handle(ctx, ev)
	took := time.Since(start)
	if applied || !fulfilment.Retryable(err) || httpapi.StatusOf(err) != 503 {
		t.Fatalf("Handle while the inbox is locked = %v, %v; want a retryable 503", applied, err)
	}
	if limit := cfg.OpTimeout + time.Second; took > limit {
		t.Fatalf("Handle took %s while frozen, want at most %s", took, limit)
	}
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Inbox(ctx, ev.ID()); !errors.Is(err, fulfilment.ErrNotFound) {
		t.Fatalf("Inbox after the frozen attempt = %v, want not found", err)
	}
	if applied, err := h.Handle(ctx, ev); err != nil || !applied {
		t.Fatalf("Handle after the thaw = %v, %v; want applied", applied, err)
	}
}

// approved returns the APPROVED event of a new payment, as the relay
// publishes it.
func approved(t *testing.T) fulfilment.Event {
	t.Helper()
	p := pay.Payment{ID: pay.NewID(), MerchantID: pay.NewID(), OrderID: "o", Amount: 1, Currency: "USD", Status: pay.StatusApproved}
	ev, err := fulfilment.DecodeEvent(pay.NewEvent(pay.EventStatusChanged, p, 2, pay.StatusPending, "", time.Now()).Payload)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}
