package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/stampede-lab/stampede/pay"
)

// adminStore is what the merchant and webhook commands need of the
// payment store; the SQL store implements it.
type adminStore interface {
	pay.Store
	pay.MerchantStore
	pay.WebhookStore
}

// openAdmin opens the payment store the options name, for the merchant
// and webhook commands.
func (o *payStoreOptions) openAdmin(cmd *cobra.Command) (adminStore, error) {
	s, _, err := o.open(cmd, false) // merchant add may be the first step: it creates the database
	if err != nil {
		return nil, err
	}
	as, ok := s.(adminStore)
	if !ok {
		s.Close()
		return nil, fmt.Errorf("the store %T cannot manage merchants", s)
	}
	return as, nil
}

// argError names the argument arg in a validation error.
func argError(arg string, err error) error {
	if e, ok := errors.AsType[*pay.Error](err); ok {
		return fmt.Errorf("%s %s", arg, e.Message)
	}
	return fmt.Errorf("%s: %w", arg, err)
}

// printJSON writes v as indented JSON.
func printJSON(w io.Writer, v any) error {
	out, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(w, string(out))
	return err
}

func newPayMerchantCmd() *cobra.Command {
	var store payStoreOptions
	cmd := &cobra.Command{
		Use:   "merchant",
		Short: "Manage merchants: their API keys and webhooks",
		Long: `Manage the merchants that may call the payment API.

  add NAME            create a merchant; prints {"merchant_id","api_key"} once
  list                the merchants (revoked ones too)
  revoke ID           revoke the merchant's API key
  webhook ID URL      register the merchant's webhook (https, or http to a
                      loopback host); prints the signing secret once
  webhook ID --remove remove it

API keys are stored as SHA-256 hashes: a lost key cannot be shown again;
add a new merchant, or revoke it. The store is the one serve pay uses:
--postgres (or $STAMPEDE_POSTGRES_URL), else --sqlite.`,
	}
	var (
		remove   bool
		showJSON bool
	)
	add := &cobra.Command{
		Use:   "add NAME",
		Short: "Create a merchant and print its API key (shown only now)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := pay.ValidateMerchantName(args[0]); err != nil {
				return argError("NAME", err)
			}
			s, err := store.openAdmin(cmd)
			if err != nil {
				return err
			}
			defer s.Close()
			key := pay.NewAPIKey()
			m := pay.Merchant{ID: pay.NewID(), Name: args[0], KeyHash: pay.HashAPIKey(key), CreatedAt: time.Now()}
			if err := s.CreateMerchant(cmd.Context(), m); err != nil {
				return err
			}
			return printJSON(cmd.OutOrStdout(), map[string]string{"merchant_id": m.ID, "api_key": key})
		},
	}
	list := &cobra.Command{
		Use:   "list",
		Short: "List the merchants",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := store.openAdmin(cmd)
			if err != nil {
				return err
			}
			defer s.Close()
			ms, err := s.Merchants(cmd.Context())
			if err != nil {
				return err
			}
			if showJSON {
				type row struct {
					ID         string     `json:"merchant_id"`
					Name       string     `json:"name"`
					CreatedAt  time.Time  `json:"created_at"`
					RevokedAt  *time.Time `json:"revoked_at,omitempty"`
					WebhookURL string     `json:"webhook_url,omitempty"`
				}
				rows := make([]row, 0, len(ms))
				for _, m := range ms {
					rows = append(rows, row{m.ID, m.Name, m.CreatedAt, m.RevokedAt, m.WebhookURL})
				}
				return printJSON(cmd.OutOrStdout(), rows)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tNAME\tCREATED\tREVOKED\tWEBHOOK")
			for _, m := range ms {
				revoked := "-"
				if m.RevokedAt != nil {
					revoked = m.RevokedAt.Format(time.RFC3339)
				}
				hook := m.WebhookURL
				if hook == "" {
					hook = "-"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", m.ID, m.Name, m.CreatedAt.Format(time.RFC3339), revoked, hook)
			}
			return tw.Flush()
		},
	}
	list.Flags().BoolVar(&showJSON, "json", false, "print JSON")
	revoke := &cobra.Command{
		Use:   "revoke ID",
		Short: "Revoke a merchant's API key",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := store.openAdmin(cmd)
			if err != nil {
				return err
			}
			defer s.Close()
			if err := s.RevokeMerchant(cmd.Context(), args[0], time.Now()); err != nil {
				if errors.Is(err, pay.ErrNotFound) {
					return fmt.Errorf("no merchant %s", args[0])
				}
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "revoked %s\n", args[0])
			return nil
		},
	}
	hook := &cobra.Command{
		Use:   "webhook ID [URL]",
		Short: "Register (or --remove) a merchant's webhook; prints the signing secret once",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			url := ""
			switch {
			case remove && len(args) == 2:
				return errors.New("give a URL or --remove, not both")
			case !remove && len(args) == 1:
				return errors.New("a URL is required (or --remove)")
			case !remove:
				url = args[1]
				if err := pay.ValidateWebhookURL(url); err != nil {
					return argError("URL", err)
				}
			}
			s, err := store.openAdmin(cmd)
			if err != nil {
				return err
			}
			defer s.Close()
			secret := ""
			if url != "" {
				secret = pay.NewWebhookSecret()
			}
			if err := s.SetWebhook(cmd.Context(), args[0], url, secret); err != nil {
				if errors.Is(err, pay.ErrNotFound) {
					return fmt.Errorf("no merchant %s", args[0])
				}
				return err
			}
			if url == "" {
				fmt.Fprintf(cmd.OutOrStdout(), "removed the webhook of %s\n", args[0])
				return nil
			}
			return printJSON(cmd.OutOrStdout(), map[string]string{"merchant_id": args[0], "webhook_url": url, "signing_secret": secret})
		},
	}
	hook.Flags().BoolVar(&remove, "remove", false, "remove the merchant's webhook")
	for _, sub := range []*cobra.Command{add, list, revoke, hook} {
		store.flags(sub)
		cmd.AddCommand(sub)
	}
	return cmd
}

