package waitroom

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"hash"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/stampede-lab/stampede/internal/jsonbody"
)

// Token format
//
//	base64url(payload) "." base64url(HMAC-SHA256(key, prefix(kind) || payload))
//
// Both parts use unpadded URL-safe base64. The payload is the JSON of
// tokenPayload exactly as encoding/json writes it; Verify accepts that
// canonical form only, so a token verifies only if it is byte for byte what
// Sign would produce for its claims. The MAC input starts with a prefix that
// names the kind, so a ticket token never verifies as an admission token nor
// the other way round.

const (
	// minSecretLen is the shortest secret NewSigner accepts: 256 bits, the
	// size of HMAC-SHA256's output.
	minSecretLen = 32
	// maxTokenLen bounds the tokens Verify will look at, before any decoding.
	maxTokenLen = 4096
	// macPrefix starts every MAC input; the kind and a NUL follow it.
	macPrefix = "stampede-waitroom-token-v1\x00"
)

// b64 is strict unpadded URL-safe base64: non-zero trailing bits are an
// error, so every byte string has exactly one encoding. (The decoder still
// skips CR and LF; Verify rejects those before decoding.)
var b64 = base64.RawURLEncoding.Strict()

// The messages of token errors. None carries the secret or a MAC.
const (
	msgMalformed = "malformed token"
	msgSignature = "token signature invalid"
	msgWrongKind = "wrong token kind"
	msgExpired   = "token expired"
)

// Signer signs and verifies tokens with one secret. It is safe for
// concurrent use. The zero Signer signs and verifies nothing; make one with
// NewSigner.
type Signer struct {
	key []byte
	now func() time.Time
	// macs holds HMAC-SHA256 states keyed with key, so that a token's MAC
	// does not set up the key's inner and outer pads again.
	macs sync.Pool
}

// NewSigner returns a Signer keyed with secret, which must be at least 32
// bytes (use random bytes, not a password). now is the clock Sign and Verify
// read; nil means time.Now. The secret is copied.
func NewSigner(secret []byte, now func() time.Time) (*Signer, error) {
	if len(secret) < minSecretLen {
		return nil, fieldError("secret", "must be at least %d bytes, got %d", minSecretLen, len(secret))
	}
	if now == nil {
		now = time.Now
	}
	s := &Signer{key: bytes.Clone(secret), now: now}
	s.macs.New = func() any { return hmac.New(sha256.New, s.key) }
	return s, nil
}

// TokenKind says what a token proves.
type TokenKind string

// The token kinds.
const (
	// TicketToken proves that the bearer holds user U's ticket of one
	// join (Generation) in room R. It is handed out at join and sent as
	// "Authorization: Bearer" to read or leave that ticket; it proves
	// nothing about the user's later joins.
	TicketToken TokenKind = "ticket"
	// AdmissionToken is the HMAC form of an admission: user U admitted to
	// room R until Expires, verified with VerifyAdmission and the shared
	// secret. The server no longer issues it: admission tokens are JWTs
	// (jwt.go, VerifyAdmissionJWT), verifiable without the secret.
	AdmissionToken TokenKind = "admission"
)

// tokenKinds lists every kind a token can have.
var tokenKinds = [...]TokenKind{TicketToken, AdmissionToken}

// known reports whether k is one of the token kinds.
func (k TokenKind) known() bool {
	for _, kk := range tokenKinds {
		if k == kk {
			return true
		}
	}
	return false
}

// Claims are what a token says. Times have whole-second precision in a
// token: Sign truncates them and Verify returns them in UTC.
type Claims struct {
	// Kind is the token's kind.
	Kind TokenKind
	// Room is the room the token is for.
	Room string
	// User is the user the token is for.
	User string
	// Seq is the user's arrival sequence number in the room. Only
	// admission tokens carry it; it is 0 in ticket tokens.
	Seq int64
	// Generation is the join a ticket token is for (Ticket.Generation).
	// Only ticket tokens carry it, and they must.
	Generation int64
	// Place is where the holder of a ticket token stood at a store read
	// (Ticket.Place), so that any instance can answer their polls from
	// its room view; nil when the token carries none. Only ticket tokens
	// carry one.
	Place *Place
	// IssuedAt is when the token was signed; Sign fills in the signer's
	// clock when it is zero.
	IssuedAt time.Time
	// Expires is when the token stops verifying.
	Expires time.Time
}

