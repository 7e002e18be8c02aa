package jsonbody

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"
)

// strictBody is the shape FuzzStrictDecode decodes into.
type strictBody struct {
	Amount int64          `json:"amount"`
	Order  string         `json:"order_id"`
	Meta   map[string]any `json:"meta"`
}

// FuzzStrictDecode: whatever the body, Decode does not panic, and what
// it accepts is UTF-8 with every object's names distinct in any case,
// top-level names in their exact case, and no string holding U+FFFD that
// the body did not write (an escaped lone surrogate turns into one).
func FuzzStrictDecode(f *testing.F) {
	for _, s := range []string{
		`{"amount":1,"order_id":"a"}`, `{"amount":1,"AMOUNT":2}`, `{"amount":1,"amount":2}`,
		`{"order_id":"\ud800"}`, `{"order_id":"\ud83d\ude00"}`, `{"meta":{"a":1,"A":[{"b":1,"b":2}]}}`,
		`{"Amount":1}`, "{\"order_id\":\"\xff\"}", `{"order_id":"\u00e9\\"}`, `{"meta":{"\u0041":1,"a":2}}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(in))
		r.Header.Set("Content-Type", "application/json")
		var b strictBody
		if err := Decode(httptest.NewRecorder(), r, &b, 1<<16, `"amount", "order_id", "meta"`); err != nil {
			return
		}
		if !utf8.ValidString(in) {
			t.Fatalf("accepted a body that is not UTF-8: %q", in)
		}
		if !strings.Contains(in, "\uFFFD") && !strings.Contains(strings.ToLower(in), `\ufffd`) {
			if strings.ContainsRune(b.Order, utf8.RuneError) {
				t.Fatalf("accepted %q, which decodes to a replacement character", in)
			}
		}
		checkNames(t, in, json.NewDecoder(bytes.NewReader([]byte(in))), true)
	})
}

// checkNames walks one value of dec with encoding/json's tokens and fails
// on an object whose names are not distinct in any case, or (top) a
// top-level name not in its exact case.
func checkNames(t *testing.T, in string, dec *json.Decoder, top bool) {
	tok, err := dec.Token()
	if err != nil {
		t.Fatalf("accepted %q, which encoding/json cannot walk: %v", in, err)
	}
	switch tok {
	case json.Delim('{'):
		seen := map[string]bool{}
		for dec.More() {
			name, _ := dec.Token()
			n := strings.ToLower(name.(string))
			if seen[n] {
				t.Fatalf("accepted %q: the name %q twice", in, name)
			}
			seen[n] = true
			if top && name != "amount" && name != "order_id" && name != "meta" {
				t.Fatalf("accepted %q: the top-level name %q", in, name)
			}
			checkNames(t, in, dec, false)
		}
		dec.Token()
	case json.Delim('['):
		for dec.More() {
			checkNames(t, in, dec, false)
		}
		dec.Token()
	}
}

// TestStrictRefusals names what checkStrict refuses and lets through.
func TestStrictRefusals(t *testing.T) {
	for in, ok := range map[string]bool{
		`{"amount":1,"order_id":"a"}`:        true,
		`{"amount":1,"AMOUNT":2}`:            false,
		`{"amount":1,"amount":2}`:            false,
		`{"Amount":1}`:                       false,
		`{"order_id":"\ud800"}`:              false,
		`{"order_id":"\udfff"}`:              false,
		`{"order_id":"\ud800\u0041"}`:        false,
		`{"order_id":"\ud83d\ude00"}`:        true,
		`{"meta":{"a":1,"b":{"c":1,"C":1}}}`: false,
		`{"meta":{"\u0041":1,"a":2}}`:        false,
		`{"meta":{"l":[{"x":1},{"x":2}]}}`:   true,
		"{\"order_id\":\"\xc3\x28\"}":        false,
		`{"order_id":"\\ud800"}`:             true, // an escaped backslash, not an escape
	} {
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(in))
		r.Header.Set("Content-Type", "application/json")
		var b strictBody
		err := Decode(httptest.NewRecorder(), r, &b, 1<<16, `"amount", "order_id", "meta"`)
		if (err == nil) != ok {
			t.Errorf("Decode(%s) = %v, want ok %v", in, err, ok)
		}
	}
}
