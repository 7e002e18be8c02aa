// Package client is the Go client of the waiting room's HTTP API (package
// waitroom/api): join, ticket and leave for tests and the lab, the online
// admission check and release for checkouts, and the two pieces a service
// needs to verify admission tokens with protocol.AdmissionVerifier: Keys
// (the room's JWKS, fetched and cached) and the Client itself as the
// online protocol.AdmissionChecker.
package client

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
	"time"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/internal/httpapi"
	"github.com/stampede-lab/stampede/protocol"
	"github.com/stampede-lab/stampede/waitroom"
)

// Config configures a Client.
type Config struct {
	// BaseURL is the waiting room's address, such as
	// "https://queue.example.com".
	BaseURL string
	// CheckoutKey authorizes Check and Done (the server's
	// --checkout-key); not needed for Join, Ticket and Leave.
	CheckoutKey string
	// AdminToken authorizes the room administration calls (Rooms,
	// RoomAdmin, PutRoom, PatchRoom, DeleteRoom): the server's
	// --admin-token.
	AdminToken string
	// Timeout bounds every call, retries none.
	Timeout time.Duration
	// HTTPClient sends the requests; nil means a new http.Client.
	HTTPClient *http.Client
}

// DefaultConfig returns a two-second timeout; BaseURL must be set.
func DefaultConfig() Config { return Config{Timeout: 2 * time.Second} }

// minKeyLen is the shortest checkout key the waiting room accepts.
const minKeyLen = 16

// Validate reports every unusable field by its snake_case name.
func (c Config) Validate() error {
	var f stampede.Fields
	if u, err := url.Parse(c.BaseURL); c.BaseURL == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		f.Add("base_url", "must be an http or https URL, got %q", c.BaseURL)
	}
	if c.Timeout <= 0 {
		f.Add("timeout", "must be positive, got %s", c.Timeout)
	}
	if c.CheckoutKey != "" && len(c.CheckoutKey) < minKeyLen {
		f.Add("checkout_key", "must be empty or at least %d bytes, got %d", minKeyLen, len(c.CheckoutKey))
	}
	if c.AdminToken != "" && len(c.AdminToken) < minKeyLen {
		f.Add("admin_token", "must be empty or at least %d bytes, got %d", minKeyLen, len(c.AdminToken))
	}
	return f.Err()
}

// Client calls a waiting room's HTTP API: the online admission check and
// release for checkouts, and join, ticket and leave for tests and the lab.
// Error answers are *stampede.Error values (httpapi.ReadProblem); a
// transport failure or timeout is returned as it is. Safe for concurrent
// use.
type Client struct {
	cfg  Config
	base string
	hc   *http.Client
}

// New returns a Client for cfg.
func New(cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{}
	}
	return &Client{cfg: cfg, base: strings.TrimSuffix(cfg.BaseURL, "/"), hc: hc}, nil
}

var _ protocol.AdmissionChecker = (*Client)(nil)

// CheckAdmission implements protocol.AdmissionChecker with Check: a
// service verifying admissions with protocol.AdmissionVerifier sets its
// Online to a Client made with the waiting room's checkout key. The
// waiting room's refusal of the token itself is Forbidden naming the
// admission header; any other failure (no answer, a 5xx, a checkout key
// the room refuses) is an error that is not a *stampede.Error, which the
// verifier answers as Unavailable: it is not the buyer's fault.
func (c *Client) CheckAdmission(ctx context.Context, room, token string) (protocol.AdmissionStatus, error) {
	a, err := c.Check(ctx, room, token)
	if err != nil {
		if e, ok := errors.AsType[*stampede.Error](err); ok && e.Field == "admission_token" && e.Class() != stampede.Unavailable {
			return protocol.AdmissionStatus{}, &stampede.Error{Code: stampede.Forbidden, Field: protocol.HeaderAdmission,
				Message: "the waiting room does not accept the admission token"}
		}
		return protocol.AdmissionStatus{}, fmt.Errorf("the waiting room's online check: %v", err)
	}
	return protocol.AdmissionStatus{Held: a.Held, Reason: a.Reason, User: a.UserID, ExpiresAt: a.ExpiresAt}, nil
}

// Failover is a protocol.AdmissionChecker over several instances of one
// waiting room (or its gates): each is asked in turn until one answers,
// and the first answer, or the token's refusal, is the result.
type Failover []*Client

var _ protocol.AdmissionChecker = Failover(nil)

