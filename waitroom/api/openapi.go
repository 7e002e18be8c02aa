package api

import (
	_ "embed"
	"sync"

	"github.com/stampede-lab/stampede/internal/httpapi"
)

// openapiYAML describes every route of NewHandler.
//
//go:embed openapi.yaml
var openapiYAML []byte

var openAPI = sync.OnceValue(func() *httpapi.Spec { return httpapi.MustLoadSpec(openapiYAML) })

// OpenAPI returns the waiting room's OpenAPI 3 description, served on
// /openapi.json; tests check real answers against it (package apitest).
func OpenAPI() *httpapi.Spec { return openAPI() }