// tokenPayload is the JSON inside a token. The field order is the order
// encoding/json writes, which is the one canonical form.
type tokenPayload struct {
	Kind     TokenKind `json:"k"`
	Room     string    `json:"r"`
	User     string    `json:"u"`
	Expires  int64     `json:"exp"`
	IssuedAt int64     `json:"iat"`
	Seq      *int64    `json:"seq,omitempty"` // admission tokens only
	Gen      *int64    `json:"g,omitempty"`   // ticket tokens only
	// Place is a ticket token's Place: rank, admitted, departed, order.
	Place *[4]int64 `json:"p,omitempty"`
}

// payload checks c and turns it into a token payload. The errors name the
// offending field.
func (c Claims) payload() (tokenPayload, error) {
	var p tokenPayload
	switch {
	case c.Kind == "":
		return p, fieldError("kind", "is required")
	case !c.Kind.known():
		return p, fieldError("kind", "must be %q or %q, got %q", TicketToken, AdmissionToken, c.Kind)
	case c.Room == "":
		return p, fieldError("room", "is required")
	case !utf8.ValidString(c.Room):
		return p, fieldError("room", "must be valid UTF-8")
	case c.User == "":
		return p, fieldError("user", "is required")
	case !utf8.ValidString(c.User):
		return p, fieldError("user", "must be valid UTF-8")
	case c.Expires.IsZero():
		return p, fieldError("expires", "is required")
	case c.IssuedAt.Unix() <= 0:
		return p, fieldError("issued_at", "must be after 1970-01-01T00:00:00Z")
	case c.Expires.Unix() <= c.IssuedAt.Unix():
		return p, fieldError("expires", "must be at least a second after issued_at")
	case c.Seq < 0:
		return p, fieldError("seq", "must not be negative, got %d", c.Seq)
	case c.Kind != AdmissionToken && c.Seq != 0:
		return p, fieldError("seq", "only admission tokens carry a sequence number")
	case c.Kind == TicketToken && c.Generation <= 0:
		return p, fieldError("generation", "a ticket token must name its join, got %d", c.Generation)
	case c.Kind != TicketToken && c.Generation != 0:
		return p, fieldError("generation", "only ticket tokens carry a generation")
	case c.Kind != TicketToken && c.Place != nil:
		return p, fieldError("place", "only ticket tokens carry a place")
	case c.Place != nil && (c.Place.Rank < 0 || c.Place.Admitted < 0 || c.Place.Departed < 0 || c.Place.Order < 0):
		return p, fieldError("place", "must not be negative, got %+v", *c.Place)
	}
	p = tokenPayload{
		Kind:     c.Kind,
		Room:     c.Room,
		User:     c.User,
		Expires:  c.Expires.Unix(),
		IssuedAt: c.IssuedAt.Unix(),
	}
	if c.Kind == AdmissionToken {
		seq := c.Seq
		p.Seq = &seq
	}
	if c.Kind == TicketToken {
		gen := c.Generation
		p.Gen = &gen
	}
	if c.Place != nil {
		p.Place = &[4]int64{c.Place.Rank, c.Place.Admitted, c.Place.Departed, c.Place.Order}
	}
	return p, nil
}

// claims turns a parsed payload back into Claims.
func (p tokenPayload) claims() Claims {
	c := Claims{
		Kind:     p.Kind,
		Room:     p.Room,
		User:     p.User,
		IssuedAt: time.Unix(p.IssuedAt, 0).UTC(),
		Expires:  time.Unix(p.Expires, 0).UTC(),
	}
	if p.Seq != nil {
		c.Seq = *p.Seq
	}
	if p.Gen != nil {
		c.Generation = *p.Gen
	}
	if p.Place != nil {
		c.Place = &Place{Rank: p.Place[0], Admitted: p.Place[1], Departed: p.Place[2], Order: p.Place[3]}
	}
	return c
}

