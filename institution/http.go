package institution

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/stampede-lab/stampede/internal/jsonbody"
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
// strictly (see package jsonbody) and maps its errors to this package's.
func (s *Server) decodeJSON(w http.ResponseWriter, r *http.Request, dst any, allowed string) error {
	err := jsonbody.Decode(w, r, dst, s.cfg.MaxBody, allowed)
	e, ok := errors.AsType[*jsonbody.Error](err)
	if !ok {
		return err
	}
	code := CodeInvalid
	switch e.Kind {
	case jsonbody.Unsupported:
		code = CodeUnsupported
	case jsonbody.TooLarge:
		code = CodeTooLarge
	}
	return &Error{Code: code, Field: e.Field, Message: e.Message, Err: e.Err}
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