// CheckAdmission implements protocol.AdmissionChecker.
func (f Failover) CheckAdmission(ctx context.Context, room, token string) (protocol.AdmissionStatus, error) {
	err := errors.New("no waiting room to ask")
	for _, c := range f {
		var st protocol.AdmissionStatus
		st, err = c.CheckAdmission(ctx, room, token)
		if _, refused := errors.AsType[*stampede.Error](err); err == nil || refused || ctx.Err() != nil {
			return st, err
		}
	}
	return protocol.AdmissionStatus{}, err
}

// Admission is the answer of Check and Done.
type Admission struct {
	// Held is true while the slot is held (always false after Done).
	Held bool `json:"held"`
	// Released is true when Done released the slot.
	Released bool `json:"released"`
	// Reason is "held" or why not: released, expired, superseded,
	// no_ticket, not_admitted, invalid_token, other_room.
	Reason string `json:"reason"`
	// UserID and Seq identify the admission (empty for an invalid token).
	UserID string `json:"user_id"`
	Seq    int64  `json:"seq"`
	// ExpiresAt is the lease's end while held.
	ExpiresAt time.Time `json:"expires_at"`
}

// TicketInfo is a ticket as the API shows it.
type TicketInfo struct {
	Room   string         `json:"room"`
	UserID string         `json:"user_id"`
	State  waitroom.State `json:"state"`
	// Position is the place in line, 1 for the next one admitted, and
	// Ahead the users before it; both nil unless waiting.
	Position *int64 `json:"position"`
	Ahead    *int64 `json:"ahead"`
	// ETASeconds is the expected wait's middle, ETALowSeconds and
	// ETAHighSeconds its range, ETABasis what it rests on (rate or
	// capacity); nil and empty without an estimate.
	ETASeconds     *float64               `json:"eta_seconds"`
	ETALowSeconds  *float64               `json:"eta_low_seconds"`
	ETAHighSeconds *float64               `json:"eta_high_seconds"`
	ETABasis       waitroom.EstimateBasis `json:"eta_basis"`
	PollAfterMS    int64                  `json:"poll_after_ms"`
	TicketToken    string                 `json:"ticket_token"`
	AdmissionToken string                 `json:"admission_token"`
	LeaseExpiresAt time.Time              `json:"lease_expires_at"`
}

// JoinRequest says who joins: all empty is an anonymous join; UserID with
// UserSig and UserExpires a trusted one (SignUser); TicketToken re-joins
// with a ticket already held.
type JoinRequest struct {
	UserID      string
	UserSig     string
	UserExpires time.Time
	TicketToken string
}

// Check asks whether admissionToken's slot in room is still held.
func (c *Client) Check(ctx context.Context, room, admissionToken string) (Admission, error) {
	var a Admission
	err := c.do(ctx, http.MethodPost, "/v1/rooms/"+url.PathEscape(room)+"/admissions/check", c.cfg.CheckoutKey,
		map[string]string{"admission_token": admissionToken}, &a)
	return a, err
}

// Done releases admissionToken's slot in room (the checkout is finished).
func (c *Client) Done(ctx context.Context, room, admissionToken string) (Admission, error) {
	var a Admission
	err := c.do(ctx, http.MethodPost, "/v1/rooms/"+url.PathEscape(room)+"/admissions/done", c.cfg.CheckoutKey,
		map[string]string{"admission_token": admissionToken}, &a)
	return a, err
}

// Join joins room as req says.
func (c *Client) Join(ctx context.Context, room string, req JoinRequest) (TicketInfo, error) {
	body := map[string]any{}
	if req.UserID != "" {
		body["user_id"] = req.UserID
	}
	if req.UserSig != "" {
		body["user_sig"] = req.UserSig
		body["user_expires"] = req.UserExpires.Unix()
	}
	var t TicketInfo
	err := c.do(ctx, http.MethodPost, "/v1/rooms/"+url.PathEscape(room)+"/tickets", req.TicketToken, body, &t)
	return t, err
}

// Ticket reads user's ticket in room with its ticket token.
func (c *Client) Ticket(ctx context.Context, room, user, ticketToken string) (TicketInfo, error) {
	var t TicketInfo
	err := c.do(ctx, http.MethodGet, "/v1/rooms/"+url.PathEscape(room)+"/tickets/"+url.PathEscape(user), ticketToken, nil, &t)
	return t, err
}

