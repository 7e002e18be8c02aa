package api_test

import (
	"context"
	"net/http"
	"sync"
	"testing"

	"github.com/stampede-lab/stampede/waitroom"
	"github.com/stampede-lab/stampede/waitroom/api"
)

// running is a Server whose Run goes on in the background until Close
// (or the test's end).
type running struct {
	*api.Server
	stop func()
}

// Handler is the server's HTTP handler.
func (r *running) Handler() http.Handler { return r.Server }

// Close stops admission and waits for it; calling it again does nothing.
func (r *running) Close() { r.stop() }

// startServer makes a Server on store with cfg and runs it until the test
// ends or Close is called.
func startServer(t testing.TB, ctx context.Context, store waitroom.Store, cfg api.Config) (*running, error) {
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
		srv.Run(ctx)
	}()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return &running{Server: srv, stop: stop}, nil
}
