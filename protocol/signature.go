package protocol

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The signature of a body Stampede POSTs to someone else's endpoint: pay's
// webhooks and the fulfilment outlet sign alike, in Stripe's scheme, so
// one receiver-side check (VerifySignature, or Stripe's libraries) serves
// both.
const (
	// HeaderSignature carries the signature: "t=<unix seconds>,v1=<hex
	// HMAC-SHA256 of "<unix seconds>.<body>" under the shared secret>".
	HeaderSignature = "Stampede-Signature"
	// HeaderEventID carries the id of the event in the body, the same on
	// every attempt; receivers de-duplicate by it.
	HeaderEventID = "Stampede-Event-Id"
	// DefaultSignatureTolerance is how far a signature's timestamp may be
	// from the receiver's clock: five minutes, as Stripe's libraries use.
	DefaultSignatureTolerance = 5 * time.Minute
)

// Errors of VerifySignature.
var (
	ErrBadSignature   = errors.New("signature does not match")
	ErrStaleSignature = errors.New("signature timestamp outside the tolerance")
	ErrNoTolerance    = errors.New("signature tolerance must be positive (DefaultSignatureTolerance is 5m)")
)

// Sign returns the HeaderSignature value of body sent at t under secret:
// "t=<unix seconds>,v1=<hex HMAC-SHA256 of "<unix seconds>.<body>">".
func Sign(secret string, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(signatureMAC(secret, ts, body))
}

// signatureMAC is the HMAC-SHA256 of "<ts>.<body>" under secret.
func signatureMAC(secret, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts))
	m.Write([]byte("."))
	m.Write(body)
	return m.Sum(nil)
}

// VerifySignature checks a HeaderSignature value against body and secret,
// as a receiver should: one of its v1 signatures must match (compared in
// constant time), and its timestamp must be within tolerance of now
// (replay protection). tolerance must be positive
// (DefaultSignatureTolerance); 0 or less is refused with ErrNoTolerance,
// since no tolerance would accept a replay for ever.
func VerifySignature(secret, header string, body []byte, now time.Time, tolerance time.Duration) error {
	if tolerance <= 0 {
		return ErrNoTolerance
	}
	var (
		ts   string
		sigs [][]byte
	)
	for part := range strings.SplitSeq(header, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			if b, err := hex.DecodeString(v); err == nil {
				sigs = append(sigs, b)
			}
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || len(sigs) == 0 {
		return fmt.Errorf("%w: malformed header", ErrBadSignature)
	}
	want := signatureMAC(secret, ts, body)
	ok := false
	for _, s := range sigs {
		if hmac.Equal(s, want) {
			ok = true
		}
	}
	if !ok {
		return ErrBadSignature
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return ErrStaleSignature
	}
	return nil
}
