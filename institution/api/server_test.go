package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/institution"
	"github.com/stampede-lab/stampede/institution/client"
	"github.com/stampede-lab/stampede/internal/httpapi"
)

func TestNormalApprovesAndChargesOnce(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	res, err := f.admin.Approve(ctx, req("pay-1"))
	if err != nil {
		t.Fatalf("Approve: %v", err)
	}
	if res.Status != institution.StatusApproved || res.ApprovalID == "" || res.ExternalKey != "pay-1" || res.Replayed {
		t.Fatalf("result %+v, want a fresh APPROVED with an approval id", res)
	}
	st, err := f.admin.Status(ctx, "pay-1")
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	if !st.Found || st.Status != institution.StatusApproved || st.Charges != 1 || st.Amount != 15000 || st.Currency != "KRW" || st.ApprovalID != res.ApprovalID || !st.Definitive {
		t.Fatalf("status %+v", st)
	}
	l := f.ledger(t)
	if l.ChargesTotal != 1 || l.Keys != 1 || l.ApprovedKeys != 1 || l.ChargesByKey["pay-1"] != 1 || l.DoubleChargedKeys != 0 {
		t.Fatalf("ledger %+v", l)
	}
	r := l.Records[0]
	if r.ApprovedAt.IsZero() || r.ApprovedAt.Location() != time.UTC || r.Requests != 1 {
		t.Fatalf("record %+v", r)
	}
}

func TestDeclineRecordsNoCharge(t *testing.T) {
	f := newFixture(t, nil)
	f.setBehavior(t, institution.ModeDecline, 0, true)
	ctx := context.Background()
	res, err := f.admin.Approve(ctx, req("pay-d"))
	if err != nil {
		t.Fatalf("a decline must be a result, not an error: %v", err)
	}
	if res.Status != institution.StatusDeclined || res.ApprovalID != "" {
		t.Fatalf("result %+v, want DECLINED without an approval id", res)
	}
	st, err := f.admin.Status(ctx, "pay-d")
	if err != nil || !st.Found || st.Status != institution.StatusDeclined || st.Charges != 0 {
		t.Fatalf("status %+v, %v", st, err)
	}
	if l := f.ledger(t); l.ChargesTotal != 0 || l.DeclinedKeys != 1 || l.Records[0].DeclinedAt.IsZero() {
		t.Fatalf("ledger %+v", l)
	}
	// Idempotent: a repeat in NORMAL mode replays the decline.
	f.setBehavior(t, institution.ModeNormal, 0, true)
	if res, err := f.admin.Approve(ctx, req("pay-d")); err != nil || res.Status != institution.StatusDeclined || !res.Replayed {
		t.Fatalf("repeat after a decline: %+v, %v", res, err)
	}
}

func TestErrorModeRecordsNothing(t *testing.T) {
	f := newFixture(t, nil)
	f.setBehavior(t, institution.ModeError, 0, true)
	ctx := context.Background()
	_, err := f.admin.Approve(ctx, req("pay-e"))
	if !errors.Is(err, client.ErrInstitution) || errors.Is(err, client.ErrUnknownOutcome) {
		t.Fatalf("Approve in mode ERROR: %v, want ErrInstitution", err)
	}
	if e, ok := errors.AsType[*institution.Error](err); !ok || e.Status != 500 || e.Code != institution.CodeInstitution {
		t.Fatalf("error %#v, want a 500 institution_error", err)
	}
	if l := f.ledger(t); l.Keys != 0 || l.ChargesTotal != 0 {
		t.Fatalf("mode ERROR recorded %+v", l)
	}
	if st, err := f.admin.Status(ctx, "pay-e"); err != nil || st.Found {
		t.Fatalf("status %+v, %v", st, err)
	}
}

