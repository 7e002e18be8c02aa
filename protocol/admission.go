package protocol

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/stampede-lab/stampede"
)

// Admission tokens are standard JWTs (RFC 7519) signed with EdDSA
// (Ed25519), so that a service in any language verifies them with the
// public keys the waiting room serves at /.well-known/jwks.json and no
// shared secret:
//
//	header  {"alg":"EdDSA","kid":"<epoch>-<hash>","typ":"JWT"}
//	claims  {"iss":"stampede-waitroom","sub":"<user>","aud":["stampede-room:<room>"],
//	         "room":"<room>","seq":<n>,"adm":<admitted at>,"iat":..,"exp":..,"jti":"<room>:<seq>"}
//
// seq identifies the admission: a user who leaves and is admitted again
// gets a new one, so an online check fails for an old token at once.
// Offline verification proves only that the token was issued and has not
// expired: a slot released early still verifies offline until exp.

// AdmissionIssuer is the iss claim of every admission token.
const AdmissionIssuer = "stampede-waitroom"

// AdmissionAudiencePrefix starts the aud claim; the room follows.
const AdmissionAudiencePrefix = "stampede-room:"

// MaxTokenLen bounds the tokens VerifyAdmission looks at, before any
// decoding.
const MaxTokenLen = 4096

// The messages of a token that does not verify (Unauthorized errors).
const (
	MsgMalformed = "malformed token"
	MsgSignature = "token signature invalid"
	MsgExpired   = "token expired"
)

// AdmissionClaims are what an admission token says.
type AdmissionClaims struct {
	// Room is the room the user was admitted to.
	Room string
	// User is the admitted user (the sub claim).
	User string
	// Seq is the user's arrival sequence number: it identifies this
	// admission.
	Seq int64
	// AdmittedAt is when the admission began (whole seconds); a gate
	// caps the sliding lease from it.
	AdmittedAt time.Time
	// IssuedAt is when the token was signed.
	IssuedAt time.Time
	// Expires is when the token stops verifying offline: the lease's end
	// when it was signed.
	Expires time.Time
	// KeyID is the kid of the key that signed the token (set by
	// VerifyAdmission).
	KeyID string
}

// JWTClaims are the private claims of an admission token, beside the
// registered ones.
type JWTClaims struct {
	Room       string `json:"room"`
	Seq        int64  `json:"seq"`
	AdmittedAt int64  `json:"adm"`
}

// StandardClaims returns the registered claims of c's token.
func (c AdmissionClaims) StandardClaims() jwt.Claims {
	return jwt.Claims{
		Issuer:   AdmissionIssuer,
		Subject:  c.User,
		Audience: jwt.Audience{AdmissionAudiencePrefix + c.Room},
		IssuedAt: jwt.NewNumericDate(c.IssuedAt),
		Expiry:   jwt.NewNumericDate(c.Expires),
		ID:       fmt.Sprintf("%s:%d", c.Room, c.Seq),
	}
}

// PrivateClaims returns the private claims of c's token.
func (c AdmissionClaims) PrivateClaims() JWTClaims {
	return JWTClaims{Room: c.Room, Seq: c.Seq, AdmittedAt: c.AdmittedAt.Unix()}
}

func tokenError(msg string, cause error) error {
	return &stampede.Error{Code: stampede.Unauthorized, Message: msg, Err: cause}
}

