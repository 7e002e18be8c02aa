package sqlstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stampede-lab/stampede/checkout"
	"github.com/stampede-lab/stampede/checkout/checkouttest"
	"github.com/stampede-lab/stampede/checkout/sqlstore"
	"github.com/stampede-lab/stampede/internal/testenv"
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

func file(path string) sqlstore.Config {
	cfg := sqlstore.DefaultConfig()
	cfg.SQLitePath, cfg.OpTimeout = path, time.Minute
	return cfg
}

// TestSQLiteMemory runs the suite on a fresh in-memory database per
// test, the tests in parallel.
func TestSQLiteMemory(t *testing.T) {
	t.Parallel()
	checkouttest.Exercise(t, func(t *testing.T) checkout.Store { return open(t, file(sqlstore.Memory)) },
		checkouttest.Options{Parallel: true})
}

// TestSQLiteSharedFile runs the suite on one database file, a new store
// (and connections) per test, as processes sharing a file would.
func TestSQLiteSharedFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "checkout.db")
	checkouttest.Exercise(t, func(t *testing.T) checkout.Store { return open(t, file(path)) }, checkouttest.Options{})
}

// TestPostgres runs the suite on one schema of STAMPEDE_POSTGRES_URL's
// database (skipped when it is unset, failed in CI), a new store per
// test, the tests in parallel.
func TestPostgres(t *testing.T) {
	t.Parallel()
	cfg := file("")
	cfg.PostgresURL = testenv.URL(t, testenv.PostgresURL)
	cfg.Schema, cfg.MaxConns = fmt.Sprintf("checkout_store_%d", time.Now().UnixNano()), 16
	checkouttest.Exercise(t, func(t *testing.T) checkout.Store { return open(t, cfg) }, checkouttest.Options{Parallel: true})
}

// TestBesidePayOnce: checkout's tables and migrations live beside pay's
// in one file, in their own version table, applied once by processes
// opening the file together.
func TestBesidePayOnce(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "stampede.db")
	ps, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ps.Close()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			s, err := sqlstore.Open(context.Background(), file(path))
			if err != nil {
				t.Errorf("Open: %v", err)
				return
			}
			s.Close()
		})
	}
	wg.Wait()
	if _, err := ps.List(context.Background(), "", 1); err != nil {
		t.Fatalf("pay's store after checkout migrated the file: %v", err)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM ` + sqlstore.VersionTable + ` WHERE version_id = 1`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%s records migration 1 %d times (%v), want once", sqlstore.VersionTable, n, err)
	}
}
