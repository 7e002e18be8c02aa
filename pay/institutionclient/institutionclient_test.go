package institutionclient_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	instapi "github.com/stampede-lab/stampede/institution/api"
	instclient "github.com/stampede-lab/stampede/institution/client"
	"github.com/stampede-lab/stampede/pay/connectortest"
	"github.com/stampede-lab/stampede/pay/institutionclient"
)

// TestConformance runs the connector suite against the simulator's own
// protocol.
func TestConformance(t *testing.T) {
	const timeout = 100 * time.Millisecond
	connectortest.Run(t, func(t *testing.T) connectortest.Harness {
		cfg := instapi.DefaultConfig()
		cfg.AdminToken, cfg.NotFoundWindow = "institution-admin-token-for-tests", 50*time.Millisecond
		srv, err := instapi.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ts := httptest.NewServer(srv)
		t.Cleanup(func() { srv.Close(); ts.Close() })
		hc := &http.Client{Timeout: timeout}
		return connectortest.Harness{
			Connector:   institutionclient.New(instclient.NewClient(ts.URL, hc)),
			Unreachable: institutionclient.New(instclient.NewClient("http://127.0.0.1:1", hc)),
			Sim:         srv.Simulator,
			CallTimeout: timeout,
		}
	})
}
