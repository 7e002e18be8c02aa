package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"
)

// The helpers every command test shares: running the command line
// in-process, starting a `serve` command until the test ends, and the
// buffers and addresses they need.

// syncBuffer is a bytes.Buffer safe to read while a command writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// execute runs the stampede command line with args to its end and returns
// its stdout, stderr and error.
func execute(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	cmd := newRootCmd()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

// runCmd runs the stampede command line with args in-process until ctx
// ends, through the root command (whose hook reads the environment and
// makes the logger); its stderr goes to the returned buffer, and its error
// to the channel when it returns.
func runCmd(ctx context.Context, args ...string) (*syncBuffer, <-chan error) {
	cmd := newRootCmd()
	errOut := &syncBuffer{}
	cmd.SetOut(io.Discard)
	cmd.SetErr(errOut)
	cmd.SetArgs(args)
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	return errOut, done
}

// freeAddr returns a loopback address with a port free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startServe runs `stampede serve <service> --log-format text --http ADDR
// args...` in-process on a free address, waits until its /healthz answers
// 200 (at most 30 s), and returns the address and its log. When the test
// ends the command is cancelled and must return without error within 30 s;
// a failed test logs the command's log.
func startServe(t *testing.T, service string, args ...string) (string, *syncBuffer) {
	t.Helper()
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	logs, done := runCmd(ctx, append([]string{"serve", service, "--log-format", "text", "--http", addr}, args...)...)
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve %s: %v\n%s", service, err, logs.String())
			}
		case <-time.After(30 * time.Second):
			t.Errorf("serve %s did not stop within 30s of the cancel", service)
		}
		if t.Failed() {
			t.Logf("serve %s's log:\n%s", service, logs.String())
		}
	})
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		select {
		case err := <-done:
			t.Fatalf("serve %s stopped: %v\n%s", service, err, logs.String())
		default:
		}
		if resp, err := http.Get("http://" + addr + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return addr, logs
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve %s did not come up on %s:\n%s", service, addr, logs.String())
		}
	}
}
