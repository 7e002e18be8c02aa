package console

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/stampede-lab/stampede"
)

// Names of the session cookie and the CSRF header.
const (
	// CookieName is the session cookie.
	CookieName = "stampede_console"
	// CSRFHeader must carry the session's CSRF token on every control.
	CSRFHeader = "X-CSRF-Token"
)

// sessions signs and checks session cookies and their CSRF tokens. A
// session is "<expiry unix seconds>.<MAC>": nothing to store, valid on
// every console that has the same admin token.
type sessions struct {
	key       []byte            // MAC key, derived from the admin token
	tokenHash [sha256.Size]byte // SHA-256 of the admin token, for the login compare
	ttl       time.Duration
	now       func() time.Time
	secure    bool
}

func newSessions(adminToken string, ttl time.Duration, now func() time.Time, secure bool) *sessions {
	m := hmac.New(sha256.New, []byte(adminToken))
	m.Write([]byte("stampede console session key v1"))
	return &sessions{key: m.Sum(nil), tokenHash: sha256.Sum256([]byte(adminToken)), ttl: ttl, now: now, secure: secure}
}

// checkToken compares a typed token with the admin token in constant time
// (over SHA-256 sums, so that the length leaks nothing either).
func (s *sessions) checkToken(typed string) bool {
	sum := sha256.Sum256([]byte(typed))
	return subtle.ConstantTimeCompare(sum[:], s.tokenHash[:]) == 1
}

func (s *sessions) mac(purpose, msg string) string {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(purpose + "\x00" + msg))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// issue returns a new session value.
func (s *sessions) issue() string {
	exp := strconv.FormatInt(s.now().Add(s.ttl).Unix(), 10)
	return exp + "." + s.mac("session", exp)
}

// valid reports whether v is a session this console signed that has not
// expired.
func (s *sessions) valid(v string) bool {
	exp, sig, ok := strings.Cut(v, ".")
	if !ok {
		return false
	}
	want := s.mac("session", exp)
	if subtle.ConstantTimeCompare([]byte(sig), []byte(want)) != 1 {
		return false
	}
	n, err := strconv.ParseInt(exp, 10, 64)
	return err == nil && s.now().Unix() < n
}

// csrf is the CSRF token of session v.
func (s *sessions) csrf(v string) string { return s.mac("csrf", v) }

// cookie is the session cookie for value v (expired when v is empty).
func (s *sessions) cookie(v string) *http.Cookie {
	c := &http.Cookie{Name: CookieName, Value: v, Path: "/console", HttpOnly: true, Secure: s.secure,
		SameSite: http.SameSiteStrictMode}
	if v == "" {
		c.MaxAge = -1
	} else {
		c.Expires = s.now().Add(s.ttl)
	}
	return c
}

// session returns the request's valid session, or "".
func (s *sessions) session(r *http.Request) string {
	c, err := r.Cookie(CookieName)
	if err != nil || !s.valid(c.Value) {
		return ""
	}
	return c.Value
}

// errLogin is the answer to an API call without a valid session.
var errLogin = &stampede.Error{Code: stampede.Unauthorized, Message: "log in to the console first (POST /console/login)"}

// authorize checks the session of an API read.
func (s *sessions) authorize(r *http.Request) (string, error) {
	v := s.session(r)
	if v == "" {
		return "", errLogin
	}
	return v, nil
}

// authorizeControl checks the session and the CSRF header of a control.
func (s *sessions) authorizeControl(r *http.Request) error {
	v, err := s.authorize(r)
	if err != nil {
		return err
	}
	got := r.Header.Get(CSRFHeader)
	if got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(s.csrf(v))) != 1 {
		return &stampede.Error{Code: stampede.Forbidden, Field: CSRFHeader,
			Message: "a control needs the page's CSRF token in the " + CSRFHeader + " header"}
	}
	return nil
}

// sameOrigin reports whether a form post comes from the console's own
// page: no Origin header (an older browser, or not a browser) or one
// naming the request's host.
func sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	_, host, ok := strings.Cut(o, "://")
	return ok && host == r.Host
}
