package payclient_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/checkout"
	"github.com/stampede-lab/stampede/checkout/payclient"
	"github.com/stampede-lab/stampede/internal/httpapi"
	"github.com/stampede-lab/stampede/pay"
	"github.com/stampede-lab/stampede/protocol"
)

// stub answers POST /v1/payments with post and GET /v1/payments/p2 with
// an APPROVED payment.
func stub(t *testing.T, post func(w http.ResponseWriter)) *payclient.Client {
	t.Helper()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer key" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if r.Method == http.MethodGet && r.URL.Path == "/v1/payments/p2" {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"id":"p2","status":"APPROVED"}`)
			return
		}
		if r.Header.Get("Idempotency-Key") != "k1" || r.Header.Get(protocol.HeaderAdmission) != "adm" {
			w.WriteHeader(http.StatusTeapot)
			return
		}
		post(w)
	}))
	t.Cleanup(ts.Close)
	c, err := payclient.New(ts.URL, "key", nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func problem(w http.ResponseWriter, e *stampede.Error) { httpapi.WriteProblem(w, e, "pay") }

// TestClassification: what each answer of pay means for the order.
func TestClassification(t *testing.T) {
	req := checkout.PaymentRequest{OrderID: "o1", IdempotencyKey: "k1", Amount: 100, Currency: "KRW", Admission: "adm"}
	for _, c := range []struct {
		name     string
		post     func(w http.ResponseWriter)
		want     pay.Status // "" when an error is expected
		rejected bool
	}{
		{"approved", func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, `{"id":"p1","status":"APPROVED"}`)
		}, pay.StatusApproved, false},
		{"unknown", func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusAccepted)
			io.WriteString(w, `{"id":"p1","status":"UNKNOWN"}`)
		}, pay.StatusUnknown, false},
		{"invalid is rejected", func(w http.ResponseWriter) { problem(w, stampede.InvalidField("amount", "bad")) }, "", true},
		{"forbidden is rejected", func(w http.ResponseWriter) { problem(w, stampede.Errorf(stampede.Forbidden, "no admission")) }, "", true},
		{"in flight is unknown", func(w http.ResponseWriter) { problem(w, stampede.Errorf(stampede.Conflict, "in flight")) }, "", false},
		{"unavailable is unknown", func(w http.ResponseWriter) { problem(w, stampede.UnavailableErr("store", nil)) }, "", false},
		{"order exists reads the payment", func(w http.ResponseWriter) {
			problem(w, &stampede.Error{Code: pay.CodeOrderExists, Message: "exists", Extra: map[string]any{"payment_id": "p2"}})
		}, pay.StatusApproved, false},
		{"a body without a payment is unknown", func(w http.ResponseWriter) { w.WriteHeader(http.StatusCreated) }, "", false},
	} {
		p, err := stub(t, c.post).Pay(context.Background(), req)
		_, rejected := errors.AsType[*checkout.RejectedError](err)
		switch {
		case c.want != "" && (err != nil || p.Status != c.want):
			t.Errorf("%s: Pay = %+v, %v; want %s", c.name, p, err, c.want)
		case c.want == "" && (err == nil || rejected != c.rejected):
			t.Errorf("%s: Pay = %+v, %v; want an error, rejected=%v", c.name, p, err, c.rejected)
		}
	}
	// A failed read is never a rejection: it says nothing about the outcome.
	c := stub(t, nil)
	if _, err := c.Payment(context.Background(), "nope"); err == nil {
		t.Error("Payment of an unknown id succeeded")
	} else if _, rejected := errors.AsType[*checkout.RejectedError](err); rejected {
		t.Errorf("Payment's 4xx = %v; want an unknown outcome, not a rejection", err)
	}
}

func TestNewNamesTheFlag(t *testing.T) {
	if _, err := payclient.New("ftp://x", "k", nil); stampede.As(err).Field != "pay" {
		t.Errorf("bad URL: %v", err)
	}
	if _, err := payclient.New("http://x", "", nil); stampede.As(err).Field != "pay_key" {
		t.Errorf("no key: %v", err)
	}
}
