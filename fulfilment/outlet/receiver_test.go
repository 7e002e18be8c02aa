package outlet_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stampede-lab/stampede/fulfilment/outlet"
	"github.com/stampede-lab/stampede/protocol"
)

// TestOutletToReceiverExactlyOnceInOrder runs the outlet through the keyed
// consumer into the example Python receiver, which fails 5 % of the calls
// before applying and 3 % after (the answer lost), and is killed and
// restarted mid-run: every event is applied exactly once, and each
// payment's events in order.
func TestOutletToReceiverExactlyOnceInOrder(t *testing.T) {
	const (
		keys   = 20
		perKey = 15
		total  = keys * perKey
	)
	db := filepath.Join(t.TempDir(), "receiver.db")
	args := []string{"--fail-rate", "0.05", "--lost-answer-rate", "0.03"}
	rc := startReceiver(t, db, 0, args...)
	_, port, _ := strings.Cut(rc.addr, ":")
	s := newStream(t, 4)
	s.cfg.MaxAttempts = 0 // the receiver's restart must park nothing, however slow the machine
	cfg := testConfig(rc.url(), nil)
	o, err := outlet.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.consume(o.Deliver)

	payment := func(k int) string { return fmt.Sprintf("pay_%02d", k) }
	publish := func(from, to int64) {
		for seq := from; seq <= to; seq++ { // interleaved: every payment's seq, then the next seq
			for k := range keys {
				s.publish(payment(k), seq, seq)
			}
		}
	}
	publish(1, 7)
	waitUntil(t, 10*time.Second, "a third delivered", func() bool { return o.Stats().Delivered >= total/3 })
	// Killed without warning mid-run, then started again on the same port
	// and file while the rest is published.
	_ = rc.cmd.Process.Signal(syscall.SIGKILL)
	_ = rc.cmd.Wait()
	publish(8, perKey)
	time.Sleep(200 * time.Millisecond)
	p, _ := strconv.Atoi(port)
	rc = startReceiver(t, db, p, args...)
	waitUntil(t, 30*time.Second, "every event delivered", func() bool { return o.Stats().Delivered >= total })
	counts := rc.stop(t)
	st := o.Stats()
	t.Logf("outlet %+v; receiver after the restart %v", st, counts)

	rows := dump(t, db)
	if len(rows) != total {
		t.Errorf("%d events applied, want %d, each once", len(rows), total)
	}
	seen := map[string]bool{}
	next := map[string]int64{}
	for _, r := range rows {
		if seen[r.EventID] {
			t.Errorf("event %s applied twice", r.EventID)
		}
		seen[r.EventID] = true
		if r.Seq != next[r.PaymentID]+1 {
			t.Errorf("payment %s: event %d applied after %d: order lost", r.PaymentID, r.Seq, next[r.PaymentID])
		}
		next[r.PaymentID] = r.Seq
	}
	for k := range keys {
		if next[payment(k)] != perKey {
			t.Errorf("payment %s: applied up to %d, want %d", payment(k), next[payment(k)], perKey)
		}
	}
	// The failures happened: retried calls, and lost answers sent again
	// and recognised as duplicates.
	if st.Retries == 0 || counts["failed"]+counts["lost"] == 0 || counts["duplicate"] == 0 && counts["lost"] > 0 {
		t.Errorf("outlet %+v, receiver %v: want retries, failures and duplicates", st, counts)
	}
}

// TestReceiverRefusesForgedSignatures: the example receiver refuses a
// body signed with another secret, a stale signature, a tampered body and
// a missing signature (401), and applies the genuine one.
func TestReceiverRefusesForgedSignatures(t *testing.T) {
	db := filepath.Join(t.TempDir(), "receiver.db")
	rc := startReceiver(t, db, 0)
	body := eventBody(t, "pay_sig", 1)
	now := time.Now()
	post := func(sig string, body []byte) int {
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, rc.url(), bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(outlet.HeaderIdempotencyKey, "pay_sig-1")
		if sig != "" {
			req.Header.Set(protocol.HeaderSignature, sig)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	tampered := bytes.Replace(body, []byte(`"amount":1001`), []byte(`"amount":1`), 1)
	for name, c := range map[string]struct {
		sig  string
		body []byte
	}{
		"another secret":  {protocol.Sign("whsec_forged", now, body), body},
		"stale timestamp": {protocol.Sign(secret, now.Add(-10*time.Minute), body), body},
		"tampered body":   {protocol.Sign(secret, now, body), tampered},
		"no signature":    {"", body},
		"garbage":         {"t=abc,v1=zz", body},
	} {
		if code := post(c.sig, c.body); code != http.StatusUnauthorized {
			t.Errorf("%s: answered %d, want 401", name, code)
		}
	}
	if code := post(protocol.Sign(secret, now, body), body); code != http.StatusNoContent {
		t.Fatalf("genuine: answered %d, want 204", code)
	}
	counts := rc.stop(t)
	if rows := dump(t, db); len(rows) != 1 || rows[0].EventID != "pay_sig-1" || counts["refused"] != 5 {
		t.Errorf("applied %v, counts %v: want only the genuine event applied and 5 refused", rows, counts)
	}
}
