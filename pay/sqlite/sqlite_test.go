package sqlite_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"

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

// TestConformanceFile runs the suite on a fresh database file per test.
func TestConformanceFile(t *testing.T) {
	paytest.Run(t, func(t *testing.T) pay.Store {
		return open(t, filepath.Join(t.TempDir(), "pay.db"))
	})
}

// TestConformanceSharedFile runs the suite on one database file shared by
// every test, as a real database is.
func TestConformanceSharedFile(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "pay.db"))
	paytest.Run(t, func(*testing.T) pay.Store { return s })
}

// TestConformanceMemory runs the suite on the in-memory database.
func TestConformanceMemory(t *testing.T) {
	paytest.Run(t, func(t *testing.T) pay.Store { return open(t, sqlite.Memory) })
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
		if pay.ErrorCode(err) != pay.CodeUnavailable || pay.HTTPStatus(err) != 503 {
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
	for _, field := range []string{"Path", "OpTimeout", "BusyTimeout", "MaxReadConns", "Now"} {
		if err == nil || !strings.Contains(err.Error(), field+":") {
			t.Errorf("Validate() = %v, want it to name %s", err, field)
		}
	}
	if _, err := sqlite.OpenConfig(context.Background(), sqlite.Config{}); err == nil {
		t.Error("OpenConfig with an empty Config succeeded")
	}
}
