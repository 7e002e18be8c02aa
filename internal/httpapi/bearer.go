package httpapi

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
	"time"

	"github.com/stampede-lab/stampede"
)

// BearerGuard authorizes requests by one bearer token (an admin token),
// compared in constant time over the tokens' SHA-256 (so that the length
// leaks nothing either), with a FailureThrottle in front: a client prefix
// that sent too many wrong tokens is refused (429) before its token is
// even compared.
type BearerGuard struct {
	hash     [sha256.Size]byte
	throttle *FailureThrottle
	what     string
}

// NewBearerGuard guards with token, allowing failures wrong tokens per
// client prefix a minute; what names the token in messages ("admin
// token").
func NewBearerGuard(token string, failures int, what string) *BearerGuard {
	return &BearerGuard{hash: sha256.Sum256([]byte(token)), throttle: NewFailureThrottle(failures, time.Minute, nil), what: what}
}

// Authorize returns nil when r carries "Authorization: Bearer <token>",
// an Unauthorized error when not, and a RateLimited one when r's prefix
// is throttled.
func (g *BearerGuard) Authorize(r *http.Request) error {
	if err := g.throttle.Check(r, g.what); err != nil {
		return err
	}
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	sum := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	if !ok || !strings.EqualFold(scheme, "Bearer") || subtle.ConstantTimeCompare(sum[:], g.hash[:]) != 1 {
		g.throttle.Fail(r)
		return &stampede.Error{Code: stampede.Unauthorized, Message: "the " + g.what + " is required: Authorization: Bearer <" + g.what + ">"}
	}
	return nil
}
