package waitroom

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/internal/httpapi"
)

// referenceToken is a token built as Sign built it before its fast path:
// the payload by encoding/json, a fresh HMAC per token.
func referenceToken(t *testing.T, key []byte, p tokenPayload) string {
	t.Helper()
	body, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte(macPrefix))
	m.Write([]byte(p.Kind))
	m.Write([]byte{0})
	m.Write(body)
	return b64.EncodeToString(body) + "." + b64.EncodeToString(m.Sum(nil))
}

// FuzzSignMatchesReference: Sign writes the canonical payload (what
// encoding/json writes, which Verify demands) and the same token as the
// reference construction, for any room and user, so that tokens of older
// and newer instances verify on each other.
func FuzzSignMatchesReference(f *testing.F) {
	f.Add("drop-42", "alice", int64(17), true)
	f.Add("r", "<&>\u2028\"\\\x01", int64(0), false)
	f.Add("한국", "\xff", int64(1<<40), true)
	s, _ := newTestSigner(f)
	f.Fuzz(func(t *testing.T, room, user string, seq int64, admission bool) {
		c := Claims{Kind: TicketToken, Room: room, User: user, IssuedAt: tokenEpoch, Expires: tokenEpoch.Add(time.Hour)}
		if admission {
			c.Kind, c.Seq = AdmissionToken, seq
		}
		tok, err := s.Sign(c)
		if room == "" || user == "" || !utf8.ValidString(room) || !utf8.ValidString(user) || (admission && seq < 0) {
			if err == nil {
				t.Fatalf("Sign(%+v) accepted bad claims", c)
			}
			return
		}
		if len(tok) > maxTokenLen || err != nil {
			if err == nil {
				t.Fatalf("Sign(%+v) made a token of %d bytes", c, len(tok))
			}
			return
		}
		p, _ := c.payload()
		if want, _ := json.Marshal(p); !bytes.Equal(appendPayload(nil, p), want) {
			t.Fatalf("appendPayload = %s, encoding/json %s", appendPayload(nil, p), want)
		}
		if want := referenceToken(t, tokenSecret, p); tok != want {
			t.Fatalf("Sign(%+v) = %s, reference %s", c, tok, want)
		}
		if got, err := s.Verify(tok, c.Kind); err != nil || got.Room != room || got.User != user {
			t.Fatalf("Verify(Sign(%+v)) = %+v, %v", c, got, err)
		}
	})
}

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
		v := ticketJSON{Room: room, UserID: user, State: State(state), PollAfterMS: poll,
			TicketToken: tok, AdmissionToken: adm, LeaseExpiresAt: lease, Message: msg}
		if hasPos {
			v.Position = &pos
		}
		if hasETA {
			v.ETASeconds = &eta
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
