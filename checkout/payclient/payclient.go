// Package payclient is checkout's Payer over pay's HTTP API: POST
// /v1/payments and GET /v1/payments/{id}, authenticated with a merchant's
// API key ("Authorization: Bearer <key>"), the order's idempotency key as
// Idempotency-Key and the buyer's admission as Stampede-Admission.
package payclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/checkout"
	"github.com/stampede-lab/stampede/internal/httpapi"
	"github.com/stampede-lab/stampede/pay"
	"github.com/stampede-lab/stampede/protocol"
)

var _ checkout.Payer = (*Client)(nil)

// Client is a checkout.Payer talking to pay.
type Client struct {
	base string
	key  string
	hc   *http.Client
}

// New returns a Client for pay at baseURL (such as
// http://127.0.0.1:8081) with a merchant's API key; hc nil means
// http.DefaultClient. Callers bound each call with its context.
func New(baseURL, apiKey string, hc *http.Client) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, stampede.InvalidField("pay", "must be an http(s) base URL, got %q", baseURL)
	}
	if apiKey == "" {
		return nil, stampede.InvalidField("pay_key", "is required: a merchant API key of pay")
	}
	if hc == nil {
		hc = http.DefaultClient
	}
	return &Client{base: strings.TrimRight(baseURL, "/"), key: apiKey, hc: hc}, nil
}

// paymentJSON is the part of pay's payment answer the checkout reads.
type paymentJSON struct {
	ID     string     `json:"id"`
	Status pay.Status `json:"status"`
}

