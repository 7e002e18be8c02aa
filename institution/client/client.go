// Package client is the Go client of the institution simulator's HTTP
// API (institution/api). It classifies every failure the way a payment
// service must: ErrNotSent (the request never left, safe to report as
// failed), ErrUnknownOutcome (it may have been processed: settle by status
// inquiry, never by retrying), ErrInstitution (the institution answered an
// error and processed nothing), ErrRejected (our request was wrong) and
// ErrStatusUnavailable (the status inquiry cannot answer now). The payment
// service's adapter (pay/institutionclient) and the labs use it.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/institution"
	"github.com/stampede-lab/stampede/internal/httpapi"
)

// The errors of the Client. Each wraps the cause (a transport error, or an
// *Error carrying the code and HTTP status the institution answered), so
// errors.Is and errors.As see both.
var (
	// ErrUnknownOutcome: the request may have reached the institution and
	// been processed, but no answer said so — a timeout or a connection
	// lost after the connection was made, a 504, or an unreadable 200.
	// The money may have moved: settle by status inquiry, do not retry
	// the approval.
	ErrUnknownOutcome = errors.New("institution: outcome unknown, the request may have been processed")
	// ErrNotSent: the request never reached the institution (no
	// connection could be made: refused, DNS, dial timeout, the context
	// ended first, a malformed URL). Nothing was processed.
	ErrNotSent = errors.New("institution: request not sent")
	// ErrInstitution: the institution answered with an error status (5xx
	// other than 504: mode ERROR, busy, shutting down). The simulator
	// never records an approval it answers this way.
	ErrInstitution = errors.New("institution: the institution answered an error")
	// ErrRejected: the institution refused the request as wrong (4xx: an
	// invalid field, a conflicting repeat, a bad admin token). Nothing
	// was processed; sending it again will not help.
	ErrRejected = errors.New("institution: request rejected")
	// ErrStatusUnavailable: the status inquiry could not answer (503
	// status_api DOWN, or the institution could not be reached). It says
	// nothing about the approval: ask again later, never read it as not
	// found.
	ErrStatusUnavailable = errors.New("institution: status inquiry unavailable")
)

// Response size limits of the Client.
const (
	maxAnswer      = 1 << 20 // an approval, a status, a behaviour
	maxAdminAnswer = 1 << 30 // the arrival log and the ledger
	defaultTimeout = 30 * time.Second
)

// Client calls an institution simulator. It is safe for concurrent use.
type Client struct {
	base       string
	hc         *http.Client
	adminToken string
}

// NewClient returns a client for the institution at baseURL (for example
// "http://127.0.0.1:8090"). hc carries the timeout that turns a hang into
// ErrUnknownOutcome; contexts passed to the methods bound each call too.
// Nil hc means a client with a 30 s timeout on http.DefaultTransport.
func NewClient(baseURL string, hc *http.Client) *Client {
	if hc == nil {
		hc = &http.Client{Timeout: defaultTimeout}
	}
	return &Client{base: strings.TrimRight(baseURL, "/"), hc: hc}
}

// WithAdminToken returns a copy of c that sends token to the admin
// endpoints (Behavior, SetBehavior, Reset, Arrivals, Approvals).
func (c *Client) WithAdminToken(token string) *Client {
	cc := *c
	cc.adminToken = token
	return &cc
}

