package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/spf13/cobra"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/institution"
	instclient "github.com/stampede-lab/stampede/institution/client"
	"github.com/stampede-lab/stampede/pay"
)

func newPayCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "pay", Short: "Payment tools"}
	cmd.AddCommand(newPayParityCmd(), newPayCloseOutCmd(), newPayMerchantCmd(), newPayWebhooksCmd())
	return cmd
}

func newPayParityCmd() *cobra.Command {
	var (
		store    payStoreOptions
		ledger   ledgerFlags
		showJSON bool
	)
	cmd := &cobra.Command{
		Use:   "parity",
		Short: "Compare our payments with the institution's ledger",
		Long: `Compare every payment in our database with the institution's ledger:
matched, ours only (APPROVED here, no charge there), institution only (charged
there, not APPROVED here), amount mismatch, and double charges. Exits with
status 2 on any mismatch.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var f stampede.Fields
			ledger.check(&f)
			if err := flagErrors("", f.Err()); err != nil {
				return err
			}
			s, _, err := store.open(cmd, true)
			if err != nil {
				return err
			}
			defer s.Close()
			charges, err := ledger.client().Approvals(cmd.Context())
			if err != nil {
				return fmt.Errorf("reading the institution's ledger: %w", err)
			}
			rep, err := pay.Parity(cmd.Context(), s, ChargesOf(charges))
			if err != nil {
				return err
			}
			if showJSON {
				out, _ := json.MarshalIndent(rep, "", "  ")
				fmt.Fprintln(cmd.OutOrStdout(), string(out))
			} else {
				fmt.Fprintln(cmd.OutOrStdout(), rep.String())
			}
			if n := rep.Mismatches(); n > 0 {
				return fmt.Errorf("%w: parity found %d mismatches", errParity, n)
			}
			return nil
		},
	}
	store.flags(cmd)
	ledger.add(cmd)
	cmd.Flags().BoolVar(&showJSON, "json", false, "print the report as JSON")
	return cmd
}

// errParity marks a parity mismatch (exit status 2).
var errParity = errors.New("parity mismatch")

// ChargesOf turns the institution's ledger into pay.Charge values.
func ChargesOf(l institution.Ledger) []pay.Charge {
	out := make([]pay.Charge, 0, len(l.Records))
	for _, r := range l.Records {
		out = append(out, pay.Charge{ExternalKey: r.ExternalKey, Approved: r.Status == institution.StatusApproved,
			Amount: r.Amount, Currency: r.Currency, Times: r.Charges})
	}
	return out
}

// ledgerFlags are the flags of the commands that read the institution's
// ledger (pay parity, pay close-out).
type ledgerFlags struct {
	instURL, adminToken string
}

func (l *ledgerFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&l.instURL, "institution", "", "base URL of the payment institution (required)")
	cmd.Flags().StringVar(&l.adminToken, "admin-token", "", "the institution's admin token (required)")
}

// check adds to f every one of the flags that is missing.
func (l *ledgerFlags) check(f *stampede.Fields) {
	if l.instURL == "" {
		f.Add("institution", "is required: the base URL of the payment institution")
	}
	if l.adminToken == "" {
		f.Add("admin_token", "(or %s) is required to read the institution's ledger", envAdminToken)
	}
}

// client is the institution's admin client.
func (l *ledgerFlags) client() *instclient.Client {
	return instclient.NewClient(l.instURL, &http.Client{}).WithAdminToken(l.adminToken)
}