// VerifyAdmission verifies an admission token offline: its EdDSA signature
// by a key of keys (matched by kid), its issuer, that it is for room, and
// that now is before its expiry. It proves that the token was issued, not
// that the slot is still held: ask an AdmissionChecker for that.
//
// Its errors are *stampede.Error values: Unauthorized with MsgMalformed,
// MsgSignature or MsgExpired; Forbidden for a genuine admission to another
// room; Invalid for an empty room or a zero now.
func VerifyAdmission(token string, keys jose.JSONWebKeySet, room string, now time.Time) (AdmissionClaims, error) {
	if room == "" {
		return AdmissionClaims{}, stampede.InvalidField("room", "is required")
	}
	if now.IsZero() {
		return AdmissionClaims{}, stampede.InvalidField("now", "is required")
	}
	if len(token) > MaxTokenLen || len(token) == 0 || !canonical(token) {
		return AdmissionClaims{}, tokenError(MsgMalformed, nil)
	}
	tok, err := jwt.ParseSigned(token, []jose.SignatureAlgorithm{jose.EdDSA})
	if err != nil || len(tok.Headers) != 1 {
		return AdmissionClaims{}, tokenError(MsgMalformed, err)
	}
	kid := tok.Headers[0].KeyID
	found := keys.Key(kid)
	if kid == "" || len(found) == 0 {
		return AdmissionClaims{}, tokenError(MsgSignature, nil)
	}
	var std jwt.Claims
	var priv JWTClaims
	if err := tok.Claims(found[0].Key, &std, &priv); err != nil {
		return AdmissionClaims{}, tokenError(MsgSignature, err)
	}
	if std.Issuer != AdmissionIssuer || std.Subject == "" || priv.Room == "" || std.Expiry == nil || std.IssuedAt == nil ||
		!std.Audience.Contains(AdmissionAudiencePrefix+priv.Room) {
		return AdmissionClaims{}, tokenError(MsgMalformed, nil)
	}
	if !now.Before(std.Expiry.Time()) {
		return AdmissionClaims{}, tokenError(MsgExpired, nil)
	}
	if priv.Room != room {
		return AdmissionClaims{}, &stampede.Error{Code: stampede.Forbidden, Message: "admission token is for another room"}
	}
	return AdmissionClaims{
		Room: priv.Room, User: std.Subject, Seq: priv.Seq,
		AdmittedAt: time.Unix(priv.AdmittedAt, 0).UTC(),
		IssuedAt:   std.IssuedAt.Time().UTC(), Expires: std.Expiry.Time().UTC(), KeyID: kid,
	}, nil
}

// KeySource gives the public keys admission tokens are verified with: the
// waiting room's JWKS, fetched and cached by an adapter, or a fixed set.
type KeySource interface {
	// AdmissionKeys returns the current key set. An error means the keys
	// could not be had (the verifier answers Unavailable).
	AdmissionKeys(ctx context.Context) (jose.JSONWebKeySet, error)
}

// KeyRefresher is a KeySource that can fetch its keys again when a token
// names a key it does not hold (the waiting room rotated its keys since the
// last fetch). AdmissionVerifier asks it at most once per token; the
// source bounds how often it really fetches.
type KeyRefresher interface {
	KeySource
	// RefreshAdmissionKeys returns the key set, fetched again if it
	// lacks kid and the source's bound allows.
	RefreshAdmissionKeys(ctx context.Context, kid string) (jose.JSONWebKeySet, error)
}

// AdmissionKeyID returns the kid in an admission token's header, or ""
// for a token that does not parse.
func AdmissionKeyID(token string) string {
	if len(token) > MaxTokenLen || len(token) == 0 {
		return ""
	}
	tok, err := jwt.ParseSigned(token, []jose.SignatureAlgorithm{jose.EdDSA})
	if err != nil || len(tok.Headers) != 1 {
		return ""
	}
	return tok.Headers[0].KeyID
}

// StaticKeys is a KeySource with a fixed key set.
type StaticKeys jose.JSONWebKeySet

// AdmissionKeys returns the set.
func (k StaticKeys) AdmissionKeys(context.Context) (jose.JSONWebKeySet, error) {
	return jose.JSONWebKeySet(k), nil
}

// AdmissionStatus is what the waiting room says online of an admission.
type AdmissionStatus struct {
	// Held is true while the admission holds its slot.
	Held bool
	// Reason says why it is not held: expired, released, superseded,
	// no_ticket, not_admitted, invalid_token, other_room.
	Reason string
	// User is the admitted user; ExpiresAt the end of the slot's lease.
	User      string
	ExpiresAt time.Time
}

