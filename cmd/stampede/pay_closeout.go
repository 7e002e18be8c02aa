package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/institution"
	"github.com/stampede-lab/stampede/pay"
)

func newPayCloseOutCmd() *cobra.Command {
	var (
		store                  payStoreOptions
		ledger                 ledgerFlags
		coSQLite, coPostgres   string
		fulSQLite, fulPostgres string
		event                  string
		showJSON               bool
	)
	cmd := &cobra.Command{
		Use:   "close-out",
		Short: "Close a sale out: institution ↔ pay ↔ orders ↔ tickets, every difference and what was done about it",
		Long: `Compare, for a sale, what the institution holds (charged or captured, less
refunds) with pay's payments, the checkout's orders of the event and the
fulfilment's tickets. Every difference is printed with what pay did about it
(the closure pass's or the merchant's cancellation, or nothing):

  money_without_ticket   money held for a payment whose order is not sold with a ticket
  money_unknown_to_pay   money held under a key pay does not know
  sold_without_money     a sold order whose payment holds nothing
  sold_without_ticket    a sold order without its ticket
  parity_*               pay parity's mismatches

Exits 0 only when there is no difference, 2 otherwise.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var f stampede.Fields
			ledger.check(&f)
			if event == "" {
				f.Add("event", "is required: the sale's event at the checkout")
			}
			if (coSQLite == "") == (coPostgres == "") {
				f.Add("", "the checkout's database is needed: --checkout-sqlite or --checkout-postgres, one of the two")
			}
			if (fulSQLite == "") == (fulPostgres == "") {
				f.Add("", "the fulfilment's database is needed: --fulfilment-sqlite or --fulfilment-postgres, one of the two")
			}
			if err := flagErrors("", f.Err()); err != nil {
				return err
			}
			ctx := cmd.Context()
			s, _, err := store.open(cmd, true)
			if err != nil {
				return err
			}
			defer s.Close()
			sale, err := readSaleDBs(ctx, coSQLite, coPostgres, fulSQLite, fulPostgres, event)
			if err != nil {
				return err
			}
			ic := ledger.client()
			ledger, err := ic.Approvals(ctx)
			if err != nil {
				return fmt.Errorf("reading the institution's ledger: %w", err)
			}
			refunds, err := ic.Refunds(ctx)
			if err != nil {
				return fmt.Errorf("reading the institution's refunds: %w", err)
			}
			rep, err := pay.CloseOut(ctx, s, ChargesOf(ledger), HeldOf(ledger, refunds), sale)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if showJSON {
				b, _ := json.MarshalIndent(rep, "", "  ")
				fmt.Fprintln(out, string(b))
			} else {
				fmt.Fprintln(out, rep.String())
				for _, d := range rep.Differences {
					fmt.Fprintf(out, "%-22s payment=%s order=%s key=%s held=%d done: %s\n", d.Kind, d.PaymentID, d.OrderID, d.ExternalKey, d.Held, d.Done)
				}
			}
			if n := len(rep.Differences); n > 0 {
				return fmt.Errorf("%w: the close-out found %d differences", errParity, n)
			}
			return nil
		},
	}
	store.flags(cmd)
	f := cmd.Flags()
	ledger.add(cmd)
	f.StringVar(&event, "event", "", "the sale's event at the checkout (required)")
	f.StringVar(&coSQLite, "checkout-sqlite", "", "the checkout's SQLite file")
	f.StringVar(&coPostgres, "checkout-postgres", "", "the checkout's PostgreSQL URL")
	f.StringVar(&fulSQLite, "fulfilment-sqlite", "", "the fulfilment's SQLite file")
	f.StringVar(&fulPostgres, "fulfilment-postgres", "", "the fulfilment's PostgreSQL URL")
	f.BoolVar(&showJSON, "json", false, "print the report as JSON")
	return cmd
}

// HeldOf is what the institution still holds per key
// (institution.Ledger.Held), as pay.CloseOut reads it.
func HeldOf(l institution.Ledger, r institution.RefundLedger) []pay.Held {
	var out []pay.Held
	for _, h := range l.Held(r) {
		out = append(out, pay.Held{ExternalKey: h.ExternalKey, Amount: h.Amount})
	}
	return out
}

// readSaleDBs reads the checkout's paid orders of event and the
// fulfilment's ticketed orders, read-only, from their databases.
func readSaleDBs(ctx context.Context, coSQLite, coPostgres, fulSQLite, fulPostgres, event string) (pay.Sale, error) {
	open := func(sqlite, pg string) (*sql.DB, bool, error) {
		if pg != "" {
			db, err := sql.Open("pgx", pg)
			return db, true, err
		}
		db, err := sql.Open("sqlite", "file:"+sqlite+"?mode=ro&_pragma=busy_timeout(5000)")
		return db, false, err
	}
	co, pgCo, err := open(coSQLite, coPostgres)
	if err != nil {
		return nil, err
	}
	defer co.Close()
	q := "SELECT id FROM checkout_orders WHERE status = 'paid' AND event_id = ?"
	if pgCo {
		q = "SELECT id FROM checkout_orders WHERE status = 'paid' AND event_id = $1"
	}
	sold, err := ids(ctx, co, q, event)
	if err != nil {
		return nil, fmt.Errorf("reading the checkout's orders: %w", err)
	}
	ful, _, err := open(fulSQLite, fulPostgres)
	if err != nil {
		return nil, err
	}
	defer ful.Close()
	ticketed, err := ids(ctx, ful, "SELECT order_id FROM tickets")
	if err != nil {
		return nil, fmt.Errorf("reading the tickets: %w", err)
	}
	return func(order string) (bool, bool) { return sold[order], ticketed[order] }, nil
}

// ids reads a one-column query into a set.
func ids(ctx context.Context, db *sql.DB, q string, args ...any) (map[string]bool, error) {
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		out[id] = true
	}
	return out, rows.Err()
}
