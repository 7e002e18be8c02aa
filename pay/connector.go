package pay

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Capabilities is what a payment institution's connector declares it
// guarantees. The service reads them instead of assuming: a refund is
// refused before anything is written when the connector cannot carry it
// out, and an approval is retried with its key only where the institution
// promises that a repeated key is not charged twice.
type Capabilities struct {
	// IdempotentApproval: a repeated approval with the same key is
	// answered with the first result and charged once (Stripe keeps an
	// Idempotency-Key 24 hours, Toss Payments 15 days). Without it an
	// approval whose answer was lost is never sent again: UNKNOWN is
	// settled by inquiry.
	IdempotentApproval bool `json:"idempotent_approval"`
	// InquiryByOrder: the institution can be asked about a payment by
	// the key or order id we sent, not only by an id it returned (which
	// a lost answer never delivered).
	InquiryByOrder bool `json:"inquiry_by_order"`
	// Refund: refunds of an approved payment, with an inquiry of a
	// refund by its key.
	Refund bool `json:"refund"`
	// PartialRefund: a refund may be less than the payment's amount, and
	// several refunds may add up to it.
	PartialRefund bool `json:"partial_refund"`
	// ManualCapture: an approval may be an authorisation captured later.
	ManualCapture bool `json:"manual_capture"`
	// Void: an uncaptured authorisation may be cancelled.
	Void bool `json:"void"`
}

// Names lists the capabilities that are set, by their JSON names.
func (c Capabilities) Names() []string {
	var out []string
	for _, f := range []struct {
		name string
		on   bool
	}{
		{"idempotent_approval", c.IdempotentApproval}, {"inquiry_by_order", c.InquiryByOrder},
		{"refund", c.Refund}, {"partial_refund", c.PartialRefund},
		{"manual_capture", c.ManualCapture}, {"void", c.Void},
	} {
		if f.on {
			out = append(out, f.name)
		}
	}
	return out
}

// String lists the capabilities that are set, or "none".
func (c Capabilities) String() string {
	if n := c.Names(); len(n) > 0 {
		return strings.Join(n, ",")
	}
	return "none"
}

// Connector is an Institution that names itself and declares its
// Capabilities: one adapter package per institution implements it
// (pay/institutionclient for the simulator, pay/stripeconnector for
// Stripe, pay/tossconnector for Toss Payments).
type Connector interface {
	Institution
	// Name is the connector's name, as serve pay's --connector spells it.
	Name() string
	// Capabilities declares what the institution guarantees.
	Capabilities() Capabilities
}

// CapabilitiesOf returns what inst declares, or no capability at all for
// an Institution that is not a Connector: approvals and inquiries only.
func CapabilitiesOf(inst Institution) Capabilities {
	if c, ok := inst.(Connector); ok {
		return c.Capabilities()
	}
	return Capabilities{}
}

// Connectors lists the connectors serve pay knows, by name.
func Connectors() []string { return []string{"simulator", "stripe", "toss"} }

// ValidateConnector checks a connector name.
func ValidateConnector(name string) error {
	if !slices.Contains(Connectors(), name) {
		return Invalid("connector", "must be one of %v, got %q", Connectors(), name)
	}
	return nil
}

// ClientAuthorized is a Connector whose institution has the buyer
// authorise the payment in its own widget before the payment service is
// called, as Toss Payments does: the widget is opened with the merchant's
// order id and amount and hands the buyer's browser a payment key, which
// the merchant's server passes on in the create request (payment_key).
// The service then sends the order id as the payment's external key (the
// institution knows the payment by it: it is what an inquiry asks about)
// and the payment key with the approval.
type ClientAuthorized interface {
	Connector
	// CheckCreate checks a create request's order id, currency and
	// payment key against the institution's rules before anything is
	// written; its error is an Invalid naming the field.
	CheckCreate(orderID, currency, paymentKey string) error
}

// Refunder is a Connector that can refund: the refund's own key is sent
// with it, so that an inquiry can find it after a lost answer.
type Refunder interface {
	// Refund asks for a refund. Its errors tell what is known, as
	// Approve's do: ErrNotSent and ErrRejected (nothing happened),
	// ErrOutcomeUnknown (the money may have moved back: settle by
	// InquireRefund, never by sending it again); a nil error carries the
	// institution's verdict.
	Refund(ctx context.Context, req RefundRequest) (RefundVerdict, error)
	// InquireRefund asks what became of a refund's external key;
	// paymentKey is the refunded payment's external key, for an
	// institution that lists refunds per payment only.
	// ErrInquiryUnavailable when the status API is down.
	InquireRefund(ctx context.Context, externalKey, paymentKey string) (RefundInquiry, error)
}

// RefundRequest is what the service sends to the institution to refund.
type RefundRequest struct {
	// ExternalKey is the refund's own key (the refund's ID): the
	// institution's idempotency key and what an inquiry asks about.
	ExternalKey string
	// PaymentKey is the payment's external key at the institution.
	PaymentKey string
	Amount     int64
	Currency   string
	// Reason is the merchant's reason, when given.
	Reason string
}

// RefundVerdict is the institution's answer to a refund.
type RefundVerdict struct {
	Succeeded bool // false: declined
}

// RefundInquiry is the institution's answer to a refund's inquiry; the
// members mean what Inquiry's do.
type RefundInquiry struct {
	Found          bool
	Succeeded      bool
	Definitive     bool
	NotFoundWindow time.Duration
}

// errUnsupported is the error of an operation the connector cannot do.
func errUnsupported(inst Institution, what string) *Error {
	name := "the institution"
	if c, ok := inst.(Connector); ok {
		name = fmt.Sprintf("the %s connector", c.Name())
	}
	return &Error{Code: CodeNotSupported, Kind: CodeConflict, Message: fmt.Sprintf("%s does not support %s", name, what)}
}