func TestHangBeforeIsUnknownAndChargesNothing(t *testing.T) {
	f := newFixture(t, nil)
	f.setBehavior(t, institution.ModeHangBefore, 200, true)
	start := time.Now()
	_, err := f.client(50*time.Millisecond).Approve(context.Background(), req("pay-hb"))
	if !errors.Is(err, client.ErrUnknownOutcome) {
		t.Fatalf("Approve: %v, want ErrUnknownOutcome", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("the client's 50ms timeout took %s", took)
	}
	// The request may reach the server after the client gave up: wait
	// until it arrived and is no longer held.
	waitFor(t, "the request arrives and its hang ends", 5*time.Second, func() bool {
		return f.srv.Arrivals().Count == 1 && f.srv.Hung() == 0
	})
	if l := f.ledger(t); l.Keys != 0 || l.ChargesTotal != 0 {
		t.Fatalf("HANG_BEFORE_PROCESSING recorded %+v", l)
	}
	log, err := f.admin.Arrivals(context.Background())
	if err != nil || log.Count != 1 || log.Arrivals[0].ExternalKey != "pay-hb" || log.Arrivals[0].Mode != institution.ModeHangBefore {
		t.Fatalf("arrivals %+v, %v", log, err)
	}
}

func TestHangBeforeAnswers504WhenTheCallerWaits(t *testing.T) {
	f := newFixture(t, nil)
	f.setBehavior(t, institution.ModeHangBefore, 50, true)
	start := time.Now()
	_, err := f.client(5*time.Second).Approve(context.Background(), req("pay-hb2"))
	if !errors.Is(err, client.ErrUnknownOutcome) {
		t.Fatalf("Approve: %v, want ErrUnknownOutcome", err)
	}
	if e, ok := errors.AsType[*institution.Error](err); !ok || e.Status != http.StatusGatewayTimeout || e.Code != stampede.Timeout {
		t.Fatalf("error %v, want a 504 timeout", err)
	}
	if took := time.Since(start); took < 50*time.Millisecond {
		t.Fatalf("answered after %s, before the 50ms hang", took)
	}
	if l := f.ledger(t); l.ChargesTotal != 0 {
		t.Fatalf("charged %d", l.ChargesTotal)
	}
}

func TestHangAfterIsUnknownAndChargesOnce(t *testing.T) {
	f := newFixture(t, nil)
	f.setBehavior(t, institution.ModeHangAfter, 200, true)
	ctx := context.Background()
	_, err := f.client(50*time.Millisecond).Approve(ctx, req("pay-ha"))
	if !errors.Is(err, client.ErrUnknownOutcome) {
		t.Fatalf("Approve: %v, want ErrUnknownOutcome", err)
	}
	waitFor(t, "the request arrives and its hang ends", 5*time.Second, func() bool {
		return f.srv.Arrivals().Count == 1 && f.srv.Hung() == 0
	})
	if l := f.ledger(t); l.ChargesTotal != 1 || l.ChargesByKey["pay-ha"] != 1 {
		t.Fatalf("ledger %+v, want one charge: the money moved before the hang", l)
	}
	st, err := f.admin.Status(ctx, "pay-ha")
	if err != nil || !st.Found || st.Status != institution.StatusApproved || st.Charges != 1 {
		t.Fatalf("status %+v, %v", st, err)
	}
}

func TestHangAfterLateAnswerIsTheApproval(t *testing.T) {
	f := newFixture(t, nil)
	f.setBehavior(t, institution.ModeHangAfter, 50, true)
	res, err := f.client(5*time.Second).Approve(context.Background(), req("pay-ha2"))
	if err != nil || res.Status != institution.StatusApproved || res.ApprovalID == "" {
		t.Fatalf("Approve: %+v, %v", res, err)
	}
}

// TestIdempotencyDecidesDoubleCharges sends one key three times: an
// idempotent institution charges once, the other three times.
func TestIdempotencyDecidesDoubleCharges(t *testing.T) {
	for _, mode := range []institution.Mode{institution.ModeNormal, institution.ModeHangAfter} {
		for _, idem := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/idempotent=%v", mode, idem), func(t *testing.T) {
				f := newFixture(t, nil)
				f.setBehavior(t, mode, 100, idem)
				c := f.client(30 * time.Millisecond) // the hang mode times out, as a retrying client does
				ids := map[string]bool{}
				for range 3 {
					res, err := c.Approve(context.Background(), req("pay-r"))
					switch {
					case mode == institution.ModeHangAfter && !errors.Is(err, client.ErrUnknownOutcome):
						t.Fatalf("Approve: %v, want ErrUnknownOutcome", err)
					case mode == institution.ModeNormal && err != nil:
						t.Fatalf("Approve: %v", err)
					case err == nil:
						ids[res.ApprovalID] = true
					}
				}
				want := 1
				if !idem {
					want = 3
				}
				waitFor(t, "every request arrives and is answered", 5*time.Second, func() bool {
					return f.srv.Arrivals().Count == 3 && f.srv.Hung() == 0
				})
				l := f.ledger(t)
				if l.ChargesTotal != want || l.ChargesByKey["pay-r"] != want || l.Keys != 1 || l.Records[0].Requests != 3 {
					t.Fatalf("ledger %+v, want %d charges of one key from 3 requests", l, want)
				}
				if double := l.DoubleChargedKeys; (double == 1) == idem || l.ExtraCharges != want-1 {
					t.Fatalf("double_charged_keys %d, extra_charges %d", double, l.ExtraCharges)
				}
				if mode == institution.ModeNormal && len(ids) != want {
					t.Fatalf("approval ids %v, want %d distinct", ids, want)
				}
			})
		}
	}
}

