package gate_test

import (
	"context"
	"testing"

	"github.com/stampede-lab/stampede/gate"
	"github.com/stampede-lab/stampede/waitroom"
	"github.com/stampede-lab/stampede/waitroom/api"
	"github.com/stampede-lab/stampede/waitroom/api/apitest"
)

// running is a waiting-room instance running for the test (apitest).
type running = apitest.Running

// startServer makes a Server on store with cfg and runs it until the test
// ends or Close is called (apitest.Start).
func startServer(t testing.TB, ctx context.Context, store waitroom.Store, cfg api.Config) (*running, error) {
	t.Helper()
	return apitest.Start(t, ctx, store, cfg)
}

// withWaitroom is cfg embedding the waiting-room instance srv.
func withWaitroom(cfg gate.Config, srv *running) gate.Config {
	cfg.Service, cfg.Tickets, cfg.Admissions, cfg.Waitroom = srv.Service(), srv.Tickets(), srv.Admissions(), srv
	return cfg
}
