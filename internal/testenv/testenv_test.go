package testenv_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/stampede-lab/stampede/internal/testenv"
)

// fakeTB records how a helper stopped the test. Skip and Fatalf end the
// calling goroutine, as the real ones do; every other method of
// testing.TB is the nil embedded one and panics.
type fakeTB struct {
	testing.TB
	skipped, failed bool
	msg             string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Skip(args ...any) {
	f.skipped, f.msg = true, fmt.Sprint(args...)
	runtime.Goexit()
}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed, f.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// outcome is what a helper did to a fake test.
type outcome struct {
	value    string // what it returned, if it did
	returned bool
	skipped  bool
	failed   bool
	msg      string
}

// call runs fn on a fake test, on a goroutine of its own so that Skip and
// Fatalf can end it.
func call(fn func(t testing.TB) string) outcome {
	f := &fakeTB{}
	var o outcome
	done := make(chan struct{})
	go func() {
		defer close(done)
		o.value = fn(f)
		o.returned = true
	}()
	<-done
	o.skipped, o.failed, o.msg = f.skipped, f.failed, f.msg
	return o
}

// check compares what a helper did with what the case wants: a value
// returned, a skip, or a failure, with a message that contains every one
// of mention.
func check(t *testing.T, what string, o outcome, want string, value string, mention ...string) {
	t.Helper()
	switch want {
	case "value":
		if !o.returned || o.skipped || o.failed || o.value != value {
			t.Errorf("%s: %+v, want %q returned", what, o, value)
		}
		return
	case "skip":
		if !o.skipped || o.failed || o.returned {
			t.Errorf("%s: %+v, want a skip", what, o)
		}
	case "fail":
		if !o.failed || o.skipped || o.returned {
			t.Errorf("%s: %+v, want a failure", what, o)
		}
	}
	for _, m := range mention {
		if !strings.Contains(o.msg, m) {
			t.Errorf("%s: message %q does not mention %q", what, o.msg, m)
		}
	}
}

func TestCI(t *testing.T) {
	for ci, want := range map[string]bool{"": false, "false": false, "0": false, "nonsense": false, "true": true, "TRUE": true, "1": true} {
		t.Setenv("CI", ci)
		if got := testenv.CI(); got != want {
			t.Errorf("CI=%q: CI() = %v, want %v", ci, got, want)
		}
	}
}

func TestURL(t *testing.T) {
	const name = testenv.PostgresURL
	const url = "postgres://postgres@db.example:5432/test"
	cases := []struct {
		ci, value string
		want      string // value, skip or fail
	}{
		{ci: "", value: "", want: "skip"},
		{ci: "false", value: "", want: "skip"},
		{ci: "true", value: "", want: "fail"},
		{ci: "1", value: "", want: "fail"},
		{ci: "", value: url, want: "value"},
		{ci: "true", value: url, want: "value"},
	}
	for _, c := range cases {
		t.Setenv("CI", c.ci)
		t.Setenv(name, c.value)
		o := call(func(t testing.TB) string { return testenv.URL(t, name) })
		what := fmt.Sprintf("CI=%q %s=%q", c.ci, name, c.value)
		// A skip says what to set and to what; a failure also says why
		// CI does not skip.
		switch c.want {
		case "skip":
			check(t, what, o, c.want, "", name, "postgres://postgres@127.0.0.1:5432/test", ".ci/run")
		case "fail":
			check(t, what, o, c.want, "", name, "CI="+c.ci, "must run")
		default:
			check(t, what, o, c.want, c.value)
		}
	}
}

func TestURLUnknownName(t *testing.T) {
	t.Setenv("CI", "")
	t.Setenv("STAMPEDE_TESTENV_UNKNOWN", "")
	o := call(func(t testing.TB) string { return testenv.URL(t, "STAMPEDE_TESTENV_UNKNOWN") })
	check(t, "an unknown, unset variable", o, "skip", "", "STAMPEDE_TESTENV_UNKNOWN is not set")
}

// executable writes an executable file in dir and returns its path.
func executable(t *testing.T, dir, name string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestExecutable(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("the fake executables are shell scripts")
	}
	const env = "STAMPEDE_TESTENV_BROWSER"
	dir := t.TempDir()
	fromEnv := executable(t, dir, "from-env")
	candidate := executable(t, dir, "candidate")
	notExec := filepath.Join(dir, "not-executable")
	if err := os.WriteFile(notExec, []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	absent := filepath.Join(dir, "absent")

	cases := []struct {
		what       string
		ci, env    string
		candidates []string
		want       string // value, skip or fail
		value      string
	}{
		{what: "the variable wins", env: fromEnv, candidates: []string{candidate}, want: "value", value: fromEnv},
		{what: "the variable wins in CI", ci: "true", env: fromEnv, candidates: []string{candidate}, want: "value", value: fromEnv},
		{what: "the first candidate found", candidates: []string{absent, notExec, candidate}, want: "value", value: candidate},
		{what: "a bare name from PATH", candidates: []string{"sh"}, want: "value", value: lookPath(t, "sh")},
		{what: "none found", candidates: []string{absent, notExec}, want: "skip"},
		{what: "none found in CI", ci: "true", candidates: []string{absent, notExec}, want: "fail"},
		// A variable set to something that is not there is a mistake to
		// report, not a reason to fall back on another executable.
		{what: "the variable names nothing", env: absent, candidates: []string{candidate}, want: "skip"},
		{what: "the variable names nothing, in CI", ci: "true", env: absent, candidates: []string{candidate}, want: "fail"},
	}
	for _, c := range cases {
		t.Setenv("CI", c.ci)
		t.Setenv(env, c.env)
		o := call(func(t testing.TB) string { return testenv.Executable(t, env, c.candidates...) })
		if c.want == "value" {
			check(t, c.what, o, c.want, c.value)
			continue
		}
		tried := c.candidates
		if c.env != "" {
			tried = []string{c.env}
		}
		check(t, c.what, o, c.want, "", append([]string{env}, tried...)...)
	}
}

func lookPath(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("no %s in PATH", name)
	}
	return p
}

func TestChromiumFromVariable(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("the fake executable is a shell script")
	}
	fake := executable(t, t.TempDir(), "chromium")
	t.Setenv(testenv.ChromiumPath, fake)
	t.Setenv("CI", "true")
	o := call(func(t testing.TB) string { return testenv.Chromium(t) })
	check(t, "STAMPEDE_CHROMIUM set", o, "value", fake)
}

