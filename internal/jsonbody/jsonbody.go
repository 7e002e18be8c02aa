// Package jsonbody decodes HTTP request bodies that hold exactly one JSON
// object, strictly: JSON content type (charset utf-8 or none), a size
// limit, valid UTF-8 and no lone surrogates, each name once and in its
// exact case, known fields only, right types, no trailing data. Its errors say what is wrong in words a
// client can act on (naming the field where there is one); each service
// maps them to its own error type.
package jsonbody

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"strings"
	"sync"
)

// Kind classifies a decoding error.
type Kind int

// The kinds of decoding error.
const (
	Invalid     Kind = iota // malformed JSON, unknown field, wrong type: 400
	Unsupported             // not a JSON content type: 415
	TooLarge                // over the size limit: 413
)

// Code returns the wire code the services answer for the kind: "invalid",
// "unsupported" or "too_large". Every service's error codes use these
// strings, so a decoding error reads the same from all of them.
func (k Kind) Code() string {
	switch k {
	case Unsupported:
		return "unsupported"
	case TooLarge:
		return "too_large"
	default:
		return "invalid"
	}
}

// Error is a decoding error.
type Error struct {
	Kind    Kind
	Field   string // the JSON field at fault, if known
	Message string
	Err     error // the cause, if any
}

func (e *Error) Error() string {
	if e.Field != "" {
		return e.Field + ": " + e.Message
	}
	return e.Message
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Decode reads r's body, at most limit bytes, into dst (a pointer to a
// struct). allowed lists the fields for the unknown-field message, such as
// `"user_id"`. A dst that is a FastDecoder decodes its usual form itself.
func Decode(w http.ResponseWriter, r *http.Request, dst any, limit int64, allowed string) error {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return &Error{Kind: Unsupported, Message: "Content-Type must be application/json, got none"}
	}
	if ct != "application/json" {
		mt, params, err := mime.ParseMediaType(ct)
		if err != nil || mt != "application/json" {
			return &Error{Kind: Unsupported, Message: fmt.Sprintf("Content-Type must be application/json, got %q", ct)}
		}
		for k, v := range params {
			if k != "charset" || !strings.EqualFold(v, "utf-8") {
				return &Error{Kind: Unsupported, Message: fmt.Sprintf("Content-Type must be application/json (charset utf-8 only), got %q", ct)}
			}
		}
	}
	buf := bodyBuffers.Get().(*[]byte)
	defer func() {
		if cap(*buf) <= maxPooledBody {
			bodyBuffers.Put(buf)
		}
	}()
	data, err := readAll((*buf)[:0], http.MaxBytesReader(w, r.Body, limit))
	*buf = data
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return &Error{Kind: TooLarge, Message: fmt.Sprintf("request body is over the limit of %d bytes", limit)}
		}
		return &Error{Kind: Invalid, Message: "cannot read the request body", Err: err}
	}
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	switch {
	case len(trimmed) == 0:
		return &Error{Kind: Invalid, Message: fmt.Sprintf("request body is empty; want a JSON object with %s", allowed)}
	case trimmed[0] != '{':
		return &Error{Kind: Invalid, Message: fmt.Sprintf("request body must be a JSON object with %s", allowed)}
	}
	if err := checkStrict(data, fieldNames(dst)); err != nil {
		return err
	}
	if fd, ok := dst.(FastDecoder); ok && fd.DecodeFast(data) {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return decodeError(err, allowed)
	}
	if _, err := dec.Token(); err != io.EOF {
		return &Error{Kind: Invalid, Message: fmt.Sprintf("malformed JSON: trailing data after the object at byte offset %d", dec.InputOffset())}
	}
	return nil
}

// maxPooledBody is the largest body buffer kept for reuse.
const maxPooledBody = 64 << 10

// bodyBuffers holds buffers for request bodies. Nothing decoded refers to
// a buffer: encoding/json and Member both copy what they keep.
var bodyBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// readAll appends everything r reads to buf, as io.ReadAll does into a
// buffer of its own.
func readAll(buf []byte, r io.Reader) ([]byte, error) {
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// decodeError names the field or the problem of a json.Decoder error.
func decodeError(err error, allowed string) error {
	if e, ok := errors.AsType[*json.UnmarshalTypeError](err); ok && e.Field != "" {
		return &Error{Kind: Invalid, Field: e.Field, Message: fmt.Sprintf("must be %s, got %s", describeType(e.Type), e.Value), Err: err}
	}
	if e, ok := errors.AsType[*json.SyntaxError](err); ok {
		return &Error{Kind: Invalid, Message: fmt.Sprintf("malformed JSON at byte offset %d: %s", e.Offset, strings.TrimPrefix(e.Error(), "json: ")), Err: err}
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return &Error{Kind: Invalid, Message: "malformed JSON: the body ends inside the object", Err: err}
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return &Error{Kind: Invalid, Field: strings.Trim(name, `"`), Message: fmt.Sprintf("unknown field %s; allowed: %s", name, allowed), Err: err}
	}
	return &Error{Kind: Invalid, Message: "malformed JSON: " + strings.TrimPrefix(err.Error(), "json: "), Err: err}
}

// describeType names a Go type the way a JSON client thinks of it.
func describeType(t reflect.Type) string {
	if t == nil {
		return "a different type"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number (in range)"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	default:
		return "a JSON " + t.Kind().String()
	}
}

// Write answers v as JSON with status. A value that cannot be encoded is a
// bug and answers 500.
func Write(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		body, status = []byte(`{"error":{"code":"internal","message":"cannot encode the answer"}}`), http.StatusInternalServerError
	}
	WriteRaw(w, status, body)
}

// The values of the headers of a JSON answer. Every answer shares them,
// without an allocation each: net/http and this module never change a
// header's values in place, and Header.Add appends to a copy (each slice
// is full).
var (
	jsonContentType = []string{"application/json; charset=utf-8"}
	noSniff         = []string{"nosniff"}
)

// SetHeaders sets the Content-Type (JSON, UTF-8) and
// X-Content-Type-Options (nosniff) of a JSON answer in h.
func SetHeaders(h http.Header) {
	h["Content-Type"] = jsonContentType
	h["X-Content-Type-Options"] = noSniff
}

// WriteRaw answers an already encoded JSON body with status.
func WriteRaw(w http.ResponseWriter, status int, body []byte) {
	SetHeaders(w.Header())
	w.WriteHeader(status)
	w.Write(append(bytes.TrimRight(body, "\n"), '\n'))
}
