package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-lab/stampede/pay"
	"github.com/stampede-lab/stampede/pay/sqlite"
	"github.com/stampede-lab/stampede/pay/sqlstore"
)

// TestMerchantChangeOfAnotherProcessAppliesWithinTTL: two stores on one
// file, as the server and `stampede pay merchant` are, on one fake clock.
// A revocation made by the other store refuses the key here once
// MerchantTTL has passed (never later), and a webhook set there gets the
// next payment's events a delivery here after the same time; a payment
// of a merchant without a webhook has no delivery.
func TestMerchantChangeOfAnotherProcessAppliesWithinTTL(t *testing.T) {
	ctx := context.Background()
	var clock atomic.Int64
	clock.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	advance := func(d time.Duration) { clock.Add(int64(d)) }
	path := filepath.Join(t.TempDir(), "pay.db")
	openAt := func() *sqlite.Store {
		cfg := sqlite.DefaultConfig()
		cfg.Path, cfg.Now = path, now
		s, err := sqlite.OpenConfig(ctx, cfg)
		if err != nil {
			t.Fatalf("OpenConfig: %v", err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	server, admin := openAt(), openAt()
	ttl := sqlstore.DefaultMerchantTTL

	key := pay.NewAPIKey()
	m := pay.Merchant{ID: pay.NewID(), Name: "shop", KeyHash: pay.HashAPIKey(key)}
	if err := admin.CreateMerchant(ctx, m); err != nil {
		t.Fatal(err)
	}
	if _, err := server.MerchantByKeyHash(ctx, m.KeyHash); err != nil {
		t.Fatalf("MerchantByKeyHash = %v, want the merchant", err)
	}
	pay1 := createFor(t, server, m.ID)
	if ds, err := server.Deliveries(ctx, pay1, 10); err != nil || len(ds) != 0 {
		t.Fatalf("deliveries of a payment of a merchant without a webhook = %v, %v; want none", ds, err)
	}

	if err := admin.SetWebhook(ctx, m.ID, "https://shop.example/hook", "whsec_x"); err != nil {
		t.Fatal(err)
	}
	if err := admin.RevokeMerchant(ctx, m.ID, now()); err != nil {
		t.Fatal(err)
	}
	advance(ttl)
	if _, err := server.MerchantByKeyHash(ctx, m.KeyHash); !errors.Is(err, pay.ErrNotFound) {
		t.Fatalf("MerchantByKeyHash %s after a revocation elsewhere = %v, want ErrNotFound", ttl, err)
	}
	pay2 := createFor(t, server, m.ID)
	if ds, err := server.Deliveries(ctx, pay2, 10); err != nil || len(ds) != 1 {
		t.Fatalf("deliveries of a payment made %s after the webhook was set elsewhere = %d, %v; want 1", ttl, len(ds), err)
	}
}

// createFor writes a pending payment of merchant and returns its ID.
func createFor(t *testing.T, s *sqlite.Store, merchant string) string {
	t.Helper()
	p := pay.Payment{ID: pay.NewID(), MerchantID: merchant, OrderID: "order-" + pay.NewID(), Amount: 1000, Currency: "KRW"}
	if _, err := s.CreatePending(context.Background(), p, pay.IdempotencyRecord{Key: "k-" + p.ID, RequestHash: "h"}); err != nil {
		t.Fatalf("CreatePending: %v", err)
	}
	return p.ID
}

// TestCheckpointerCopiesTheWAL: payments committed on a file database
// reach the main file (a copy of it alone, without the WAL, holds them)
// within a few checkpoint intervals, though the writer never checkpoints
// (wal_autocheckpoint(0)) and far fewer pages than its old threshold
// (1,000) were written.
func TestCheckpointerCopiesTheWAL(t *testing.T) {
	dir := t.TempDir()
	s := open(t, filepath.Join(dir, "pay.db"))
	const n = 20
	for range n {
		createFor(t, s, pay.NewID())
	}
	deadline := time.Now().Add(50 * sqlite.CheckpointInterval)
	var got int
	for time.Now().Before(deadline) {
		time.Sleep(sqlite.CheckpointInterval)
		got = paymentsInMainFile(t, filepath.Join(dir, "pay.db"))
		if got == n {
			return
		}
	}
	t.Fatalf("the main file alone holds %d payments %s after %d were committed, want %d",
		got, 50*sqlite.CheckpointInterval, n, n)
}

// paymentsInMainFile counts the payments of a copy of the file at path
// taken without its WAL, or -1 if the copy cannot be read (taken while a
// checkpoint wrote it).
func paymentsInMainFile(t *testing.T, path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cp := filepath.Join(t.TempDir(), "copy.db")
	if err := os.WriteFile(cp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", cp)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM payments`).Scan(&n); err != nil {
		return -1
	}
	return n
}