// Approve asks the institution to approve req. A DECLINED result is an
// answer, not an error. The errors are ErrUnknownOutcome (the money may
// have moved), ErrNotSent, ErrInstitution and ErrRejected, each wrapping
// its cause.
func (c *Client) Approve(ctx context.Context, req institution.ApproveRequest) (institution.ApprovalResult, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return institution.ApprovalResult{}, fmt.Errorf("%w: %w", ErrNotSent, err)
	}
	var connected atomic.Bool
	resp, err := c.send(ctx, http.MethodPost, "/v1/approvals", body, false, &connected)
	if err != nil {
		if !connected.Load() {
			return institution.ApprovalResult{}, fmt.Errorf("%w: %w", ErrNotSent, err)
		}
		return institution.ApprovalResult{}, fmt.Errorf("%w: %w", ErrUnknownOutcome, err)
	}
	data, err := readAll(resp, maxAnswer)
	if err != nil {
		return institution.ApprovalResult{}, fmt.Errorf("%w: reading the answer: %w", ErrUnknownOutcome, err)
	}
	switch {
	case resp.StatusCode == http.StatusOK:
		var res institution.ApprovalResult
		if err := json.Unmarshal(data, &res); err != nil {
			return institution.ApprovalResult{}, fmt.Errorf("%w: the 200 answer is not an approval result: %w", ErrUnknownOutcome, err)
		}
		if res.Status != institution.StatusApproved && res.Status != institution.StatusDeclined && res.Status != institution.StatusAuthorized {
			return institution.ApprovalResult{}, fmt.Errorf("%w: the 200 answer has status %q", ErrUnknownOutcome, res.Status)
		}
		return res, nil
	case resp.StatusCode == http.StatusGatewayTimeout:
		return institution.ApprovalResult{}, fmt.Errorf("%w: %w", ErrUnknownOutcome, answerError(resp, data))
	default:
		return institution.ApprovalResult{}, classify(resp, data, ErrUnknownOutcome)
	}
}

// StatusResult is the answer of a status inquiry.
type StatusResult struct {
	// Found is true when the institution has a record for the key.
	Found bool
	// Status is StatusApproved or StatusDeclined when Found.
	Status string
	// ApprovalID, Amount, Currency and Charges are the record's when
	// Found; Charges over 1 is a double charge.
	ApprovalID string
	Amount     int64
	Currency   string
	Charges    int
	// Definitive is true when the answer will not change: a record was
	// found, or no request for the key arrived at the institution within
	// its not-found window. A request still in the network has not
	// arrived, so the caller must also wait NotFoundWindow after it sent
	// its own request before turning "not found" into "failed".
	Definitive bool
	// NotFoundWindow is the window the institution declared; set when
	// not Found.
	NotFoundWindow time.Duration
	// LastAttemptAt is when the last request for the key arrived, if one
	// did and no record was made.
	LastAttemptAt time.Time
}

// Status asks the institution what it knows about externalKey. The errors
// are ErrStatusUnavailable (503, or no answer), ErrInstitution (another
// 5xx) and ErrRejected (a 4xx other than the not-found answer).
func (c *Client) Status(ctx context.Context, externalKey string) (StatusResult, error) {
	resp, err := c.send(ctx, http.MethodGet, "/v1/approvals/"+url.PathEscape(externalKey), nil, false, nil)
	if err != nil {
		return StatusResult{}, fmt.Errorf("%w: %w", ErrStatusUnavailable, err)
	}
	data, err := readAll(resp, maxAnswer)
	if err != nil {
		return StatusResult{}, fmt.Errorf("%w: reading the answer: %w", ErrStatusUnavailable, err)
	}
	switch resp.StatusCode {
	case http.StatusOK:
		var rec institution.Record
		if err := json.Unmarshal(data, &rec); err != nil || !knownStatus(rec.Status) {
			return StatusResult{}, fmt.Errorf("%w: the 200 answer is not a record: %.200s", ErrStatusUnavailable, data)
		}
		return StatusResult{Found: true, Status: rec.Status, ApprovalID: rec.ApprovalID, Amount: rec.Amount,
			Currency: rec.Currency, Charges: rec.Charges, Definitive: true}, nil
	case http.StatusNotFound:
		if res, ok := notFound(answerError(resp, data)); ok {
			return res, nil
		}
	case http.StatusServiceUnavailable:
		return StatusResult{}, fmt.Errorf("%w: %w", ErrStatusUnavailable, answerError(resp, data))
	}
	return StatusResult{}, classify(resp, data, ErrStatusUnavailable)
}

// Behavior returns the institution's current behaviour.
func (c *Client) Behavior(ctx context.Context) (institution.Behavior, error) {
	var b institution.Behavior
	return b, c.admin(ctx, http.MethodGet, "/admin/behavior", nil, &b)
}