// Ready reports a Signer that was not made by NewSigner.
func (s *Signer) Ready() error {
	if s == nil || len(s.key) < minSecretLen || s.now == nil {
		return &Error{Code: CodeInternal, Message: "token signer not initialised (use NewSigner)"}
	}
	return nil
}

// Now is the signer's clock.
func (s *Signer) Now() time.Time { return s.now() }

// Secret is the secret s was made with. The HTTP API derives the other
// keys of the same instance from it (proof-of-work challenges, and the
// admission keys when none are configured).
func (s *Signer) Secret() []byte { return s.key }

// MinSecretLen is the shortest secret NewSigner, SignUser and KeySpec
// accept: 256 bits, the size of HMAC-SHA256's output.
const MinSecretLen = minSecretLen

// macHeads are the starts of the MAC inputs of the token kinds: macPrefix,
// the kind and a NUL.
var macHeads = func() map[TokenKind][]byte {
	m := make(map[TokenKind][]byte, len(tokenKinds))
	for _, k := range tokenKinds {
		m[k] = []byte(macPrefix + string(k) + "\x00")
	}
	return m
}()

// mac is the MAC of body as a token of kind.
func (s *Signer) mac(kind TokenKind, body []byte) []byte {
	return s.appendMAC(nil, kind, body)
}

// appendMAC appends the MAC of body as a token of kind to dst.
func (s *Signer) appendMAC(dst []byte, kind TokenKind, body []byte) []byte {
	head, ok := macHeads[kind]
	if !ok {
		head = []byte(macPrefix + string(kind) + "\x00")
	}
	m := s.macs.Get().(hash.Hash)
	m.Reset()
	m.Write(head)
	m.Write(body)
	dst = m.Sum(dst)
	s.macs.Put(m)
	return dst
}

// appendPayload appends p's JSON exactly as encoding/json writes it (the
// canonical form; TestPayloadEncodingIsCanonical holds it to that).
func appendPayload(dst []byte, p tokenPayload) []byte {
	dst = append(dst, `{"k":`...)
	dst = jsonbody.AppendString(dst, string(p.Kind))
	dst = append(dst, `,"r":`...)
	dst = jsonbody.AppendString(dst, p.Room)
	dst = append(dst, `,"u":`...)
	dst = jsonbody.AppendString(dst, p.User)
	dst = append(dst, `,"exp":`...)
	dst = strconv.AppendInt(dst, p.Expires, 10)
	dst = append(dst, `,"iat":`...)
	dst = strconv.AppendInt(dst, p.IssuedAt, 10)
	if p.Seq != nil {
		dst = append(dst, `,"seq":`...)
		dst = strconv.AppendInt(dst, *p.Seq, 10)
	}
	if p.Gen != nil {
		dst = append(dst, `,"g":`...)
		dst = strconv.AppendInt(dst, *p.Gen, 10)
	}
	if p.Place != nil {
		for i, n := range p.Place {
			if i == 0 {
				dst = append(dst, `,"p":[`...)
			} else {
				dst = append(dst, ',')
			}
			dst = strconv.AppendInt(dst, n, 10)
		}
		dst = append(dst, ']')
	}
	return append(dst, '}')
}

// Sign returns the token for c. Kind, Room, User and Expires are required
// (the errors name the missing field); a zero IssuedAt means now. Seq is
// for admission tokens only. Times are truncated to whole seconds, and
// Expires must then be after IssuedAt.
func (s *Signer) Sign(c Claims) (string, error) {
	if err := s.Ready(); err != nil {
		return "", err
	}
	if c.IssuedAt.IsZero() {
		c.IssuedAt = s.now()
	}
	p, err := c.payload()
	if err != nil {
		return "", err
	}
	// One buffer holds the payload, its MAC and then the token: room for
	// them all when no character of the room or user needs an escape.
	est := 180 + len(p.Room) + len(p.User)
	buf := make([]byte, 0, est+sha256.Size+b64.EncodedLen(est)+1+b64.EncodedLen(sha256.Size))
	buf = appendPayload(buf, p)
	n := len(buf)
	buf = s.appendMAC(buf, c.Kind, buf[:n])
	body, mac := buf[:n:n], buf[n:]
	size := b64.EncodedLen(len(body)) + 1 + b64.EncodedLen(len(mac))
	if size > maxTokenLen {
		return "", &Error{Code: CodeInvalid, Message: fmt.Sprintf("token would be %d bytes, over the limit of %d (room or user too long)", size, maxTokenLen)}
	}
	start := len(buf)
	buf = slices.Grow(buf, size)[:start+size]
	body, mac = buf[:n:n], buf[n:start] // buf may have moved
	tok := buf[start:]
	b64.Encode(tok, body)
	tok[b64.EncodedLen(len(body))] = '.'
	b64.Encode(tok[b64.EncodedLen(len(body))+1:], mac)
	return string(tok), nil
}

