package institution

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"strings"
	"time"
)

// errorBody is the JSON of every error answer.
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
}

// detail is err as the API shows it. Internal errors show no details.
func detail(err error) errorDetail {
	e, ok := errors.AsType[*Error](err)
	if !ok || e.Code == CodeInternal {
		return errorDetail{Code: CodeInternal, Message: "internal error; the server logged the details"}
	}
	msg := e.Message
	if e.Field != "" {
		msg = e.Field + ": " + msg
	}
	return errorDetail{Code: e.Code, Message: msg, Field: e.Field}
}

// writeError answers err as JSON with its HTTPStatus.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	status := HTTPStatus(err)
	if ErrorCode(err) == CodeInternal {
		s.log.Error("institution: http request failed", "method", r.Method, "path", r.URL.Path, "status", status, "err", err)
	}
	switch status {
	case http.StatusUnauthorized:
		w.Header().Set("WWW-Authenticate", `Bearer realm="stampede-institution"`)
	case http.StatusServiceUnavailable:
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, status, errorBody{Error: detail(err)})
}

// writeJSON answers v as JSON with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil { // only values of this package are written: a bug
		body, status = []byte(`{"error":{"code":"internal","message":"cannot encode the answer"}}`), http.StatusInternalServerError
	}
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(append(body, '\n'))
}

// decodeJSON reads a request body holding exactly one JSON object into dst
// (a pointer to a struct), strictly: the content type must be JSON, the
// body at most MaxBody bytes, every field known and typed right. allowed
// lists the fields for the messages.
func (s *Server) decodeJSON(w http.ResponseWriter, r *http.Request, dst any, allowed string) error {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return &Error{Code: CodeUnsupported, Message: "Content-Type must be application/json, got none"}
	}
	if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
		return &Error{Code: CodeUnsupported, Message: fmt.Sprintf("Content-Type must be application/json, got %q", ct)}
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBody))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return &Error{Code: CodeTooLarge, Message: fmt.Sprintf("request body is over the limit of %d bytes", s.cfg.MaxBody)}
		}
		return &Error{Code: CodeInvalid, Message: "cannot read the request body", Err: err}
	}
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	switch {
	case len(trimmed) == 0:
		return &Error{Code: CodeInvalid, Message: fmt.Sprintf("request body is empty; want a JSON object with %s", allowed)}
	case trimmed[0] != '{':
		return &Error{Code: CodeInvalid, Message: fmt.Sprintf("request body must be a JSON object with %s", allowed)}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return jsonError(err, allowed)
	}
	if _, err := dec.Token(); err != io.EOF {
		return &Error{Code: CodeInvalid, Message: fmt.Sprintf("malformed JSON: trailing data after the object at byte offset %d", dec.InputOffset())}
	}
	return nil
}

// jsonError turns a json.Decoder error into an invalid-input error that
// names the field or the problem.
func jsonError(err error, allowed string) error {
	if e, ok := errors.AsType[*json.UnmarshalTypeError](err); ok && e.Field != "" {
		return &Error{Code: CodeInvalid, Field: e.Field, Message: fmt.Sprintf("must be %s, got %s", describeType(e.Type), e.Value), Err: err}
	}
	if e, ok := errors.AsType[*json.SyntaxError](err); ok {
		return &Error{Code: CodeInvalid, Message: fmt.Sprintf("malformed JSON at byte offset %d: %s", e.Offset, strings.TrimPrefix(e.Error(), "json: ")), Err: err}
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return &Error{Code: CodeInvalid, Message: "malformed JSON: the body ends inside the object", Err: err}
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		field := strings.Trim(name, `"`)
		return &Error{Code: CodeInvalid, Field: field, Message: fmt.Sprintf("unknown field; allowed: %s", allowed), Err: err}
	}
	return &Error{Code: CodeInvalid, Message: "malformed JSON: " + strings.TrimPrefix(err.Error(), "json: "), Err: err}
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

// authAdmin checks the admin bearer token in constant time (hashing first,
// so that not even the length leaks).
func (s *Server) authAdmin(r *http.Request) error {
	h := r.Header.Get("Authorization")
	scheme, token, ok := strings.Cut(h, " ")
	token = strings.TrimSpace(token)
	if h == "" || !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return &Error{Code: CodeUnauthorized, Message: "missing Authorization: Bearer <admin token>"}
	}
	got := sha256.Sum256([]byte(token))
	if subtle.ConstantTimeCompare(got[:], s.adminHash[:]) != 1 {
		return &Error{Code: CodeUnauthorized, Message: "admin token invalid"}
	}
	return nil
}

// statusRecorder remembers the status a handler wrote.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

// WriteHeader remembers the first status.
func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

// Write remembers 200 if no status was written.
func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// logRequests logs every request at Debug and turns a panic into a 500.
func (s *Server) logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w}
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				err := &Error{Code: CodeInternal, Message: "handler panicked", Err: fmt.Errorf("panic: %v", p)}
				if rec.status == 0 {
					s.writeError(rec, r, err)
				} else {
					s.log.Error("institution: http: handler panicked after answering", "method", r.Method, "path", r.URL.Path, "err", err)
				}
			}
			s.log.Debug("institution: http request", "method", r.Method, "path", r.URL.Path,
				"status", rec.status, "took", time.Since(start), "remote", r.RemoteAddr)
		}()
		next.ServeHTTP(rec, r)
	})
}
