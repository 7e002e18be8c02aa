package pay

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net"
	"net/url"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Merchant is an account that may create and read payments. It
// authenticates with an API key, of which only the SHA-256 hash is
// stored.
type Merchant struct {
	ID            string // a UUID (NewID: v7), canonical lower-case form
	Name          string // printable UTF-8, at most MaxMerchantNameLen bytes
	KeyHash       string // HashAPIKey of the merchant's API key
	WebhookURL    string // "" when no webhook is registered
	WebhookSecret string // the webhook signing secret; "" without a webhook
	CreatedAt     time.Time
	RevokedAt     *time.Time // nil while the merchant's key is valid
}

// Revoked reports whether the merchant's key was revoked.
func (m Merchant) Revoked() bool { return m.RevokedAt != nil }

// MaxMerchantNameLen is the longest merchant name accepted.
const MaxMerchantNameLen = 128

// apiKeyPrefix starts every API key, so that a leaked key is easy to
// recognise (secret scanners, logs).
const apiKeyPrefix = "sk_"

// NewAPIKey returns a new random API key: "sk_" and 32 random bytes,
// base64url. Only its hash (HashAPIKey) is stored.
func NewAPIKey() string { return apiKeyPrefix + randomToken() }

// NewWebhookSecret returns a new random webhook signing secret: "whsec_"
// and 32 random bytes, base64url.
func NewWebhookSecret() string { return "whsec_" + randomToken() }

func randomToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// HashAPIKey returns the stored form of an API key: the hex SHA-256 of
// the key. The keys have 256 random bits, so a fast unsalted hash is
// enough (no password stretching is needed), and looking a key up by its
// hash leaks nothing through timing that would help guess another key.
func HashAPIKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// MerchantStore persists merchants. The SQL store implements it beside
// Store.
type MerchantStore interface {
	// CreateMerchant inserts m (ID, Name, KeyHash and CreatedAt set).
	CreateMerchant(ctx context.Context, m Merchant) error
	// Merchants returns every merchant, revoked ones included, ordered by
	// CreatedAt then ID.
	Merchants(ctx context.Context) ([]Merchant, error)
	// Merchant returns the merchant id, or ErrNotFound.
	Merchant(ctx context.Context, id string) (Merchant, error)
	// MerchantByKeyHash returns the merchant whose key hash is hash and
	// that is not revoked, or ErrNotFound.
	MerchantByKeyHash(ctx context.Context, hash string) (Merchant, error)
	// RevokeMerchant revokes the merchant's key at at; revoking a revoked
	// merchant changes nothing. ErrNotFound if there is no such merchant.
	RevokeMerchant(ctx context.Context, id string, at time.Time) error
	// SetWebhook registers (or, with url "", removes) the merchant's
	// webhook URL and signing secret. ErrNotFound if there is no such
	// merchant.
	SetWebhook(ctx context.Context, id, url, secret string) error
}

// ValidateText checks a text field as every store must see it: valid
// UTF-8, printable characters only (so no NUL and no control
// characters), 1 to max bytes. SQLite would store anything and
// PostgreSQL refuses NUL and invalid UTF-8 with an error; checking here
// answers both with the same 400 naming field.
func ValidateText(field, s string, max int) error {
	switch {
	case s == "":
		return Invalid(field, "is required")
	case len(s) > max:
		return Invalid(field, "must be at most %d bytes", max)
	case !utf8.ValidString(s):
		return Invalid(field, "must be valid UTF-8")
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return Invalid(field, "must hold printable characters only (no NUL or control characters), found %U", r)
		}
	}
	return nil
}

// ValidateMerchantName checks a merchant's name.
func ValidateMerchantName(name string) error {
	return ValidateText("name", name, MaxMerchantNameLen)
}

// MaxWebhookURLLen is the longest webhook URL accepted.
const MaxWebhookURLLen = 2048

// ValidateWebhookURL checks a webhook URL: absolute https, or http to a
// loopback host (127.0.0.0/8, ::1, localhost) for tests and local
// receivers; no user information or fragment.
func ValidateWebhookURL(raw string) error {
	if err := ValidateText("url", raw, MaxWebhookURLLen); err != nil {
		return err
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return Invalid("url", "must be an absolute URL")
	case u.Host == "" || u.Hostname() == "":
		return Invalid("url", "must name a host")
	case u.User != nil:
		return Invalid("url", "must not carry user information")
	case u.Fragment != "":
		return Invalid("url", "must not have a fragment")
	case u.Scheme == "https":
		return nil
	case u.Scheme == "http" && IsLoopback(u.Hostname()):
		return nil
	case u.Scheme == "http":
		return Invalid("url", "must be https (http is allowed to a loopback host only)")
	}
	return Invalid("url", "must be an https URL")
}

// IsLoopback reports whether host (no port) is a loopback host:
// "localhost" or a loopback IP address.
func IsLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// ScopedKey is the key an idempotency record is stored under: the
// merchant's ID, "/" and the client's Idempotency-Key. Keys are scoped per
// merchant, as Stripe scopes them per account: two merchants using the
// same key create two payments.
func ScopedKey(merchantID, key string) string { return merchantID + "/" + key }

// maxScopedKeyLen is the longest ScopedKey: a UUID, "/", a key.
const maxScopedKeyLen = 36 + 1 + MaxIdempotencyKeyLen
