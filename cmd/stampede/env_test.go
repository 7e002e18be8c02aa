package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// probeValues are what the probe command's flags held when it ran.
type probeValues struct {
	name    string
	timeout time.Duration
	on      bool
	n       int
	redis   string
}

// rootWithProbe is the real command tree with one more serve subcommand,
// "probe", added the way a future service would be: its flags read the
// environment with no code of its own.
func rootWithProbe(got *probeValues) *cobra.Command {
	root := newRootCmd()
	probe := &cobra.Command{Use: "probe", RunE: func(*cobra.Command, []string) error { return nil }}
	f := probe.Flags()
	f.StringVar(&got.name, "probe-name", "default", "a string")
	f.DurationVar(&got.timeout, "timeout", time.Second, "a duration")
	f.BoolVar(&got.on, "on", false, "a bool")
	f.IntVar(&got.n, "n", 1, "an int")
	f.StringVar(&got.redis, "redis", "", "a flag with an alias variable")
	for _, c := range root.Commands() {
		if c.Name() == "serve" {
			c.AddCommand(probe)
			bindEnv(c)
		}
	}
	return root
}

func runProbe(t *testing.T, args ...string) (probeValues, error) {
	t.Helper()
	var got probeValues
	root := rootWithProbe(&got)
	root.SetOut(&bytes.Buffer{})
	root.SetErr(&bytes.Buffer{})
	root.SetArgs(append([]string{"serve", "probe"}, args...))
	err := root.ExecuteContext(context.Background())
	return got, err
}

// clearEnv unsets (sets empty, which the flags ignore) the variables the
// tests below use.
func clearEnv(t *testing.T) {
	for _, v := range []string{"STAMPEDE_PROBE_NAME", "STAMPEDE_TIMEOUT", "STAMPEDE_ON", "STAMPEDE_N", "STAMPEDE_REDIS",
		envRedis, "STAMPEDE_LOG_LEVEL", "STAMPEDE_LOG_FORMAT"} {
		t.Setenv(v, "")
	}
}

func TestEnvSetsFlags(t *testing.T) {
	clearEnv(t)
	t.Setenv("STAMPEDE_PROBE_NAME", "from-env")
	t.Setenv("STAMPEDE_TIMEOUT", "250ms")
	t.Setenv("STAMPEDE_ON", "true")
	t.Setenv("STAMPEDE_N", "7")
	t.Setenv(envRedis, "redis://alias:6379/0")
	got, err := runProbe(t)
	if err != nil {
		t.Fatal(err)
	}
	want := probeValues{name: "from-env", timeout: 250 * time.Millisecond, on: true, n: 7, redis: "redis://alias:6379/0"}
	if got != want {
		t.Errorf("flags = %+v, want %+v", got, want)
	}

	// STAMPEDE_<FLAG> comes before the documented alias.
	t.Setenv("STAMPEDE_REDIS", "redis://generic:6379/0")
	if got, _ := runProbe(t); got.redis != "redis://generic:6379/0" {
		t.Errorf("--redis = %q, want STAMPEDE_REDIS's value over %s's", got.redis, envRedis)
	}
}

func TestFlagBeatsEnv(t *testing.T) {
	clearEnv(t)
	t.Setenv("STAMPEDE_PROBE_NAME", "from-env")
	t.Setenv("STAMPEDE_TIMEOUT", "not a duration")
	t.Setenv("STAMPEDE_ON", "true")
	got, err := runProbe(t, "--probe-name", "from-flag", "--timeout", "2s", "--on=false")
	if err != nil {
		t.Fatalf("a bad variable for a flag given on the command line: %v", err)
	}
	if got.name != "from-flag" || got.timeout != 2*time.Second || got.on {
		t.Errorf("flags = %+v, want the command line's values", got)
	}
}

func TestEmptyEnvIsUnset(t *testing.T) {
	clearEnv(t)
	got, err := runProbe(t)
	if err != nil {
		t.Fatal(err)
	}
	if got.name != "default" || got.timeout != time.Second || got.n != 1 {
		t.Errorf("flags = %+v, want the defaults", got)
	}
}

func TestBadEnvNamesTheVariable(t *testing.T) {
	for _, tc := range []struct{ env, value, flag string }{
		{"STAMPEDE_TIMEOUT", "soon", "--timeout"},
		{"STAMPEDE_ON", "maybe", "--on"},
		{"STAMPEDE_N", "many", "--n"},
		{"STAMPEDE_LOG_LEVEL", "loud", "--log-level"},
		{"STAMPEDE_LOG_FORMAT", "xml", "--log-format"},
	} {
		clearEnv(t)
		t.Setenv(tc.env, tc.value)
		_, err := runProbe(t)
		if err == nil || !strings.Contains(err.Error(), tc.env) || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("%s=%s: error %v, want one naming %s and %s", tc.env, tc.value, err, tc.env, tc.flag)
		}
	}
}

