package main

import (
	"bufio"
	"context"
	"debug/elf"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v4"
)

// repoRoot is the repository, seen from cmd/stampede.
const repoRoot = "../.."

// composeService is the part of a compose service the test reads.
type composeService struct {
	Image       string            `yaml:"image"`
	Build       any               `yaml:"build"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Ports       []string          `yaml:"ports"`
	DependsOn   yaml.Node         `yaml:"depends_on"`
	Healthcheck struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
}

// dependsOn are the services of depends_on, in its list or map form.
func (d composeService) dependsOn() []string {
	var names []string
	switch d.DependsOn.Kind {
	case yaml.SequenceNode:
		_ = d.DependsOn.Decode(&names)
	case yaml.MappingNode:
		for i := 0; i < len(d.DependsOn.Content); i += 2 {
			names = append(names, d.DependsOn.Content[i].Value)
		}
	}
	return names
}

// composeFile is the part of deploy/compose.yaml the tests read.
type composeFile struct {
	Services map[string]composeService `yaml:"services"`
}

func readCompose(t *testing.T) composeFile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var compose composeFile
	if err := yaml.Unmarshal(b, &compose); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	return compose
}

// interpolateRE matches compose's ${VAR}, ${VAR:-default} and ${VAR:?error}.
var interpolateRE = regexp.MustCompile(`\$\{(\w+)(?::?([-?])([^}]*))?\}`)

// interpolate replaces compose variables: a default by itself, a required
// variable by a stand-in of 64 characters (a secret the operator sets).
func interpolate(s string) string {
	return interpolateRE.ReplaceAllStringFunc(s, func(m string) string {
		sub := interpolateRE.FindStringSubmatch(m)
		switch sub[2] {
		case "-":
			return sub[3]
		case "?":
			return strings.Repeat("x", 64)
		}
		return ""
	})
}

// TestComposeFile checks deploy/compose.yaml against the real command line:
// every service the platform needs is there; every stampede service runs a
// serve subcommand with flags and STAMPEDE_* variables the command accepts
// and with the values it requires; ports and health checks use the port
// the service listens on.
func TestComposeFile(t *testing.T) {
	compose := readCompose(t)
	// The service each stampede service runs, and the flags it must be
	// given (on the command line or in the environment).
	stampede := map[string]string{
		"waitroom-1": "waitroom", "waitroom-2": "waitroom", "waitroom-3": "waitroom",
		"institution": "institution", "pay": "pay",
	}
	required := map[string][]string{
		"waitroom":    {"http", "redis", "secret", "admin-token"},
		"institution": {"http", "admin-token"},
		"pay":         {"http", "postgres", "nats", "institution"},
	}
	for _, name := range []string{"redis", "postgres", "nats"} {
		if _, ok := compose.Services[name]; !ok {
			t.Errorf("compose.yaml has no %s service", name)
		}
	}
	if nats := compose.Services["nats"]; !slices.Contains(nats.Command, "-js") {
		t.Errorf("nats runs %v, without -js (JetStream)", nats.Command)
	}
	secrets := map[string]map[string]bool{}
	for name, svc := range compose.Services {
		for _, dep := range svc.dependsOn() {
			if _, ok := compose.Services[dep]; !ok {
				t.Errorf("%s depends on %s, which is not a service", name, dep)
			}
		}
		if len(svc.Healthcheck.Test) == 0 {
			t.Errorf("%s has no health check", name)
		}
		if svc.Image == "stampede:dev" && stampede[name] == "" {
			t.Errorf("%s runs stampede but the test does not know it: add it to the test's table", name)
		}
	}
	for name, want := range stampede {
		svc, ok := compose.Services[name]
		if !ok {
			t.Errorf("compose.yaml has no %s service", name)
			continue
		}
		if svc.Image != "stampede:dev" || svc.Build == nil {
			t.Errorf("%s: image %q build %v, want stampede:dev built from the Dockerfile", name, svc.Image, svc.Build)
		}
		args := make([]string, len(svc.Command))
		for i, a := range svc.Command {
			args[i] = interpolate(a)
		}
		cmd, rest, err := newRootCmd().Find(args)
		if err != nil || cmd.Parent() == nil || cmd.Parent().Name() != "serve" || cmd.Name() != want {
			t.Errorf("%s: command %v is not `serve %s` (%v)", name, svc.Command, want, err)
			continue
		}
		fs := cmd.Flags()
		if err := cmd.ParseFlags(rest); err != nil {
			t.Errorf("%s: serve %s rejects %v: %v", name, want, rest, err)
			continue
		}
		if len(fs.Args()) > 0 {
			t.Errorf("%s: serve %s takes no arguments, got %v", name, want, fs.Args())
		}
		byEnv := map[string]*pflag.Flag{}
		fs.VisitAll(func(f *pflag.Flag) {
			for _, env := range envNames(f) {
				byEnv[env] = f
			}
		})
		for env, v := range svc.Environment {
			f := byEnv[env]
			if f == nil {
				t.Errorf("%s: %s is no variable of serve %s", name, env, want)
				continue
			}
			if f.Changed {
				continue // the command line wins
			}
			if err := fs.Set(f.Name, interpolate(v)); err != nil {
				t.Errorf("%s: %s: %v", name, env, err)
			}
		}
		for _, flag := range required[want] {
			if f := fs.Lookup(flag); f == nil || f.Value.String() == "" || !f.Changed {
				t.Errorf("%s: serve %s needs --%s (or %s)", name, want, flag, envName(flag))
			}
		}
		for _, flag := range []string{"secret", "admin-token"} {
			if f := fs.Lookup(flag); f != nil && want == "waitroom" {
				if secrets[flag] == nil {
					secrets[flag] = map[string]bool{}
				}
				secrets[flag][svc.Environment[envName(flag)]+"|"+f.Value.String()] = true
			}
		}
		// The service listens on all interfaces, on the port compose
		// publishes and the health check asks.
		http := fs.Lookup("http").Value.String()
		port := http[strings.LastIndex(http, ":")+1:]
		if host := strings.TrimSuffix(http, ":"+port); host != "" && host != "0.0.0.0" {
			t.Errorf("%s: --http %s listens on %s only: unreachable from other containers", name, http, host)
		}
		if !slices.ContainsFunc(svc.Ports, func(p string) bool { return strings.HasSuffix(p, ":"+port) }) {
			t.Errorf("%s: ports %v do not publish %s", name, svc.Ports, port)
		}
		if hc := svc.Healthcheck.Test; !slices.Equal(hc, []string{"CMD", "/stampede", "probe", "http://127.0.0.1:" + port + "/healthz"}) &&
			!slices.Equal(hc, []string{"CMD", "/stampede", "probe", "http://127.0.0.1:" + port + "/readyz"}) {
			t.Errorf("%s: health check %v, want /stampede probe of /healthz or /readyz on %s", name, hc, port)
		}
	}
	for flag, values := range secrets {
		if len(values) != 1 {
			t.Errorf("the waiting rooms do not share one --%s: %d different settings", flag, len(values))
		}
	}
}

// dockerfile is a Dockerfile's instructions, continuation lines joined.
func dockerfile(t *testing.T) [][2]string {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out [][2]string
	var cur string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if cur == "" && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		if l, ok := strings.CutSuffix(line, `\`); ok {
			cur += l + " "
			continue
		}
		cur += line
		instr, args, _ := strings.Cut(cur, " ")
		out = append(out, [2]string{strings.ToUpper(instr), strings.TrimSpace(args)})
		cur = ""
	}
	return out
}

// shellWords splits a shell command line on blanks, honouring single and
// double quotes (enough for a Dockerfile's RUN line).
func shellWords(s string) ([]string, error) {
	var words []string
	var w strings.Builder
	in, quote := false, rune(0)
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			w.WriteRune(r)
		case r == '\'' || r == '"':
			quote, in = r, true
		case r == ' ' || r == '\t':
			if in {
				words, in = append(words, w.String()), false
				w.Reset()
			}
		default:
			w.WriteRune(r)
			in = true
		}
	}
	if quote != 0 {
		return nil, errors.New("unterminated quote")
	}
	if in {
		words = append(words, w.String())
	}
	return words, nil
}

// TestDockerfile checks the Dockerfile's stages, then runs its build
// command and checks that the binary is static: no interpreter, no shared
// libraries, so it runs on a distroless or scratch image. No Docker engine
// runs here, so this is how the Dockerfile is tested. The first run takes
// minutes (-trimpath builds do not share the build cache of plain ones);
// later runs take seconds.
func TestDockerfile(t *testing.T) {
	var froms, users, entrypoints []string
	var build []string
	for _, in := range dockerfile(t) {
		switch in[0] {
		case "FROM":
			froms = append(froms, in[1])
		case "USER":
			users = append(users, in[1])
		case "ENTRYPOINT":
			entrypoints = append(entrypoints, in[1])
		case "RUN":
			if strings.Contains(in[1], "go build") {
				w, err := shellWords(in[1])
				if err != nil {
					t.Fatalf("RUN %s: %v", in[1], err)
				}
				build = w
			}
		}
	}
	if len(froms) != 2 || !strings.HasPrefix(froms[0], "golang:1.26 ") || !strings.HasSuffix(froms[0], " AS build") {
		t.Errorf("stages %q: want a golang:1.26 build stage, then the final one", froms)
	}
	if final := froms[len(froms)-1]; !strings.HasPrefix(final, "gcr.io/distroless/static") && final != "scratch" {
		t.Errorf("final stage FROM %s: want distroless static or scratch", final)
	}
	if len(users) != 1 || strings.HasPrefix(users[0], "0") || strings.HasPrefix(users[0], "root") {
		t.Errorf("USER %q: want one non-root user", users)
	}
	if !slices.Equal(entrypoints, []string{`["/stampede"]`}) {
		t.Errorf("ENTRYPOINT %q, want [\"/stampede\"]", entrypoints)
	}

	// The build command: VAR=value ... go build ... -o /stampede ./cmd/stampede.
	var env []string
	for len(build) > 0 && strings.Contains(build[0], "=") {
		env, build = append(env, build[0]), build[1:]
	}
	if !slices.Contains(env, "CGO_ENABLED=0") {
		t.Errorf("the build runs with %v, want CGO_ENABLED=0", env)
	}
	for _, want := range []string{"-trimpath", "-ldflags=-s -w", "./cmd/stampede"} {
		if !slices.Contains(build, want) {
			t.Errorf("the build command %q lacks %s", build, want)
		}
	}
	o := slices.Index(build, "-o")
	if len(build) < 2 || build[0] != "go" || build[1] != "build" || o < 0 || o+1 >= len(build) || build[o+1] != "/stampede" {
		t.Fatalf("the build command %q is not go build ... -o /stampede", build)
	}
	if testing.Short() {
		t.Skip("-short: not running the Dockerfile's go build (it compiles the whole binary)")
	}
	bin := filepath.Join(t.TempDir(), "stampede")
	args := slices.Clone(build)
	args[o+1] = bin
	c := exec.Command(args[0], args[1:]...)
	c.Dir = repoRoot
	c.Env = append(os.Environ(), env...)
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(append(env, args...), " "), err, out)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary has an interpreter (PT_INTERP): it is dynamically linked")
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
		t.Errorf("the binary needs shared libraries %v (%v)", libs, err)
	}
	if f.Section(".symtab") != nil {
		t.Error("the binary has a symbol table: -ldflags=-s did not apply")
	}
	// And it runs: the health check the compose file uses is there.
	if out, err := exec.Command(bin, "probe", "--help").CombinedOutput(); err != nil || !strings.Contains(string(out), "probe URL") {
		t.Errorf("%s probe --help: %v\n%s", bin, err, out)
	}
}

// TestComposeServicesStart runs compose.yaml's stampede services in this
// process with their commands and environment, as far as they can run
// without Docker: Redis, PostgreSQL and NATS are the embedded defaults
// (the URL flags and variables are left out), --http is a free loopback
// port and pay calls the institution started here. Each must pass its own
// health check (`stampede probe`, as compose runs it) and stop cleanly.
func TestComposeServicesStart(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts five services")
	}
	compose := readCompose(t)
	backing := map[string]bool{"--redis": true, "--postgres": true, "--nats": true}
	for _, env := range []string{envRedis, envPostgres, envNATS, "STAMPEDE_REDIS", "STAMPEDE_POSTGRES", "STAMPEDE_NATS"} {
		t.Setenv(env, "")
	}
	institutionURL := ""
	for _, name := range []string{"institution", "pay", "waitroom-1", "waitroom-2", "waitroom-3"} {
		svc, ok := compose.Services[name]
		if !ok {
			t.Fatalf("compose.yaml has no %s service", name)
		}
		addr := freeAddr(t)
		var args []string
		for i := 0; i < len(svc.Command); i++ {
			a := interpolate(svc.Command[i])
			switch {
			case backing[a]:
				i++ // the embedded default instead
				continue
			case a == "--http" || a == "--institution":
				args = append(args, a)
				if a == "--http" {
					args = append(args, addr)
				} else {
					args = append(args, institutionURL)
				}
				i++
				continue
			}
			args = append(args, a)
		}
		if name == "pay" {
			dir := t.TempDir()
			args = append(args, "--sqlite", filepath.Join(dir, "pay.db"), "--nats-dir", filepath.Join(dir, "nats"))
		}
		for env, v := range svc.Environment {
			if !slices.Contains([]string{envRedis, envPostgres, envNATS}, env) {
				t.Setenv(env, interpolate(v))
			}
		}
		logs := &syncBuffer{}
		ctx, cancel := context.WithCancel(context.Background())
		cmd := newRootCmd()
		cmd.SetOut(io.Discard)
		cmd.SetErr(logs)
		cmd.SetArgs(args)
		done := make(chan error, 1)
		go func() { done <- cmd.ExecuteContext(ctx) }()
		t.Cleanup(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("%s: %v\n%s", name, err, logs.String())
				}
			case <-time.After(15 * time.Second):
				t.Errorf("%s did not stop within 15s", name)
			}
		})

		// The health check compose runs, against where the service listens.
		hc := svc.Healthcheck.Test
		if len(hc) != 4 || hc[1] != "/stampede" || hc[2] != "probe" {
			t.Fatalf("%s: health check %v is not /stampede probe URL", name, hc)
		}
		port := args[slices.Index(args, "--http")+1]
		url := regexp.MustCompile(`//[^/]+`).ReplaceAllString(hc[3], "//"+port)
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			_, _, err := execute(t, "probe", url)
			if err == nil {
				break
			}
			select {
			case err := <-done:
				t.Fatalf("%s exited: %v\n%s", name, err, logs.String())
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %v\n%s", name, err, logs.String())
			}
		}
		if name == "institution" {
			institutionURL = "http://" + addr
		}
	}
}
