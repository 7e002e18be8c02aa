package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/institution"
	"github.com/stampede-lab/stampede/internal/httpapi"
)

// The Toss protocol (Config.Protocol "toss") serves this subset of Toss
// Payments' v1 API over the simulator:
//
//	POST /v1/payments/confirm              {"paymentKey","orderId","amount"}, Idempotency-Key optional
//	GET  /v1/payments/orders/{orderId}     the Payment, its cancels included
//	POST /v1/payments/{paymentKey}/cancel  {"cancelReason","cancelAmount" (optional: the balance)},
//	                                       Idempotency-Key required
//
// Every request needs "Authorization: Basic base64(<secret key>:)";
// errors are Toss's {"code","message"} bodies. The simulator's ledger is
// keyed by orderId: a confirm is an approval of external key orderId in
// KRW, a cancel a refund of that approval whose external key is the
// cancel's Idempotency-Key. The fault modes act as in the simulator's own
// protocol, answered as Toss would: DECLINE is 403 REJECT_CARD_PAYMENT
// (a cancel: 403 NOT_CANCELABLE_PAYMENT, recorded as declined); ERROR is
// 500 FAILED_INTERNAL_SYSTEM_PROCESSING; a hang ends in 504
// GATEWAY_TIMEOUT (when the caller has not left); busy and shutting down
// are 503 SERVICE_UNAVAILABLE; status_api DOWN makes the order inquiry
// answer 500 FAILED_INTERNAL_SYSTEM_PROCESSING. With idempotent on (the
// default) a repeated confirm of an orderId, or a repeated cancel
// Idempotency-Key, is answered with its first result and charges or
// refunds nothing; off, each repeat that reaches processing charges again.
//
// The simulator plays the buyer's widget too: any well-formed paymentKey
// is an authenticated payment for the orderId it is first confirmed with.

// The Toss protocol's limits (Toss documents orderId as 6 to 64 letters,
// digits, '-' and '_', paymentKey up to 200 characters, cancelReason up to
// 200 characters, an Idempotency-Key up to 300).
const (
	maxTossPaymentKey   = 200
	maxTossCancelReason = 200
)

var tossOrderIDPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{6,64}$`)

// kst is the offset of the times Toss writes (+09:00).
var kst = time.FixedZone("KST", 9*60*60)

// tossState binds payment keys to order ids: the part of a Toss payment
// the simulator's domain does not keep.
type tossState struct {
	keyHash [sha256.Size]byte // of the expected Basic credentials

	mu      sync.Mutex
	orderOf map[string]string // paymentKey → orderId
	keyOf   map[string]string // orderId → paymentKey
}

// tossError is Toss's error body.
type tossError struct {
	status  int
	Code    string `json:"code"`
	Message string `json:"message"`
}

// tossPayment is the subset of Toss's Payment object the simulator
// answers.
type tossPayment struct {
	MID                string       `json:"mId"`
	Version            string       `json:"version"`
	PaymentKey         string       `json:"paymentKey"`
	OrderID            string       `json:"orderId"`
	LastTransactionKey string       `json:"lastTransactionKey,omitempty"`
	Status             string       `json:"status"`
	Method             string       `json:"method"`
	Currency           string       `json:"currency"`
	TotalAmount        int64        `json:"totalAmount"`
	BalanceAmount      int64        `json:"balanceAmount"`
	RequestedAt        string       `json:"requestedAt"`
	ApprovedAt         *string      `json:"approvedAt"`
	Cancels            []tossCancel `json:"cancels"`
	Failure            *tossError   `json:"failure"`
}

// tossCancel is one entry of a Payment's cancels.
type tossCancel struct {
	CancelAmount   int64  `json:"cancelAmount"`
	CancelReason   string `json:"cancelReason"`
	CanceledAt     string `json:"canceledAt"`
	TransactionKey string `json:"transactionKey"`
	CancelStatus   string `json:"cancelStatus"`
}

// handleToss registers the Toss protocol's routes. The order inquiry and
// the cancel share one pattern: Go's mux would find
// /v1/payments/orders/{orderId} and /v1/payments/{paymentKey}/cancel
// ambiguous.
func (s *Server) handleToss(a *httpapi.API) {
	s.toss = &tossState{keyHash: sha256.Sum256([]byte(s.cfg.TossSecretKey + ":")),
		orderOf: map[string]string{}, keyOf: map[string]string{}}
	a.Handle("/v1/payments/confirm", httpapi.Methods{http.MethodPost: s.tossHandler(s.tossConfirm)})
	a.Handle("/v1/payments/{first}/{second}", httpapi.Methods{
		http.MethodGet: s.tossHandler(func(_ http.ResponseWriter, r *http.Request) (any, error) {
			if r.PathValue("first") != "orders" {
				return nil, &tossError{status: http.StatusNotFound, Code: "NOT_FOUND", Message: "no such resource"}
			}
			return s.tossOrder(r.PathValue("second"))
		}),
		http.MethodPost: s.tossHandler(func(w http.ResponseWriter, r *http.Request) (any, error) {
			if r.PathValue("second") != "cancel" {
				return nil, &tossError{status: http.StatusNotFound, Code: "NOT_FOUND", Message: "no such resource"}
			}
			return s.tossCancel(w, r, r.PathValue("first"))
		}),
	})
}

// validateTossSecretKey checks the Toss protocol's secret key.
func validateTossSecretKey(key string) error {
	switch {
	case key == "":
		return stampede.InvalidField("toss_secret_key", "is required with protocol toss: the secret key clients authenticate with")
	case !strings.HasPrefix(key, "test_sk_") && !strings.HasPrefix(key, "live_sk_"):
		return stampede.InvalidField("toss_secret_key", "must start with test_sk_ or live_sk_, as a Toss Payments secret key does")
	case strings.ContainsAny(key, " \t\r\n:"):
		return stampede.InvalidField("toss_secret_key", "must not contain white space or ':'")
	}
	return nil
}

// Error implements error.
func (e *tossError) Error() string { return e.Code + ": " + e.Message }

// tossHandler runs fn after the Basic authentication and writes its
// answer, or its error as Toss's error body.
func (s *Server) tossHandler(fn func(http.ResponseWriter, *http.Request) (any, error)) httpapi.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		var out any
		err := s.tossAuth(r)
		if err == nil {
			out, err = fn(w, r)
		}
		if err != nil {
			te := tossErrorOf(err)
			httpapi.WriteJSON(w, te.status, te)
			return nil
		}
		httpapi.WriteJSON(w, http.StatusOK, out)
		return nil
	}
}

// tossAuth checks "Authorization: Basic base64(<secret key>:)" in
// constant time.
func (s *Server) tossAuth(r *http.Request) error {
	scheme, cred, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred))
	got := sha256.Sum256(raw)
	if !strings.EqualFold(scheme, "Basic") || err != nil || subtle.ConstantTimeCompare(got[:], s.toss.keyHash[:]) != 1 {
		return &tossError{status: http.StatusUnauthorized, Code: "UNAUTHORIZED_KEY", Message: "the secret key is missing or not valid (Authorization: Basic base64(secretKey + \":\"))"}
	}
	return nil
}

// tossErrorOf renders an error of the simulator as Toss answers.
func tossErrorOf(err error) *tossError {
	if te, ok := errors.AsType[*tossError](err); ok {
		return te
	}
	e := stampede.As(err)
	switch stampede.ClassOf(e) {
	case stampede.Invalid, stampede.TooLarge, stampede.Unsupported:
		return &tossError{status: http.StatusBadRequest, Code: "INVALID_REQUEST", Message: e.Message}
	case stampede.Timeout:
		return &tossError{status: http.StatusGatewayTimeout, Code: "GATEWAY_TIMEOUT", Message: e.Message}
	case stampede.Unavailable:
		if e.Code == institution.CodeStatusDown {
			return &tossError{status: http.StatusInternalServerError, Code: "FAILED_INTERNAL_SYSTEM_PROCESSING", Message: e.Message}
		}
		return &tossError{status: http.StatusServiceUnavailable, Code: "SERVICE_UNAVAILABLE", Message: e.Message}
	case stampede.Conflict:
		switch e.Field {
		case "approval_key":
			return &tossError{status: http.StatusForbidden, Code: "NOT_CANCELABLE_PAYMENT", Message: e.Message}
		case "amount":
			return &tossError{status: http.StatusForbidden, Code: "NOT_CANCELABLE_AMOUNT", Message: e.Message}
		}
		return &tossError{status: http.StatusBadRequest, Code: "ALREADY_PROCESSED_PAYMENT", Message: e.Message}
	}
	return &tossError{status: http.StatusInternalServerError, Code: "FAILED_INTERNAL_SYSTEM_PROCESSING", Message: e.Message}
}

// idempotencyKey reads the Idempotency-Key header: at most
// institution.MaxExternalKeyLen bytes the simulator's keys allow.
func idempotencyKey(r *http.Request) (string, error) {
	k := r.Header.Get("Idempotency-Key")
	if k == "" {
		return "", nil
	}
	if err := institution.ValidateExternalKey(k); err != nil {
		return "", &tossError{status: http.StatusBadRequest, Code: "INVALID_REQUEST", Message: "Idempotency-Key " + stampede.As(err).Message}
	}
	return k, nil
}

// tossConfirm serves POST /v1/payments/confirm: an approval of external
// key orderId in KRW.
func (s *Server) tossConfirm(w http.ResponseWriter, r *http.Request) (any, error) {
	a := institution.Attempt{At: s.Now(), Path: r.URL.Path}
	var body struct {
		PaymentKey *string `json:"paymentKey"`
		OrderID    *string `json:"orderId"`
		Amount     *int64  `json:"amount"`
	}
	a.Invalid = s.decodeJSON(w, r, &body, `"paymentKey", "orderId", "amount"`)
	if body.OrderID != nil {
		a.Request.ExternalKey = *body.OrderID
	}
	if a.Invalid == nil {
		a.Invalid = validateConfirm(body.PaymentKey, body.OrderID, body.Amount)
	}
	if a.Invalid == nil {
		if _, err := idempotencyKey(r); err != nil {
			a.Invalid = err
		}
	}
	if a.Invalid == nil {
		a.Request.Amount, a.Request.Currency = *body.Amount, "KRW"
		a.Invalid = s.toss.bind(*body.PaymentKey, *body.OrderID)
	}
	res, err := s.Approve(r.Context(), a)
	if err != nil {
		return nil, err
	}
	if res.Status != institution.StatusApproved {
		return nil, &tossError{status: http.StatusForbidden, Code: "REJECT_CARD_PAYMENT", Message: "the card was declined (limit exceeded or insufficient balance) (mode DECLINE)"}
	}
	if rec, refunds, ok := s.Approval(*body.OrderID); ok {
		return s.toss.payment(rec, refunds), nil
	}
	return nil, &tossError{status: http.StatusInternalServerError, Code: "FAILED_INTERNAL_SYSTEM_PROCESSING", Message: "the approval's record is gone (a reset)"}
}

// validateConfirm checks a confirm's body, naming the first field wrong.
func validateConfirm(paymentKey, orderID *string, amount *int64) error {
	switch {
	case paymentKey == nil || *paymentKey == "" || len(*paymentKey) > maxTossPaymentKey:
		return &tossError{status: http.StatusBadRequest, Code: "INVALID_REQUEST", Message: "paymentKey is required, at most 200 characters"}
	case orderID == nil || !tossOrderIDPattern.MatchString(*orderID):
		return &tossError{status: http.StatusBadRequest, Code: "INVALID_REQUEST", Message: "orderId is required: 6 to 64 letters, digits, '-' or '_'"}
	case amount == nil || *amount < 1 || *amount > institution.MaxAmount:
		return &tossError{status: http.StatusBadRequest, Code: "INVALID_REQUEST", Message: "amount is required: a positive whole number of won"}
	}
	return nil
}

// bind ties paymentKey to orderID, or refuses a paymentKey already tied
// to another order (or an order already confirmed with another key).
func (t *tossState) bind(paymentKey, orderID string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	o, hasOrder := t.orderOf[paymentKey]
	k, hasKey := t.keyOf[orderID]
	if (hasOrder && o != orderID) || (hasKey && k != paymentKey) {
		return &tossError{status: http.StatusBadRequest, Code: "INVALID_REQUEST", Message: "the paymentKey and orderId do not belong to one payment"}
	}
	t.orderOf[paymentKey], t.keyOf[orderID] = orderID, paymentKey
	return nil
}

// payment renders an approval's record and refunds as Toss's Payment.
func (t *tossState) payment(rec institution.Record, refunds []institution.RefundRecord) tossPayment {
	t.mu.Lock()
	key := t.keyOf[rec.ExternalKey]
	t.mu.Unlock()
	p := tossPayment{MID: "stampede-sim", Version: "2022-11-16", PaymentKey: key, OrderID: rec.ExternalKey,
		Method: "카드", Currency: rec.Currency, TotalAmount: rec.Amount, BalanceAmount: rec.Amount, Cancels: []tossCancel{}}
	if rec.Status != institution.StatusApproved {
		p.Status, p.RequestedAt = "ABORTED", rec.DeclinedAt.In(kst).Format(time.RFC3339)
		p.Failure = &tossError{Code: "REJECT_CARD_PAYMENT", Message: "the card was declined"}
		return p
	}
	at := rec.ApprovedAt.In(kst).Format(time.RFC3339)
	p.Status, p.RequestedAt, p.ApprovedAt, p.LastTransactionKey = "DONE", at, &at, transactionKey(rec.ApprovalID)
	for _, r := range refunds {
		if r.Status != institution.RefundSucceeded {
			continue
		}
		p.BalanceAmount -= r.Amount
		p.LastTransactionKey = transactionKey(r.ExternalKey)
		p.Cancels = append(p.Cancels, tossCancel{CancelAmount: r.Amount, CancelReason: r.Reason,
			CanceledAt: r.RefundedAt.In(kst).Format(time.RFC3339), TransactionKey: p.LastTransactionKey, CancelStatus: "DONE"})
	}
	switch {
	case len(p.Cancels) == 0:
	case p.BalanceAmount == 0:
		p.Status = "CANCELED"
	default:
		p.Status = "PARTIAL_CANCELED"
	}
	return p
}

// transactionKey derives an opaque transaction key from a simulator id.
func transactionKey(id string) string {
	sum := sha256.Sum256([]byte(id))
	return strings.ToUpper(hex.EncodeToString(sum[:16]))
}

// tossOrder serves GET /v1/payments/orders/{orderId}: the status inquiry.
func (s *Server) tossOrder(orderID string) (any, error) {
	if !tossOrderIDPattern.MatchString(orderID) {
		return nil, &tossError{status: http.StatusBadRequest, Code: "INVALID_REQUEST", Message: "orderId must be 6 to 64 letters, digits, '-' or '_'"}
	}
	if _, err := s.Status(orderID); err != nil {
		if stampede.ClassOf(stampede.As(err)) == stampede.NotFound {
			return nil, &tossError{status: http.StatusNotFound, Code: "NOT_FOUND_PAYMENT", Message: "no payment for this orderId"}
		}
		return nil, err
	}
	rec, refunds, ok := s.Approval(orderID)
	if !ok {
		return nil, &tossError{status: http.StatusNotFound, Code: "NOT_FOUND_PAYMENT", Message: "no payment for this orderId"}
	}
	return s.toss.payment(rec, refunds), nil
}

// tossCancel serves POST /v1/payments/{paymentKey}/cancel: a refund of
// the payment's order whose external key is the Idempotency-Key.
func (s *Server) tossCancel(w http.ResponseWriter, r *http.Request, paymentKey string) (any, error) {
	var body struct {
		CancelReason *string `json:"cancelReason"`
		CancelAmount *int64  `json:"cancelAmount"`
	}
	if err := s.decodeJSON(w, r, &body, `"cancelReason", "cancelAmount"`); err != nil {
		return nil, err
	}
	key, err := idempotencyKey(r)
	switch {
	case err != nil:
		return nil, err
	case key == "":
		return nil, &tossError{status: http.StatusBadRequest, Code: "INVALID_REQUEST", Message: "the simulator needs an Idempotency-Key on a cancel: it keys the refund"}
	case body.CancelReason == nil || *body.CancelReason == "" || len(*body.CancelReason) > maxTossCancelReason:
		return nil, &tossError{status: http.StatusBadRequest, Code: "INVALID_REQUEST", Message: "cancelReason is required, at most 200 characters"}
	}
	s.toss.mu.Lock()
	orderID, ok := s.toss.orderOf[paymentKey]
	s.toss.mu.Unlock()
	rec, refunds, found := s.Approval(orderID)
	if !ok || !found {
		return nil, &tossError{status: http.StatusNotFound, Code: "NOT_FOUND_PAYMENT", Message: "no payment for this paymentKey"}
	}
	amount := rec.Amount
	if body.CancelAmount != nil {
		amount = *body.CancelAmount
	} else {
		for _, r := range refunds {
			if r.Status == institution.RefundSucceeded {
				amount -= r.Amount
			}
		}
	}
	res, err := s.Refund(r.Context(), institution.RefundRequest{ExternalKey: key, ApprovalKey: orderID, Amount: amount, Reason: *body.CancelReason}, r.URL.Path)
	if err != nil {
		return nil, err
	}
	if res.Status != institution.RefundSucceeded {
		return nil, &tossError{status: http.StatusForbidden, Code: "NOT_CANCELABLE_PAYMENT", Message: "the cancel was refused (mode DECLINE)"}
	}
	rec, refunds, _ = s.Approval(orderID)
	return s.toss.payment(rec, refunds), nil
}
