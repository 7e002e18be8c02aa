package main

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stampede-lab/stampede/institution"
)

// syncBuffer is a bytes.Buffer safe to read while a command writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// runInstitutionCmd runs `serve institution` with args until ctx ends,
// through the root command (whose hook reads the environment and makes the
// logger), logging text lines.
func runInstitutionCmd(ctx context.Context, args ...string) (*syncBuffer, <-chan error) {
	cmd := newRootCmd()
	errOut := &syncBuffer{}
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetErr(errOut)
	cmd.SetArgs(append([]string{"serve", "institution", "--log-format", "text"}, args...))
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	return errOut, done
}

func TestServeInstitutionRejectsBadFlags(t *testing.T) {
	t.Setenv(envAdminToken, "")
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
	if err := <-done; err == nil || !strings.Contains(err.Error(), "--admin-token must be at least 16 bytes") {
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

	addrRE := regexp.MustCompile(`addr=(\S+)`)
	var addr string
	for deadline := time.Now().Add(5 * time.Second); addr == ""; time.Sleep(10 * time.Millisecond) {
		if m := addrRE.FindStringSubmatch(errOut.String()); m != nil {
			addr = m[1]
		} else if time.Now().After(deadline) {
			t.Fatalf("no listening address logged:\n%s", errOut.String())
		}
	}
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	c := institution.NewClient("http://"+addr, &http.Client{Transport: tr, Timeout: 10 * time.Second}).WithAdminToken(token)
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
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
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
	if err := <-held; !errors.Is(err, institution.ErrUnknownOutcome) {
		t.Errorf("the held request: %v, want ErrUnknownOutcome (released)", err)
	}
	for _, want := range []string{"institution simulator listening", "shutting down", "stopped"} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, errOut.String())
		}
	}
}
