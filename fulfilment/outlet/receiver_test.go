package outlet_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stampede-lab/stampede/fulfilment/outlet"
	"github.com/stampede-lab/stampede/internal/freeport"
	"github.com/stampede-lab/stampede/protocol"
)

// TestOutletToReceiverExactlyOnceInOrder runs the outlet through the keyed
// consumer into the example Python receiver, which fails 5 % of the calls
// before applying and 3 % after (the answer lost), and is killed and
// restarted mid-run: every event is applied exactly once, and each
// payment's events in order.
//
// By hand, bigger and with other rates (not in CI):
//
//	STAMPEDE_OUTLET_EVENTS=10000 STAMPEDE_OUTLET_FAIL_RATE=0.01 STAMPEDE_OUTLET_LOST_RATE=0.01 \
//	  go test -run TestOutletToReceiverExactlyOnceInOrder -v ./fulfilment/outlet
//
// It runs on an embedded nats-server, and on the real one named by
// STAMPEDE_NATS_URL when set.
func TestOutletToReceiverExactlyOnceInOrder(t *testing.T) {
	t.Run("embedded", func(t *testing.T) { exactlyOnceInOrder(t, embedded(t)) })
	if url := os.Getenv("STAMPEDE_NATS_URL"); url != "" {
		t.Run("real", func(t *testing.T) { exactlyOnceInOrder(t, url) })
	}
}

func exactlyOnceInOrder(t *testing.T, url string) {
	const keys = 20
	total := envInt(t, "STAMPEDE_OUTLET_EVENTS", 300)
	perKey := int64(max(total/keys, 2))
	total = keys * int(perKey)
	failRate, lostRate := envString("STAMPEDE_OUTLET_FAIL_RATE", "0.05"), envString("STAMPEDE_OUTLET_LOST_RATE", "0.03")
	db := filepath.Join(t.TempDir(), "receiver.db")
	args := []string{"--fail-rate", failRate, "--lost-answer-rate", lostRate}
	// A port outside the ephemeral range: while the receiver is down, no
	// outgoing connection can take it, and its restart finds it free.
	p, err := freeport.Restartable()
	if err != nil {
		t.Fatal(err)
	}
	rc := startReceiver(t, db, p, args...)
	s := newStreamOn(t, url, 4)
	s.cfg.MaxAttempts = 0 // the receiver's restart must park nothing, however slow the machine
	cfg := testConfig(rc.url(), nil)
	o, err := outlet.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.consume(o.Deliver)

	payment := func(k int) string { return fmt.Sprintf("pay_%02d", k) }
	var payments []string
	for k := range keys {
		payments = append(payments, payment(k))
	}
	start := time.Now()
	s.publish(payments, 1, perKey/2)
	limit := 10*time.Second + time.Duration(total)*10*time.Millisecond
	waitUntil(t, limit, "a third delivered", func() bool { return o.Stats().Delivered >= uint64(total/3) })
	// Killed without warning mid-run, then started again on the same port
	// and file while the rest is published.
	_ = rc.cmd.Process.Signal(syscall.SIGKILL)
	_ = rc.cmd.Wait()
	killedAt := o.Stats().Delivered
	s.publish(payments, perKey/2+1, perKey)
	time.Sleep(200 * time.Millisecond)
	rc = startReceiver(t, db, p, args...)
	waitUntil(t, 20*time.Second+limit, "every event delivered", func() bool { return o.Stats().Delivered >= uint64(total) })
	took := time.Since(start)
	counts := rc.stop(t)
	st := o.Stats()
	t.Logf("%d events over %d payments in %s, the receiver killed after %d; outlet %+v; receiver after the restart %v",
		total, keys, took.Round(time.Millisecond), killedAt, st, counts)

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

// envInt reads a positive integer from the environment, or def.
func envInt(t testing.TB, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// envString reads a string from the environment, or def.
func envString(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
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
	if rows := dump(t, db); len(rows) != 1 || rows[0].EventID != "pay_sig-1" || counts["refused"] != 5 || counts["applied"] != 1 {
		t.Errorf("applied %v, counts %v: want only the genuine event applied and 5 refused", rows, counts)
	}
}
