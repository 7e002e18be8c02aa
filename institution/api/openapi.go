package api

import (
	_ "embed"
	"sync"

	"github.com/stampede-lab/stampede/internal/httpapi"
)

// openAPIYAML is the simulator's OpenAPI 3 description.
//
//go:embed openapi.yaml
var openAPIYAML []byte

// openAPI parses the description once.
var openAPI = sync.OnceValue(func() *httpapi.Spec { return httpapi.MustLoadSpec(openAPIYAML) })

// OpenAPI returns the simulator's OpenAPI 3 description, as the Server
// serves it on /openapi.json. Tests validate answers against it (package
// internal/httpapi/apitest).
func OpenAPI() *httpapi.Spec { return openAPI() }
