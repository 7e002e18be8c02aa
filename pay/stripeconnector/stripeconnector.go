// Package stripeconnector is the Stripe connector: a pay.Connector and
// pay.Refunder over the official client (github.com/stripe/stripe-go).
//
// An approval is a PaymentIntent created and confirmed in one request,
// under the Idempotency-Key "stampede-approval-<external key>" and with
// the external key in its metadata (stampede_key). Stripe answers a
// repeated key with the first result for 24 hours, so the connector
// declares idempotent approvals and may send an approval again, with the
// same key, when the answer was lost (Config.ApprovalRetries). An inquiry
// searches the PaymentIntents by that metadata. A refund is created
// against the PaymentIntent found that way, under its own key
// ("stampede-refund-<refund key>", also in metadata), and asked about by
// listing the PaymentIntent's refunds.
//
// Errors are read as the payment service needs them: a card error is a
// decline; an invalid request, an idempotency error or an authentication
// error is a rejection (nothing happened); a 5xx, a 429, a timeout or a
// lost connection leaves the outcome unknown. Stripe's search is
// eventually consistent (Stripe documents up to a minute), so "not
// found" is read as definitive only after Config.NotFoundWindow.
package stripeconnector

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/stripe/stripe-go/v82"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/pay"
)

var (
	_ pay.Connector = (*Connector)(nil)
	_ pay.Refunder  = (*Connector)(nil)
)

// MetadataKey is the PaymentIntent and Refund metadata key holding
// Stampede's external key.
const MetadataKey = "stampede_key"

// Config configures a Connector.
type Config struct {
	// SecretKey is the Stripe secret (sk_...) or restricted (rk_...) key.
	SecretKey string
	// URL is Stripe's API base URL; empty means Stripe's. Tests point it
	// at stripe-mock.
	URL string
	// PaymentMethod is the payment method every PaymentIntent is
	// confirmed with (the buyer's card is collected by the merchant's
	// front end; a test key uses pm_card_visa).
	PaymentMethod string
	// ApprovalRetries is how many times an approval whose answer was
	// lost is sent again with the same Idempotency-Key (Stripe answers
	// a repeat with the first result, charging once).
	ApprovalRetries int
	// NotFoundWindow is how long after a request "not found" by search
	// may still change.
	NotFoundWindow time.Duration
	// HTTPClient carries the transport; nil means a default client.
	HTTPClient *http.Client
}

// DefaultConfig returns pm_card_visa, one approval retry and a one-minute
// not-found window.
func DefaultConfig() Config {
	return Config{PaymentMethod: "pm_card_visa", ApprovalRetries: 1, NotFoundWindow: time.Minute}
}

// Validate reports every bad field at once; the secret key is named as
// the environment variable serve pay reads it from.
func (c Config) Validate() error {
	var f stampede.Fields
	switch {
	case c.SecretKey == "":
		f.Add("STAMPEDE_STRIPE_SECRET_KEY", "is required: the Stripe secret key (sk_test_..., sk_live_... or rk_...)")
	case !strings.HasPrefix(c.SecretKey, "sk_") && !strings.HasPrefix(c.SecretKey, "rk_"):
		f.Add("STAMPEDE_STRIPE_SECRET_KEY", "is not a Stripe secret key: it must start with sk_ or rk_ (a publishable pk_ key cannot charge)")
	case strings.ContainsAny(c.SecretKey, " \t\r\n"):
		f.Add("STAMPEDE_STRIPE_SECRET_KEY", "must not contain white space")
	}
	if c.PaymentMethod == "" {
		f.Add("stripe_payment_method", "is required")
	}
	if c.ApprovalRetries < 0 || c.ApprovalRetries > 5 {
		f.Add("stripe_approval_retries", "must be between 0 and 5, got %d", c.ApprovalRetries)
	}
	if c.NotFoundWindow <= 0 {
		f.Add("stripe_not_found_window", "must be positive, got %s", c.NotFoundWindow)
	}
	return f.Err()
}

// Connector is the Stripe connector.
type Connector struct {
	cfg Config
	sc  *stripe.Client
}

// New returns a Connector; cfg must pass Validate. It sends nothing.
func New(cfg Config) (*Connector, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	retries := int64(0) // the service decides what is sent again
	bc := &stripe.BackendConfig{MaxNetworkRetries: &retries, HTTPClient: cfg.HTTPClient, LeveledLogger: &stripe.LeveledLogger{Level: stripe.LevelNull}}
	if cfg.URL != "" {
		u := strings.TrimRight(cfg.URL, "/")
		bc.URL = &u
	}
	sc := stripe.NewClient(cfg.SecretKey, stripe.WithBackends(stripe.NewBackendsWithConfig(bc)))
	return &Connector{cfg: cfg, sc: sc}, nil
}