// AdmissionChecker asks the waiting room online whether an admission token
// still holds its slot in room. A *stampede.Error it returns is the
// token's fault (a 4xx); any other error means the waiting room could not
// say.
type AdmissionChecker interface {
	CheckAdmission(ctx context.Context, room, token string) (AdmissionStatus, error)
}

// AdmissionVerifier is how a service that trusts an admission checks it:
// the token against the keys, sub equal to the user the request names,
// and optionally the online check.
type AdmissionVerifier struct {
	// Room is the room admissions must be for.
	Room string
	// Keys gives the waiting room's public keys.
	Keys KeySource
	// Online, when set, is asked after the offline check whether the
	// slot is still held.
	Online AdmissionChecker
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Validate reports every missing field at once.
func (v AdmissionVerifier) Validate() error {
	var f stampede.Fields
	if v.Room == "" {
		f.Add("room", "is required: the waiting room's room the admissions are for")
	}
	if v.Keys == nil {
		f.Add("keys", "is required: the waiting room's JWKS")
	}
	return f.Err()
}

// Verify checks the admission token of a request that names user (the
// HeaderUser value): Unauthorized naming HeaderAdmission for a missing,
// malformed, forged or expired token; Forbidden for another room's or
// another user's token, or one whose slot the online check says is not
// held; Unavailable when the keys or the online check cannot be had.
func (v AdmissionVerifier) Verify(ctx context.Context, token, user string) (AdmissionClaims, error) {
	if token == "" {
		return AdmissionClaims{}, &stampede.Error{Code: stampede.Unauthorized, Field: HeaderAdmission,
			Message: "header is required: the admission token the waiting room issued"}
	}
	keys, err := v.Keys.AdmissionKeys(ctx)
	if err != nil {
		return AdmissionClaims{}, stampede.UnavailableErr("the waiting room's keys", err)
	}
	now := time.Now
	if v.Now != nil {
		now = v.Now
	}
	c, err := VerifyAdmission(token, keys, v.Room, now())
	if r, ok := v.Keys.(KeyRefresher); ok && err != nil {
		if kid := AdmissionKeyID(token); kid != "" && len(keys.Key(kid)) == 0 {
			if keys, rerr := r.RefreshAdmissionKeys(ctx, kid); rerr == nil {
				c, err = VerifyAdmission(token, keys, v.Room, now())
			}
		}
	}
	if err != nil {
		e := *stampede.As(err)
		e.Field = HeaderAdmission
		return AdmissionClaims{}, &e
	}
	if user != "" && c.User != user {
		return AdmissionClaims{}, &stampede.Error{Code: stampede.Forbidden, Field: HeaderUser, Message: "the admission is another user's"}
	}
	if v.Online == nil {
		return c, nil
	}
	st, err := v.Online.CheckAdmission(ctx, v.Room, token)
	if err != nil {
		if e, ok := err.(*stampede.Error); ok && e.Class() != stampede.Unavailable && e.Class() != stampede.Internal && e.Class() != stampede.Timeout {
			return AdmissionClaims{}, e
		}
		return AdmissionClaims{}, stampede.UnavailableErr("the waiting room", err)
	}
	if !st.Held {
		return AdmissionClaims{}, &stampede.Error{Code: stampede.Forbidden, Field: HeaderAdmission,
			Message: "the admission no longer holds its slot (" + st.Reason + "); join the waiting room again"}
	}
	if st.ExpiresAt.After(c.Expires) {
		c.Expires = st.ExpiresAt
	}
	return c, nil
}

// canonical reports whether token is three segments of canonical
// unpadded base64url: the JWT parser also accepts a last character whose
// unused bits are set, another spelling of the same bytes, and a token is
// accepted only as it was signed.
func canonical(token string) bool {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return false
	}
	for _, p := range parts {
		if _, err := base64.RawURLEncoding.Strict().DecodeString(p); err != nil {
			return false
		}
	}
	return true
}
