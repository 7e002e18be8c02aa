package waitroom

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/stampede-lab/stampede"
)

// Invites. A room (or a window of its schedule) may take joins only from
// buyers the site invited: the site signs single-use enqueue tokens with
// an Ed25519 private key it keeps, and the room's configuration holds the
// public key (invite_key), so nothing secret is stored in, or shown by,
// the waiting room. A token names an invite id of the site's choosing and
// an expiry:
//
//	<id>.<expires>.<sig>
//
// where id is 1 to 64 of [A-Za-z0-9_-], expires decimal Unix seconds and
// sig the unpadded base64url Ed25519 signature of "stampede-invite-v1", a
// NUL, the room, a NUL, the id, a NUL and expires (SignInvite).
//
// The token, not the device, holds the place: a join with an invite is
// the user InvitePrefix+id, so a second device with the same token gets
// the same ticket (and its ticket token: the invite proves the place, as
// a ticket token does). Once that place is finished (left, released,
// expired, closed, abandoned) the token is refused (ErrInviteUsed); the
// store remembers used invites until a day after they expire, and an
// expired token is refused before the store is asked.

// InvitePrefix starts the user id of every invited join: a join may not
// name such an id itself.
const InvitePrefix = "invite-"

// inviteLabel prefixes the signed message of an invite.
const inviteLabel = "stampede-invite-v1\x00"

// MaxInviteLen bounds an invite token before it is parsed.
const MaxInviteLen = 200

// Invite is a parsed invite token.
type Invite struct {
	// ID is the site's name for the invite; the place's user id is
	// InvitePrefix+ID.
	ID string
	// Expires is when the token stops being accepted.
	Expires time.Time
	// sig is the signature.
	sig []byte
}

// User returns the user id that holds the invite's place.
func (i Invite) User() string { return InvitePrefix + i.ID }

// inviteMessage is what an invite's signature covers.
func inviteMessage(room, id string, expires int64) []byte {
	return []byte(inviteLabel + room + "\x00" + id + "\x00" + strconv.FormatInt(expires, 10))
}

// SignInvite returns the token with which a site invites one buyer (any
// number of devices) to room until expires. Any language computes it with
// its Ed25519 library; this function is the reference.
func SignInvite(key ed25519.PrivateKey, room, id string, expires time.Time) string {
	e := expires.Unix()
	return id + "." + strconv.FormatInt(e, 10) + "." +
		base64.RawURLEncoding.EncodeToString(ed25519.Sign(key, inviteMessage(room, id, e)))
}

// EncodeInviteKey returns the invite_key of a room for pub: unpadded
// base64url.
func EncodeInviteKey(pub ed25519.PublicKey) string { return base64.RawURLEncoding.EncodeToString(pub) }

// decodeInviteKey reads an invite_key: 32 bytes in base64url or standard
// base64, padded or not.
func decodeInviteKey(s string) (ed25519.PublicKey, error) {
	s = strings.TrimRight(s, "=")
	for _, enc := range []*base64.Encoding{base64.RawURLEncoding, base64.RawStdEncoding} {
		if b, err := enc.DecodeString(s); err == nil && len(b) == ed25519.PublicKeySize {
			return ed25519.PublicKey(b), nil
		}
	}
	return nil, errors.New("must be an Ed25519 public key: 32 bytes in base64url (43 characters)")
}