// tokenError is an unauthorized error with msg.
func tokenError(msg string, cause error) error {
	return &Error{Code: CodeUnauthorized, Message: msg, Err: cause}
}

// Verify checks token and returns its claims if it is a valid, unexpired
// token of kind signed with s's secret. Its errors are *Error values with
// code CodeUnauthorized and one of the messages "malformed token", "token
// signature invalid", "wrong token kind" or "token expired".
//
// The signature is checked, in constant time, before the payload is parsed,
// and only the canonical encoding Sign produces is accepted.
func (s *Signer) Verify(token string, kind TokenKind) (Claims, error) {
	if err := s.Ready(); err != nil {
		return Claims{}, err
	}
	if !kind.known() {
		return Claims{}, &Error{Code: CodeInternal, Message: fmt.Sprintf("cannot verify unknown token kind %q", kind)}
	}
	if len(token) > maxTokenLen {
		return Claims{}, tokenError(msgMalformed, nil)
	}
	if !tokenAlphabet(token) || strings.Count(token, ".") != 1 {
		return Claims{}, tokenError(msgMalformed, nil)
	}
	enc, encMAC, _ := strings.Cut(token, ".")
	body, err := b64.DecodeString(enc)
	if err != nil || len(body) == 0 {
		return Claims{}, tokenError(msgMalformed, nil)
	}
	mac, err := b64.DecodeString(encMAC)
	if err != nil || len(mac) != sha256.Size {
		return Claims{}, tokenError(msgMalformed, nil)
	}
	if !hmac.Equal(mac, s.mac(kind, body)) {
		// A genuine token of another kind is reported as such; it is
		// still never parsed.
		for _, other := range tokenKinds {
			if other != kind && hmac.Equal(mac, s.mac(other, body)) {
				return Claims{}, tokenError(msgWrongKind, nil)
			}
		}
		return Claims{}, tokenError(msgSignature, nil)
	}

	p, err := parsePayload(body)
	if err != nil {
		return Claims{}, tokenError(msgMalformed, err)
	}
	if p.Kind != kind {
		return Claims{}, tokenError(msgWrongKind, nil)
	}
	if (p.Seq != nil) != (kind == AdmissionToken) || (p.Gen != nil) != (kind == TicketToken) {
		return Claims{}, tokenError(msgMalformed, nil)
	}
	c := p.claims()
	if _, err := c.payload(); err != nil { // empty room or user, bad times
		return Claims{}, tokenError(msgMalformed, err)
	}
	if !s.now().Before(c.Expires) {
		return Claims{}, tokenError(msgExpired, nil)
	}
	return c, nil
}

// tokenAlphabet reports whether every byte of token is in the URL-safe
// base64 alphabet or is a dot.
func tokenAlphabet(token string) bool {
	for i := 0; i < len(token); i++ {
		switch b := token[i]; {
		case 'A' <= b && b <= 'Z', 'a' <= b && b <= 'z', '0' <= b && b <= '9',
			b == '-', b == '_', b == '.':
		default:
			return false
		}
	}
	return true
}