func TestIdempotentRepeatWithAnotherAmountConflicts(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	if _, err := f.admin.Approve(ctx, req("pay-c")); err != nil {
		t.Fatal(err)
	}
	other := req("pay-c")
	other.Amount++
	_, err := f.admin.Approve(ctx, other)
	e, ok := errors.AsType[*institution.Error](err)
	if !errors.Is(err, client.ErrRejected) || !ok || e.Status != http.StatusConflict || e.Field != "external_key" {
		t.Fatalf("Approve with another amount: %v, want a 409 naming external_key", err)
	}
	if l := f.ledger(t); l.ChargesTotal != 1 {
		t.Fatalf("charged %d", l.ChargesTotal)
	}
}

func TestArrivalsAreUTCOrderedAndTakenBeforeTheHang(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			if _, err := f.admin.Approve(ctx, req(fmt.Sprintf("pay-%02d", i))); err != nil {
				t.Errorf("Approve: %v", err)
			}
		})
	}
	wg.Wait()
	f.setBehavior(t, institution.ModeHangBefore, 60_000, true)
	done := make(chan error, 1)
	go func() {
		_, err := f.client(0).Approve(ctx, req("pay-held"))
		done <- err
	}()
	waitFor(t, "the request is held", 2*time.Second, func() bool { return f.srv.Hung() == 1 })

	log, err := f.admin.Arrivals(ctx)
	if err != nil {
		t.Fatalf("Arrivals: %v", err)
	}
	if log.Count != 21 || len(log.Arrivals) != 21 || log.Dropped != 0 {
		t.Fatalf("%d arrivals (dropped %d), want 21: the held one counts on arrival", log.Count, log.Dropped)
	}
	for i, a := range log.Arrivals {
		if a.At.Location() != time.UTC || a.At.UnixNano() != a.UnixNano || a.Path != "/v1/approvals" || a.ExternalKey == "" {
			t.Errorf("arrival %d: %+v", i, a)
		}
		if i > 0 && a.UnixNano < log.Arrivals[i-1].UnixNano {
			t.Errorf("arrival %d at %s is before arrival %d at %s", i, a.At, i-1, log.Arrivals[i-1].At)
		}
	}
	if last := log.Arrivals[20]; last.ExternalKey != "pay-held" || last.Mode != institution.ModeHangBefore {
		t.Errorf("last arrival %+v, want the held request", last)
	}
	// The wire format: RFC 3339 with nanoseconds, in UTC ("Z").
	resp := adminGet(t, f, "/admin/arrivals")
	if !strings.Contains(resp, `"at":"`) || !strings.Contains(resp, `Z","unix_nano":`) {
		t.Errorf("arrivals JSON lacks UTC timestamps: %.300s", resp)
	}
	if _, err := f.admin.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	<-done
}