// SetBehavior replaces the institution's behaviour with b (start from
// DefaultBehavior) and returns the behaviour now in force.
func (c *Client) SetBehavior(ctx context.Context, b institution.Behavior) (institution.Behavior, error) {
	body, err := json.Marshal(b)
	if err != nil {
		return institution.Behavior{}, err
	}
	var out institution.Behavior
	return out, c.admin(ctx, http.MethodPut, "/admin/behavior", body, &out)
}

// Reset clears the institution's ledger, arrivals and attempts, returns it
// to DefaultBehavior and releases every held request.
func (c *Client) Reset(ctx context.Context) (institution.ResetResult, error) {
	var out institution.ResetResult
	return out, c.admin(ctx, http.MethodPost, "/admin/reset", nil, &out)
}

// Arrivals returns every approval request the institution received since
// the last reset, in time order.
func (c *Client) Arrivals(ctx context.Context) (institution.ArrivalLog, error) {
	var out institution.ArrivalLog
	return out, c.admin(ctx, http.MethodGet, "/admin/arrivals", nil, &out)
}

// Approvals returns the institution's ledger: records, charges per key and
// totals.
func (c *Client) Approvals(ctx context.Context) (institution.Ledger, error) {
	var out institution.Ledger
	return out, c.admin(ctx, http.MethodGet, "/admin/approvals", nil, &out)
}

// admin calls an admin endpoint and decodes its 200 answer into out.
func (c *Client) admin(ctx context.Context, method, path string, body []byte, out any) error {
	resp, err := c.send(ctx, method, path, body, true, nil)
	if err != nil {
		return fmt.Errorf("institution: %s %s: %w", method, path, err)
	}
	data, err := readAll(resp, maxAdminAnswer)
	if err != nil {
		return fmt.Errorf("institution: %s %s: reading the answer: %w", method, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %w", method, path, classify(resp, data, ErrInstitution))
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("institution: %s %s: decoding the answer: %w", method, path, err)
	}
	return nil
}

// send makes one request. connected, if not nil, is set once the
// transport has a connection to the institution: before that, no byte of
// the request can have reached it.
func (c *Client) send(ctx context.Context, method, path string, body []byte, admin bool, connected *atomic.Bool) (*http.Response, error) {
	if connected != nil {
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
			GotConn: func(httptrace.GotConnInfo) { connected.Store(true) },
		})
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json, "+httpapi.ProblemContentType)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if admin {
		req.Header.Set("Authorization", "Bearer "+c.adminToken)
	}
	return c.hc.Do(req)
}

// readAll reads and closes the answer's body, at most limit bytes.
func readAll(resp *http.Response, limit int64) ([]byte, error) {
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err == nil && int64(len(data)) > limit {
		err = fmt.Errorf("the answer is over %d bytes", limit)
	}
	return data, err
}

// answerError makes an *Error from an error answer whose body was read
// into data: the problem's code, field, detail and extension members, or
// the start of a body that is not a problem (httpapi.ReadProblem).
func answerError(resp *http.Response, data []byte) *institution.Error {
	r := *resp
	r.Body = io.NopCloser(bytes.NewReader(data))
	return httpapi.ReadProblem(&r)
}

// maxWindowMS is the longest not-found window in milliseconds that a
// time.Duration holds.
const maxWindowMS = float64(math.MaxInt64 / int64(time.Millisecond))

// notFound reads the status inquiry's 404 problem: code not_found with
// the members "definitive" and "not_found_window_ms", and
// "last_attempt_at" when a request for the key arrived. ok is false for
// any other 404 (a wrong base URL, say).
func notFound(e *institution.Error) (res StatusResult, ok bool) {
	definitive, okD := e.Extra[institution.MemberDefinitive].(bool)
	window, okW := e.Extra[institution.MemberNotFoundWindow].(float64)
	if e.Code != stampede.NotFound || !okD || !okW || window < 0 || window > maxWindowMS || window != math.Trunc(window) {
		return StatusResult{}, false
	}
	res = StatusResult{Definitive: definitive, NotFoundWindow: time.Duration(window) * time.Millisecond}
	if last, isString := e.Extra[institution.MemberLastAttempt].(string); isString {
		t, err := time.Parse(time.RFC3339Nano, last)
		if err != nil {
			return StatusResult{}, false
		}
		res.LastAttemptAt = t
	}
	return res, true
}

