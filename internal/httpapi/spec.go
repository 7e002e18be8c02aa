package httpapi

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/getkin/kin-openapi/openapi3"
	"go.yaml.in/yaml/v4"
)

// problemSchema is the RFC 9457 body every Stampede API answers errors
// with, added to each spec as #/components/schemas/Problem so that no
// spec writes it again.
var problemSchema = map[string]any{
	"type":     "object",
	"required": []any{"type", "title", "status", "detail", "code"},
	"properties": map[string]any{
		"type":   map[string]any{"type": "string", "description": "urn:stampede:problem:<code>"},
		"title":  map[string]any{"type": "string", "description": "the HTTP status text"},
		"status": map[string]any{"type": "integer", "minimum": 400, "maximum": 599},
		"detail": map[string]any{"type": "string", "description": "what went wrong, safe to show"},
		"code":   map[string]any{"type": "string", "description": "a stable error code such as invalid or not_found"},
		"field":  map[string]any{"type": "string", "description": "the field, header or parameter at fault"},
		"errors": map[string]any{
			"type":        "array",
			"description": "every field at fault, when a request has more than one (the first is field and detail)",
			"items": map[string]any{
				"type":     "object",
				"required": []any{"field", "detail"},
				"properties": map[string]any{
					"field":  map[string]any{"type": "string"},
					"detail": map[string]any{"type": "string"},
				},
			},
		},
	},
	"additionalProperties": true,
}

// Spec is a loaded, validated OpenAPI 3 description of an API.
type Spec struct {
	// Doc is the parsed description, with references resolved.
	Doc *openapi3.T
	// JSON is the description as served on /openapi.json.
	JSON []byte
}

// LoadSpec parses an OpenAPI 3 description written in YAML (or JSON),
// adds #/components/schemas/Problem and #/components/responses/Problem
// (an application/problem+json answer), and validates it.
func LoadSpec(doc []byte) (*Spec, error) {
	var tree map[string]any
	if err := yaml.Unmarshal(doc, &tree); err != nil {
		return nil, fmt.Errorf("httpapi: parsing the OpenAPI description: %w", err)
	}
	components, _ := tree["components"].(map[string]any)
	if components == nil {
		components = map[string]any{}
		tree["components"] = components
	}
	schemas, _ := components["schemas"].(map[string]any)
	if schemas == nil {
		schemas = map[string]any{}
		components["schemas"] = schemas
	}
	schemas["Problem"] = problemSchema
	responses, _ := components["responses"].(map[string]any)
	if responses == nil {
		responses = map[string]any{}
		components["responses"] = responses
	}
	responses["Problem"] = map[string]any{
		"description": "An error, as RFC 9457 problem details.",
		"content": map[string]any{ProblemContentType: map[string]any{
			"schema": map[string]any{"$ref": "#/components/schemas/Problem"},
		}},
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
	out, err := d.MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("httpapi: encoding the OpenAPI description: %w", err)
	}
	return &Spec{Doc: d, JSON: out}, nil
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