func TestArrivalLogDropsTheOldestBeyondItsBound(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.MaxArrivals = 3 })
	for i := range 5 {
		if _, err := f.admin.Approve(context.Background(), req(fmt.Sprintf("k%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	log, err := f.admin.Arrivals(context.Background())
	if err != nil || log.Count != 3 || log.Dropped != 2 || log.Arrivals[0].ExternalKey != "k2" || log.Arrivals[2].ExternalKey != "k4" {
		t.Fatalf("arrivals %+v, %v", log, err)
	}
}

// holdRequests starts n approvals that the server holds (with a 60 s hang)
// and returns their outcomes' channel once all are held.
func holdRequests(t *testing.T, f *fixture, mode institution.Mode, n int) <-chan error {
	t.Helper()
	f.setBehavior(t, mode, 60_000, true)
	base := f.srv.Hung()
	out := make(chan error, n)
	c := f.client(30 * time.Second)
	for i := range n {
		go func() {
			_, err := c.Approve(context.Background(), req(fmt.Sprintf("held-%s-%d", mode, i)))
			out <- err
		}()
	}
	waitFor(t, fmt.Sprintf("%d more requests are held", n), 5*time.Second, func() bool { return f.srv.Hung() == base+n })
	return out
}

// expectReleased waits for n outcomes, each a 504 released, within bound.
func expectReleased(t *testing.T, out <-chan error, n int, bound time.Duration) {
	t.Helper()
	deadline := time.After(bound)
	for range n {
		select {
		case err := <-out:
			e, ok := errors.AsType[*institution.Error](err)
			if !errors.Is(err, client.ErrUnknownOutcome) || !ok || e.Code != institution.CodeReleased || e.Status != http.StatusGatewayTimeout {
				t.Errorf("released request: %v, want ErrUnknownOutcome with a 504 released", err)
			}
		case <-deadline:
			t.Fatalf("a held request was not released within %s", bound)
		}
	}
}

func TestResetReleasesHeldRequestsPromptly(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	before := holdRequests(t, f, institution.ModeHangBefore, 3)
	after := holdRequests(t, f, institution.ModeHangAfter, 2)
	if l := f.ledger(t); l.ChargesTotal != 2 {
		t.Fatalf("HANG_AFTER charged %d, want 2 before holding", l.ChargesTotal)
	}
	start := time.Now()
	res, err := f.admin.Reset(ctx)
	if err != nil || res.Released != 5 || res.Behavior != institution.DefaultBehavior() {
		t.Fatalf("Reset: %+v, %v", res, err)
	}
	expectReleased(t, before, 3, 2*time.Second)
	expectReleased(t, after, 2, 2*time.Second)
	t.Logf("5 requests held for a 60s hang were released %s after the reset", time.Since(start))
	waitFor(t, "no request is held", time.Second, func() bool { return f.srv.Hung() == 0 })
	if l := f.ledger(t); l.Keys != 0 || l.ChargesTotal != 0 {
		t.Fatalf("ledger after reset %+v", l)
	}
	if log, _ := f.admin.Arrivals(ctx); log.Count != 0 {
		t.Fatalf("%d arrivals after reset", log.Count)
	}
	if b, err := f.admin.Behavior(ctx); err != nil || b != institution.DefaultBehavior() {
		t.Fatalf("behaviour after reset %+v, %v", b, err)
	}
	// Served normally afterwards.
	if res, err := f.admin.Approve(ctx, req("after-reset")); err != nil || res.Status != institution.StatusApproved {
		t.Fatalf("Approve after reset: %+v, %v", res, err)
	}
}

func TestCloseReleasesHeldRequestsAndFailsNewOnesFast(t *testing.T) {
	f := newFixture(t, nil)
	out := holdRequests(t, f, institution.ModeHangBefore, 3)
	f.srv.Close()
	expectReleased(t, out, 3, 2*time.Second)
	start := time.Now()
	_, err := f.admin.Approve(context.Background(), req("late"))
	e, ok := errors.AsType[*institution.Error](err)
	if !errors.Is(err, client.ErrInstitution) || !ok || e.Code != institution.CodeShuttingDown || e.Status != http.StatusServiceUnavailable {
		t.Fatalf("Approve after Close: %v, want ErrInstitution with a 503 shutting_down", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("Approve after Close took %s", took)
	}
	if l := f.ledger(t); l.Keys != 0 {
		t.Fatalf("recorded after Close: %+v", l)
	}
	f.srv.Close() // idempotent
}

func TestMaxHungAnswersBusyAtOnce(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.MaxHung = 2 })
	out := holdRequests(t, f, institution.ModeHangAfter, 2)
	start := time.Now()
	_, err := f.admin.Approve(context.Background(), req("one-too-many"))
	e, ok := errors.AsType[*institution.Error](err)
	if !errors.Is(err, client.ErrInstitution) || !ok || e.Code != institution.CodeBusy || e.Status != http.StatusServiceUnavailable {
		t.Fatalf("Approve beyond MaxHung: %v, want ErrInstitution with a 503 busy", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("busy took %s", took)
	}
	if l := f.ledger(t); l.ChargesTotal != 2 || l.ChargesByKey["one-too-many"] != 0 {
		t.Fatalf("ledger %+v: a busy request must not be charged", l)
	}
	if _, err := f.admin.Reset(context.Background()); err != nil {
		t.Fatal(err)
	}
	expectReleased(t, out, 2, 2*time.Second)
}

func TestStatusAPIDownIsUnavailable(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	if _, err := f.admin.Approve(ctx, req("pay-s")); err != nil {
		t.Fatal(err)
	}
	b := institution.DefaultBehavior()
	b.StatusAPI = institution.StatusAPIDown
	if _, err := f.admin.SetBehavior(ctx, b); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"pay-s", "never-seen"} {
		_, err := f.admin.Status(ctx, key)
		e, ok := errors.AsType[*institution.Error](err)
		if !errors.Is(err, client.ErrStatusUnavailable) || !ok || e.Status != http.StatusServiceUnavailable || e.Code != institution.CodeStatusDown {
			t.Errorf("Status(%s) with the status API down: %v, want ErrStatusUnavailable", key, err)
		}
	}
	// Approvals keep working.
	if _, err := f.admin.Approve(ctx, req("pay-s2")); err != nil {
		t.Fatalf("Approve with the status API down: %v", err)
	}
}

func TestNotFoundIsDefinitiveOnlyAfterTheWindow(t *testing.T) {
	clock := &fakeClock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	f := newFixture(t, func(c *Config) { c.Now, c.NotFoundWindow = clock.Now, 2*time.Second })
	ctx := context.Background()
	status := func(key string) client.StatusResult {
		t.Helper()
		st, err := f.admin.Status(ctx, key)
		if err != nil {
			t.Fatalf("Status(%s): %v", key, err)
		}
		if st.Found || st.NotFoundWindow != 2*time.Second {
			t.Fatalf("Status(%s) = %+v, want not found with a 2s window", key, st)
		}
		return st
	}
	if st := status("never-sent"); !st.Definitive || !st.LastAttemptAt.IsZero() {
		t.Errorf("a key never attempted: %+v, want definitive", st)
	}
	f.setBehavior(t, institution.ModeHangBefore, 0, true)
	if _, err := f.admin.Approve(ctx, req("pay-w")); !errors.Is(err, client.ErrUnknownOutcome) {
		t.Fatalf("Approve: %v", err)
	}
	if st := status("pay-w"); st.Definitive || !st.LastAttemptAt.Equal(clock.Now()) {
		t.Errorf("just attempted: %+v, want not definitive", st)
	}
	clock.Advance(1999 * time.Millisecond)
	if st := status("pay-w"); st.Definitive {
		t.Errorf("1.999s after the attempt: definitive")
	}
	clock.Advance(time.Millisecond)
	if st := status("pay-w"); !st.Definitive {
		t.Errorf("2s after the attempt: not definitive")
	}
	// A retry opens the window again.
	if _, err := f.admin.Approve(ctx, req("pay-w")); !errors.Is(err, client.ErrUnknownOutcome) {
		t.Fatalf("Approve: %v", err)
	}
	if st := status("pay-w"); st.Definitive {
		t.Errorf("just after a retry: definitive")
	}
	// The raw answer is the documented 404.
	resp, err := f.hc.Get(f.ts.URL + "/v1/approvals/pay-w")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != httpapi.ProblemContentType {
		t.Errorf("404 Content-Type %q, want %s", ct, httpapi.ProblemContentType)
	}
	for _, want := range []string{`"code":"not_found"`, `"status":404`, `"type":"urn:stampede:problem:not_found"`, `"not_found_window_ms":2000`, `"definitive":false`, `"last_attempt_at":"2026-03-01T12:00:02Z"`} {
		if resp.StatusCode != 404 || !strings.Contains(string(body), want) {
			t.Errorf("404 body lacks %s: %d %s", want, resp.StatusCode, body)
		}
	}
}

func TestApproveNotSentWhenNoConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	c := client.NewClient("http://"+addr, &http.Client{Transport: validating(t, tr), Timeout: 2 * time.Second})
	if _, err := c.Approve(context.Background(), req("k")); !errors.Is(err, client.ErrNotSent) || errors.Is(err, client.ErrUnknownOutcome) {
		t.Errorf("connection refused: %v, want ErrNotSent", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Approve(ctx, req("k")); !errors.Is(err, client.ErrNotSent) || !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: %v, want ErrNotSent wrapping context.Canceled", err)
	}
	if _, err := client.NewClient("http://bad host", nil).Approve(context.Background(), req("k")); !errors.Is(err, client.ErrNotSent) {
		t.Errorf("malformed URL: %v, want ErrNotSent", err)
	}
	if _, err := c.Status(context.Background(), "k"); !errors.Is(err, client.ErrStatusUnavailable) {
		t.Errorf("Status, connection refused: %v, want ErrStatusUnavailable", err)
	}
}

// TestApproveConnectionLostAfterSendingIsUnknown and the next test play
// a broken institution, so their answers are not validated against the
// description.
func TestApproveConnectionLostAfterSendingIsUnknown(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		conn.Close() // the request arrived; the answer never leaves
	}))
	defer ts.Close()
	_, err := client.NewClient(ts.URL, ts.Client()).Approve(context.Background(), req("k"))
	if !errors.Is(err, client.ErrUnknownOutcome) || errors.Is(err, client.ErrNotSent) {
		t.Fatalf("connection closed after the request: %v, want ErrUnknownOutcome", err)
	}
}