// parsePayload parses the JSON of a token strictly: unknown fields,
// trailing data and any encoding other than the canonical one are errors.
func parsePayload(body []byte) (tokenPayload, error) {
	// The common case, without escapes, is read by hand; it is accepted
	// only if writing it back gives body again, as below.
	if p, ok := parseCanonical(body); ok && bytes.Equal(appendPayload(make([]byte, 0, len(body)), p), body) {
		return p, nil
	}
	var p tokenPayload
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return tokenPayload{}, err
	}
	// Re-encoding catches trailing data, whitespace, duplicate or
	// differently cased keys, escapes and field order.
	canon, err := json.Marshal(p)
	if err != nil {
		return tokenPayload{}, err
	}
	if !bytes.Equal(canon, body) {
		return tokenPayload{}, fmt.Errorf("payload is not in canonical form")
	}
	return p, nil
}

// VerifyAdmission verifies an HMAC admission token (kind AdmissionToken;
// the server now issues JWTs instead, see VerifyAdmissionJWT) for room, signed with secret,
// at time now. It is for downstream services (a checkout) that share the
// waiting room's secret. Token errors are as Verify's; a genuine admission
// to another room is an *Error with code CodeForbidden; a short secret, an
// empty room or a zero now is an *Error with code CodeInvalid naming it.
func VerifyAdmission(token string, secret []byte, room string, now time.Time) (Claims, error) {
	if room == "" {
		return Claims{}, fieldError("room", "is required")
	}
	if now.IsZero() {
		return Claims{}, fieldError("now", "is required")
	}
	s, err := NewSigner(secret, func() time.Time { return now })
	if err != nil {
		return Claims{}, err
	}
	c, err := s.Verify(token, AdmissionToken)
	if err != nil {
		return Claims{}, err
	}
	if c.Room != room {
		return Claims{}, &Error{Code: CodeForbidden, Message: "admission token is for another room"}
	}
	return c, nil
}

// parseCanonical reads a payload in the canonical form appendPayload
// writes when no string needs an escape; ok is false for anything else
// (the caller then decodes it with encoding/json). The caller still
// compares the payload written back with body.
func parseCanonical(body []byte) (p tokenPayload, ok bool) {
	rest := body
	str := func(key string) (string, bool) {
		if !bytes.HasPrefix(rest, []byte(key)) {
			return "", false
		}
		rest = rest[len(key):]
		end := bytes.IndexByte(rest, '"')
		if end < 0 || bytes.IndexByte(rest[:end], '\\') >= 0 {
			return "", false
		}
		v := string(rest[:end])
		rest = rest[end+1:]
		return v, true
	}
	num := func(key string) (int64, bool) {
		if !bytes.HasPrefix(rest, []byte(key)) {
			return 0, false
		}
		rest = rest[len(key):]
		end := 0
		for end < len(rest) && (rest[end] == '-' || rest[end] >= '0' && rest[end] <= '9') {
			end++
		}
		n, err := strconv.ParseInt(string(rest[:end]), 10, 64)
		rest = rest[end:]
		return n, err == nil
	}
	var kind, room, user string
	if kind, ok = str(`{"k":"`); !ok {
		return p, false
	}
	if room, ok = str(`,"r":"`); !ok {
		return p, false
	}
	if user, ok = str(`,"u":"`); !ok {
		return p, false
	}
	p.Kind, p.Room, p.User = TokenKind(kind), room, user
	if p.Expires, ok = num(`,"exp":`); !ok {
		return p, false
	}
	if p.IssuedAt, ok = num(`,"iat":`); !ok {
		return p, false
	}
	if bytes.HasPrefix(rest, []byte(`,"seq":`)) {
		n, ok := num(`,"seq":`)
		if !ok {
			return p, false
		}
		p.Seq = &n
	}
	if bytes.HasPrefix(rest, []byte(`,"g":`)) {
		n, ok := num(`,"g":`)
		if !ok {
			return p, false
		}
		p.Gen = &n
	}
	if bytes.HasPrefix(rest, []byte(`,"p":[`)) {
		rest = rest[len(`,"p":`):]
		var pl [4]int64
		for i := range pl {
			sep := ","
			if i == 0 {
				sep = "["
			}
			if pl[i], ok = num(sep); !ok {
				return p, false
			}
		}
		if len(rest) == 0 || rest[0] != ']' {
			return p, false
		}
		rest = rest[1:]
		p.Place = &pl
	}
	return p, string(rest) == "}"
}