// TestEveryServeFlagSaysItsVariable walks the real serve and pay commands:
// every flag reads STAMPEDE_<FLAG> and its --help says so.
func TestEveryServeFlagSaysItsVariable(t *testing.T) {
	root := newRootCmd()
	var walk func(c *cobra.Command)
	n := 0
	walk = func(c *cobra.Command) {
		c.InitDefaultHelpFlag()
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if f.Name == "help" {
				return
			}
			n++
			want := envName(f.Name)
			if names := envNames(f); len(names) == 0 || names[0] != want {
				t.Errorf("%s --%s reads %v, want %s first", c.CommandPath(), f.Name, names, want)
			}
			if !strings.Contains(c.Flags().FlagUsages(), "(env "+want) {
				t.Errorf("%s --help does not name %s", c.CommandPath(), want)
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	for _, c := range root.Commands() {
		if c.Name() == "serve" || c.Name() == "pay" {
			walk(c)
		}
	}
	if n < 20 {
		t.Errorf("only %d flags under serve and pay: the walk missed commands", n)
	}
	for _, name := range []string{"log-format", "log-level"} {
		if f := root.PersistentFlags().Lookup(name); f == nil || len(envNames(f)) == 0 {
			t.Errorf("--%s does not read %s", name, envName(name))
		}
	}
}

// TestServeLogsJSON runs the institution with its stderr not a terminal:
// every line is JSON; --log-format text (or STAMPEDE_LOG_FORMAT) switches.
func TestServeLogsJSON(t *testing.T) {
	run := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		cmd := newRootCmd()
		var errOut bytes.Buffer
		cmd.SetOut(&bytes.Buffer{})
		cmd.SetErr(&errOut)
		cmd.SetArgs(append([]string{"serve", "institution", "--http", "127.0.0.1:0"}, args...))
		done := make(chan error, 1)
		go func() { done <- cmd.ExecuteContext(ctx) }()
		time.Sleep(200 * time.Millisecond)
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("serve institution: %v\n%s", err, errOut.String())
		}
		return errOut.String()
	}
	t.Setenv(envAdminToken, "0123456789abcdef0123")
	t.Setenv("STAMPEDE_LOG_FORMAT", "")
	out := run()
	sc := bufio.NewScanner(strings.NewReader(out))
	lines := 0
	for sc.Scan() {
		lines++
		if !json.Valid(sc.Bytes()) {
			t.Errorf("not JSON: %s", sc.Text())
		}
	}
	if lines < 2 || !strings.Contains(out, `"msg":"institution simulator listening"`) {
		t.Errorf("want JSON lines with the listening line, got:\n%s", out)
	}
	if out := run("--log-format", "text"); !strings.Contains(out, `msg="institution simulator listening"`) {
		t.Errorf("--log-format text: got:\n%s", out)
	}
	t.Setenv("STAMPEDE_LOG_FORMAT", "text")
	if out := run(); !strings.Contains(out, `msg="institution simulator listening"`) {
		t.Errorf("STAMPEDE_LOG_FORMAT=text: got:\n%s", out)
	}
}

// TestOnlyTheRootHasAPersistentHook guards the one hook that applies the
// environment and makes the logger: cobra runs only the nearest
// PersistentPreRun, so a subcommand with its own would silently skip both;
// and a subcommand's own --log-level would shadow the root's.
func TestOnlyTheRootHasAPersistentHook(t *testing.T) {
	root := newRootCmd()
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			if sub.PersistentPreRun != nil || sub.PersistentPreRunE != nil {
				t.Errorf("%s has its own PersistentPreRun: the root's (environment, logger) would not run for it", sub.CommandPath())
			}
			for _, name := range []string{"log-level", "log-format"} {
				if sub.LocalNonPersistentFlags().Lookup(name) != nil || sub.PersistentFlags().Lookup(name) != nil {
					t.Errorf("%s defines its own --%s, shadowing the root's", sub.CommandPath(), name)
				}
			}
			walk(sub)
		}
	}
	walk(root)
	if root.PersistentPreRunE == nil {
		t.Error("the root has no PersistentPreRunE")
	}
}
