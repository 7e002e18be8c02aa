package httpapi

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"reflect"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"go.yaml.in/yaml/v4"
)

// problemYAML is the one definition of the RFC 9457 problem every
// Stampede API answers errors with: #/components/schemas/Problem and
// #/components/responses/Problem, which every description carries as a
// copy so that it stands alone.
//
//go:embed problem.yaml
var problemYAML []byte

// problemComponents is problemYAML parsed: "schemas" and "responses",
// each holding "Problem".
var problemComponents = sync.OnceValue(func() map[string]any {
	var c map[string]any
	if err := yaml.Unmarshal(problemYAML, &c); err != nil {
		panic(fmt.Sprintf("httpapi: problem.yaml: %v", err))
	}
	return c
})

// Spec is a loaded, validated OpenAPI 3 description of an API.
type Spec struct {
	// Doc is the parsed description, with references resolved.
	Doc *openapi3.T
	// JSON is the description as served on /openapi.json.
	JSON []byte
}

// LoadSpec parses an OpenAPI 3 description written in YAML (or JSON),
// checks that it carries #/components/schemas/Problem and
// #/components/responses/Problem exactly as problem.yaml defines them,
// and validates it. The served JSON is the description itself.
func LoadSpec(doc []byte) (*Spec, error) {
	var tree map[string]any
	if err := yaml.Unmarshal(doc, &tree); err != nil {
		return nil, fmt.Errorf("httpapi: parsing the OpenAPI description: %w", err)
	}
	components, _ := tree["components"].(map[string]any)
	for _, kind := range []string{"schemas", "responses"} {
		want := problemComponents()[kind].(map[string]any)["Problem"]
		group, _ := components[kind].(map[string]any)
		got, ok := group["Problem"]
		if !ok {
			return nil, fmt.Errorf("httpapi: the OpenAPI description lacks #/components/%s/Problem (copy it from internal/httpapi/problem.yaml)", kind)
		}
		if !reflect.DeepEqual(got, want) {
			return nil, fmt.Errorf("httpapi: the OpenAPI description's #/components/%s/Problem differs from internal/httpapi/problem.yaml", kind)
		}
	}
	raw, err := json.Marshal(tree)
	if err != nil {
		return nil, fmt.Errorf("httpapi: encoding the OpenAPI description: %w", err)
	}
	loader := openapi3.NewLoader()
	d, err := loader.LoadFromData(raw)
	if err != nil {
		return nil, fmt.Errorf("httpapi: loading the OpenAPI description: %w", err)
	}
	if err := d.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("httpapi: the OpenAPI description is invalid: %w", err)
	}
	return &Spec{Doc: d, JSON: raw}, nil
}

// MustLoadSpec is LoadSpec for descriptions embedded in the binary, where
// an invalid one is a bug: it panics.
func MustLoadSpec(doc []byte) *Spec {
	s, err := LoadSpec(doc)
	if err != nil {
		panic(err)
	}
	return s
}