// classify wraps an error answer in ErrRejected (4xx), ErrInstitution
// (5xx) or otherwise.
func classify(resp *http.Response, data []byte, otherwise error) error {
	e := answerError(resp, data)
	switch {
	case resp.StatusCode >= 400 && resp.StatusCode < 500:
		return fmt.Errorf("%w: %w", ErrRejected, e)
	case resp.StatusCode >= 500:
		return fmt.Errorf("%w: %w", ErrInstitution, e)
	default:
		return fmt.Errorf("%w: %w", otherwise, e)
	}
}

// Refund asks the institution to refund req. A DECLINED result is an
// answer, not an error. The errors are Approve's: ErrUnknownOutcome (the
// money may have moved back: settle by RefundStatus, never by sending it
// again), ErrNotSent, ErrInstitution and ErrRejected.
func (c *Client) Refund(ctx context.Context, req institution.RefundRequest) (institution.RefundResult, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return institution.RefundResult{}, fmt.Errorf("%w: %w", ErrNotSent, err)
	}
	var connected atomic.Bool
	resp, err := c.send(ctx, http.MethodPost, "/v1/refunds", body, false, &connected)
	if err != nil {
		if !connected.Load() {
			return institution.RefundResult{}, fmt.Errorf("%w: %w", ErrNotSent, err)
		}
		return institution.RefundResult{}, fmt.Errorf("%w: %w", ErrUnknownOutcome, err)
	}
	data, err := readAll(resp, maxAnswer)
	if err != nil {
		return institution.RefundResult{}, fmt.Errorf("%w: reading the answer: %w", ErrUnknownOutcome, err)
	}
	switch {
	case resp.StatusCode == http.StatusOK:
		var res institution.RefundResult
		if err := json.Unmarshal(data, &res); err != nil ||
			(res.Status != institution.RefundSucceeded && res.Status != institution.RefundDeclined) {
			return institution.RefundResult{}, fmt.Errorf("%w: the 200 answer is not a refund result: %.200s", ErrUnknownOutcome, data)
		}
		return res, nil
	case resp.StatusCode == http.StatusGatewayTimeout:
		return institution.RefundResult{}, fmt.Errorf("%w: %w", ErrUnknownOutcome, answerError(resp, data))
	default:
		return institution.RefundResult{}, classify(resp, data, ErrUnknownOutcome)
	}
}

// RefundStatus asks the institution what it knows about a refund's
// externalKey; the answer and the errors are Status's, with Status
// SUCCEEDED or DECLINED when Found and Charges the times it refunded.
func (c *Client) RefundStatus(ctx context.Context, externalKey string) (StatusResult, error) {
	resp, err := c.send(ctx, http.MethodGet, "/v1/refunds/"+url.PathEscape(externalKey), nil, false, nil)
	if err != nil {
		return StatusResult{}, fmt.Errorf("%w: %w", ErrStatusUnavailable, err)
	}
	data, err := readAll(resp, maxAnswer)
	if err != nil {
		return StatusResult{}, fmt.Errorf("%w: reading the answer: %w", ErrStatusUnavailable, err)
	}
	switch resp.StatusCode {
	case http.StatusOK:
		var rec institution.RefundRecord
		if err := json.Unmarshal(data, &rec); err != nil || (rec.Status != institution.RefundSucceeded && rec.Status != institution.RefundDeclined) {
			return StatusResult{}, fmt.Errorf("%w: the 200 answer is not a refund record: %.200s", ErrStatusUnavailable, data)
		}
		return StatusResult{Found: true, Status: rec.Status, Amount: rec.Amount, Charges: rec.Refunds, Definitive: true}, nil
	case http.StatusNotFound:
		if res, ok := notFound(answerError(resp, data)); ok {
			return res, nil
		}
	case http.StatusServiceUnavailable:
		return StatusResult{}, fmt.Errorf("%w: %w", ErrStatusUnavailable, answerError(resp, data))
	}
	return StatusResult{}, classify(resp, data, ErrStatusUnavailable)
}

// Refunds returns the institution's refund ledger (admin token).
func (c *Client) Refunds(ctx context.Context) (institution.RefundLedger, error) {
	var l institution.RefundLedger
	return l, c.admin(ctx, http.MethodGet, "/admin/refunds", nil, &l)
}

