package jsonbody

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestDecodeClassifiesAndNames(t *testing.T) {
	type body struct {
		Name  string `json:"name"`
		Count int    `json:"count"`
	}
	cases := []struct {
		ct, in string
		kind   Kind
		field  string
		ok     bool
	}{
		{"application/json", `{"name":"a","count":2}`, 0, "", true},
		{"application/json; charset=utf-8", `{"name":"a"}`, 0, "", true},
		{"", `{"name":"a"}`, Unsupported, "", false},
		{"text/plain", `{"name":"a"}`, Unsupported, "", false},
		{"application/json", strings.Repeat(" ", 100) + `{}`, TooLarge, "", false},
		{"application/json", ``, Invalid, "", false},
		{"application/json", `[1]`, Invalid, "", false},
		{"application/json", `{"nick":"a"}`, Invalid, "nick", false},
		{"application/json", `{"count":"two"}`, Invalid, "count", false},
		{"application/json", `{"name":"a"} {}`, Invalid, "", false},
		{"application/json", `{"name":`, Invalid, "", false},
	}
	for _, tc := range cases {
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(tc.in))
		if tc.ct != "" {
			r.Header.Set("Content-Type", tc.ct)
		}
		var b body
		err := Decode(httptest.NewRecorder(), r, &b, 64, `"name", "count"`)
		if tc.ok {
			if err != nil {
				t.Errorf("%q: %v", tc.in, err)
			}
			continue
		}
		e, isErr := errors.AsType[*Error](err)
		if !isErr || e.Kind != tc.kind || e.Field != tc.field || e.Message == "" {
			t.Errorf("%q (%s): got %#v, want kind %d naming %q", tc.in, tc.ct, err, tc.kind, tc.field)
		}
	}
}

// TestKindCode: each kind's wire code, as every service answers it.
func TestKindCode(t *testing.T) {
	for k, want := range map[Kind]string{Invalid: "invalid", Unsupported: "unsupported", TooLarge: "too_large"} {
		if got := k.Code(); got != want {
			t.Errorf("Kind(%d).Code() = %q, want %q", k, got, want)
		}
	}
}