// Name implements pay.Connector: "stripe".
func (c *Connector) Name() string { return "stripe" }

// Capabilities implements pay.Connector.
func (c *Connector) Capabilities() pay.Capabilities {
	return pay.Capabilities{IdempotentApproval: true, InquiryByOrder: true, Refund: true, PartialRefund: true, ManualCapture: true, Void: true}
}

// approvalKey, refundKey and operationKey are the Idempotency-Keys sent
// to Stripe: each request its own.
func approvalKey(externalKey string) string { return "stampede-approval-" + externalKey }
func refundKey(externalKey string) string   { return "stampede-refund-" + externalKey }
func operationKey(kind pay.OperationKind, externalKey string) string {
	return "stampede-" + string(kind) + "-" + externalKey
}

// Approve implements pay.Institution: create and confirm a PaymentIntent.
func (c *Connector) Approve(ctx context.Context, req pay.ApprovalRequest) (pay.Verdict, error) {
	return c.approve(ctx, req, false)
}

// Authorize implements pay.Capturer: create and confirm a PaymentIntent
// with capture_method manual, which Stripe leaves requires_capture.
func (c *Connector) Authorize(ctx context.Context, req pay.ApprovalRequest) (pay.Verdict, error) {
	return c.approve(ctx, req, true)
}

// approve creates and confirms a PaymentIntent, sent again under its key
// (Stripe answers a repeated key with the first result) up to
// ApprovalRetries times while the outcome is unknown.
func (c *Connector) approve(ctx context.Context, req pay.ApprovalRequest, manual bool) (pay.Verdict, error) {
	var last error
	for attempt := 0; attempt <= c.cfg.ApprovalRetries; attempt++ {
		if attempt > 0 && ctx.Err() != nil {
			break
		}
		params := &stripe.PaymentIntentCreateParams{
			Amount:        stripe.Int64(req.Amount),
			Currency:      stripe.String(strings.ToLower(req.Currency)),
			Confirm:       stripe.Bool(true),
			PaymentMethod: stripe.String(c.cfg.PaymentMethod),
			// No redirect: a payment method that would need one
			// declines instead of waiting for the buyer.
			AutomaticPaymentMethods: &stripe.PaymentIntentCreateAutomaticPaymentMethodsParams{
				Enabled: stripe.Bool(true), AllowRedirects: stripe.String("never")},
		}
		if manual {
			params.CaptureMethod = stripe.String(string(stripe.PaymentIntentCaptureMethodManual))
		}
		params.AddMetadata(MetadataKey, req.ExternalKey)
		params.SetIdempotencyKey(approvalKey(req.ExternalKey))
		pi, err := c.sc.V1PaymentIntents.Create(ctx, params)
		if err == nil {
			return verdictOf(pi)
		}
		kind, werr := classify(err)
		switch kind {
		case declined:
			return pay.Verdict{Approved: false}, nil
		case rejected:
			return pay.Verdict{}, errors.Join(pay.ErrRejected, werr)
		}
		last = werr // unknown: the same key again is safe
	}
	return pay.Verdict{}, errors.Join(pay.ErrOutcomeUnknown, last)
}

// verdictOf reads a confirmed PaymentIntent.
func verdictOf(pi *stripe.PaymentIntent) (pay.Verdict, error) {
	switch pi.Status {
	case stripe.PaymentIntentStatusSucceeded, stripe.PaymentIntentStatusRequiresCapture:
		return pay.Verdict{Approved: true}, nil
	case stripe.PaymentIntentStatusRequiresPaymentMethod, stripe.PaymentIntentStatusCanceled:
		return pay.Verdict{Approved: false}, nil
	default: // processing, requires_action, requires_confirmation: not settled yet
		return pay.Verdict{}, fmt.Errorf("%w: the PaymentIntent is %s", pay.ErrOutcomeUnknown, pi.Status)
	}
}

// find searches the PaymentIntent whose metadata holds externalKey; nil
// when there is none.
func (c *Connector) find(ctx context.Context, externalKey string) (*stripe.PaymentIntent, error) {
	params := &stripe.PaymentIntentSearchParams{}
	params.Context = ctx
	params.Query = fmt.Sprintf("metadata['%s']:'%s'", MetadataKey, strings.ReplaceAll(externalKey, "'", `\'`))
	params.Limit = stripe.Int64(10)
	var found *stripe.PaymentIntent
	for pi, err := range c.sc.V1PaymentIntents.Search(ctx, params) {
		if err != nil {
			return nil, err
		}
		if pi.Metadata[MetadataKey] == externalKey {
			return pi, nil
		}
		if found == nil {
			found = pi
		}
		break
	}
	return found, nil
}

