package waitroom

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/protocol"
)

// Admission tokens are standard JWTs (RFC 7519) signed with EdDSA
// (Ed25519), so that a checkout in any language verifies them with the
// public keys of GET /.well-known/jwks.json and no shared secret:
//
//	header  {"alg":"EdDSA","kid":"<epoch>-<hash>","typ":"JWT"}
//	claims  {"iss":"stampede-waitroom","sub":"<user>","aud":["stampede-room:<room>"],
//	         "room":"<room>","seq":<n>,"adm":<admitted at>,"iat":..,"exp":..,"jti":"<room>:<seq>"}
//
// seq identifies the admission: a user who leaves and is admitted again
// gets a new one, so an online check (POST /admissions/check) fails for an
// old token at once. Offline verification proves only that the token was
// issued and has not expired: a slot released early still verifies
// offline until exp.
//
// Keys. Every instance behind one address must sign with the same keys, so
// they are derived, not generated: the Ed25519 seed of a key is
// HMAC-SHA256(secret, "stampede-admission-ed25519-v1\x00" || epoch), with
// the shared --secret and a key epoch (--key-epoch). Its kid is the epoch,
// a dash and 12 hex digits of the public key's SHA-256. To rotate, start
// every instance with a new epoch (or secret) and the old one as a previous
// key (--previous-key-epoch, --previous-secret): new tokens are signed with
// the new key, and the JWKS serves both until the old tokens have expired.

// AdmissionIssuer is the iss claim of every admission token.
const AdmissionIssuer = protocol.AdmissionIssuer

// keyDerivationLabel prefixes the HMAC input that derives a signing key.
const keyDerivationLabel = "stampede-admission-ed25519-v1\x00"

// KeySpec names one admission signing key: the secret and epoch it is
// derived from.
type KeySpec struct {
	// Secret is the shared secret, at least 32 bytes.
	Secret []byte
	// Epoch tells keys from one secret apart: 1 to 32 letters, digits,
	// '-', '_' or '.'.
	Epoch string
}

// DefaultKeyEpoch is the key epoch used when none is configured.
const DefaultKeyEpoch = "1"

// Validate reports every unusable field by its snake_case name (secret,
// key_epoch).
func (k KeySpec) Validate() error {
	var f stampede.Fields
	if len(k.Secret) < minSecretLen {
		f.Add("secret", "must be at least %d bytes, got %d", minSecretLen, len(k.Secret))
	}
	if len(k.Epoch) == 0 || len(k.Epoch) > 32 {
		f.Add("key_epoch", "must be 1 to 32 characters, got %d", len(k.Epoch))
	}
	for _, r := range k.Epoch {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			f.Add("key_epoch", "may contain only letters, digits, '-', '_' and '.', got %q", r)
			break
		}
	}
	return f.Err()
}

// admissionKey is one derived Ed25519 key pair with its kid.
type admissionKey struct {
	kid  string
	priv ed25519.PrivateKey
	pub  ed25519.PublicKey
}

// deriveKey derives the key pair of spec (see the key derivation above).
func deriveKey(spec KeySpec) (admissionKey, error) {
	if err := spec.Validate(); err != nil {
		return admissionKey{}, err
	}
	m := hmac.New(sha256.New, spec.Secret)
	m.Write([]byte(keyDerivationLabel))
	m.Write([]byte(spec.Epoch))
	priv := ed25519.NewKeyFromSeed(m.Sum(nil))
	pub := priv.Public().(ed25519.PublicKey)
	sum := sha256.Sum256(pub)
	return admissionKey{kid: spec.Epoch + "-" + hex.EncodeToString(sum[:6]), priv: priv, pub: pub}, nil
}

// AdmissionClaims are what an admission token says (the protocol's).
type AdmissionClaims = protocol.AdmissionClaims

// AdmissionSigner signs admission tokens with its current key and verifies
// them with the current and previous keys. It is safe for concurrent use.
type AdmissionSigner struct {
	current admissionKey
	keys    []admissionKey // current first
	signer  jose.Signer
	jwks    jose.JSONWebKeySet
	now     func() time.Time
}

// NewAdmissionSigner derives the signing key from current and verification
// keys from previous (for rotation). now is the clock; nil means time.Now.
func NewAdmissionSigner(current KeySpec, previous []KeySpec, now func() time.Time) (*AdmissionSigner, error) {
	if now == nil {
		now = time.Now
	}
	cur, err := deriveKey(current)
	if err != nil {
		return nil, err
	}
	s := &AdmissionSigner{current: cur, keys: []admissionKey{cur}, now: now}
	for _, p := range previous {
		k, err := deriveKey(p)
		if err != nil {
			return nil, fmt.Errorf("previous key: %w", err)
		}
		if k.kid == cur.kid {
			continue
		}
		s.keys = append(s.keys, k)
	}
	s.signer, err = jose.NewSigner(jose.SigningKey{Algorithm: jose.EdDSA, Key: jose.JSONWebKey{Key: cur.priv, KeyID: cur.kid}},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		return nil, &Error{Code: CodeInternal, Message: "cannot make the admission signer", Err: err}
	}
	for _, k := range s.keys {
		s.jwks.Keys = append(s.jwks.Keys, jose.JSONWebKey{Key: k.pub, KeyID: k.kid, Algorithm: string(jose.EdDSA), Use: "sig"})
	}
	return s, nil
}

// KeyID is the kid of the current signing key.
func (s *AdmissionSigner) KeyID() string { return s.current.kid }

// JWKS returns the public keys, current first, as a JSON Web Key Set.
func (s *AdmissionSigner) JWKS() jose.JSONWebKeySet { return s.jwks }

// Sign returns the admission token for c. Room, User and Expires are
// required; a zero IssuedAt means now and a zero AdmittedAt means
// IssuedAt.
func (s *AdmissionSigner) Sign(c AdmissionClaims) (string, error) {
	if c.IssuedAt.IsZero() {
		c.IssuedAt = s.now()
	}
	if c.AdmittedAt.IsZero() {
		c.AdmittedAt = c.IssuedAt
	}
	switch {
	case c.Room == "":
		return "", fieldError("room", "is required")
	case c.User == "":
		return "", fieldError("user", "is required")
	case c.Seq < 0:
		return "", fieldError("seq", "must not be negative, got %d", c.Seq)
	case c.Expires.Unix() <= c.IssuedAt.Unix():
		return "", fieldError("expires", "must be at least a second after issued_at")
	}
	tok, err := jwt.Signed(s.signer).Claims(c.StandardClaims()).Claims(c.PrivateClaims()).Serialize()
	if err != nil {
		return "", &Error{Code: CodeInternal, Message: "cannot sign the admission token", Err: err}
	}
	return tok, nil
}

// Verify checks an admission token for room against s's keys at s's
// clock (see VerifyAdmissionJWT).
func (s *AdmissionSigner) Verify(token, room string) (AdmissionClaims, error) {
	return VerifyAdmissionJWT(token, s.jwks, room, s.now())
}

// VerifyAdmissionJWT verifies an admission token offline (see
// protocol.VerifyAdmission).
func VerifyAdmissionJWT(token string, keys jose.JSONWebKeySet, room string, now time.Time) (AdmissionClaims, error) {
	return protocol.VerifyAdmission(token, keys, room, now)
}
