// Package apitest runs a waiting-room instance (waitroom/api.Server) for
// the tests of the packages that talk to one: the waiting room's own HTTP
// tests, the gate's and the console's. It holds what each would otherwise
// write again: start a Server on a store, run its admission in the
// background, and stop it when the test ends.
package apitest

import (
	"context"
	"net/http"
	"sync"
	"testing"

	"github.com/stampede-lab/stampede/waitroom"
	"github.com/stampede-lab/stampede/waitroom/api"
)

// Running is a Server whose Run goes on in the background until Close
// (or the test's end).
type Running struct {
	*api.Server
	stop func()
}

// Handler is the server's HTTP handler.
func (r *Running) Handler() http.Handler { return r.Server }

// Close stops admission and waits for it; calling it again does nothing.
func (r *Running) Close() { r.stop() }

// Start makes a Server on store with cfg and runs it until the test ends
// or Close is called.
func Start(t testing.TB, ctx context.Context, store waitroom.Store, cfg api.Config) (*Running, error) {
	t.Helper()
	cfg.Store = store
	srv, err := api.New(cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Run(ctx)
	}()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return &Running{Server: srv, stop: stop}, nil
}
