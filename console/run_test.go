package console_test

import (
	"context"
	"testing"

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
