package institution

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/stampede-lab/stampede/internal/httplog"
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
	return &Error{Code: Code(e.Kind.Code()), Field: e.Field, Message: e.Message, Err: e.Err}
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

// logRequests logs every request at Debug and turns a panic into a JSON
// 500 (see package httplog).
func (s *Server) logRequests(next http.Handler) http.Handler {
	return httplog.Wrap(s.log, "institution", next, func(w http.ResponseWriter, r *http.Request, err error) {
		s.writeError(w, r, &Error{Code: CodeInternal, Message: "handler panicked", Err: err})
	})
}
