package pay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
)

// Held is what the institution still holds of one external key: what it
// charged (or captured) less what it refunded.
type Held struct {
	ExternalKey string
	Amount      int64
}

// Sale says, per order id, whether the merchant sold it (its order paid)
// and issued its ticket.
type Sale func(orderID string) (sold, ticketed bool)

// Difference is one disagreement of a close-out and what was done about
// it.
type Difference struct {
	// Kind: money_without_ticket (the institution holds money for a
	// payment whose order has no sold ticket), money_unknown_to_pay (it
	// holds money under a key pay does not know), sold_without_money (a
	// sold order whose payment holds nothing), sold_without_ticket, or
	// parity_<kind> (pay.Parity's).
	Kind        string `json:"kind"`
	PaymentID   string `json:"payment_id,omitempty"`
	OrderID     string `json:"order_id,omitempty"`
	ExternalKey string `json:"external_key,omitempty"`
	Held        int64  `json:"held,omitempty"`
	// Done says what pay did about it: its cancellation (the closure's
	// or the merchant's) and how it stands, or "nothing".
	Done string `json:"done"`
}

// CloseOutReport is institution ↔ pay ↔ orders ↔ tickets for a sale.
type CloseOutReport struct {
	Payments    int          `json:"payments"`
	HeldKeys    int          `json:"held_keys"`
	Sold        int          `json:"sold"`
	Parity      ParityReport `json:"parity"`
	Differences []Difference `json:"differences"`
}

// String summarises the report in one line.
func (r CloseOutReport) String() string {
	return fmt.Sprintf("payments %d, keys holding money %d, sold orders %d, differences %d (parity: %s)",
		r.Payments, r.HeldKeys, r.Sold, len(r.Differences), r.Parity)
}

// CloseOut compares every payment in store (of the orders sale knows
// about, or all when orders is nil) with what the institution holds
// (held, and its charges for parity) and with the sale. The difference
// is zero when every key holding money belongs to a sold, ticketed order,
// every sold order's payment holds money, and parity is clean.
func CloseOut(ctx context.Context, store Store, charges []Charge, held []Held, sale Sale) (CloseOutReport, error) {
	var rep CloseOutReport
	par, err := Parity(ctx, store, charges)
	if err != nil {
		return rep, err
	}
	rep.Parity = par
	byKey := map[string]Payment{}
	for after := ""; ; {
		page, err := store.List(ctx, after, 500)
		if err != nil {
			return rep, err
		}
		for _, p := range page {
			byKey[p.ExternalKey] = p
		}
		rep.Payments += len(page)
		if len(page) < 500 {
			break
		}
		after = page[len(page)-1].ID
	}
	holds := map[string]int64{}
	for _, h := range held {
		if h.Amount > 0 {
			holds[h.ExternalKey] = h.Amount
			rep.HeldKeys++
		}
	}
	done := func(p Payment) string {
		cs, ok := store.(CancellationStore)
		if !ok {
			return "nothing"
		}
		c, err := cs.GetCancellation(ctx, p.ID)
		if errors.Is(err, ErrNotFound) || err != nil {
			return "nothing: not closed"
		}
		what := "cancelled by the merchant"
		if c.IdempotencyKey == ScopedKey(p.MerchantID, ClosureKey(p.ID)) {
			what = "closed by the closure pass"
		}
		return fmt.Sprintf("%s: %s %s %s", what, c.Status, c.Action, c.Outcome)
	}
	for key, amount := range holds {
		p, ok := byKey[key]
		if !ok {
			rep.Differences = append(rep.Differences, Difference{Kind: "money_unknown_to_pay", ExternalKey: key, Held: amount, Done: "nothing"})
			continue
		}
		if sold, ticketed := sale(p.OrderID); !sold || !ticketed {
			rep.Differences = append(rep.Differences, Difference{Kind: "money_without_ticket", PaymentID: p.ID, OrderID: p.OrderID,
				ExternalKey: key, Held: amount, Done: done(p)})
		}
	}
	for _, p := range byKey {
		sold, ticketed := sale(p.OrderID)
		if !sold {
			continue
		}
		rep.Sold++
		if holds[p.ExternalKey] <= 0 && p.Status == StatusApproved {
			rep.Differences = append(rep.Differences, Difference{Kind: "sold_without_money", PaymentID: p.ID, OrderID: p.OrderID, Done: done(p)})
		}
		if !ticketed {
			rep.Differences = append(rep.Differences, Difference{Kind: "sold_without_ticket", PaymentID: p.ID, OrderID: p.OrderID, Done: "nothing"})
		}
	}
	for kind, ids := range map[string][]string{"parity_ours_only": par.OursOnly, "parity_institution_only": par.InstitutionOnly,
		"parity_amount_mismatch": par.AmountMismatch, "parity_double_charged": par.DoubleCharged} {
		for _, id := range ids {
			rep.Differences = append(rep.Differences, Difference{Kind: kind, PaymentID: id, Done: "nothing"})
		}
	}
	slices.SortFunc(rep.Differences, func(a, b Difference) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.PaymentID, b.PaymentID), cmp.Compare(a.ExternalKey, b.ExternalKey))
	})
	return rep, nil
}
