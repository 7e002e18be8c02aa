package waitroom

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
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
		c := Claims{Kind: TicketToken, Room: room, User: user, Generation: 1, IssuedAt: tokenEpoch, Expires: tokenEpoch.Add(time.Hour)}
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

// TestTicketTokenCarriesPlace: a ticket token's place is signed in the
// canonical payload (what encoding/json writes) and verified back; a
// tampered place fails the MAC, and only ticket tokens carry one.
func TestTicketTokenCarriesPlace(t *testing.T) {
	s, _ := newTestSigner(t)
	pl := &Place{Rank: 1234, Admitted: 99, Departed: 7, Order: 1767225600000}
	c := Claims{Kind: TicketToken, Room: "r", User: "u", Generation: 5, Place: pl, IssuedAt: tokenEpoch, Expires: tokenEpoch.Add(time.Hour)}
	tok, err := s.Sign(c)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := c.payload()
	if want, _ := json.Marshal(p); !bytes.Equal(appendPayload(nil, p), want) {
		t.Fatalf("appendPayload = %s, encoding/json %s", appendPayload(nil, p), want)
	}
	got, err := s.Verify(tok, TicketToken)
	if err != nil || got.Place == nil || *got.Place != *pl {
		t.Fatalf("Verify = %+v, %v; want the place %+v", got, err, *pl)
	}
	forged := strings.Replace(string(appendPayload(nil, p)), `"p":[1234`, `"p":[1`, 1)
	_, mac, _ := strings.Cut(tok, ".")
	if _, err := s.Verify(b64.EncodeToString([]byte(forged))+"."+mac, TicketToken); err == nil {
		t.Error("a token whose place was changed verifies")
	}
	c.Kind, c.Generation, c.Seq = AdmissionToken, 0, 1
	if _, err := s.Sign(c); err == nil {
		t.Error("an admission token with a place was signed")
	}
}

// FuzzParseCanonicalAgrees: the hand-read payload is accepted only where
// encoding/json's strict decoding and re-encoding accept it, with the
// same result.
func FuzzParseCanonicalAgrees(f *testing.F) {
	f.Add([]byte(`{"k":"ticket","r":"r","u":"u","exp":2,"iat":1,"g":5,"p":[1,2,3,4]}`))
	f.Add([]byte(`{"k":"admission","r":"r","u":"u","exp":2,"iat":1,"seq":7}`))
	f.Add([]byte(`{"k":"ticket","r":"r","u":"u","exp":02,"iat":1,"g":5}`))
	f.Add([]byte(`{"k":"ticket","r":"<","u":"u","exp":2,"iat":1,"g":5}`))
	f.Add([]byte("{\"k\":\"ticket\",\"r\":\"\xff\",\"u\":\"u\",\"exp\":2,\"iat\":1,\"g\":5}"))
	f.Fuzz(func(t *testing.T, body []byte) {
		fast, ok := parseCanonical(body)
		if !ok || !bytes.Equal(appendPayload(nil, fast), body) {
			return
		}
		var slow tokenPayload
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&slow); err != nil {
			t.Fatalf("fast path accepted %q, encoding/json refuses it: %v", body, err)
		}
		if canon, _ := json.Marshal(slow); !bytes.Equal(canon, body) {
			t.Fatalf("fast path accepted %q, not canonical for encoding/json (%s)", body, canon)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("%q: fast %+v, encoding/json %+v", body, fast, slow)
		}
	})
}
