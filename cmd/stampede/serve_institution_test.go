package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stampede-lab/stampede/institution"
	instapi "github.com/stampede-lab/stampede/institution/api"
	instclient "github.com/stampede-lab/stampede/institution/client"
	"github.com/stampede-lab/stampede/internal/httpapi/apitest"
)

// runInstitutionCmd runs `serve institution` with args until ctx ends,
// through the root command (whose hook reads the environment and makes the
// logger), logging text lines.
func runInstitutionCmd(ctx context.Context, args ...string) (*syncBuffer, <-chan error) {
	return runCmd(ctx, append([]string{"serve", "institution", "--log-format", "text"}, args...)...)
}

// listeningAddr waits for the command to log its listening address.
func listeningAddr(t *testing.T, errOut *syncBuffer) string {
	t.Helper()
	addrRE := regexp.MustCompile(`addr=(\S+)`)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if m := addrRE.FindStringSubmatch(errOut.String()); m != nil {
			return m[1]
		} else if time.Now().After(deadline) {
			t.Fatalf("no listening address logged:\n%s", errOut.String())
		}
	}
}

func TestServeInstitutionRejectsBadFlags(t *testing.T) {
	t.Setenv(envAdminToken, "")
	t.Setenv(envTossKey, "")
	long := "--admin-token=0123456789abcdef"
	cases := []struct {
		args []string
		want string
	}{
		{nil, "--admin-token"},
		{[]string{"--admin-token", "short"}, "--admin-token"},
		{[]string{long, "--not-found-window", "0s"}, "--not-found-window"},
		{[]string{long, "--not-found-window", "soon"}, "not-found-window"},
		{[]string{long, "--max-hung", "0"}, "--max-hung"},
		{[]string{long, "--log-level", "loud"}, "--log-level"},
		{[]string{long, "--http", ""}, "--http"},
		{[]string{long, "--http", "256.0.0.1:99999"}, "--http"},
		{[]string{long, "--read-header-timeout", "0s"}, "--read-header-timeout"},
		{[]string{long, "--read-timeout", "1s", "--read-header-timeout", "2s"}, "--read-timeout: must be at least the read header timeout"},
		{[]string{long, "--idle-timeout", "-1s"}, "--idle-timeout"},
		{[]string{long, "--shutdown-timeout", "-1s"}, "--shutdown-timeout"},
		{[]string{long, "--protocol", "swift"}, "--protocol"},
		{[]string{long, "--protocol", "toss"}, "--toss-secret-key: is required with protocol toss"},
		{[]string{long, "--protocol", "toss", "--toss-secret-key", "test_ck_1"}, "--toss-secret-key: must start with test_sk_"},
	}
	for _, tc := range cases {
		_, done := runInstitutionCmd(context.Background(), tc.args...)
		if err := <-done; err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one naming %s", tc.args, err, tc.want)
		}
	}
}

func TestServeInstitutionReadsTheEnvironment(t *testing.T) {
	t.Setenv(envAdminToken, "short")
	_, done := runInstitutionCmd(context.Background())
	if err := <-done; err == nil || !strings.Contains(err.Error(), "--admin-token: must be at least 16 bytes") {
		t.Errorf("a short %s: %v", envAdminToken, err)
	}
}

// TestServeInstitutionServesAndReleasesOnShutdown starts the simulator,
// holds a request for a minute, and stops it with the context, as SIGINT
// does: the held request is released and the command returns promptly.
func TestServeInstitutionServesAndReleasesOnShutdown(t *testing.T) {
	const token = "0123456789abcdef0123"
	t.Setenv(envAdminToken, token)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errOut, done := runInstitutionCmd(ctx, "--http", "127.0.0.1:0", "--not-found-window", "5s")

	addr := listeningAddr(t, errOut)
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: apitest.New(t, instapi.OpenAPI()).Transport(t, tr), Timeout: 10 * time.Second}
	c := instclient.NewClient("http://"+addr, hc).WithAdminToken(token)
	bg := context.Background()
	if res, err := c.Approve(bg, institution.ApproveRequest{ExternalKey: "cli-1", Amount: 100, Currency: "USD"}); err != nil || res.Status != institution.StatusApproved {
		t.Fatalf("Approve: %+v, %v", res, err)
	}
	if st, err := c.Status(bg, "never"); err != nil || st.NotFoundWindow != 5*time.Second {
		t.Fatalf("Status: %+v, %v", st, err)
	}
	b := institution.DefaultBehavior()
	b.Mode, b.HangMS = institution.ModeHangBefore, 60_000
	if _, err := c.SetBehavior(bg, b); err != nil {
		t.Fatal(err)
	}
	held := make(chan error, 1)
	go func() {
		_, err := c.Approve(bg, institution.ApproveRequest{ExternalKey: "cli-2", Amount: 100, Currency: "USD"})
		held <- err
	}()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if log, err := c.Arrivals(bg); err == nil && log.Count == 2 {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the held request did not arrive: %+v, %v", log, err)
		}
	}
	time.Sleep(50 * time.Millisecond) // let it be held
	start := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve institution: %v\n%s", err, errOut.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve institution did not stop within 10s of the cancel")
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("stopping took %s with a request held for 60s", took)
	}
	if err := <-held; !errors.Is(err, instclient.ErrUnknownOutcome) {
		t.Errorf("the held request: %v, want ErrUnknownOutcome (released)", err)
	}
	for _, want := range []string{"institution simulator listening", "shutting down", "stopped"} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, errOut.String())
		}
	}
}

