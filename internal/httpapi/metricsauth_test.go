package httpapi_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/internal/httpapi"
)

// TestMetricsAuthGuardsOnlyMetrics: with Config.MetricsAuth, /metrics
// answers what it returns (here 401 problem+json, no metric) unless it
// accepts the request; /healthz and /readyz answer anyone.
func TestMetricsAuthGuardsOnlyMetrics(t *testing.T) {
	a, err := httpapi.New(httpapi.Config{Name: "guarded", Logger: slog.New(slog.DiscardHandler),
		MetricsAuth: func(r *http.Request) error {
			if r.Header.Get("Authorization") != "Bearer scrape" {
				return stampede.Errorf(stampede.Unauthorized, "the metrics need a token")
			}
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a)
	defer srv.Close()
	get := func(path, auth string) (int, string, string) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
	}
	if code, ct, body := get("/metrics", ""); code != http.StatusUnauthorized || ct != "application/problem+json" || strings.Contains(body, "stampede_ready") {
		t.Errorf("/metrics without a token = %d %s %.200s, want 401 problem+json and no metric", code, ct, body)
	}
	if code, _, body := get("/metrics", "Bearer scrape"); code != http.StatusOK || !strings.Contains(body, "http_requests_total") {
		t.Errorf("/metrics with the token = %d %.200s, want the metrics", code, body)
	}
	for _, p := range []string{"/healthz", "/readyz"} {
		if code, _, _ := get(p, ""); code != http.StatusOK {
			t.Errorf("%s without a token = %d, want 200", p, code)
		}
	}
}
