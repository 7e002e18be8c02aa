package protocol_test

import (
	"encoding/hex"
	"errors"
	"strconv"
	"testing"
	"time"

	stripewebhook "github.com/stripe/stripe-go/v82/webhook"

	"github.com/stampede-lab/stampede/protocol"
)

// TestSignatureIsStripes: a signature of protocol.Sign passes Stripe's own
// check (stripe-go's webhook.ValidatePayload), and Stripe's passes
// VerifySignature: a receiver may use either.
func TestSignatureIsStripes(t *testing.T) {
	body := []byte(`{"type":"payment.status_changed","payment_id":"p1","seq":2,"status":"APPROVED"}`)
	now := time.Now()
	if err := stripewebhook.ValidatePayload(body, protocol.Sign("whsec_1", now, body), "whsec_1"); err != nil {
		t.Errorf("stripe-go refuses protocol.Sign: %v", err)
	}
	stripes := "t=" + strconv.FormatInt(now.Unix(), 10) + ",v1=" + hex.EncodeToString(stripewebhook.ComputeSignature(now, body, "whsec_1"))
	if err := protocol.VerifySignature("whsec_1", stripes, body, now, protocol.DefaultSignatureTolerance); err != nil {
		t.Errorf("VerifySignature refuses stripe-go's signature: %v", err)
	}
}

// TestVerifySignatureRefuses: another secret, another body, an old or
// future timestamp, a malformed header and no tolerance are refused; a
// header with several v1 (a secret being rotated) passes if one matches.
func TestVerifySignatureRefuses(t *testing.T) {
	body := []byte(`{"a":1}`)
	now := time.Now()
	good := protocol.Sign("s", now, body)
	for name, c := range map[string]struct {
		header string
		body   []byte
		tol    time.Duration
		want   error
	}{
		"another secret": {protocol.Sign("t", now, body), body, time.Minute, protocol.ErrBadSignature},
		"another body":   {good, []byte(`{"a":2}`), time.Minute, protocol.ErrBadSignature},
		"too old":        {protocol.Sign("s", now.Add(-2*time.Minute), body), body, time.Minute, protocol.ErrStaleSignature},
		"too new":        {protocol.Sign("s", now.Add(2*time.Minute), body), body, time.Minute, protocol.ErrStaleSignature},
		"malformed":      {"v1=00", body, time.Minute, protocol.ErrBadSignature},
		"no tolerance":   {good, body, 0, protocol.ErrNoTolerance},
	} {
		if err := protocol.VerifySignature("s", c.header, c.body, now, c.tol); !errors.Is(err, c.want) {
			t.Errorf("%s: VerifySignature = %v, want %v", name, err, c.want)
		}
	}
	rotated := protocol.Sign("old", now, body) + "," + good[len("t=")+len(strconv.FormatInt(now.Unix(), 10))+1:]
	if err := protocol.VerifySignature("s", rotated, body, now, time.Minute); err != nil {
		t.Errorf("two v1, the second matching: %v", err)
	}
}