// Wait polls user's ticket in room until it is no longer waiting: each
// poll after the previous answer's poll_after_ms (which grows with the
// distance to the head of the line), each with the newest ticket token
// the answers handed out (a poll that reads the store hands out one that
// lets the next polls be answered without it). onPoll, if not nil, sees
// every answer. It returns the last answer, with the newest token, or the
// first error (ctx's included).
func (c *Client) Wait(ctx context.Context, room, user, ticketToken string, onPoll func(TicketInfo)) (TicketInfo, error) {
	t, err := c.Ticket(ctx, room, user, ticketToken)
	for {
		if err != nil {
			return t, err
		}
		if t.TicketToken == "" {
			t.TicketToken = ticketToken
		}
		ticketToken = t.TicketToken
		if onPoll != nil {
			onPoll(t)
		}
		if t.State != waitroom.StateWaiting {
			return t, nil
		}
		wait := time.NewTimer(max(time.Duration(t.PollAfterMS)*time.Millisecond, minWaitPoll))
		select {
		case <-ctx.Done():
			wait.Stop()
			return t, ctx.Err()
		case <-wait.C:
		}
		t, err = c.Ticket(ctx, room, user, ticketToken)
	}
}

// minWaitPoll is the shortest pause between two polls of Wait, whatever
// an answer says.
const minWaitPoll = 100 * time.Millisecond

// Leave leaves the queue or releases the slot of user's ticket in room.
func (c *Client) Leave(ctx context.Context, room, user, ticketToken string) (TicketInfo, error) {
	var t TicketInfo
	err := c.do(ctx, http.MethodDelete, "/v1/rooms/"+url.PathEscape(room)+"/tickets/"+url.PathEscape(user), ticketToken, nil, &t)
	return t, err
}

// Rooms lists every room with its configuration (GET /v1/rooms, admin
// token), as the server answers it.
func (c *Client) Rooms(ctx context.Context) (json.RawMessage, error) {
	var out json.RawMessage
	err := c.do(ctx, http.MethodGet, "/v1/rooms", c.cfg.AdminToken, nil, &out)
	return out, err
}

// RoomAdmin reads one room's counters and whole configuration (GET
// /v1/rooms/{room} with the admin token: the admin view).
func (c *Client) RoomAdmin(ctx context.Context, room string) (json.RawMessage, error) {
	var out json.RawMessage
	err := c.do(ctx, http.MethodGet, roomPath(room), c.cfg.AdminToken, nil, &out)
	return out, err
}

// AdmissionLog writes room's whole admission log to w, one entry a line
// (GET /v1/rooms/{room}/log, page by page), and returns how many entries
// it wrote.
func (c *Client) AdmissionLog(ctx context.Context, room string, w io.Writer) (int64, error) {
	var n int64
	from := int64(1)
	for {
		var page struct {
			Entries []string `json:"entries"`
			Next    *int64   `json:"next"`
		}
		if err := c.do(ctx, http.MethodGet, fmt.Sprintf("%s/log?from=%d", roomPath(room), from), c.cfg.AdminToken, nil, &page); err != nil {
			return n, err
		}
		for _, e := range page.Entries {
			if _, err := io.WriteString(w, e+"\n"); err != nil {
				return n, err
			}
			n++
		}
		if page.Next == nil || len(page.Entries) == 0 {
			return n, nil
		}
		from = *page.Next
	}
}

// PutRoom creates room, or replaces its whole configuration, with cfg
// (PUT /v1/rooms/{room}: capacity is required, every other field has a
// default). The server validates cfg and names each bad field.
func (c *Client) PutRoom(ctx context.Context, room string, cfg json.RawMessage) (json.RawMessage, error) {
	var out json.RawMessage
	err := c.do(ctx, http.MethodPut, roomPath(room), c.cfg.AdminToken, cfg, &out)
	return out, err
}

// PatchRoom changes the fields patch names (PATCH /v1/rooms/{room}, a JSON
// merge patch: an object member such as the template is merged).
func (c *Client) PatchRoom(ctx context.Context, room string, patch json.RawMessage) (json.RawMessage, error) {
	var out json.RawMessage
	err := c.do(ctx, http.MethodPatch, roomPath(room), c.cfg.AdminToken, patch, &out)
	return out, err
}

// DeleteRoom removes room and all its data (DELETE /v1/rooms/{room}).
func (c *Client) DeleteRoom(ctx context.Context, room string) error {
	var out json.RawMessage
	return c.do(ctx, http.MethodDelete, roomPath(room), c.cfg.AdminToken, nil, &out)
}

func roomPath(room string) string { return "/v1/rooms/" + url.PathEscape(room) }

// do sends one request with bearer (if any) and body (if any) as JSON and
// decodes a 2xx answer into out.
func (c *Client) do(ctx context.Context, method, path, bearer string, body, out any) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("waitroom client: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return httpapi.ReadProblem(resp)
	}
	if resp.StatusCode == http.StatusNoContent {
		return nil
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(out); err != nil {
		return fmt.Errorf("waitroom client: %s %s: decoding the answer: %w", method, path, err)
	}
	return nil
}
