package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/spf13/cobra"

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
		store      payStoreOptions
		instURL    string
		adminToken string
		showJSON   bool
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
			if instURL == "" {
				return errors.New("--institution is required")
			}
			if adminToken == "" {
				return fmt.Errorf("--admin-token (or %s) is required to read the institution's ledger", envAdminToken)
			}
			s, _, err := store.open(cmd, true)
			if err != nil {
				return err
			}
			defer s.Close()
			ledger, err := instclient.NewClient(instURL, &http.Client{}).WithAdminToken(adminToken).Approvals(cmd.Context())
			if err != nil {
				return fmt.Errorf("reading the institution's ledger: %w", err)
			}
			rep, err := pay.Parity(cmd.Context(), s, ChargesOf(ledger))
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
	cmd.Flags().StringVar(&instURL, "institution", "", "base URL of the payment institution (required)")
	cmd.Flags().StringVar(&adminToken, "admin-token", "", "the institution's admin token")
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
