package fulfilment_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/fulfilment"
	"github.com/stampede-lab/stampede/pay"
	"github.com/stampede-lab/stampede/pay/natspub"
	"github.com/stampede-lab/stampede/protocol"
)

func payment(st pay.Status) pay.Payment {
	return pay.Payment{
		ID: "0b0f8a4e-2a51-4d5e-9d0c-3c1f6f0f7a11", MerchantID: "6f1c2b0e-8d4a-4c3e-9b7a-1e2d3c4b5a69",
		OrderID: "order-42", Amount: 12_000, Currency: "KRW", Status: st,
	}
}

// TestDecodeWhatTheRelayPublishes: the body pay writes to its outbox (and
// pay/natspub publishes as is) decodes into the event, whose ID is the
// message id the relay publishes it under.
func TestDecodeWhatTheRelayPublishes(t *testing.T) {
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for seq, st := range []pay.Status{pay.StatusPending, pay.StatusUnknown, pay.StatusApproved} {
		typ := pay.EventStatusChanged
		if st == pay.StatusPending {
			typ = pay.EventCreated
		}
		oe := pay.NewEvent(typ, payment(st), int64(seq+1), "", "", at)
		ev, err := fulfilment.DecodeEvent(oe.Payload)
		if err != nil {
			t.Fatalf("DecodeEvent(%s): %v", oe.Payload, err)
		}
		p := payment(st)
		want := fulfilment.Event{PaymentEvent: protocol.PaymentEvent{
			PaymentID: p.ID, Seq: oe.Seq, Type: typ, Status: st,
			MerchantID: p.MerchantID, OrderID: p.OrderID, Amount: p.Amount, Currency: p.Currency, At: at,
		}}
		if ev != want {
			t.Fatalf("DecodeEvent(%s) = %+v, want %+v", oe.Payload, ev, want)
		}
		if ev.ID() != natspub.MsgID(oe) {
			t.Fatalf("ID() = %s, want the relay's %s", ev.ID(), natspub.MsgID(oe))
		}
	}
}

// TestDecodeOptionalFields: a non-terminal event needs no order; amount,
// currency, type and time are optional; unknown fields are ignored.
func TestDecodeOptionalFields(t *testing.T) {
	ev, err := fulfilment.DecodeEvent([]byte(`{"payment_id":"p1","seq":1,"status":"PENDING","added_later":[1,2]}`))
	if err != nil {
		t.Fatal(err)
	}
	if ev.ID() != "p1-1" || ev.MerchantID != "" || ev.Amount != 0 || !ev.At.IsZero() {
		t.Fatalf("decoded %+v", ev)
	}
	ev, err = fulfilment.DecodeEvent([]byte(`{"payment_id":"p1","seq":2,"status":"DECLINED","merchant_id":"m","order_id":"o"}`))
	if err != nil || ev.OrderID != "o" || ev.Status != pay.StatusDeclined {
		t.Fatalf("decoded %+v, %v", ev, err)
	}
}

// TestDecodeRejectsNamingTheField: a body that can never be processed is
// CodeInvalid, naming the field at fault.
func TestDecodeRejectsNamingTheField(t *testing.T) {
	for body, field := range map[string]string{
		``:   "body",
		`[]`: "body",
		`{"payment_id":"p","seq":1,"status":"PENDING"} {}`:                             "body",
		`{"seq":1,"status":"PENDING"}`:                                                 "payment_id",
		`{"payment_id":"p","status":"PENDING"}`:                                        "seq",
		`{"payment_id":"p","seq":0,"status":"PENDING"}`:                                "seq",
		`{"payment_id":"p","seq":"1","status":"PENDING"}`:                              "seq",
		`{"payment_id":"p","seq":1}`:                                                   "status",
		`{"payment_id":"p","seq":1,"status":"approved"}`:                               "status",
		`{"payment_id":"p","seq":1,"status":"APPROVED","order_id":"o"}`:                "merchant_id",
		`{"payment_id":"p","seq":1,"status":"FAILED","merchant_id":"m"}`:               "order_id",
		`{"payment_id":"p","seq":1,"status":"PENDING","amount":-1}`:                    "amount",
		`{"payment_id":"p\u0000","seq":1,"status":"PENDING"}`:                          "payment_id",
		`{"payment_id":"p","seq":1,"status":"PENDING","currency":"KRWKRWKRW"}`:         "currency",
		`{"payment_id":"` + strings.Repeat("x", 256) + `","seq":1,"status":"PENDING"}`: "payment_id",
	} {
		_, err := fulfilment.DecodeEvent([]byte(body))
		e := stampede.As(err)
		if e == nil || e.Code != stampede.Invalid || e.Field != field {
			t.Errorf("DecodeEvent(%.60s) = %v, want invalid %s", body, err, field)
		}
		if fulfilment.Retryable(err) {
			t.Errorf("DecodeEvent(%.60s): the error is retryable", body)
		}
	}
	if _, err := fulfilment.DecodeEvent(make([]byte, protocol.MaxEventBytes+1)); stampede.CodeOf(err) != stampede.Invalid {
		t.Errorf("an oversized body = %v, want invalid", err)
	}
}

