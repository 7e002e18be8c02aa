package jsonbody

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
)

// slowBody is the shape of a join body, decoded by encoding/json only.
type slowBody struct {
	Name  *string `json:"name"`
	Sig   *string `json:"sig"`
	Count *int64  `json:"count"`
}

// fastBody is slowBody with a fast decoder.
type fastBody slowBody

// DecodeFast implements FastDecoder.
func (b *fastBody) DecodeFast(data []byte) bool {
	var v fastBody
	ok := Members(data, func(m Member) bool {
		switch string(m.Name) {
		case "name":
			return m.String(&v.Name)
		case "sig":
			return m.String(&v.Sig)
		case "count":
			return m.Int64(&v.Count)
		}
		return false
	})
	if ok {
		*b = v
	}
	return ok
}

const fastAllowed = `"name", "sig", "count"`

// decodeBoth decodes data as a request body into a fastBody and a slowBody.
func decodeBoth(data []byte) (fast fastBody, fastErr error, slow slowBody, slowErr error) {
	req := func() *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(data))
		r.Header.Set("Content-Type", "application/json")
		return r
	}
	fastErr = Decode(httptest.NewRecorder(), req(), &fast, 4096, fastAllowed)
	slowErr = Decode(httptest.NewRecorder(), req(), &slow, 4096, fastAllowed)
	return
}

// checkSame fails t unless decoding data with the fast path gives what
// encoding/json gives: the same value, or an error of the same kind,
// field and message.
func checkSame(t *testing.T, data []byte) {
	t.Helper()
	fast, fastErr, slow, slowErr := decodeBoth(data)
	switch {
	case (fastErr == nil) != (slowErr == nil):
		t.Fatalf("%q: fast path error %v, encoding/json error %v", data, fastErr, slowErr)
	case fastErr != nil:
		fe, _ := errors.AsType[*Error](fastErr)
		se, _ := errors.AsType[*Error](slowErr)
		if fe == nil || se == nil || fe.Kind != se.Kind || fe.Field != se.Field || fe.Message != se.Message {
			t.Fatalf("%q: fast path error %#v, encoding/json error %#v", data, fastErr, slowErr)
		}
	case !reflect.DeepEqual(slowBody(fast), slow):
		t.Fatalf("%q: fast path decoded %s, encoding/json %s", data, show(slowBody(fast)), show(slow))
	}
}

func show(b slowBody) string {
	out, _ := json.Marshal(b)
	return string(out)
}

// fastTaken reports whether the fast path decodes data by itself.
func fastTaken(data []byte) bool {
	var b fastBody
	return b.DecodeFast(data)
}

var fastSeeds = []string{
	`{"name":"u1"}`,
	` {"name" : "u1" , "sig":"abc", "count": 17 } ` + "\n",
	`{}`, ` { } `, `{"name":null}`, `{"name":"a","name":"b"}`, `{"name":"a","name":null}`,
	`{"count":-0}`, `{"count":9223372036854775807}`, `{"count":9223372036854775808}`,
	`{"count":1.0}`, `{"count":1e3}`, `{"count":01}`, `{"count":-}`, `{"count":"1"}`,
	`{"name":1}`, `{"name":"\u0041"}`, `{"name":"a\"b"}`, `{"NAME":"a"}`, `{"nick":"a"}`,
	`{"name":"한국"}`, "{\"name\":\"\xff\"}", "{\"name\":\"a\tb\"}", `{"name":"<&>"}`,
	`{"name":true}`, `{"name":{}}`, `{"name":[]}`, `{"name":"a",}`, `{"name":"a"} {}`,
	`{"name":"a"}x`, `{"name"`, `{"name":`, `{"name":"a"`, `[]`, `null`, ``, "\ufeff{}",
	`{"name":nul}`, `{"name":nullx}`, `{"count":1 }`, `{"count":-12,"sig":"s"}`,
}