func newPayWebhooksCmd() *cobra.Command {
	var (
		store    payStoreOptions
		payment  string
		limit    int
		resend   string
		showJSON bool
	)
	cmd := &cobra.Command{
		Use:   "webhooks",
		Short: "List webhook deliveries, or re-send one",
		Long: `List the latest webhook deliveries, newest first: event id, payment, seq,
type, status (pending, delivered, failed), attempts, last error code and the
next attempt. --resend ID makes a delivery pending again (same event id and
body, a new retry period); a running serve pay sends it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 1 {
				return fmt.Errorf("--limit must be at least 1, got %d", limit)
			}
			s, err := store.openAdmin(cmd)
			if err != nil {
				return err
			}
			defer s.Close()
			if resend != "" {
				if err := s.ResendDelivery(cmd.Context(), resend, time.Now()); err != nil {
					if errors.Is(err, pay.ErrNotFound) {
						return fmt.Errorf("--resend: no delivery %s", resend)
					}
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "resending %s\n", resend)
				return nil
			}
			ds, err := s.Deliveries(cmd.Context(), payment, limit)
			if err != nil {
				return err
			}
			if showJSON {
				type row struct {
					ID        string             `json:"id"`
					PaymentID string             `json:"payment_id"`
					Seq       int64              `json:"seq"`
					Type      string             `json:"type"`
					Status    pay.DeliveryStatus `json:"status"`
					Attempts  int                `json:"attempts"`
					LastError string             `json:"last_error,omitempty"`
					NextAt    time.Time          `json:"next_at"`
				}
				rows := make([]row, 0, len(ds))
				for _, d := range ds {
					rows = append(rows, row{d.ID, d.PaymentID, d.Seq, d.Type, d.Status, d.Attempts, d.LastError, d.NextAt})
				}
				return printJSON(cmd.OutOrStdout(), rows)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tPAYMENT\tSEQ\tTYPE\tSTATUS\tATTEMPTS\tLAST_ERROR\tNEXT_AT")
			for _, d := range ds {
				last, next := d.LastError, "-"
				if last == "" {
					last = "-"
				}
				if d.Status == pay.DeliveryPending {
					next = d.NextAt.Format(time.RFC3339)
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%d\t%s\t%s\n", d.ID, d.PaymentID, d.Seq, d.Type, d.Status, d.Attempts, last, next)
			}
			return tw.Flush()
		},
	}
	store.flags(cmd)
	f := cmd.Flags()
	f.StringVar(&payment, "payment", "", "only the deliveries of this payment")
	f.IntVar(&limit, "limit", 50, "how many deliveries to list")
	f.StringVar(&resend, "resend", "", "re-send the delivery with this event id")
	f.BoolVar(&showJSON, "json", false, "print JSON")
	return cmd
}