// knownStatus reports whether st is an approval record's status.
func knownStatus(st string) bool {
	switch st {
	case institution.StatusApproved, institution.StatusDeclined, institution.StatusAuthorized, institution.StatusVoided:
		return true
	}
	return false
}

// operationPath is the path of an operation kind's requests.
func operationPath(kind string) string {
	if kind == institution.OpVoid {
		return "/v1/voids"
	}
	return "/v1/captures"
}

// Operate asks the institution to capture or void (req.Kind) an
// authorisation. A DECLINED result is an answer, not an error; the
// errors are Refund's.
func (c *Client) Operate(ctx context.Context, req institution.OperationRequest) (institution.OperationResult, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return institution.OperationResult{}, fmt.Errorf("%w: %w", ErrNotSent, err)
	}
	var connected atomic.Bool
	resp, err := c.send(ctx, http.MethodPost, operationPath(req.Kind), body, false, &connected)
	if err != nil {
		if !connected.Load() {
			return institution.OperationResult{}, fmt.Errorf("%w: %w", ErrNotSent, err)
		}
		return institution.OperationResult{}, fmt.Errorf("%w: %w", ErrUnknownOutcome, err)
	}
	data, err := readAll(resp, maxAnswer)
	if err != nil {
		return institution.OperationResult{}, fmt.Errorf("%w: reading the answer: %w", ErrUnknownOutcome, err)
	}
	switch {
	case resp.StatusCode == http.StatusOK:
		var res institution.OperationResult
		if err := json.Unmarshal(data, &res); err != nil ||
			(res.Status != institution.OpSucceeded && res.Status != institution.OpDeclined) {
			return institution.OperationResult{}, fmt.Errorf("%w: the 200 answer is not an operation result: %.200s", ErrUnknownOutcome, data)
		}
		return res, nil
	case resp.StatusCode == http.StatusGatewayTimeout:
		return institution.OperationResult{}, fmt.Errorf("%w: %w", ErrUnknownOutcome, answerError(resp, data))
	default:
		return institution.OperationResult{}, classify(resp, data, ErrUnknownOutcome)
	}
}

// OperationStatus asks the institution what it knows about a capture's
// or void's externalKey; the answer and the errors are RefundStatus's,
// with Status SUCCEEDED or DECLINED when Found.
func (c *Client) OperationStatus(ctx context.Context, kind, externalKey string) (StatusResult, error) {
	resp, err := c.send(ctx, http.MethodGet, operationPath(kind)+"/"+url.PathEscape(externalKey), nil, false, nil)
	if err != nil {
		return StatusResult{}, fmt.Errorf("%w: %w", ErrStatusUnavailable, err)
	}
	data, err := readAll(resp, maxAnswer)
	if err != nil {
		return StatusResult{}, fmt.Errorf("%w: reading the answer: %w", ErrStatusUnavailable, err)
	}
	switch resp.StatusCode {
	case http.StatusOK:
		var rec institution.OperationRecord
		if err := json.Unmarshal(data, &rec); err != nil || (rec.Status != institution.OpSucceeded && rec.Status != institution.OpDeclined) {
			return StatusResult{}, fmt.Errorf("%w: the 200 answer is not an operation record: %.200s", ErrStatusUnavailable, data)
		}
		return StatusResult{Found: true, Status: rec.Status, Amount: rec.Amount, Charges: rec.Applied, Definitive: true}, nil
	case http.StatusNotFound:
		if res, ok := notFound(answerError(resp, data)); ok {
			return res, nil
		}
	case http.StatusServiceUnavailable:
		return StatusResult{}, fmt.Errorf("%w: %w", ErrStatusUnavailable, answerError(resp, data))
	}
	return StatusResult{}, classify(resp, data, ErrStatusUnavailable)
}

// Operations returns the institution's captures and voids (admin token).
func (c *Client) Operations(ctx context.Context) ([]institution.OperationRecord, error) {
	var out []institution.OperationRecord
	return out, c.admin(ctx, http.MethodGet, "/admin/operations", nil, &out)
}