// validInviteID reports whether id is 1 to 64 of [A-Za-z0-9_-].
func validInviteID(id string) bool {
	if len(id) == 0 || len(id) > 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// ParseInvite decodes an invite token's parts without checking its
// signature. Errors are invalid-field errors naming "invite".
func ParseInvite(token string) (Invite, error) {
	bad := func(why string) (Invite, error) { return Invite{}, fieldError("invite", "%s", why) }
	if len(token) == 0 || len(token) > MaxInviteLen {
		return bad("must be an invite token of 1 to 200 characters: id.expires.signature")
	}
	id, rest, ok1 := strings.Cut(token, ".")
	exp, sig, ok2 := strings.Cut(rest, ".")
	if !ok1 || !ok2 {
		return bad("must be an invite token: id.expires.signature")
	}
	if !validInviteID(id) {
		return bad("has a bad id: 1 to 64 letters, digits, '-' or '_'")
	}
	e, err := strconv.ParseInt(exp, 10, 64)
	if err != nil || e <= 0 || e > 253402300799 || exp[0] == '0' || exp[0] == '+' {
		return bad("has a bad expiry: decimal Unix seconds")
	}
	s, err := base64.RawURLEncoding.Strict().DecodeString(sig)
	if err != nil || len(s) != ed25519.SignatureSize {
		return bad("has a bad signature: 86 base64url characters")
	}
	return Invite{ID: id, Expires: time.Unix(e, 0).UTC(), sig: s}, nil
}

// VerifyInvite checks an invite token for room under key (the room's
// invite_key) at now: well formed, signed by the key's owner for this
// room, not expired. Errors are *Error values naming the field "invite":
// 403 when the room takes no invites, 400 for a malformed token, 401 for
// a forged or expired one.
func VerifyInvite(key, room, token string, now time.Time) (Invite, error) {
	if key == "" {
		return Invite{}, &Error{Code: CodeForbidden, Field: "invite", Message: "this room takes no invites (it has no invite_key)"}
	}
	pub, err := decodeInviteKey(key)
	if err != nil {
		return Invite{}, &Error{Code: CodeForbidden, Field: "invite", Message: "this room's invite_key is unusable"}
	}
	inv, err := ParseInvite(token)
	if err != nil {
		return Invite{}, err
	}
	if !ed25519.Verify(pub, inviteMessage(room, inv.ID, inv.Expires.Unix()), inv.sig) {
		return Invite{}, &Error{Code: CodeUnauthorized, Field: "invite", Message: "signature invalid: not an invite to this room"}
	}
	if !now.Before(inv.Expires) {
		return Invite{}, &Error{Code: CodeUnauthorized, Field: "invite", Message: "the invite has expired"}
	}
	return inv, nil
}

// The errors of invited joins.
var (
	// ErrInviteRequired refuses a join without an invite while the room,
	// or its window in force (or next to open), takes invited buyers only.
	ErrInviteRequired = &Error{Code: CodeInviteRequired, Kind: stampede.Forbidden, Field: "invite",
		Message: "this sale is by invitation only now: join with your invite"}
	// ErrInviteUsed refuses an invite whose place has been used and is
	// finished.
	ErrInviteUsed = &Error{Code: CodeInviteUsed, Kind: stampede.Conflict, Field: "invite",
		Message: "this invite has been used already"}
)

// InviteStore is a Store that takes invited joins.
type InviteStore interface {
	// JoinInvite is Join for the place of an invite: user is
	// Invite.User(). A live place is returned unchanged (any number of
	// devices); a finished one is refused with ErrInviteUsed; a new one
	// is queued and the invite recorded as used until a day after
	// expires. A plain Join is refused with ErrInviteRequired while the
	// room takes invited buyers only.
	JoinInvite(ctx context.Context, room, user string, expires time.Time) (Ticket, error)
}

// JoinInvite puts the holder of a verified invite in room's queue, or
// returns their place (see InviteStore).
func (s *Service) JoinInvite(ctx context.Context, room string, inv Invite) (Ticket, error) {
	if err := ValidateRoom(room); err != nil {
		return Ticket{}, err
	}
	is, ok := s.store.(InviteStore)
	if !ok {
		return Ticket{}, &Error{Code: CodeUnsupported, Field: "invite", Message: "this waiting room's store takes no invites"}
	}
	return s.withPlace(room, func() (Ticket, error) { return is.JoinInvite(ctx, room, inv.User(), inv.Expires) })
}