// TestHandleRejectsAnInvalidEvent: an invalid event is refused before the
// store is touched.
func TestHandleRejectsAnInvalidEvent(t *testing.T) {
	h, err := fulfilment.NewHandler(untouchable{}, fulfilment.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	applied, err := h.Handle(context.Background(), fulfilment.Event{PaymentEvent: protocol.PaymentEvent{PaymentID: "x", Seq: 1, Status: pay.StatusApproved}})
	if applied || stampede.CodeOf(err) != stampede.Invalid {
		t.Fatalf("Handle(APPROVED without order) = %v, %v; want invalid", applied, err)
	}
}

// untouchable is a Store that fails the test run if used.
type untouchable struct{ fulfilment.Store }

func (untouchable) Update(context.Context, func(context.Context, fulfilment.Tx) error) error {
	panic("the store was used")
}

func TestConfigValidateNamesFields(t *testing.T) {
	if err := fulfilment.DefaultConfig().Validate(); err != nil {
		t.Fatalf("DefaultConfig().Validate() = %v", err)
	}
	var fields []string
	for _, e := range stampede.FieldErrors(fulfilment.Config{}.Validate()) {
		fields = append(fields, e.Field)
	}
	if fmt.Sprint(fields) != "[now new_ticket_id]" {
		t.Errorf("Validate() named %v, want every field at once: now, new_ticket_id", fields)
	}
	if _, err := fulfilment.NewHandler(nil, fulfilment.DefaultConfig()); err == nil {
		t.Error("NewHandler(nil store) succeeded")
	}
}

// FuzzDecodeEvent: DecodeEvent never panics, and what it accepts is a
// valid event whose ID follows from its payment and seq, and which
// survives a round trip through pay's event body.
func FuzzDecodeEvent(f *testing.F) {
	for seq, st := range pay.Statuses() {
		f.Add(pay.NewEvent(pay.EventStatusChanged, payment(st), int64(seq+1), pay.StatusPending, "r", time.Unix(0, 0)).Payload)
	}
	for _, s := range []string{
		``, `{}`, `null`, `{"payment_id":"p","seq":1,"status":"PENDING"}`,
		`{"payment_id":"p","seq":9223372036854775807,"status":"DECLINED","merchant_id":"m","order_id":"o"}`,
		`{"payment_id":"p","seq":1e3,"status":"PENDING"}`, `{"payment_id":"\ud800","seq":1,"status":"UNKNOWN"}`,
		`{"payment_id":"p","seq":1,"status":"APPROVED","merchant_id":"m","order_id":"o","at":"2026-13-01T00:00:00Z"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		ev, err := fulfilment.DecodeEvent(body)
		if err != nil {
			if e := stampede.As(err); e.Code != stampede.Invalid || e.Field == "" {
				t.Fatalf("DecodeEvent error %v: want CodeInvalid naming a field", err)
			}
			return
		}
		if err := ev.Validate(); err != nil {
			t.Fatalf("decoded an invalid event %+v: %v", ev, err)
		}
		if ev.ID() != protocol.EventID(ev.PaymentID, ev.Seq) || ev.Seq < 1 || !ev.Status.Valid() {
			t.Fatalf("decoded %+v", ev)
		}
		if ev.Status.Terminal() && (ev.MerchantID == "" || ev.OrderID == "") {
			t.Fatalf("terminal event without its order: %+v", ev)
		}
		for _, s := range []string{ev.PaymentID, ev.MerchantID, ev.OrderID, ev.Currency, ev.Type} {
			if !utf8.ValidString(s) || strings.ContainsRune(s, 0) {
				t.Fatalf("decoded an id that is not clean UTF-8: %q", s)
			}
		}
		// Round trip: the same payment written by pay decodes the same.
		p := pay.Payment{ID: ev.PaymentID, MerchantID: ev.MerchantID, OrderID: ev.OrderID, Amount: ev.Amount, Currency: ev.Currency, Status: ev.Status}
		again, err := fulfilment.DecodeEvent(pay.NewEvent(ev.Type, p, ev.Seq, "", "", ev.At).Payload)
		if err != nil {
			t.Fatalf("re-encoded %+v does not decode: %v", ev, err)
		}
		if !again.At.Equal(ev.At) {
			t.Fatalf("round trip changed the time: %v, then %v", ev.At, again.At)
		}
		again.At = ev.At
		again.From, again.Reason, again.ManualReview = ev.From, ev.Reason, ev.ManualReview
		if again != ev {
			t.Fatalf("round trip: %+v, then %+v", ev, again)
		}
		if _, err := json.Marshal(ev); err != nil {
			t.Fatal(err)
		}
	})
}