// Inquire implements pay.Institution: search by the key in metadata.
func (c *Connector) Inquire(ctx context.Context, externalKey string) (pay.Inquiry, error) {
	pi, err := c.find(ctx, externalKey)
	if err != nil {
		_, werr := classify(err)
		return pay.Inquiry{}, errors.Join(pay.ErrInquiryUnavailable, werr)
	}
	if pi == nil {
		return pay.Inquiry{Definitive: true, NotFoundWindow: c.cfg.NotFoundWindow}, nil
	}
	v, err := verdictOf(pi)
	if err != nil { // not settled at Stripe yet: ask again later
		return pay.Inquiry{NotFoundWindow: c.cfg.NotFoundWindow}, nil
	}
	return pay.Inquiry{Found: true, Approved: v.Approved, Definitive: true}, nil
}

// Refund implements pay.Refunder: a refund of the PaymentIntent of
// req.PaymentKey under the refund's own Idempotency-Key.
func (c *Connector) Refund(ctx context.Context, req pay.RefundRequest) (pay.RefundVerdict, error) {
	pi, err := c.find(ctx, req.PaymentKey)
	if err != nil {
		// Nothing about the refund was sent yet.
		_, werr := classify(err)
		return pay.RefundVerdict{}, errors.Join(pay.ErrNotSent, werr)
	}
	if pi == nil {
		return pay.RefundVerdict{}, fmt.Errorf("%w: no PaymentIntent of key %s", pay.ErrRejected, req.PaymentKey)
	}
	params := &stripe.RefundCreateParams{PaymentIntent: stripe.String(pi.ID), Amount: stripe.Int64(req.Amount)}
	params.AddMetadata(MetadataKey, req.ExternalKey)
	params.SetIdempotencyKey(refundKey(req.ExternalKey))
	r, err := c.sc.V1Refunds.Create(ctx, params)
	if err != nil {
		kind, werr := classify(err)
		switch kind {
		case declined:
			return pay.RefundVerdict{Succeeded: false}, nil
		case rejected:
			return pay.RefundVerdict{}, errors.Join(pay.ErrRejected, werr)
		}
		return pay.RefundVerdict{}, errors.Join(pay.ErrOutcomeUnknown, werr)
	}
	switch r.Status {
	case stripe.RefundStatusSucceeded:
		return pay.RefundVerdict{Succeeded: true}, nil
	case stripe.RefundStatusFailed, stripe.RefundStatusCanceled:
		return pay.RefundVerdict{Succeeded: false}, nil
	default: // pending, requires_action: settled later by inquiry
		return pay.RefundVerdict{}, fmt.Errorf("%w: the refund is %s", pay.ErrOutcomeUnknown, r.Status)
	}
}

// InquireRefund implements pay.Refunder. The refund key alone does not
// name the PaymentIntent, so the refund's metadata is searched through
// the refunds Stripe lists (newest first, up to 100).
func (c *Connector) InquireRefund(ctx context.Context, externalKey, _ string) (pay.RefundInquiry, error) {
	params := &stripe.RefundListParams{}
	params.Context = ctx
	params.Limit = stripe.Int64(100)
	params.Single = true
	for r, err := range c.sc.V1Refunds.List(ctx, params) {
		if err != nil {
			_, werr := classify(err)
			return pay.RefundInquiry{}, errors.Join(pay.ErrInquiryUnavailable, werr)
		}
		if r.Metadata[MetadataKey] != externalKey {
			continue
		}
		switch r.Status {
		case stripe.RefundStatusSucceeded:
			return pay.RefundInquiry{Found: true, Succeeded: true, Definitive: true}, nil
		case stripe.RefundStatusFailed, stripe.RefundStatusCanceled:
			return pay.RefundInquiry{Found: true, Definitive: true}, nil
		default:
			return pay.RefundInquiry{NotFoundWindow: c.cfg.NotFoundWindow}, nil
		}
	}
	return pay.RefundInquiry{Definitive: true, NotFoundWindow: c.cfg.NotFoundWindow}, nil
}

var _ pay.Capturer = (*Connector)(nil)

// Capture implements pay.Capturer: capture the PaymentIntent of
// req.PaymentKey (amount_to_capture req.Amount) under the capture's own
// Idempotency-Key.
func (c *Connector) Capture(ctx context.Context, req pay.OperationRequest) (pay.RefundVerdict, error) {
	return c.operate(ctx, pay.OpCapture, req)
}

// Void implements pay.Capturer: cancel the PaymentIntent of
// req.PaymentKey under the void's own Idempotency-Key.
func (c *Connector) Void(ctx context.Context, req pay.OperationRequest) (pay.RefundVerdict, error) {
	return c.operate(ctx, pay.OpVoid, req)
}

