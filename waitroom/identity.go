package waitroom

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Identity. A ticket belongs to whoever first received its token. A join
// comes in one of three ways:
//
//   - anonymous (the waiting page's default): no user_id; the server
//     assigns a random one (AnonymousID) and the ticket token is the only
//     handle on the ticket;
//   - trusted: the site vouches for its own user id with user_sig, an
//     HMAC-SHA256 over the room, the user id and user_expires under a
//     secret it shares with the waiting room (SignUser; compared in
//     constant time), the way Queue-it's KnownUser vouches for a visitor;
//   - unsigned: a bare user_id, accepted only when the room's server
//     explicitly allows it (HandlerConfig.AllowUnsignedUsers, off by
//     default).
//
// A join for a user who already holds a live ticket (waiting or admitted)
// returns that ticket's token only to a request that presents it
// ("Authorization: Bearer <ticket_token>"); any other such join answers
// 409 conflict and never reveals nor replaces the token, signed or not.

// AnonPrefix starts every server-assigned user id: a join may not name
// such an id itself.
const AnonPrefix = "anon-"

// anonEncoding is lower-case base32 without padding.
var anonEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// AnonymousID returns a new random user id: "anon-" and 128 bits from
// crypto/rand in lower-case base32 (26 characters).
func AnonymousID() string {
	var b [16]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	return AnonPrefix + anonEncoding.EncodeToString(b[:])
}

// anonKeyLabel prefixes the HMAC input of a keyed anonymous id.
const anonKeyLabel = "stampede-anon-v1\x00"

// Bounds of a join's Idempotency-Key (see KeyedAnonymousID).
const (
	MinJoinKeyLen = 16
	MaxJoinKeyLen = 128
)

// ValidateJoinKey checks an anonymous join's Idempotency-Key: 16 to 128
// visible ASCII characters (a random one per browser or device, never
// shown to anyone else).
func ValidateJoinKey(key string) error {
	if len(key) < MinJoinKeyLen || len(key) > MaxJoinKeyLen {
		return &Error{Code: CodeInvalid, Field: "Idempotency-Key", Message: fmt.Sprintf("must be %d to %d characters", MinJoinKeyLen, MaxJoinKeyLen)}
	}
	for i := 0; i < len(key); i++ {
		if key[i] <= ' ' || key[i] > '~' {
			return &Error{Code: CodeInvalid, Field: "Idempotency-Key", Message: "must be visible ASCII characters"}
		}
	}
	return nil
}

// KeyedAnonymousID returns the anonymous id of an anonymous join that
// carries key: "anon-" and 128 bits of HMAC-SHA256(secret, label || room ||
// NUL || key) in lower-case base32, so that a join tried again with the
// same key (its answer lost to a timeout) gets the same ticket back instead
// of leaving an orphan ticket in line. The key is the ticket's handle until
// the ticket token arrives: it must be as secret as the token.
func KeyedAnonymousID(secret []byte, room, key string) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(anonKeyLabel))
	m.Write([]byte(room))
	m.Write([]byte{0})
	m.Write([]byte(key))
	return AnonPrefix + anonEncoding.EncodeToString(m.Sum(nil)[:16])
}

// userSigLabel prefixes the HMAC input of a user signature.
const userSigLabel = "stampede-user-v1\x00"

// maxUserSigLen bounds a user_sig before it is decoded.
const maxUserSigLen = 2 * sha256.Size

// userMAC is HMAC-SHA256(secret, label || room || NUL || user || NUL ||
// expires as decimal Unix seconds).
func userMAC(secret []byte, room, user string, expires int64) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(userSigLabel))
	m.Write([]byte(room))
	m.Write([]byte{0})
	m.Write([]byte(user))
	m.Write([]byte{0})
	m.Write([]byte(strconv.FormatInt(expires, 10)))
	return m.Sum(nil)
}

// SignUser returns the user_sig with which a site vouches that user may
// join room until expires: the lower-case hex HMAC-SHA256, under the site
// secret, of "stampede-user-v1", a NUL, the room, a NUL, the user id, a
// NUL and expires as decimal Unix seconds. Any language computes it with
// its HMAC library; this function is the reference.
func SignUser(secret []byte, room, user string, expires time.Time) string {
	return hex.EncodeToString(userMAC(secret, room, user, expires.Unix()))
}

// MaxUserExpiry bounds a signed user id's life: a user_expires further
// than this from now is refused, so that a leaked signature is not a
// pass for ever. A site signs for minutes (a page view), not days.
const MaxUserExpiry = 24 * time.Hour

// VerifyUser checks a trusted join: sig must be SignUser's answer for
// room, user and expires under secret, now before expires, and expires
// at most MaxUserExpiry after now. The
// comparison is constant-time. Errors are *Error values naming the field.
func VerifyUser(secret []byte, room, user, sig string, expires int64, now time.Time) error {
	if len(secret) < minSecretLen {
		return &Error{Code: CodeForbidden, Message: "trusted joins are not enabled for this room (no site secret)"}
	}
	if len(sig) != maxUserSigLen {
		return &Error{Code: CodeUnauthorized, Field: "user_sig", Message: "must be 64 lower-case hex digits"}
	}
	got, err := hex.DecodeString(strings.ToLower(sig))
	if err != nil {
		return &Error{Code: CodeUnauthorized, Field: "user_sig", Message: "must be 64 lower-case hex digits"}
	}
	if !hmac.Equal(got, userMAC(secret, room, user, expires)) {
		return &Error{Code: CodeUnauthorized, Field: "user_sig", Message: "signature invalid"}
	}
	if now.Unix() >= expires {
		return &Error{Code: CodeUnauthorized, Field: "user_expires", Message: "the signed user id has expired"}
	}
	if expires > now.Add(MaxUserExpiry).Unix() {
		return &Error{Code: CodeInvalid, Field: "user_expires", Message: "must be at most 24 hours after now (MaxUserExpiry): sign for the visit, not for ever"}
	}
	return nil
}