func TestApproveUnreadable200IsUnknown(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"status":"MAYBE"}`)
	}))
	defer ts.Close()
	if _, err := client.NewClient(ts.URL, ts.Client()).Approve(context.Background(), req("k")); !errors.Is(err, client.ErrUnknownOutcome) {
		t.Fatalf("a 200 with an unknown status: %v, want ErrUnknownOutcome", err)
	}
}

func TestAdminNeedsTheToken(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	for _, c := range []*client.Client{client.NewClient(f.ts.URL, f.hc), f.admin.WithAdminToken("wrong-token-wrong-token")} {
		_, err := c.Reset(ctx)
		e, ok := errors.AsType[*institution.Error](err)
		if !errors.Is(err, client.ErrRejected) || !ok || e.Status != http.StatusUnauthorized || e.Code != stampede.Unauthorized {
			t.Errorf("Reset without the right token: %v, want a 401", err)
		}
		if _, err := c.SetBehavior(ctx, institution.DefaultBehavior()); !errors.Is(err, client.ErrRejected) {
			t.Errorf("SetBehavior without the right token: %v", err)
		}
		if _, err := c.Arrivals(ctx); !errors.Is(err, client.ErrRejected) {
			t.Errorf("Arrivals without the right token: %v", err)
		}
		if _, err := c.Approvals(ctx); !errors.Is(err, client.ErrRejected) {
			t.Errorf("Approvals without the right token: %v", err)
		}
	}
}

func TestPutBehaviorIsPartial(t *testing.T) {
	f := newFixture(t, nil)
	code, body := do(t, f, http.MethodPut, "/admin/behavior", testToken, "application/json", `{"status_api":"DOWN"}`)
	if code != 200 || !strings.Contains(body, `"mode":"NORMAL"`) || !strings.Contains(body, `"status_api":"DOWN"`) || !strings.Contains(body, `"hang_ms":8000`) {
		t.Fatalf("partial PUT: %d %s", code, body)
	}
	if b := f.srv.Behavior(); b.StatusAPI != institution.StatusAPIDown || b.Mode != institution.ModeNormal || !b.Idempotent {
		t.Fatalf("behaviour %+v", b)
	}
}

func TestHealthzMetricsAndRoutes(t *testing.T) {
	f := newFixture(t, nil)
	if code, body := do(t, f, http.MethodGet, "/healthz", "", "", ""); code != 200 || !strings.Contains(body, `"ok"`) {
		t.Errorf("healthz: %d %s", code, body)
	}
	ctx := context.Background()
	f.admin.Approve(ctx, req("m1"))
	f.admin.Approve(ctx, req("m1"))
	f.setBehavior(t, institution.ModeDecline, 0, true)
	f.admin.Approve(ctx, req("m2"))
	code, body := do(t, f, http.MethodGet, "/metrics", "", "", "")
	for _, want := range []string{
		"stampede_institution_arrivals_total 3",
		`stampede_institution_approvals_total{status="APPROVED"} 1`,
		`stampede_institution_approvals_total{status="DECLINED"} 1`,
		"stampede_institution_replays_total 1",
		"stampede_institution_charges_total 1",
		"stampede_institution_hung_requests 0",
		"stampede_institution_busy_total 0",
	} {
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// TestRoutesAnswerProblems checks the answers every Stampede service
// shares: JSON 404 and 405 (with Allow) problems, /readyz and
// /openapi.json.
func TestRoutesAnswerProblems(t *testing.T) {
	f := newFixture(t, nil)
	cases := []struct {
		method, path string
		status       int
		code         institution.Code
		allow        string
	}{
		{http.MethodDelete, "/v1/approvals", 405, stampede.MethodNotAllowed, "POST"},
		{http.MethodGet, "/v1/approvals", 405, stampede.MethodNotAllowed, "POST"},
		{http.MethodPost, "/v1/approvals/k", 405, stampede.MethodNotAllowed, "GET, HEAD"},
		{http.MethodDelete, "/admin/behavior", 405, stampede.MethodNotAllowed, "GET, HEAD, PUT"},
		{http.MethodGet, "/admin/reset", 405, stampede.MethodNotAllowed, "POST"},
		{http.MethodPost, "/healthz", 405, stampede.MethodNotAllowed, "GET, HEAD"},
		{http.MethodGet, "/nope", 404, stampede.NotFound, ""},
		{http.MethodGet, "/v1/approvals/a/b", 404, stampede.NotFound, ""},
		{http.MethodPost, "/admin", 404, stampede.NotFound, ""},
	}
	for _, tc := range cases {
		r, err := http.NewRequest(tc.method, f.ts.URL+tc.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := f.hc.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		p := httpapi.ReadProblem(resp)
		resp.Body.Close()
		if resp.StatusCode != tc.status || p.Code != tc.code || resp.Header.Get("Allow") != tc.allow ||
			resp.Header.Get("Content-Type") != httpapi.ProblemContentType {
			t.Errorf("%s %s: %d %s, Allow %q, Content-Type %q; want %d %s, Allow %q", tc.method, tc.path,
				resp.StatusCode, p.Code, resp.Header.Get("Allow"), resp.Header.Get("Content-Type"), tc.status, tc.code, tc.allow)
		}
	}
	if code, body := do(t, f, http.MethodGet, "/readyz", "", "", ""); code != 200 || !strings.Contains(body, `"ready"`) {
		t.Errorf("readyz: %d %s", code, body)
	}
	code, body := do(t, f, http.MethodGet, "/openapi.json", "", "", "")
	var doc struct {
		OpenAPI string         `json:"openapi"`
		Paths   map[string]any `json:"paths"`
	}
	if err := json.Unmarshal([]byte(body), &doc); code != 200 || err != nil || doc.OpenAPI != "3.0.3" {
		t.Fatalf("openapi.json: %d %v %.200s", code, err, body)
	}
	for _, path := range []string{"/v1/approvals", "/v1/approvals/{external_key}", "/admin/behavior", "/admin/arrivals",
		"/admin/approvals", "/admin/reset", "/healthz", "/readyz", "/metrics", "/openapi.json"} {
		if doc.Paths[path] == nil {
			t.Errorf("openapi.json lacks %s", path)
		}
	}
	// The request metrics count by route pattern, method and status.
	if code, body := do(t, f, http.MethodGet, "/metrics", "", "", ""); code != 200 || !strings.Contains(body, `http_requests_total{code="405",method="DELETE",route="/v1/approvals"} 1`) {
		t.Errorf("metrics lack the request counter: %d", code)
	}
}

func TestConfigValidateNamesTheField(t *testing.T) {
	cfg := DefaultConfig()
	cfg.AdminToken, cfg.MaxHung, cfg.NotFoundWindow, cfg.MaxBody, cfg.MaxArrivals = "short", 0, 0, 10, 0
	_, err := New(cfg)
	var got []string
	for _, e := range stampede.FieldErrors(err) {
		got = append(got, e.Field)
	}
	if want := []string{"admin_token", "max_body", "max_hung", "not_found_window", "max_arrivals"}; !slices.Equal(got, want) {
		t.Errorf("New named %v (%v), want every field at once: %v", got, err, want)
	}
	reg := prometheus.NewRegistry()
	cfg = DefaultConfig()
	cfg.AdminToken, cfg.Registry = testToken, reg
	if _, err := New(cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := New(cfg); err == nil {
		t.Error("a second server on one registry was accepted")
	}
	for _, b := range []institution.Behavior{{Mode: "FAST", StatusAPI: institution.StatusAPIUp}, {Mode: institution.ModeNormal, HangMS: -1, StatusAPI: institution.StatusAPIUp}, {Mode: institution.ModeNormal}} {
		if err := b.Validate(); err == nil {
			t.Errorf("Behavior %+v was accepted", b)
		}
	}
}

// hang validates a behaviour that hangs for ms.
func hang(ms int64) error {
	b := institution.DefaultBehavior()
	b.HangMS = ms
	return b.Validate()
}

// TestServerConfigOutlastsTheLongestHang: a request held for MaxHangMS is
// answered before the write timeout cuts it.
func TestServerConfigOutlastsTheLongestHang(t *testing.T) {
	c := ServerConfig()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.WriteTimeout <= institution.MaxHang || institution.MaxHang != time.Duration(institution.MaxHangMS)*time.Millisecond {
		t.Fatalf("WriteTimeout %s does not outlast the longest hang, %s", c.WriteTimeout, institution.MaxHang)
	}
	if err := institution.DefaultBehavior().Validate(); err != nil || hang(institution.MaxHangMS) != nil || hang(institution.MaxHangMS+1) == nil {
		t.Fatalf("hang_ms is not bounded by MaxHangMS")
	}
}

// do sends a raw request and returns the status and body.
func do(t *testing.T, f *fixture, method, path, token, contentType, body string) (int, string) {
	t.Helper()
	r, err := http.NewRequest(method, f.ts.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	if contentType != "" {
		r.Header.Set("Content-Type", contentType)
	}
	resp, err := f.hc.Do(r)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data)
}

func adminGet(t *testing.T, f *fixture, path string) string {
	t.Helper()
	code, body := do(t, f, http.MethodGet, path, testToken, "", "")
	if code != 200 {
		t.Fatalf("GET %s: %d %s", path, code, body)
	}
	return body
}

// TestClientReadsAnswersThatAreNotProblems plays a proxy in front of the
// institution, whose error answers are not problems: the Client keeps its
// sentinel errors and the status, and a 404 that is not the status
// inquiry's problem is not read as "not found".
func TestClientReadsAnswersThatAreNotProblems(t *testing.T) {
	status := http.StatusBadGateway
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(status)
		io.WriteString(w, "<html>proxy error</html>")
	}))
	defer ts.Close()
	c := client.NewClient(ts.URL, ts.Client())
	_, err := c.Approve(context.Background(), req("k"))
	e, ok := errors.AsType[*institution.Error](err)
	if !errors.Is(err, client.ErrInstitution) || !ok || e.Status != http.StatusBadGateway || !strings.Contains(e.Message, "proxy error") {
		t.Errorf("a proxy's 502: %v, want ErrInstitution with status 502 quoting the body", err)
	}
	status = http.StatusNotFound
	if _, err := c.Status(context.Background(), "k"); !errors.Is(err, client.ErrRejected) {
		t.Errorf("a 404 that is no not-found problem: %v, want ErrRejected", err)
	}
	status = http.StatusServiceUnavailable
	if _, err := c.Status(context.Background(), "k"); !errors.Is(err, client.ErrStatusUnavailable) {
		t.Errorf("a proxy's 503 to a status inquiry: %v, want ErrStatusUnavailable", err)
	}
	status = http.StatusGatewayTimeout
	if _, err := c.Approve(context.Background(), req("k")); !errors.Is(err, client.ErrUnknownOutcome) {
		t.Errorf("a proxy's 504: %v, want ErrUnknownOutcome", err)
	}
}