// TestFastDecodeAgrees: for hand-picked bodies the fast path decodes the
// same values and gives the same errors as encoding/json, and it does
// take the usual bodies.
func TestFastDecodeAgrees(t *testing.T) {
	for _, s := range fastSeeds {
		checkSame(t, []byte(s))
	}
	for _, s := range []string{`{"name":"u1"}`, `{"name":"u1","sig":"x","count":-3}`, ` {} `, `{"name":null}`} {
		if !fastTaken([]byte(s)) {
			t.Errorf("%q: the fast path does not decode it", s)
		}
	}
	for _, s := range []string{`{"count":1.0}`, `{"NAME":"a"}`, `{"name":"a\"b"}`, "{\"name\":\"\xff\"}", `{"name":"a"} {}`} {
		if fastTaken([]byte(s)) {
			t.Errorf("%q: the fast path decodes it; it must leave it to encoding/json", s)
		}
	}
}

// TestFastDecodeRejectsWithField: bad bodies still get a 400-kind error
// naming the field.
func TestFastDecodeRejectsWithField(t *testing.T) {
	for in, field := range map[string]string{
		`{"count":1.5}`: "count", `{"count":"1"}`: "count", `{"name":2}`: "name", `{"nick":"a"}`: "nick",
	} {
		fast, err, _, _ := decodeBoth([]byte(in))
		e, ok := errors.AsType[*Error](err)
		if !ok || e.Kind != Invalid || e.Field != field {
			t.Errorf("%q: got %#v (%+v), want an Invalid error naming %q", in, err, fast, field)
		}
	}
}

// FuzzFastDecode: the fast path never accepts, rejects or decodes a body
// differently from encoding/json. Run with
// go test -fuzz FuzzFastDecode ./internal/jsonbody/.
func FuzzFastDecode(f *testing.F) {
	for _, s := range fastSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkSame(t, data)
	})
}

// FuzzAppendString: AppendString writes what encoding/json writes.
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "plain", "a\"b\\c", "<&>", "\x00\x01\b\f\n\r\t\x1f\x7f", "한국어", "\u2028\u2029", "\xff\xfe", "a\xc3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := AppendString(nil, s); !bytes.Equal(got, want) {
			t.Fatalf("AppendString(%q) = %s, encoding/json %s", s, got, want)
		}
	})
}

// FuzzAppendFloat: AppendFloat writes what encoding/json writes, and
// refuses what it cannot write.
func FuzzAppendFloat(f *testing.F) {
	for _, v := range []float64{0, math.Copysign(0, -1), 1, 0.1, 12.5, 1e-7, 1e21, 1e20, -3.4e-9, math.MaxFloat64, math.SmallestNonzeroFloat64, math.NaN(), math.Inf(1)} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v float64) {
		want, err := json.Marshal(v)
		got, ok := AppendFloat([]byte("x"), v)
		if ok != (err == nil) {
			t.Fatalf("AppendFloat(%v) ok %v, encoding/json error %v", v, ok, err)
		}
		if ok && !bytes.Equal(got, append([]byte("x"), want...)) {
			t.Fatalf("AppendFloat(%v) = %s, encoding/json %s", v, got[1:], want)
		}
		if !ok && string(got) != "x" {
			t.Fatalf("AppendFloat(%v) appended %q", v, got[1:])
		}
	})
}

// TestDecodeKeepsNoBuffer: what a decoded body holds stays as decoded
// while later bodies reuse the pooled buffers.
func TestDecodeKeepsNoBuffer(t *testing.T) {
	long := `{"name":"` + strings.Repeat("x", 300) + `","sig":"s"}`
	ins := []string{long, `{"name":"y","sig":"zzzz"}`, long, `{"count":3}`, `{"name":"` + strings.Repeat("w", 600) + `"}`}
	var got []fastBody
	for _, in := range ins {
		fast, err, _, _ := decodeBoth([]byte(in))
		if err != nil {
			t.Fatalf("%q: %v", in, err)
		}
		got = append(got, fast)
	}
	for i, in := range ins {
		var want slowBody
		if err := json.Unmarshal([]byte(in), &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(slowBody(got[i]), want) {
			t.Errorf("body %d decoded %s, now holds %s", i, show(want), show(slowBody(got[i])))
		}
	}
}
