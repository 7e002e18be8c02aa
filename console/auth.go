package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"sync"
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

// LoginFailures is how many wrong admin tokens one client address (an
// IPv6 /64) may type in a minute; past that the login answers 429 until
// the minute ends, right token or not.
const LoginFailures = 5

// sessions signs and checks session cookies and their CSRF tokens. A
// session is "<expiry unix seconds>.<random id>.<MAC>", valid on every
// console that has the same admin token; a logout revokes its id on the
// console that received it (remembered until the session would have
// expired).
type sessions struct {
	key       []byte            // MAC key, derived from the admin token
	tokenHash [sha256.Size]byte // SHA-256 of the admin token, for the login compare
	ttl       time.Duration
	now       func() time.Time
	secure    bool

	mu      sync.Mutex
	revoked map[string]int64 // session → its expiry (Unix seconds)
}

func newSessions(adminToken string, ttl time.Duration, now func() time.Time, secure bool) *sessions {
	m := hmac.New(sha256.New, []byte(adminToken))
	m.Write([]byte("stampede console session key v1"))
	return &sessions{key: m.Sum(nil), tokenHash: sha256.Sum256([]byte(adminToken)), ttl: ttl, now: now, secure: secure,
		revoked: map[string]int64{}}
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
	var id [16]byte
	rand.Read(id[:]) // never fails (crypto/rand)
	msg := strconv.FormatInt(s.now().Add(s.ttl).Unix(), 10) + "." + base64.RawURLEncoding.EncodeToString(id[:])
	return msg + "." + s.mac("session", msg)
}

// valid reports whether v is a session this console signed that has not
// expired nor been logged out.
func (s *sessions) valid(v string) bool {
	i := strings.LastIndexByte(v, '.')
	if i < 0 {
		return false
	}
	msg, sig := v[:i], v[i+1:]
	exp, _, ok := strings.Cut(msg, ".")
	if !ok {
		return false
	}
	want := s.mac("session", msg)
	if subtle.ConstantTimeCompare([]byte(sig), []byte(want)) != 1 {
		return false
	}
	n, err := strconv.ParseInt(exp, 10, 64)
	if err != nil || s.now().Unix() >= n {
		return false
	}
	s.mu.Lock()
	_, gone := s.revoked[v]
	s.mu.Unlock()
	return !gone
}

// revoke ends session v (a valid one) for good, dropping revocations of
// sessions that have expired anyway.
func (s *sessions) revoke(v string) {
	exp, _, _ := strings.Cut(v, ".")
	n, err := strconv.ParseInt(exp, 10, 64)
	if err != nil {
		return
	}
	now := s.now().Unix()
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, e := range s.revoked {
		if e <= now {
			delete(s.revoked, k)
		}
	}
	s.revoked[v] = n
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
