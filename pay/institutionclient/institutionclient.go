// Package institutionclient adapts the institution simulator's HTTP client
// (package institution) to pay.Institution, translating its answers and
// errors into what the payment service knows: approved, declined, not
// sent, rejected, or unknown.
package institutionclient

import (
	"context"
	"errors"

	"github.com/stampede-lab/stampede/institution"
	instclient "github.com/stampede-lab/stampede/institution/client"
	"github.com/stampede-lab/stampede/pay"
)

// Adapter is a pay.Institution over an instclient.Client.
type Adapter struct {
	c *instclient.Client
}

var _ pay.Institution = (*Adapter)(nil)

// New returns an Adapter over c.
func New(c *instclient.Client) *Adapter { return &Adapter{c: c} }

// Approve implements pay.Institution.
func (a *Adapter) Approve(ctx context.Context, req pay.ApprovalRequest) (pay.Verdict, error) {
	res, err := a.c.Approve(ctx, institution.ApproveRequest{ExternalKey: req.ExternalKey, Amount: req.Amount, Currency: req.Currency})
	switch {
	case err == nil:
		return pay.Verdict{Approved: res.Status == institution.StatusApproved}, nil
	case errors.Is(err, instclient.ErrNotSent):
		return pay.Verdict{}, errors.Join(pay.ErrNotSent, err)
	case errors.Is(err, instclient.ErrRejected):
		// A 4xx: the institution refused the request without processing it.
		return pay.Verdict{}, errors.Join(pay.ErrRejected, err)
	default:
		// Timeouts, lost answers and 5xx: the money may have moved. Never
		// guess: a status inquiry settles it.
		return pay.Verdict{}, errors.Join(pay.ErrOutcomeUnknown, err)
	}
}

// Inquire implements pay.Institution.
func (a *Adapter) Inquire(ctx context.Context, externalKey string) (pay.Inquiry, error) {
	res, err := a.c.Status(ctx, externalKey)
	switch {
	case errors.Is(err, instclient.ErrStatusUnavailable):
		return pay.Inquiry{}, errors.Join(pay.ErrInquiryUnavailable, err)
	case err != nil:
		return pay.Inquiry{}, err
	}
	return pay.Inquiry{
		Found:          res.Found,
		Approved:       res.Found && res.Status == institution.StatusApproved,
		Definitive:     res.Definitive,
		NotFoundWindow: res.NotFoundWindow,
	}, nil
}
