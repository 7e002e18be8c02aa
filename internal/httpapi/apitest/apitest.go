// Package apitest checks, in tests, that every answer an API gives matches
// its OpenAPI description, so that the description cannot drift from the
// code: an HTTP client whose transport validates each response it
// receives with kin-openapi's openapi3filter.
package apitest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/stampede-lab/stampede/internal/httpapi"
)

func init() {
	// Pages are described as text/html strings.
	openapi3filter.RegisterBodyDecoder("text/html", openapi3filter.PlainBodyDecoder)
}

// Validator checks responses against one API's description.
type Validator struct {
	spec   *httpapi.Spec
	router routers.Router
}

// New returns a Validator for spec; it fails t if no router can be built.
func New(t testing.TB, spec *httpapi.Spec) *Validator {
	t.Helper()
	// No servers: paths match on any test host.
	doc := *spec.Doc
	doc.Servers = nil
	r, err := legacy.NewRouter(&doc)
	if err != nil {
		t.Fatalf("apitest: router: %v", err)
	}
	return &Validator{spec: spec, router: r}
}

// Check validates one response to req with the given body. A response to
// a path or method the description does not have must be a problem
// (404 or 405) whose body matches #/components/schemas/Problem.
func (v *Validator) Check(req *http.Request, resp *http.Response, body []byte) error {
	route, params, err := v.router.FindRoute(req)
	if err != nil {
		if resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusMethodNotAllowed {
			return fmt.Errorf("%s %s is not in the description, but answered %d", req.Method, req.URL.Path, resp.StatusCode)
		}
		schema := v.spec.Doc.Components.Schemas["Problem"].Value
		var got any
		if _, val, err := decode(resp, body); err != nil {
			return fmt.Errorf("%s %s answered %d with a body that is not problem+json: %w", req.Method, req.URL.Path, resp.StatusCode, err)
		} else {
			got = val
		}
		if err := schema.VisitJSON(got); err != nil {
			return fmt.Errorf("%s %s: %d body is not a Problem: %w", req.Method, req.URL.Path, resp.StatusCode, err)
		}
		return nil
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{
			Request: req, PathParams: params, Route: route,
			Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc},
		},
		Status: resp.StatusCode,
		Header: resp.Header,
		Options: &openapi3filter.Options{
			IncludeResponseStatus: true,
			MultiError:            true,
		},
	}
	in.SetBodyBytes(body)
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		return fmt.Errorf("%s %s → %d does not match the description: %w", req.Method, req.URL.Path, resp.StatusCode, err)
	}
	return nil
}

// decode reads a JSON or problem+json body.
func decode(resp *http.Response, body []byte) (string, any, error) {
	ct := resp.Header.Get("Content-Type")
	if ct != httpapi.ProblemContentType {
		return "", nil, fmt.Errorf("Content-Type %q, want %s", ct, httpapi.ProblemContentType)
	}
	v, err := openapi3filter.JSONBodyDecoder(bytes.NewReader(body), resp.Header, nil, nil)
	return ct, v, err
}

// Transport returns a RoundTripper over base (nil: http.DefaultTransport)
// that validates every response and reports a mismatch with t.Errorf.
func (v *Validator) Transport(t testing.TB, base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		resp, err := base.RoundTrip(req)
		if err != nil {
			return resp, err
		}
		body, rerr := io.ReadAll(resp.Body)
		resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(body))
		if rerr != nil {
			return resp, nil // the caller sees the short body
		}
		if err := v.Check(req, resp, body); err != nil {
			t.Errorf("apitest: %v", err)
		}
		return resp, nil
	})
}

// Client returns an http.Client whose every response is validated (see
// Transport).
func (v *Validator) Client(t testing.TB) *http.Client {
	return &http.Client{Transport: v.Transport(t, nil)}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
