// Package tossconnector is the Toss Payments connector: a pay.Connector,
// pay.Refunder and pay.ClientAuthorized over Toss Payments' v1 REST API
// (there is no official Go client; the API is plain JSON over HTTPS with
// Basic authentication: the secret key as user name, no password).
//
// The buyer authorises the payment in Toss's widget, opened by the
// merchant's page with an orderId and amount; Toss then sends the
// browser to the merchant's success URL with a paymentKey. The merchant's
// server creates the payment at Stampede with order_id set to that
// orderId and payment_key to that paymentKey; the order id is then the
// payment's external key. The requests:
//
//   - approval: POST /v1/payments/confirm {paymentKey, orderId, amount}
//     under the Idempotency-Key "stampede-approval-<orderId>". Toss keeps
//     an Idempotency-Key 15 days and answers a repeat with the first
//     result, so the connector declares idempotent approvals and sends an
//     approval whose answer was lost again, with the same key
//     (Config.ApprovalRetries);
//   - inquiry: GET /v1/payments/orders/{orderId};
//   - refund: the payment's paymentKey is read by that inquiry, then
//     POST /v1/payments/{paymentKey}/cancel {cancelReason, cancelAmount}
//     under the Idempotency-Key "stampede-refund-<refund key>", full or
//     partial. The cancelReason ends with "[stampede-refund:<refund key>]",
//     the mark that finds the refund again;
//   - refund inquiry: the payment's inquiry, its cancels searched for
//     that mark (Toss's cancels carry their reason, not the
//     Idempotency-Key).
//
// Errors are read as the payment service needs them (see classify): a
// card or account refusal (403 REJECT_CARD_PAYMENT and the like) is a
// decline; any other 4xx a rejection, nothing processed (401
// UNAUTHORIZED_KEY, 400 INVALID_REQUEST, 404 NOT_FOUND_PAYMENT_SESSION
// ...), except the answers that say the request is being or was
// processed, or may be tried again (400 ALREADY_PROCESSED_PAYMENT, 400
// PROVIDER_ERROR, 409 IDEMPOTENT_REQUEST_PROCESSING, 429): those, a 5xx, a
// timeout or a connection lost after it was made leave the outcome
// unknown. A request that never reached a connection was not sent.
package tossconnector

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/pay"
)

var (
	_ pay.Connector        = (*Connector)(nil)
	_ pay.Refunder         = (*Connector)(nil)
	_ pay.ClientAuthorized = (*Connector)(nil)
)

// DefaultURL is Toss Payments' API.
const DefaultURL = "https://api.tosspayments.com"

// EnvSecretKey is the environment variable serve pay reads the secret
// key from; Validate names the key by it.
const EnvSecretKey = "STAMPEDE_TOSS_SECRET_KEY"

// Toss's limits on what the connector sends.
const (
	MaxPaymentKeyLen   = 200
	maxCancelReasonLen = 200
	maxAnswer          = 1 << 20
)

