// Package institutionclient is the simulator connector: it adapts the
// institution simulator's HTTP client (package institution) to
// pay.Connector and pay.Refunder, translating its answers and errors into
// what the payment service knows: approved (refunded), declined, not
// sent, rejected, or unknown. Its capabilities are the simulator's:
// inquiry by the key we send, refunds, partial refunds; approvals are not
// declared idempotent (the simulator's idempotent mode is a fault-mode
// switch, off by default), so a lost approval is settled by inquiry.
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

var (
	_ pay.Connector = (*Adapter)(nil)
	_ pay.Refunder  = (*Adapter)(nil)
	_ pay.Capturer  = (*Adapter)(nil)
)

// Name implements pay.Connector: "simulator".
func (a *Adapter) Name() string { return "simulator" }

// Capabilities implements pay.Connector.
func (a *Adapter) Capabilities() pay.Capabilities {
	return pay.Capabilities{InquiryByOrder: true, Refund: true, PartialRefund: true, ManualCapture: true, Void: true}
}

// Refund implements pay.Refunder.
func (a *Adapter) Refund(ctx context.Context, req pay.RefundRequest) (pay.RefundVerdict, error) {
	res, err := a.c.Refund(ctx, institution.RefundRequest{ExternalKey: req.ExternalKey, ApprovalKey: req.PaymentKey, Amount: req.Amount})
	switch {
	case err == nil:
		return pay.RefundVerdict{Succeeded: res.Status == institution.RefundSucceeded}, nil
	case errors.Is(err, instclient.ErrNotSent):
		return pay.RefundVerdict{}, errors.Join(pay.ErrNotSent, err)
	case errors.Is(err, instclient.ErrRejected):
		return pay.RefundVerdict{}, errors.Join(pay.ErrRejected, err)
	default:
		return pay.RefundVerdict{}, errors.Join(pay.ErrOutcomeUnknown, err)
	}
}

// InquireRefund implements pay.Refunder.
func (a *Adapter) InquireRefund(ctx context.Context, externalKey, _ string) (pay.RefundInquiry, error) {
	res, err := a.c.RefundStatus(ctx, externalKey)
	switch {
	case errors.Is(err, instclient.ErrStatusUnavailable):
		return pay.RefundInquiry{}, errors.Join(pay.ErrInquiryUnavailable, err)
	case err != nil:
		return pay.RefundInquiry{}, err
	}
	return pay.RefundInquiry{
		Found:          res.Found,
		Succeeded:      res.Found && res.Status == institution.RefundSucceeded,
		Definitive:     res.Definitive,
		NotFoundWindow: res.NotFoundWindow,
	}, nil
}

// New returns an Adapter over c.
func New(c *instclient.Client) *Adapter { return &Adapter{c: c} }

// Approve implements pay.Institution.
func (a *Adapter) Approve(ctx context.Context, req pay.ApprovalRequest) (pay.Verdict, error) {
	return a.approve(ctx, institution.ApproveRequest{ExternalKey: req.ExternalKey, Amount: req.Amount, Currency: req.Currency})
}

// Authorize implements pay.Capturer: an approval with capture "manual".
func (a *Adapter) Authorize(ctx context.Context, req pay.ApprovalRequest) (pay.Verdict, error) {
	return a.approve(ctx, institution.ApproveRequest{ExternalKey: req.ExternalKey, Amount: req.Amount, Currency: req.Currency, Capture: "manual"})
}

// approve sends one approval or authorisation.
func (a *Adapter) approve(ctx context.Context, req institution.ApproveRequest) (pay.Verdict, error) {
	res, err := a.c.Approve(ctx, req)
	switch {
	case err == nil:
		return pay.Verdict{Approved: res.Status == institution.StatusApproved || res.Status == institution.StatusAuthorized}, nil
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
		Found: res.Found,
		// An authorisation found (captured or not) was approved.
		Approved:       res.Found && res.Status != institution.StatusDeclined,
		Definitive:     res.Definitive,
		NotFoundWindow: res.NotFoundWindow,
	}, nil
}

// Capture implements pay.Capturer.
func (a *Adapter) Capture(ctx context.Context, req pay.OperationRequest) (pay.RefundVerdict, error) {
	return a.operate(ctx, institution.OperationRequest{Kind: institution.OpCapture, ExternalKey: req.ExternalKey, ApprovalKey: req.PaymentKey, Amount: req.Amount})
}

// Void implements pay.Capturer.
func (a *Adapter) Void(ctx context.Context, req pay.OperationRequest) (pay.RefundVerdict, error) {
	return a.operate(ctx, institution.OperationRequest{Kind: institution.OpVoid, ExternalKey: req.ExternalKey, ApprovalKey: req.PaymentKey})
}

// operate sends one capture or void; its errors are Refund's.
func (a *Adapter) operate(ctx context.Context, req institution.OperationRequest) (pay.RefundVerdict, error) {
	res, err := a.c.Operate(ctx, req)
	switch {
	case err == nil:
		return pay.RefundVerdict{Succeeded: res.Status == institution.OpSucceeded}, nil
	case errors.Is(err, instclient.ErrNotSent):
		return pay.RefundVerdict{}, errors.Join(pay.ErrNotSent, err)
	case errors.Is(err, instclient.ErrRejected):
		return pay.RefundVerdict{}, errors.Join(pay.ErrRejected, err)
	default:
		return pay.RefundVerdict{}, errors.Join(pay.ErrOutcomeUnknown, err)
	}
}

// InquireOperation implements pay.Capturer.
func (a *Adapter) InquireOperation(ctx context.Context, kind pay.OperationKind, externalKey, _ string) (pay.RefundInquiry, error) {
	res, err := a.c.OperationStatus(ctx, string(kind), externalKey)
	switch {
	case errors.Is(err, instclient.ErrStatusUnavailable):
		return pay.RefundInquiry{}, errors.Join(pay.ErrInquiryUnavailable, err)
	case err != nil:
		return pay.RefundInquiry{}, err
	}
	return pay.RefundInquiry{
		Found:          res.Found,
		Succeeded:      res.Found && res.Status == institution.OpSucceeded,
		Definitive:     res.Definitive,
		NotFoundWindow: res.NotFoundWindow,
	}, nil
}
