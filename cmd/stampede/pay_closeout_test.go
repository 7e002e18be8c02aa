package main

import (
	"context"
	"errors"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cosqlstore "github.com/stampede-lab/stampede/checkout/sqlstore"
	fulsqlstore "github.com/stampede-lab/stampede/fulfilment/sqlstore"
	instapi "github.com/stampede-lab/stampede/institution/api"
	instclient "github.com/stampede-lab/stampede/institution/client"
	"github.com/stampede-lab/stampede/pay"
	"github.com/stampede-lab/stampede/pay/institutionclient"
	"github.com/stampede-lab/stampede/pay/sqlite"
	"log/slog"
)

// TestPayCloseOutCatchesALateApprovalUntilClosed plants a late approval:
// a payment the institution approved whose order the checkout never
// sold. The close-out exits 2 naming it as money without a ticket, with
// nothing done; once the closure pass refunded it, the close-out exits 0.
func TestPayCloseOutCatchesALateApprovalUntilClosed(t *testing.T) {
	t.Setenv(envPostgres, "")
	dir := t.TempDir()
	ctx := context.Background()
	icfg := instapi.DefaultConfig()
	icfg.AdminToken, icfg.Logger = "closeout-admin-token", slog.New(slog.DiscardHandler)
	inst, err := instapi.New(icfg)
	if err != nil {
		t.Fatal(err)
	}
	its := httptest.NewServer(inst)
	t.Cleanup(func() { inst.Close(); its.Close() })

	payDB := filepath.Join(dir, "pay.db")
	store, err := sqlite.Open(payDB)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	m := pay.Merchant{ID: pay.NewID(), Name: "close-out", KeyHash: pay.HashAPIKey(pay.NewAPIKey()), CreatedAt: time.Now()}
	if err := store.CreateMerchant(ctx, m); err != nil {
		t.Fatal(err)
	}
	cfg := pay.DefaultConfig()
	cfg.CloseAfter, cfg.Logger = time.Millisecond, slog.New(slog.DiscardHandler)
	svc, err := pay.NewService(store, institutionclient.New(instclient.NewClient(its.URL, its.Client())), cfg)
	if err != nil {
		t.Fatal(err)
	}
	late, _, err := svc.Create(ctx, "late-1", pay.CreateRequest{MerchantID: m.ID, OrderID: "late-order", Amount: 5000, Currency: "KRW"})
	if err != nil || late.Status != pay.StatusApproved {
		t.Fatalf("planting the late approval: %v %v", late.Status, err)
	}
	// The checkout's and the fulfilment's databases, with no sale of it.
	coCfg := cosqlstore.DefaultConfig()
	coCfg.SQLitePath = filepath.Join(dir, "checkout.db")
	co, err := cosqlstore.Open(ctx, coCfg)
	if err != nil {
		t.Fatal(err)
	}
	co.Close()
	fulCfg := fulsqlstore.DefaultConfig()
	fulCfg.SQLitePath = filepath.Join(dir, "fulfilment.db")
	ful, err := fulsqlstore.Open(ctx, fulCfg)
	if err != nil {
		t.Fatal(err)
	}
	ful.Close()
	args := []string{"pay", "close-out", "--sqlite", payDB, "--institution", its.URL, "--admin-token", "closeout-admin-token",
		"--event", "gig", "--checkout-sqlite", coCfg.SQLitePath, "--fulfilment-sqlite", fulCfg.SQLitePath}

	out, _, err := execute(t, args...)
	if !errors.Is(err, errParity) || !strings.Contains(out, "money_without_ticket") || !strings.Contains(out, late.ID) ||
		!strings.Contains(out, "nothing: not closed") {
		t.Fatalf("close-out of a planted late approval: %v\n%s\nwant exit 2 naming it, nothing done", err, out)
	}
	if n, err := svc.ClosurePass(ctx); err != nil || n != 1 {
		t.Fatalf("closure pass closed %d, %v; want 1", n, err)
	}
	if out, _, err := execute(t, args...); err != nil || !strings.Contains(out, "differences 0") {
		t.Fatalf("close-out after the closure: %v\n%s\nwant exit 0", err, out)
	}
	if _, _, err := execute(t, "pay", "close-out", "--sqlite", payDB, "--institution", its.URL, "--admin-token", "x"); err == nil ||
		!strings.Contains(err.Error(), "--event") {
		t.Fatalf("close-out without --event: %v, want an error naming it", err)
	}
}

// TestPayLedgerCommandsNameEveryMissingFlag: pay close-out and pay parity
// without their flags name every missing one at once, not the first.
func TestPayLedgerCommandsNameEveryMissingFlag(t *testing.T) {
	t.Setenv(envAdminToken, "")
	for args, want := range map[string][]string{
		"pay close-out": {"--institution", "--admin-token", "--event", "--checkout-sqlite or --checkout-postgres", "--fulfilment-sqlite or --fulfilment-postgres"},
		"pay parity":    {"--institution", "--admin-token"},
	} {
		_, _, err := execute(t, strings.Fields(args)...)
		if err == nil {
			t.Fatalf("%s without flags: no error", args)
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s without flags: %q does not name %s", args, err, w)
			}
		}
	}
}
