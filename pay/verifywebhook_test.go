package pay_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stampede-lab/stampede/pay"
)

// TestVerifyWebhookNeedsATolerance: a signature captured a day ago is
// refused whatever tolerance the receiver passes; 0 (which used to skip
// the check and accept a replay for ever) is refused as a mistake.
func TestVerifyWebhookNeedsATolerance(t *testing.T) {
	body := []byte(`{"id":"evt"}`)
	now := time.Now()
	old := pay.SignWebhook("whsec", now.Add(-24*time.Hour), body)
	for _, tol := range []time.Duration{0, -time.Second, pay.DefaultWebhookTolerance} {
		if err := pay.VerifyWebhook("whsec", old, body, now, tol); err == nil {
			t.Errorf("tolerance %s: a day-old signature verified", tol)
		}
	}
	if err := pay.VerifyWebhook("whsec", pay.SignWebhook("whsec", now, body), body, now, 0); !errors.Is(err, pay.ErrNoTolerance) {
		t.Errorf("tolerance 0 = %v, want ErrNoTolerance", err)
	}
	if err := pay.VerifyWebhook("whsec", pay.SignWebhook("whsec", now.Add(-time.Minute), body), body, now, pay.DefaultWebhookTolerance); err != nil {
		t.Errorf("a fresh signature: %v", err)
	}
}