// childEnv tells the test binary, run again as a child, to run
// TestChildNeedsService for real.
const childEnv = "STAMPEDE_TESTENV_CHILD"

// TestChildNeedsService is the child's test: it needs the service named by
// STAMPEDE_TESTENV_CHILD_URL. On its own it does nothing.
func TestChildNeedsService(t *testing.T) {
	if os.Getenv(childEnv) != "1" {
		return
	}
	url := testenv.URL(t, "STAMPEDE_TESTENV_CHILD_URL")
	t.Logf("child got %s", url)
}

// TestRealTestOutcome runs TestChildNeedsService in a child process with the
// real testing package, and checks what go test reports: SKIP outside CI,
// FAIL (and a failing exit status) under CI=true, PASS when the variable is
// set.
func TestRealTestOutcome(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the test binary three times")
	}
	cases := []struct {
		ci, url   string
		exitOK    bool
		want      string
		mentioned string
	}{
		{ci: "", url: "", exitOK: true, want: "--- SKIP: TestChildNeedsService", mentioned: "STAMPEDE_TESTENV_CHILD_URL is not set"},
		{ci: "true", url: "", exitOK: false, want: "--- FAIL: TestChildNeedsService", mentioned: "STAMPEDE_TESTENV_CHILD_URL is not set"},
		{ci: "true", url: "nats://child.example:4222", exitOK: true, want: "--- PASS: TestChildNeedsService", mentioned: "child got nats://child.example:4222"},
	}
	for _, c := range cases {
		cmd := exec.Command(os.Args[0], "-test.run=^TestChildNeedsService$", "-test.v", "-test.count=1")
		var env []string
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "CI=") && !strings.HasPrefix(kv, "STAMPEDE_TESTENV_") {
				env = append(env, kv)
			}
		}
		cmd.Env = append(env, childEnv+"=1", "CI="+c.ci, "STAMPEDE_TESTENV_CHILD_URL="+c.url)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		switch {
		case err == nil && !c.exitOK:
			t.Errorf("CI=%q URL=%q: the child passed, want a failing exit status\n%s", c.ci, c.url, out)
		case err != nil && (c.exitOK || !errors.As(err, &exit)):
			t.Errorf("CI=%q URL=%q: child: %v\n%s", c.ci, c.url, err, out)
		}
		for _, w := range []string{c.want, c.mentioned} {
			if !bytes.Contains(out, []byte(w)) {
				t.Errorf("CI=%q URL=%q: the child's output lacks %q:\n%s", c.ci, c.url, w, out)
			}
		}
	}
}

func TestExclusiveHoldsTheLockUntilTheTestEnds(t *testing.T) {
	name := fmt.Sprintf("exclusive-test-%d", os.Getpid())
	path := filepath.Join(os.TempDir(), "stampede-test-"+name+".lock")
	t.Cleanup(func() { os.Remove(path) })
	tryLock := func() error {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	}
	t.Run("holder", func(t *testing.T) {
		testenv.Exclusive(t, name)
		if err := tryLock(); err == nil {
			t.Fatal("a second lock was granted while the test holds it")
		}
	})
	if err := tryLock(); err != nil {
		t.Fatalf("the lock is still held after the test ended: %v", err)
	}
}