// orderIDPattern is Toss's orderId: 6 to 64 letters, digits, '-', '_'.
var orderIDPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{6,64}$`)

// Config configures a Connector.
type Config struct {
	// SecretKey is the Toss secret key (test_sk_... or live_sk_...).
	SecretKey string
	// URL is Toss's API base URL; empty means DefaultURL. Tests point it
	// at the institution simulator's toss protocol.
	URL string
	// ApprovalRetries is how many times an approval whose answer was
	// lost is sent again under the same Idempotency-Key.
	ApprovalRetries int
	// NotFoundWindow is how long after our request "not found" may still
	// change (Toss records a confirm while answering it; the window
	// covers a request still in the network).
	NotFoundWindow time.Duration
	// HTTPClient carries the transport; nil means a default client.
	// The payment service bounds each call with its own timeout.
	HTTPClient *http.Client
}

// DefaultConfig returns Toss's URL, one approval retry and a one-minute
// not-found window.
func DefaultConfig() Config {
	return Config{URL: DefaultURL, ApprovalRetries: 1, NotFoundWindow: time.Minute}
}

// Validate reports every bad field at once; the secret key is named as
// the environment variable serve pay reads it from.
func (c Config) Validate() error {
	var f stampede.Fields
	switch {
	case c.SecretKey == "":
		f.Add(EnvSecretKey, "is required: the Toss Payments secret key (test_sk_... or live_sk_...)")
	case !strings.HasPrefix(c.SecretKey, "test_sk_") && !strings.HasPrefix(c.SecretKey, "live_sk_"):
		f.Add(EnvSecretKey, "is not a Toss Payments secret key: it must start with test_sk_ or live_sk_ (a client key, test_ck_ or live_ck_, cannot confirm)")
	case strings.ContainsAny(c.SecretKey, " \t\r\n:"):
		f.Add(EnvSecretKey, "must not contain white space or ':'")
	}
	if u, err := url.Parse(c.URL); c.URL != "" && (err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "") {
		f.Add("institution", "must be an http or https URL, got %q", c.URL)
	}
	if c.ApprovalRetries < 0 || c.ApprovalRetries > 5 {
		f.Add("toss_approval_retries", "must be between 0 and 5, got %d", c.ApprovalRetries)
	}
	if c.NotFoundWindow <= 0 {
		f.Add("toss_not_found_window", "must be positive, got %s", c.NotFoundWindow)
	}
	return f.Err()
}

// Connector is the Toss Payments connector. It is safe for concurrent
// use.
type Connector struct {
	cfg  Config
	base string
	auth string
	hc   *http.Client
}

// New returns a Connector; cfg must pass Validate. It sends nothing.
func New(cfg Config) (*Connector, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.URL == "" {
		cfg.URL = DefaultURL
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	return &Connector{cfg: cfg, base: strings.TrimRight(cfg.URL, "/"), hc: hc,
		auth: "Basic " + base64.StdEncoding.EncodeToString([]byte(cfg.SecretKey+":"))}, nil
}

// Name implements pay.Connector: "toss".
func (c *Connector) Name() string { return "toss" }

// Capabilities implements pay.Connector: idempotent approvals (a key is
// kept 15 days), inquiry by order id, full and partial refunds. A confirm
// both authorises and captures, so there is no manual capture nor void.
func (c *Connector) Capabilities() pay.Capabilities {
	return pay.Capabilities{IdempotentApproval: true, InquiryByOrder: true, Refund: true, PartialRefund: true}
}

// CheckCreate implements pay.ClientAuthorized: the payment key is
// required, the order id must be a Toss orderId and the currency KRW.
func (c *Connector) CheckCreate(orderID, currency, paymentKey string) error {
	var f stampede.Fields
	if !orderIDPattern.MatchString(orderID) {
		f.Add("order_id", "must be the orderId the Toss widget was opened with: 6 to 64 letters, digits, '-' or '_', got %q", orderID)
	}
	if currency != "KRW" {
		f.Add("currency", "must be KRW with the toss connector, got %q", currency)
	}
	switch {
	case paymentKey == "":
		f.Add("payment_key", "is required with the toss connector: the paymentKey Toss's widget sent to your success URL")
	case len(paymentKey) > MaxPaymentKeyLen || !utf8.ValidString(paymentKey) || strings.ContainsAny(paymentKey, " \t\r\n/?#%"):
		f.Add("payment_key", "must be a Toss paymentKey: at most %d characters, no space, '/', '?', '#' or '%%'", MaxPaymentKeyLen)
	}
	return f.Err()
}

// approvalKey and refundKey are the Idempotency-Keys sent to Toss.
func approvalKey(orderID string) string   { return "stampede-approval-" + orderID }
func refundKey(externalKey string) string { return "stampede-refund-" + externalKey }

// refundMark is what a cancel's reason ends with: how a refund is found
// again among the payment's cancels.
func refundMark(externalKey string) string { return "[stampede-refund:" + externalKey + "]" }

// cancelReason is the merchant's reason (or "refund") shortened so that
// the mark fits Toss's 200 characters.
func cancelReason(reason, externalKey string) string {
	mark := refundMark(externalKey)
	if reason == "" {
		reason = "refund"
	}
	room := maxCancelReasonLen - len(mark) - 1
	for len(reason) > room {
		_, size := utf8.DecodeLastRuneInString(reason)
		reason = reason[:len(reason)-size]
	}
	return reason + " " + mark
}

// payment is the part of Toss's Payment object the connector reads.
type payment struct {
	PaymentKey    string   `json:"paymentKey"`
	OrderID       string   `json:"orderId"`
	Status        string   `json:"status"`
	TotalAmount   int64    `json:"totalAmount"`
	BalanceAmount int64    `json:"balanceAmount"`
	Cancels       []cancel `json:"cancels"`
}

// cancel is one entry of a Payment's cancels.
type cancel struct {
	CancelAmount   int64  `json:"cancelAmount"`
	CancelReason   string `json:"cancelReason"`
	TransactionKey string `json:"transactionKey"`
	CancelStatus   string `json:"cancelStatus"`
}

// find returns the cancel of externalKey, if the payment has one.
func (p payment) find(externalKey string) (cancel, bool) {
	mark := refundMark(externalKey)
	for _, c := range p.Cancels {
		if strings.HasSuffix(c.CancelReason, mark) {
			return c, true
		}
	}
	return cancel{}, false
}

// tossError is Toss's error body, with the HTTP status it came with.
type tossError struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Error implements error.
func (e *tossError) Error() string {
	return fmt.Sprintf("toss: HTTP %d %s: %s", e.Status, e.Code, e.Message)
}

// errKind is what an answer means for the money.
type errKind int

const (
	unknown  errKind = iota // may have been processed
	declined                // processed: refused by the card, account or Toss
	rejected                // refused, nothing processed
)

// declineCodes are Toss's codes of a processed refusal: the card,
// account or payment refused the confirm or the cancel.
var declineCodes = []string{
	"REJECT_CARD_PAYMENT", "REJECT_CARD_COMPANY", "INVALID_REJECT_CARD", "REJECT_ACCOUNT_PAYMENT",
	"INVALID_STOPPED_CARD", "INVALID_CARD_EXPIRATION", "INVALID_CARD_LOST_OR_STOLEN", "INVALID_CARD_NUMBER",
	"EXCEED_MAX_DAILY_PAYMENT_COUNT", "EXCEED_MAX_PAYMENT_AMOUNT", "EXCEED_MAX_ONE_DAY_AMOUNT", "EXCEED_MAX_AUTH_COUNT",
	"NOT_AVAILABLE_PAYMENT", "RESTRICTED_TRANSFER_ACCOUNT", "INVALID_PASSWORD", "REJECT_TOSSPAY_INVALID_ACCOUNT",
	"NOT_CANCELABLE_AMOUNT", "NOT_CANCELABLE_PAYMENT", "ALREADY_CANCELED_PAYMENT", "ALREADY_REFUND_PAYMENT",
}

// unknownCodes are Toss's 4xx codes that do not say nothing happened:
// the key's first request is still processing, the payment was already
// processed (by which request?), or a temporary failure to try again.
var unknownCodes = []string{"IDEMPOTENT_REQUEST_PROCESSING", "ALREADY_PROCESSED_PAYMENT", "PROVIDER_ERROR"}

// classify reads an error answer.
func classify(e *tossError) errKind {
	switch {
	case e.Status >= 500 || e.Status == http.StatusTooManyRequests || slices.Contains(unknownCodes, e.Code):
		return unknown
	case slices.Contains(declineCodes, e.Code):
		return declined
	case e.Status >= 400:
		return rejected
	}
	return unknown
}

// errNotConnected marks a request that never reached a connection.
var errNotConnected = errors.New("toss: no connection was made")

// send makes one request and returns the answer's status and body; an
// error wraps errNotConnected when no connection was made (nothing was
// sent), and is a *tossError for a non-2xx answer.
func (c *Connector) send(ctx context.Context, method, path, idemKey string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("%w: %w", errNotConnected, err)
		}
		body = bytes.NewReader(b)
	}
	var connected atomic.Bool
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { connected.Store(true) }})
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return fmt.Errorf("%w: %w", errNotConnected, err)
	}
	req.Header.Set("Authorization", c.auth)
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if idemKey != "" {
		req.Header.Set("Idempotency-Key", idemKey)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if !connected.Load() {
			return fmt.Errorf("%w: %w", errNotConnected, err)
		}
		return fmt.Errorf("toss: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return fmt.Errorf("toss: reading the answer of %s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		te := &tossError{Status: resp.StatusCode}
		if json.Unmarshal(data, te) != nil || te.Code == "" {
			te.Code, te.Message = "UNREADABLE", fmt.Sprintf("%.200s", data)
		}
		return te
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("toss: the %d answer of %s %s is not a Payment: %w", resp.StatusCode, method, path, err)
	}
	return nil
}

// Approve implements pay.Institution: confirm the payment the buyer
// authorised in the widget.
func (c *Connector) Approve(ctx context.Context, req pay.ApprovalRequest) (pay.Verdict, error) {
	if err := c.CheckCreate(req.ExternalKey, req.Currency, req.PaymentKey); err != nil {
		return pay.Verdict{}, errors.Join(pay.ErrNotSent, err)
	}
	body := map[string]any{"paymentKey": req.PaymentKey, "orderId": req.ExternalKey, "amount": req.Amount}
	var last error
	sent := false
	for attempt := 0; attempt <= c.cfg.ApprovalRetries; attempt++ {
		if attempt > 0 && ctx.Err() != nil {
			break
		}
		var p payment
		err := c.send(ctx, http.MethodPost, "/v1/payments/confirm", approvalKey(req.ExternalKey), body, &p)
		if err == nil {
			return verdictOf(p)
		}
		if errors.Is(err, errNotConnected) && !sent {
			return pay.Verdict{}, errors.Join(pay.ErrNotSent, err)
		}
		sent = true
		if te, ok := errors.AsType[*tossError](err); ok {
			switch classify(te) {
			case declined:
				return pay.Verdict{Approved: false}, nil
			case rejected:
				return pay.Verdict{}, errors.Join(pay.ErrRejected, err)
			}
		}
		last = err // unknown: the same key again is safe
	}
	return pay.Verdict{}, errors.Join(pay.ErrOutcomeUnknown, last)
}

// settled reads a Payment's status: whether it is settled and approved.
func settled(status string) (done, approved bool) {
	switch status {
	case "DONE", "CANCELED", "PARTIAL_CANCELED":
		return true, true
	case "ABORTED", "EXPIRED":
		return true, false
	}
	return false, false // READY, IN_PROGRESS, WAITING_FOR_DEPOSIT
}

// verdictOf reads a confirm's answer.
func verdictOf(p payment) (pay.Verdict, error) {
	done, approved := settled(p.Status)
	if !done {
		return pay.Verdict{}, fmt.Errorf("%w: the payment is %s", pay.ErrOutcomeUnknown, p.Status)
	}
	return pay.Verdict{Approved: approved}, nil
}

// order asks for the payment of orderID: nil when Toss has none.
func (c *Connector) order(ctx context.Context, orderID string) (*payment, error) {
	var p payment
	err := c.send(ctx, http.MethodGet, "/v1/payments/orders/"+url.PathEscape(orderID), "", nil, &p)
	if te, ok := errors.AsType[*tossError](err); ok && te.Status == http.StatusNotFound && te.Code == "NOT_FOUND_PAYMENT" {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &p, nil
}

// Inquire implements pay.Institution: the payment of the order id.
func (c *Connector) Inquire(ctx context.Context, externalKey string) (pay.Inquiry, error) {
	p, err := c.order(ctx, externalKey)
	if err != nil {
		return pay.Inquiry{}, errors.Join(pay.ErrInquiryUnavailable, err)
	}
	if p == nil {
		return pay.Inquiry{Definitive: true, NotFoundWindow: c.cfg.NotFoundWindow}, nil
	}
	done, approved := settled(p.Status)
	if !done { // still in progress at Toss: ask again later
		return pay.Inquiry{NotFoundWindow: c.cfg.NotFoundWindow}, nil
	}
	return pay.Inquiry{Found: true, Approved: approved, Definitive: true}, nil
}

// Refund implements pay.Refunder: a cancel of req.Amount of the payment
// of order req.PaymentKey under the refund's own Idempotency-Key.
func (c *Connector) Refund(ctx context.Context, req pay.RefundRequest) (pay.RefundVerdict, error) {
	p, err := c.order(ctx, req.PaymentKey)
	switch {
	case err != nil: // nothing about the refund was sent yet
		return pay.RefundVerdict{}, errors.Join(pay.ErrNotSent, err)
	case p == nil:
		return pay.RefundVerdict{}, fmt.Errorf("%w: Toss has no payment of order %s", pay.ErrRejected, req.PaymentKey)
	}
	if cn, ok := p.find(req.ExternalKey); ok { // an earlier attempt went through
		return pay.RefundVerdict{Succeeded: cn.CancelStatus == "" || cn.CancelStatus == "DONE"}, nil
	}
	body := map[string]any{"cancelReason": cancelReason(req.Reason, req.ExternalKey), "cancelAmount": req.Amount}
	var after payment
	err = c.send(ctx, http.MethodPost, "/v1/payments/"+url.PathEscape(p.PaymentKey)+"/cancel", refundKey(req.ExternalKey), body, &after)
	if err == nil {
		cn, ok := after.find(req.ExternalKey)
		if !ok || (cn.CancelStatus != "" && cn.CancelStatus != "DONE") {
			return pay.RefundVerdict{}, fmt.Errorf("%w: the answer does not list the cancel as done", pay.ErrOutcomeUnknown)
		}
		return pay.RefundVerdict{Succeeded: true}, nil
	}
	if errors.Is(err, errNotConnected) {
		return pay.RefundVerdict{}, errors.Join(pay.ErrNotSent, err)
	}
	if te, ok := errors.AsType[*tossError](err); ok {
		switch classify(te) {
		case declined:
			return pay.RefundVerdict{Succeeded: false}, nil
		case rejected:
			return pay.RefundVerdict{}, errors.Join(pay.ErrRejected, err)
		}
	}
	return pay.RefundVerdict{}, errors.Join(pay.ErrOutcomeUnknown, err)
}

// InquireRefund implements pay.Refunder: the payment of order
// paymentKey, its cancels searched for the refund's mark.
func (c *Connector) InquireRefund(ctx context.Context, externalKey, paymentKey string) (pay.RefundInquiry, error) {
	p, err := c.order(ctx, paymentKey)
	if err != nil {
		return pay.RefundInquiry{}, errors.Join(pay.ErrInquiryUnavailable, err)
	}
	if p == nil {
		return pay.RefundInquiry{Definitive: true, NotFoundWindow: c.cfg.NotFoundWindow}, nil
	}
	cn, ok := p.find(externalKey)
	switch {
	case !ok:
		return pay.RefundInquiry{Definitive: true, NotFoundWindow: c.cfg.NotFoundWindow}, nil
	case cn.CancelStatus == "" || cn.CancelStatus == "DONE":
		return pay.RefundInquiry{Found: true, Succeeded: true, Definitive: true}, nil
	case cn.CancelStatus == "ABORTED" || cn.CancelStatus == "FAILED":
		return pay.RefundInquiry{Found: true, Definitive: true}, nil
	}
	return pay.RefundInquiry{NotFoundWindow: c.cfg.NotFoundWindow}, nil
}
