package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync"
	"syscall"
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

// withDataDir gives a waiting room, gate or forward-auth endpoint started
// by a test a --data-dir of its own (a new temporary directory) unless args
// name one: its in-process Redis keeps a snapshot there, which must
// neither land in the package's directory nor reach another test.
func withDataDir(t *testing.T, service string, args []string) []string {
	switch service {
	case "waitroom", "gate", "forward-auth":
	default:
		return args
	}
	for _, a := range args {
		if a == "--data-dir" || strings.HasPrefix(a, "--data-dir=") {
			return args
		}
	}
	return append(append([]string{}, args...), "--data-dir", t.TempDir())
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
	logs, done := runCmd(ctx, append([]string{"serve", service, "--log-format", "text", "--http", addr}, withDataDir(t, service, args)...)...)
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve %s: %v\n%s", service, err, logs.String())
			}
		case <-time.After(30 * time.Second):
			// Every goroutine's stack: what the command waits for.
			var stacks strings.Builder
			_ = pprof.Lookup("goroutine").WriteTo(&stacks, 2)
			t.Errorf("serve %s did not stop within 30s of the cancel; the process's goroutines:\n%s", service, stacks.String())
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

// childArgsEnv carries the arguments of a child process (see
// TestChildProcess), separated by \x1f.
const childArgsEnv = "STAMPEDE_TEST_CHILD_ARGS"

// TestChildProcess is not a test: it is the stampede command line run as a
// child process of this test binary (childCmd), so that a test can kill a
// service with SIGKILL or stop it with SIGTERM as main does.
func TestChildProcess(t *testing.T) {
	args := os.Getenv(childArgsEnv)
	if args == "" {
		t.Skip("only runs as a child process of another test (childCmd)")
	}
	cmd := newRootCmd()
	cmd.SetArgs(strings.Split(args, "\x1f"))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := cmd.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// childCmd returns the command that runs `stampede args...` as a child
// process, in this process's environment plus env: the stampede binary
// itself (childBinary), as a user runs it, or, where no go command can
// build one, this test binary (TestChildProcess).
func childCmd(args []string, env ...string) *exec.Cmd {
	if bin := childBinary(); bin != "" {
		c := exec.Command(bin, args...)
		c.Env = append(os.Environ(), env...)
		return c
	}
	c := exec.Command(os.Args[0], "-test.run=^TestChildProcess$")
	c.Env = append(append(os.Environ(), env...), childArgsEnv+"="+strings.Join(args, "\x1f"))
	return c
}

var (
	childBinOnce sync.Once
	childBin     string
	// pkgDir is this package's directory, read before any test changes
	// the working directory.
	pkgDir, _ = os.Getwd()
)

// TestMain runs the tests, then removes the child binary it built.
func TestMain(m *testing.M) {
	code := m.Run()
	if childBin != "" && os.Getenv("STAMPEDE_TEST_CHILD_BIN") == "" {
		os.RemoveAll(filepath.Dir(childBin))
	}
	os.Exit(code)
}

// childBinary is the stampede binary the child processes run:
// $STAMPEDE_TEST_CHILD_BIN when set, else one `go build` of this package
// (without -race, built once per test binary), "" when no go command is
// found. The children are the labs' and the end-to-end tests' services:
// as a race-instrumented test binary they ran about a third slower
// (TestLabSaleQuick: 53 s, 36 s with the plain binary), and the race
// detector already runs on every package they are built from. A failed
// build panics: every test that starts a child would fail anyway.
func childBinary() string {
	childBinOnce.Do(func() {
		if childBin = os.Getenv("STAMPEDE_TEST_CHILD_BIN"); childBin != "" {
			return
		}
		goCmd, err := exec.LookPath("go")
		if err != nil {
			return
		}
		dir, err := os.MkdirTemp("", "stampede-child-")
		if err != nil {
			panic(err)
		}
		bin := filepath.Join(dir, "stampede")
		build := exec.Command(goCmd, "build", "-o", bin, ".")
		build.Dir = pkgDir
		if out, err := build.CombinedOutput(); err != nil {
			panic(fmt.Sprintf("building the stampede binary for the child processes: %v\n%s", err, out))
		}
		childBin = bin
	})
	return childBin
}

// child is a service started by startChild.
type child struct {
	// url is its base URL, "http://" and the address it serves.
	url string
	// log is the path of its stdout and stderr.
	log string
	// cmd is its process.
	cmd *exec.Cmd
}

// startChild runs `stampede serve <service> --http ADDR args...` as a child
// process on a free address, its output in a log file named after name,
// in this environment plus env, and waits (60 s at most) until health
// answers 200. When the test ends it is stopped with SIGTERM (SIGKILL after
// 10 s), and a failed test logs the tail of its log.
func startChild(t *testing.T, name, service, health string, env []string, args ...string) *child {
	t.Helper()
	addr := freeAddr(t)
	logPath := filepath.Join(t.TempDir(), name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	c := childCmd(append([]string{"serve", service, "--http", addr}, withDataDir(t, service, args)...), env...)
	c.Stdout, c.Stderr = logf, logf
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _, _ = c.Process.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = c.Process.Kill()
			<-done
		}
		logf.Close()
		if t.Failed() {
			if b, err := os.ReadFile(logPath); err == nil {
				if len(b) > 4000 {
					b = b[len(b)-4000:]
				}
				t.Logf("%s's log (tail):\n%s", name, b)
			}
		}
	})
	ch := &child{url: "http://" + addr, log: logPath, cmd: c}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get(ch.url + health); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return ch
			}
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(logPath)
			t.Fatalf("serve %s (%s) did not come up on %s:\n%s", service, name, addr, b)
		}
	}
}
