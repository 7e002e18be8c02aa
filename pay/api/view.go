package api

import (
	"time"

	"github.com/stampede-lab/stampede/pay"
)

// View is a payment as the API shows it.
type View struct {
	ID           string     `json:"id"`
	MerchantID   string     `json:"merchant_id"`
	OrderID      string     `json:"order_id"`
	Amount       int64      `json:"amount"`
	Currency     string     `json:"currency"`
	Status       pay.Status `json:"status"`
	ManualReview bool       `json:"manual_review"`
	ReviewReason string     `json:"review_reason,omitempty"`
	// Capture is automatic or manual (an authorisation, captured or
	// voided later); Captured is a manual payment's captured amount.
	Capture   pay.CaptureMode `json:"capture"`
	Captured  *int64          `json:"captured,omitempty"`
	CreatedAt time.Time       `json:"created_at"`
	UpdatedAt time.Time       `json:"updated_at"`
	History   []ChangeView    `json:"history,omitempty"`
	// Cancellation is the payment's cancellation, when it has one
	// (POST /v1/payments/{id}/cancel).
	Cancellation *CancellationView `json:"cancellation,omitempty"`
}

// ChangeView is one status change as the API shows it: Code is the
// reason's code (such as approval_timeout), Reason the code with safe
// text.
type ChangeView struct {
	From   pay.Status `json:"from,omitempty"`
	To     pay.Status `json:"to"`
	Code   string     `json:"code"`
	Reason string     `json:"reason"`
	At     time.Time  `json:"at"`
}

// ViewOf renders p for the API. Reasons pass through pay.SafeReason, so that
// reasons stored before they were made safe show no internals either.
func ViewOf(p pay.Payment) View {
	v := View{ID: p.ID, MerchantID: p.MerchantID, OrderID: p.OrderID, Amount: p.Amount, Currency: p.Currency,
		Status: p.Status, ManualReview: p.ManualReview, Capture: p.CaptureMode, CreatedAt: p.CreatedAt, UpdatedAt: p.UpdatedAt}
	if v.Capture == "" {
		v.Capture = pay.CaptureAutomatic
	}
	if p.Manual() {
		c := p.Captured
		v.Captured = &c
	}
	if p.ReviewReason != "" {
		v.ReviewReason = pay.SafeReason(p.ReviewReason)
	}
	for _, h := range p.History {
		r := pay.SafeReason(h.Reason)
		v.History = append(v.History, ChangeView{From: h.From, To: h.To, Code: pay.ReasonCode(r), Reason: r, At: h.At})
	}
	return v
}
