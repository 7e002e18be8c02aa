// Package routes registers an API path's handlers, one per method, on a
// ServeMux, and sends every other method on that path to a 405 handler
// given the Allow header's value, so that each service words its own error.
package routes

import (
	"net/http"
	"slices"
	"strings"
)

// Handle registers methods[m] for "m path" on mux; a GET handler also
// serves HEAD (ServeMux does that itself). Any other method on path goes to
// notAllowed(allow), where allow lists the path's methods, sorted and
// comma-separated, as the Allow header wants them.
func Handle(mux *http.ServeMux, path string, methods map[string]http.HandlerFunc, notAllowed func(allow string) http.HandlerFunc) {
	allowed := make([]string, 0, len(methods)+1)
	for method, fn := range methods {
		mux.HandleFunc(method+" "+path, fn)
		allowed = append(allowed, method)
		if method == http.MethodGet {
			allowed = append(allowed, http.MethodHead)
		}
	}
	slices.Sort(allowed)
	mux.HandleFunc(path, notAllowed(strings.Join(allowed, ", ")))
}