// Pay implements checkout.Payer. A 201 or 202 answer is the payment; a
// 409 order_exists is resolved by reading the payment it names; another
// 409 (the same key in flight) and any 5xx or transport failure are
// errors with an unknown outcome; every other 4xx is a
// *checkout.RejectedError.
func (c *Client) Pay(ctx context.Context, req checkout.PaymentRequest) (checkout.Payment, error) {
	m := map[string]any{"order_id": req.OrderID, "amount": req.Amount, "currency": req.Currency}
	if req.Manual {
		m["capture"] = "manual"
	}
	body, err := json.Marshal(m)
	if err != nil {
		return checkout.Payment{}, err
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/v1/payments", bytes.NewReader(body))
	if err != nil {
		return checkout.Payment{}, err
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Idempotency-Key", req.IdempotencyKey)
	if req.Admission != "" {
		hr.Header.Set(protocol.HeaderAdmission, req.Admission)
	}
	p, err := c.do(hr, true)
	if e, ok := errors.AsType[*stampede.Error](err); ok && e.Code == pay.CodeOrderExists {
		if id, _ := e.Extra["payment_id"].(string); id != "" {
			return c.Payment(ctx, id)
		}
	}
	return p, err
}

// Payment implements checkout.Payer; every failure is an error with an
// unknown outcome.
func (c *Client) Payment(ctx context.Context, id string) (checkout.Payment, error) {
	hr, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/v1/payments/"+url.PathEscape(id), nil)
	if err != nil {
		return checkout.Payment{}, err
	}
	return c.do(hr, false)
}

// PaymentOfOrder implements checkout.Payer: pay's GET
// /v1/payments?order_id= (one payment per order and merchant); every
// failure is an error.
func (c *Client) PaymentOfOrder(ctx context.Context, orderID string) (checkout.Payment, bool, error) {
	hr, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/v1/payments?limit=1&order_id="+url.QueryEscape(orderID), nil)
	if err != nil {
		return checkout.Payment{}, false, err
	}
	hr.Header.Set("Authorization", "Bearer "+c.key)
	hr.Header.Set("Accept", "application/json")
	resp, err := c.hc.Do(hr)
	if err != nil {
		return checkout.Payment{}, false, fmt.Errorf("pay: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return checkout.Payment{}, false, fmt.Errorf("pay: %w", httpapi.ReadProblem(resp))
	}
	var page struct {
		Payments []paymentJSON `json:"payments"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&page); err != nil {
		return checkout.Payment{}, false, fmt.Errorf("pay: reading the payments: %w", err)
	}
	if len(page.Payments) == 0 {
		return checkout.Payment{}, false, nil
	}
	p := page.Payments[0]
	if p.ID == "" || !p.Status.Valid() {
		return checkout.Payment{}, false, errors.New("pay: a listed payment without an id and status")
	}
	return checkout.Payment{ID: p.ID, Status: p.Status}, true, nil
}

// do sends hr with the API key and reads a payment or classifies the
// error. Only a create (create) can be rejected: a read that fails says
// nothing about the payment's outcome.
func (c *Client) do(hr *http.Request, create bool) (checkout.Payment, error) {
	hr.Header.Set("Authorization", "Bearer "+c.key)
	hr.Header.Set("Accept", "application/json")
	resp, err := c.hc.Do(hr)
	if err != nil {
		return checkout.Payment{}, fmt.Errorf("pay: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusCreated || resp.StatusCode == http.StatusAccepted {
		var p paymentJSON
		if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&p); err != nil {
			return checkout.Payment{}, fmt.Errorf("pay: reading the payment: %w", err)
		}
		if p.ID == "" || !p.Status.Valid() {
			return checkout.Payment{}, fmt.Errorf("pay: answer %d without a payment id and status", resp.StatusCode)
		}
		return checkout.Payment{ID: p.ID, Status: p.Status}, nil
	}
	e := httpapi.ReadProblem(resp)
	if create && resp.StatusCode >= 400 && resp.StatusCode < 500 && resp.StatusCode != http.StatusConflict &&
		resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusRequestTimeout {
		return checkout.Payment{}, &checkout.RejectedError{Code: string(e.Code), Status: resp.StatusCode, Message: e.Message}
	}
	return checkout.Payment{}, fmt.Errorf("pay: %w", e)
}

// Capture implements checkout.Payer: POST /v1/payments/{id}/capture
// under key. A 201 or 202 answer is the capture's status; a 4xx other
// than 408, 429 and a 409 conflict (the same key in flight) is a
// *checkout.RejectedError (nothing was captured by this request); any
// other failure an error with an unknown outcome.
func (c *Client) Capture(ctx context.Context, paymentID, key string) (checkout.OperationStatus, error) {
	var op struct {
		Status checkout.OperationStatus `json:"status"`
	}
	if err := c.post(ctx, "/v1/payments/"+url.PathEscape(paymentID)+"/capture", key, []byte(`{}`), &op); err != nil {
		return "", err
	}
	if op.Status == "" {
		return "", errors.New("pay: a capture answer without a status")
	}
	return op.Status, nil
}

// Confirm implements checkout.Payer: POST /v1/payments/{id}/confirm;
// errors as Capture's.
func (c *Client) Confirm(ctx context.Context, paymentID string) error {
	return c.post(ctx, "/v1/payments/"+url.PathEscape(paymentID)+"/confirm", "", nil, nil)
}

// Cancel implements checkout.Payer: POST /v1/payments/{id}/cancel under
// key; errors as Capture's.
func (c *Client) Cancel(ctx context.Context, paymentID, key string) error {
	return c.post(ctx, "/v1/payments/"+url.PathEscape(paymentID)+"/cancel", key, nil, nil)
}

// post sends a POST of body (none when nil) under key ("" for none) and
// decodes a 2xx answer into out (when not nil); a refusal is a
// *checkout.RejectedError.
func (c *Client) post(ctx context.Context, path, key string, body []byte, out any) error {
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	if body != nil {
		hr.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		hr.Header.Set("Idempotency-Key", key)
	}
	hr.Header.Set("Authorization", "Bearer "+c.key)
	hr.Header.Set("Accept", "application/json")
	resp, err := c.hc.Do(hr)
	if err != nil {
		return fmt.Errorf("pay: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		if out == nil {
			return nil
		}
		if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(out); err != nil {
			return fmt.Errorf("pay: reading the answer: %w", err)
		}
		return nil
	}
	e := httpapi.ReadProblem(resp)
	if resp.StatusCode >= 400 && resp.StatusCode < 500 && resp.StatusCode != http.StatusTooManyRequests &&
		resp.StatusCode != http.StatusRequestTimeout && !(resp.StatusCode == http.StatusConflict && e.Code == pay.CodeConflict) {
		return &checkout.RejectedError{Code: string(e.Code), Status: resp.StatusCode, Message: e.Message}
	}
	return fmt.Errorf("pay: %w", e)
}
