package institution

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/internal/httpapi"
)

// decodeJSON reads a request body holding exactly one JSON object of at
// most Config.MaxBody bytes into dst strictly; its errors are 400, 413 or
// 415 problems naming the field at fault.
func (s *Server) decodeJSON(w http.ResponseWriter, r *http.Request, dst any, allowed string) error {
	return httpapi.DecodeJSON(w, r, dst, s.cfg.MaxBody, allowed)
}

// authAdmin checks the admin bearer token in constant time (hashing first,
// so that not even the length leaks).
func (s *Server) authAdmin(r *http.Request) error {
	h := r.Header.Get("Authorization")
	scheme, token, ok := strings.Cut(h, " ")
	token = strings.TrimSpace(token)
	if h == "" || !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return &Error{Code: stampede.Unauthorized, Message: "missing Authorization: Bearer <admin token>"}
	}
	got := sha256.Sum256([]byte(token))
	if subtle.ConstantTimeCompare(got[:], s.adminHash[:]) != 1 {
		return &Error{Code: stampede.Unauthorized, Message: "admin token invalid"}
	}
	return nil
}

// admin wraps an admin endpoint's handler: 401 without the admin token.
func (s *Server) admin(fn httpapi.HandlerFunc) httpapi.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		if err := s.authAdmin(r); err != nil {
			return err
		}
		return fn(w, r)
	}
}
