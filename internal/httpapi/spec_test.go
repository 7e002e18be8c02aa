package httpapi_test

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"go.yaml.in/yaml/v4"

	"github.com/stampede-lab/stampede/internal/httpapi"
)

// withProblem returns spec with a components section holding the
// Problem schema and response of problem.yaml, as every description must.
func withProblem(t *testing.T, spec string) []byte {
	t.Helper()
	problem, err := os.ReadFile("problem.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString(spec)
	b.WriteString("components:\n")
	for line := range strings.Lines(string(problem)) {
		b.WriteString("  " + line)
	}
	return []byte(b.String())
}

// TestEverySpecStandsAlone: every openapi.yaml in the repository carries
// the Problem components itself, identical to problem.yaml (LoadSpec
// refuses a copy that differs), and what LoadSpec serves as
// /openapi.json is the file itself, nothing added. (That the files lint
// clean and load in a mock server is .ci/openapi's job: spectral and
// prism.)
func TestEverySpecStandsAlone(t *testing.T) {
	var files []string
	err := filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.Name() == "openapi.yaml" {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 5 {
		t.Fatalf("found %d openapi.yaml files (%v), want the five APIs' at least", len(files), files)
	}
	for _, f := range files {
		doc, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		spec, err := httpapi.LoadSpec(doc)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		var file, served any
		if err := yaml.Unmarshal(doc, &file); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(spec.JSON, &served); err != nil {
			t.Fatal(err)
		}
		if fileJSON := roundTrip(t, file); !reflect.DeepEqual(fileJSON, served) {
			t.Errorf("%s: the served description is not the file", f)
		}
	}
}

// roundTrip returns v as JSON would carry it.
func roundTrip(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestLoadSpecRefusesMissingOrDriftedProblem: a description without its
// own Problem components, or with a copy that differs from problem.yaml,
// does not load, so that no file can depend on what LoadSpec used to add
// and no copy drifts.
func TestLoadSpecRefusesMissingOrDriftedProblem(t *testing.T) {
	const paths = "openapi: 3.0.3\ninfo: {title: t, version: \"1\"}\npaths: {}\n"
	if _, err := httpapi.LoadSpec(withProblem(t, paths)); err != nil {
		t.Fatalf("a description with the Problem components: %v", err)
	}
	if _, err := httpapi.LoadSpec([]byte(paths)); err == nil || !strings.Contains(err.Error(), "lacks #/components/schemas/Problem") {
		t.Errorf("a description without the Problem components: %v, want lacks #/components/schemas/Problem", err)
	}
	drifted := strings.Replace(string(withProblem(t, paths)), "minimum: 400", "minimum: 100", 1)
	if _, err := httpapi.LoadSpec([]byte(drifted)); err == nil || !strings.Contains(err.Error(), "schemas/Problem differs") {
		t.Errorf("a description whose Problem schema differs: %v, want differs", err)
	}
	drifted = strings.Replace(string(withProblem(t, paths)), "An error, as RFC 9457", "An error as RFC 9457", 1)
	if _, err := httpapi.LoadSpec([]byte(drifted)); err == nil || !strings.Contains(err.Error(), "responses/Problem differs") {
		t.Errorf("a description whose Problem response differs: %v, want differs", err)
	}
}
