package pay

import (
	"context"
	"fmt"
	"slices"
)

// Charge is what the institution's ledger says about one external key.
type Charge struct {
	ExternalKey string
	Approved    bool
	Amount      int64
	Currency    string
	// Times counts the charges made under the key; more than one is a
	// double charge.
	Times int
}

// ParityReport compares our payments with the institution's ledger.
type ParityReport struct {
	// Matched: APPROVED here and charged once there, same amount and
	// currency.
	Matched int `json:"matched"`
	// OursOnly: APPROVED here, no charge there.
	OursOnly []string `json:"ours_only"`
	// InstitutionOnly: charged there, not APPROVED here (FAILED, DECLINED,
	// or unknown to us). An UNKNOWN payment charged there is listed too:
	// it has not been reconciled yet.
	InstitutionOnly []string `json:"institution_only"`
	// AmountMismatch: both sides agree it was charged, but not on what.
	AmountMismatch []string `json:"amount_mismatch"`
	// DoubleCharged: charged more than once there.
	DoubleCharged []string `json:"double_charged"`
}

// Mismatches counts every disagreement.
func (r ParityReport) Mismatches() int {
	return len(r.OursOnly) + len(r.InstitutionOnly) + len(r.AmountMismatch) + len(r.DoubleCharged)
}

// String summarizes the report in one line.
func (r ParityReport) String() string {
	return fmt.Sprintf("matched %d, ours only %d, institution only %d, amount mismatch %d, double charged %d",
		r.Matched, len(r.OursOnly), len(r.InstitutionOnly), len(r.AmountMismatch), len(r.DoubleCharged))
}

// Parity compares every payment in store with the institution's charges.
func Parity(ctx context.Context, store Store, charges []Charge) (ParityReport, error) {
	byKey := make(map[string]Charge, len(charges))
	for _, c := range charges {
		byKey[c.ExternalKey] = c
	}
	var rep ParityReport
	seen := map[string]bool{}
	after := ""
	for {
		page, err := store.List(ctx, after, 500)
		if err != nil {
			return rep, err
		}
		for _, p := range page {
			seen[p.ExternalKey] = true
			c, charged := byKey[p.ExternalKey]
			charged = charged && c.Approved && c.Times > 0
			switch {
			case p.Status == StatusApproved && !charged:
				rep.OursOnly = append(rep.OursOnly, p.ID)
			case p.Status != StatusApproved && charged:
				rep.InstitutionOnly = append(rep.InstitutionOnly, p.ID)
			case charged && (c.Amount != p.Amount || c.Currency != p.Currency):
				rep.AmountMismatch = append(rep.AmountMismatch, p.ID)
			case charged:
				rep.Matched++
			}
			if charged && c.Times > 1 {
				rep.DoubleCharged = append(rep.DoubleCharged, p.ID)
			}
		}
		if len(page) < 500 {
			break
		}
		after = page[len(page)-1].ID
	}
	for _, c := range charges {
		if c.Approved && c.Times > 0 && !seen[c.ExternalKey] {
			rep.InstitutionOnly = append(rep.InstitutionOnly, c.ExternalKey)
		}
	}
	slices.Sort(rep.InstitutionOnly)
	return rep, nil
}