// operate sends one capture or cancel (never again: a lost answer is
// settled by InquireOperation).
func (c *Connector) operate(ctx context.Context, kind pay.OperationKind, req pay.OperationRequest) (pay.RefundVerdict, error) {
	pi, err := c.find(ctx, req.PaymentKey)
	if err != nil {
		// Nothing about the operation was sent yet.
		_, werr := classify(err)
		return pay.RefundVerdict{}, errors.Join(pay.ErrNotSent, werr)
	}
	if pi == nil {
		return pay.RefundVerdict{}, fmt.Errorf("%w: no PaymentIntent of key %s", pay.ErrRejected, req.PaymentKey)
	}
	var out *stripe.PaymentIntent
	if kind == pay.OpCapture {
		params := &stripe.PaymentIntentCaptureParams{AmountToCapture: stripe.Int64(req.Amount)}
		params.AddMetadata(MetadataKey+"_capture", req.ExternalKey)
		params.SetIdempotencyKey(operationKey(kind, req.ExternalKey))
		out, err = c.sc.V1PaymentIntents.Capture(ctx, pi.ID, params)
	} else {
		params := &stripe.PaymentIntentCancelParams{}
		params.SetIdempotencyKey(operationKey(kind, req.ExternalKey))
		out, err = c.sc.V1PaymentIntents.Cancel(ctx, pi.ID, params)
	}
	if err != nil {
		k, werr := classify(err)
		switch k {
		case declined:
			return pay.RefundVerdict{Succeeded: false}, nil
		case rejected:
			return pay.RefundVerdict{}, errors.Join(pay.ErrRejected, werr)
		}
		return pay.RefundVerdict{}, errors.Join(pay.ErrOutcomeUnknown, werr)
	}
	done, settled := operationDone(kind, out.Status)
	if !settled {
		return pay.RefundVerdict{}, fmt.Errorf("%w: the PaymentIntent is %s", pay.ErrOutcomeUnknown, out.Status)
	}
	return pay.RefundVerdict{Succeeded: done}, nil
}

// operationDone reads a PaymentIntent's status after a capture or void:
// whether the operation took effect, and whether the status says
// (processing does not).
func operationDone(kind pay.OperationKind, st stripe.PaymentIntentStatus) (done, settled bool) {
	switch st {
	case stripe.PaymentIntentStatusSucceeded:
		return kind == pay.OpCapture, true
	case stripe.PaymentIntentStatusCanceled:
		return kind == pay.OpVoid, true
	case stripe.PaymentIntentStatusRequiresCapture:
		return false, true
	}
	return false, false
}

// InquireOperation implements pay.Capturer. A PaymentIntent is captured
// or cancelled at most once, so its status answers for the one
// operation pay let through: succeeded is a capture carried out,
// canceled a void; still requires_capture is neither (not found, read as
// never processed once the not-found window has passed since our
// request, Stripe answering synchronously).
func (c *Connector) InquireOperation(ctx context.Context, kind pay.OperationKind, _, paymentKey string) (pay.RefundInquiry, error) {
	pi, err := c.find(ctx, paymentKey)
	if err != nil {
		_, werr := classify(err)
		return pay.RefundInquiry{}, errors.Join(pay.ErrInquiryUnavailable, werr)
	}
	if pi == nil {
		return pay.RefundInquiry{Definitive: true, NotFoundWindow: c.cfg.NotFoundWindow}, nil
	}
	switch pi.Status {
	case stripe.PaymentIntentStatusRequiresCapture:
		return pay.RefundInquiry{Definitive: true, NotFoundWindow: c.cfg.NotFoundWindow}, nil
	case stripe.PaymentIntentStatusSucceeded, stripe.PaymentIntentStatusCanceled:
		done, _ := operationDone(kind, pi.Status)
		return pay.RefundInquiry{Found: true, Succeeded: done, Definitive: true}, nil
	}
	return pay.RefundInquiry{NotFoundWindow: c.cfg.NotFoundWindow}, nil // processing: ask again
}

// errKind is what a Stripe error means for the money.
type errKind int

const (
	unknown  errKind = iota // may have been processed
	declined                // processed: declined
	rejected                // refused, nothing processed
)

// classify reads a Stripe error.
func classify(err error) (errKind, error) {
	var se *stripe.Error
	if !errors.As(err, &se) {
		return unknown, err // transport: a timeout, a lost connection
	}
	werr := fmt.Errorf("stripe: %s (%s, HTTP %d)", se.Msg, se.Type, se.HTTPStatusCode)
	switch {
	case se.Type == stripe.ErrorTypeCard:
		return declined, werr
	case se.HTTPStatusCode == http.StatusTooManyRequests || se.HTTPStatusCode >= 500 || se.HTTPStatusCode == 0:
		return unknown, werr
	case se.Type == stripe.ErrorTypeInvalidRequest, se.Type == stripe.ErrorTypeIdempotency,
		se.HTTPStatusCode == http.StatusUnauthorized, se.HTTPStatusCode == http.StatusForbidden:
		return rejected, werr
	}
	return unknown, werr
}
