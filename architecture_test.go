package stampede_test

import (
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// module is this module's path; package paths below are relative to it.
const module = "github.com/stampede-lab/stampede"

// The layers of the house (docs/ARCHITECTURE.md draws them).
var (
	// groundFloor holds the contracts every part shares; it imports no part.
	groundFloor = []string{"", "protocol"}
	// domains hold a part's types, rules, services and interfaces, with no
	// transport and no driver.
	domains = []string{"waitroom", "pay", "checkout", "fulfilment", "dispatch", "retry", "institution"}
	// libraries are adapters made to be used by other parts' adapters: the
	// keyed JetStream consumer is a library for any event consumer, and a
	// part's Go client (<part>/client) is how others speak its API, so
	// pay's institution adapter calls the simulator through
	// institution/client and a checkout's admission check goes through
	// waitroom/client.
	libraries = []string{"dispatch/natskeyed", "institution/client", "waitroom/client"}
	// transports are the imports a domain may not have.
	transports = []string{"net/http", "database/sql", "github.com/redis/go-redis/", "github.com/nats-io/",
		"github.com/jackc/pgx", "modernc.org/sqlite", "github.com/alicebob/miniredis",
		module + "/internal/httpapi", module + "/internal/sqldb"}
)

// pkgImports is what `go list` says of one package.
type pkgImports struct {
	ImportPath string
	Imports    []string
}

// listImports returns every package of the module (tests excluded) with
// its imports, relative to the module ("" is the root package).
func listImports(t *testing.T) map[string][]string {
	t.Helper()
	// go test caches a passing result by its binary and the files the test
	// reads: stat every Go file, so that a change anywhere in the tree
	// runs the test again instead of replaying a stale pass.
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata" || strings.HasPrefix(d.Name(), "_")):
			return filepath.SkipDir
		case !d.IsDir() && strings.HasSuffix(path, ".go"):
			_, err = os.Stat(path)
		}
		return err
	})
	if err != nil {
		t.Fatalf("walking the module: %v", err)
	}
	out, err := exec.Command("go", "list", "-json=ImportPath,Imports", module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	got := map[string][]string{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p pkgImports
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		got[rel(p.ImportPath)] = p.Imports
	}
	if len(got) < 20 {
		t.Fatalf("go list found %d packages; the test is looking in the wrong place", len(got))
	}
	return got
}

// rel turns an import path of the module into its path relative to the
// module; other paths are returned as they are.
func rel(path string) string {
	if path == module {
		return ""
	}
	if r, ok := strings.CutPrefix(path, module+"/"); ok {
		return r
	}
	return path
}

// inModule reports whether rel names a package of the module.
func inModule(path string) bool { return !strings.Contains(strings.SplitN(path, "/", 2)[0], ".") }

// partOf returns the part a package belongs to and whether it is the
// part's domain (its root) or one of its adapters; part is "" for a
// package of no part.
func partOf(pkg string) (part string, domain bool) {
	first, _, nested := strings.Cut(pkg, "/")
	if slices.Contains(domains, first) {
		return first, !nested
	}
	return "", false
}

// isSuite reports whether pkg is a conformance suite (<part>/<name>test):
// a suite tests its part's interfaces and imports nothing but the domain.
func isSuite(pkg string) bool {
	part, name, ok := strings.Cut(pkg, "/")
	return ok && slices.Contains(domains, part) && strings.HasSuffix(name, "test") && !strings.Contains(name, "/")
}

// violations returns every broken rule of the house in imports.
func violations(imports map[string][]string) []string {
	var bad []string
	for pkg, imps := range imports {
		part, domain := partOf(pkg)
		for _, imp := range imps {
			r := rel(imp)
			local := inModule(r) && strings.HasPrefix(imp, module)
			switch {
			case slices.Contains(groundFloor, pkg) && local && !slices.Contains(groundFloor, r):
				bad = append(bad, fmt.Sprintf("ground floor %q imports %q: the ground floor imports no part", pkg, r))
			case domain && slices.ContainsFunc(transports, func(t string) bool {
				return imp == t || strings.HasPrefix(imp, t) && strings.HasSuffix(t, "/") || strings.HasPrefix(imp, t+"/")
			}):
				bad = append(bad, fmt.Sprintf("domain %q imports %q: a domain has no transport, driver or client", pkg, imp))
			case strings.HasPrefix(pkg, "internal/") && local && !strings.HasPrefix(r, "internal/") && !slices.Contains(groundFloor, r):
				bad = append(bad, fmt.Sprintf("%q imports %q: internal packages serve every part and import none", pkg, r))
			case !strings.HasPrefix(pkg, "lab") && !strings.HasPrefix(pkg, "cmd/") && local && (r == "lab" || strings.HasPrefix(r, "lab/")):
				bad = append(bad, fmt.Sprintf("%q imports %q: only cmd uses the lab", pkg, r))
			case local && !strings.HasPrefix(pkg, "cmd/") && strings.HasPrefix(r, "cmd/"):
				bad = append(bad, fmt.Sprintf("%q imports %q: nothing imports the commands", pkg, r))
			}
			if !local {
				continue
			}
			ipart, idomain := partOf(r)
			switch {
			case domain && ipart != "" && !idomain:
				bad = append(bad, fmt.Sprintf("domain %q imports adapter %q: adapters depend on domains, not the other way", pkg, r))
			case part != "" && !domain && ipart != "" && ipart != part && !idomain && !slices.Contains(libraries, r):
				bad = append(bad, fmt.Sprintf("adapter %q imports %q, another part's adapter: wire them in cmd", pkg, r))
			case isSuite(pkg) && ipart == part && !idomain && !isSuite(r):
				bad = append(bad, fmt.Sprintf("suite %q imports adapter %q: a conformance suite tests the interface only", pkg, r))
			}
		}
	}
	slices.Sort(bad)
	return bad
}

// TestArchitecture enforces the house's import rules on the real tree.
func TestArchitecture(t *testing.T) {
	for _, v := range violations(listImports(t)) {
		t.Error(v)
	}
}

// TestArchitectureCatchesViolations plants one violation of each rule in
// a copy of the real import graph and checks that each is reported.
func TestArchitectureCatchesViolations(t *testing.T) {
	real := listImports(t)
	plants := []struct {
		pkg, imp, want string
	}{
		{"waitroom", "net/http", "a domain has no transport"},
		{"pay", "database/sql", "a domain has no transport"},
		{"checkout", "github.com/redis/go-redis/v9", "a domain has no transport"},
		{"fulfilment", "github.com/nats-io/nats.go", "a domain has no transport"},
		{"pay", module + "/pay/sqlstore", "adapters depend on domains"},
		{"checkout/sqlstore", module + "/pay/sqlstore", "another part's adapter"},
		{"protocol", module + "/pay", "the ground floor imports no part"},
		{"", module + "/waitroom", "the ground floor imports no part"},
		{"internal/sqldb", module + "/pay", "internal packages serve every part"},
		{"gate", module + "/lab", "only cmd uses the lab"},
	}
	for _, p := range plants {
		graph := map[string][]string{}
		for k, v := range real {
			graph[k] = slices.Clone(v)
		}
		graph[p.pkg] = append(graph[p.pkg], p.imp)
		before := len(violations(real))
		found := false
		for _, v := range violations(graph) {
			if strings.Contains(v, fmt.Sprintf("%q", p.pkg)) && strings.Contains(v, p.want) {
				found = true
			}
		}
		if !found || len(violations(graph)) <= before {
			t.Errorf("planting %s → %s was not reported as %q", p.pkg, p.imp, p.want)
		}
	}
}