// TestServeInstitutionClosesStalledAndIdleConnections runs the simulator
// with short server timeouts and checks, over raw connections, that a
// client stalling in its headers or its body, or idling on a keep-alive
// connection, is cut off within the timeout, while a request the simulator
// holds for longer than all of them is still answered.
func TestServeInstitutionClosesStalledAndIdleConnections(t *testing.T) {
	const (
		token         = "0123456789abcdef0123"
		headerTimeout = 200 * time.Millisecond
		readTimeout   = 400 * time.Millisecond
		idleTimeout   = 300 * time.Millisecond
		slack         = time.Second
	)
	t.Setenv(envAdminToken, token)
	ctx, cancel := context.WithCancel(context.Background())
	errOut, done := runInstitutionCmd(ctx, "--http", "127.0.0.1:0", "--read-header-timeout", headerTimeout.String(),
		"--read-timeout", readTimeout.String(), "--idle-timeout", idleTimeout.String())
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve institution: %v", err)
		}
	}()
	addr := listeningAddr(t, errOut)
	if !strings.Contains(errOut.String(), "write_timeout=10m30s") {
		t.Errorf("the write timeout is not the longest hang plus 30s:\n%s", errOut.String())
	}

	// closedWithin sends raw on a new connection, then reads until the
	// server closes it, and reports when that happened (from the dial)
	// and what the server wrote.
	closedWithin := func(name, raw string, after func(*bufio.Reader)) (time.Duration, string) {
		t.Helper()
		start := time.Now()
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := io.WriteString(conn, raw); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		br := bufio.NewReader(conn)
		if after != nil {
			after(br)
		}
		got, err := io.ReadAll(br)
		if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
			t.Fatalf("%s: the server did not close the connection within 10s", name)
		}
		return time.Since(start), string(got)
	}

	took, got := closedWithin("stalled headers", "POST /v1/approvals HTTP/1.1\r\nHost: x\r\nContent-Type: app", nil)
	if took < headerTimeout/2 || took > headerTimeout+slack {
		t.Errorf("stalled headers: closed after %s, want about %s", took, headerTimeout)
	}
	t.Logf("stalled headers: closed after %s, answer %q", took, firstLine(got))

	took, got = closedWithin("stalled body", "POST /v1/approvals HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"+
		"Content-Length: 60\r\n\r\n{\"external_key\":\"slow\"", nil)
	if took < readTimeout/2 || took > readTimeout+slack {
		t.Errorf("stalled body: closed after %s, want about %s", took, readTimeout)
	}
	if got != "" && (!strings.HasPrefix(got, "HTTP/1.1 4") || !strings.Contains(got, "application/problem+json")) {
		t.Errorf("stalled body: answered %q, want a 4xx problem or nothing", got)
	}
	t.Logf("stalled body: closed after %s, answer %q", took, firstLine(got))

	var answered time.Time
	took, _ = closedWithin("idle keep-alive", "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", func(br *bufio.Reader) {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("idle keep-alive: %v", err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Close {
			t.Errorf("healthz: %d, close %v; want 200 on a kept-alive connection", resp.StatusCode, resp.Close)
		}
		answered = time.Now()
	})
	if idle := time.Since(answered); idle < idleTimeout/2 || idle > idleTimeout+slack {
		t.Errorf("idle keep-alive: closed %s after the answer (%s after the dial), want about %s", idle, took, idleTimeout)
	}

	// A request held longer than every timeout above is still answered.
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	c := instclient.NewClient("http://"+addr, &http.Client{Transport: apitest.New(t, instapi.OpenAPI()).Transport(t, tr)}).WithAdminToken(token)
	b := institution.DefaultBehavior()
	b.Mode, b.HangMS = institution.ModeHangAfter, 1500
	if _, err := c.SetBehavior(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	res, err := c.Approve(context.Background(), institution.ApproveRequest{ExternalKey: "held", Amount: 100, Currency: "USD"})
	if err != nil || res.Status != institution.StatusApproved {
		t.Fatalf("a request held for 1.5s: %+v, %v", res, err)
	}
	if took := time.Since(start); took < 1500*time.Millisecond {
		t.Errorf("the held request answered after %s, before its hang", took)
	}
}

// firstLine returns the first line of s.
func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\r\n")
	return line
}
