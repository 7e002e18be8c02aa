package api

import (
	"bytes"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/internal/httpapi"
	"github.com/stampede-lab/stampede/waitroom"
)

// FuzzJoinBodyDecodeFast: the join body's fast decoder never decodes a
// body differently from encoding/json, and never takes one that
// encoding/json rejects. Run with
// go test -fuzz FuzzJoinBodyDecodeFast ./waitroom/.
func FuzzJoinBodyDecodeFast(f *testing.F) {
	for _, s := range []string{
		`{"user_id":"u1"}`, `{}`, `{"user_id":"u","user_sig":"s","user_expires":1772370000}`,
		`{"challenge":"c","solution":"s"}`, `{"user_id":null}`, `{"user_expires":1.5}`, `{"User_Id":"u"}`,
		`{"user_id":"u","extra":1}`, `{"user_expires":"1"}`, `{"user_id":"a\u0062"}`, `{"user_id":"u"} x`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var fast joinBody
		if !fast.DecodeFast(data) {
			if !reflect.DeepEqual(fast, joinBody{}) {
				t.Fatalf("%q: DecodeFast refused but changed the body to %+v", data, fast)
			}
			return
		}
		var slow joinBody
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&slow); err != nil {
			t.Fatalf("%q: DecodeFast took it, encoding/json: %v", data, err)
		}
		if _, err := dec.Token(); err == nil {
			t.Fatalf("%q: DecodeFast took it, encoding/json finds trailing data", data)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("%q: DecodeFast %+v, encoding/json %+v", data, fast, slow)
		}
	})
}

// FuzzTicketJSON: writeTicket answers the bytes and headers writeJSON
// answers.
func FuzzTicketJSON(f *testing.F) {
	f.Add("drop-42", "alice", "waiting", int64(3), 12.5, int64(1000), "tok", "", "", "", true, true)
	f.Add("r", "<&>\u2028\"\\\x01\xff", "closed", int64(0), 0.0, int64(0), "", "adm", "2026-01-01T00:00:00Z", "bye <b>", false, false)
	f.Add("r", "u", "waiting", int64(-1), 1e-7, int64(-5), "", "", "", "", true, true)
	f.Add("r", "u", "waiting", int64(1), math.Inf(1), int64(1), "", "", "", "", true, true)
	f.Fuzz(func(t *testing.T, room, user, state string, pos int64, eta float64, poll int64, tok, adm, lease, msg string, hasPos, hasETA bool) {
		v := ticketJSON{Room: room, UserID: user, State: waitroom.State(state), PollAfterMS: poll,
			TicketToken: tok, AdmissionToken: adm, LeaseExpiresAt: lease, Message: msg}
		if hasPos {
			v.Position = &pos
		}
		if hasETA {
			low, high := eta*0.8, eta*1.25
			v.ETASeconds, v.ETALowSeconds, v.ETAHighSeconds = &eta, &low, &high
			v.ETABasis = waitroom.BasisRate
			if pos%2 == 0 {
				v.ETABasis = waitroom.BasisCapacity
			}
		}
		fast, slow := httptest.NewRecorder(), httptest.NewRecorder()
		writeTicket(fast, http.StatusCreated, v)
		writeJSON(slow, http.StatusCreated, v)
		if fast.Code != slow.Code || !bytes.Equal(fast.Body.Bytes(), slow.Body.Bytes()) || !reflect.DeepEqual(fast.Header(), slow.Header()) {
			t.Fatalf("writeTicket: %d %v %s\nwriteJSON:   %d %v %s", fast.Code, fast.Header(), fast.Body, slow.Code, slow.Header(), slow.Body)
		}
	})
}

// TestJoinBodyBadInputNamesField: the join still answers a bad body with
// a 4xx naming the field, through the fast path's fallback.
func TestJoinBodyBadInputNamesField(t *testing.T) {
	for in, field := range map[string]string{
		`{"user_expires":1.5}`: "user_expires", `{"user_expires":"1"}`: "user_expires",
		`{"user_id":7}`: "user_id", `{"nick":"a"}`: "nick", `{"user_sig":true}`: "user_sig",
	} {
		r := httptest.NewRequest(http.MethodPost, "/v1/rooms/r/tickets", bytes.NewReader([]byte(in)))
		r.Header.Set("Content-Type", "application/json")
		var b joinBody
		err := httpapi.DecodeJSON(httptest.NewRecorder(), r, &b, 4096, joinFields)
		e := stampede.As(err)
		if err == nil || httpapi.ErrorStatus(e) != http.StatusBadRequest || e.Field != field {
			t.Errorf("%s: got %v (status %d, field %q), want 400 naming %q", in, err, httpapi.ErrorStatus(e), e.Field, field)
		}
	}
}
