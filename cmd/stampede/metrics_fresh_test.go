package main

import (
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stampede-lab/stampede/deploy"
)

// TestFreshServicesExposeEveryDocumentedMetric starts the institution
// simulator, pay, a fulfilment worker and a waiting room with one room,
// sends them nothing else, and reads each one's /metrics: every metric of
// deploy.Metrics (what the dashboard and the alerts query) has a series
// already, so that a panel shows 0 rather than "no data" and an alert on
// a rate sees the first event.
func TestFreshServicesExposeEveryDocumentedMetric(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four services")
	}
	clearServiceEnv(t)
	const token = "fresh-admin-token-0123456789"
	inst, _ := startServe(t, "institution", "--admin-token", token)
	pay, payLog := servePay(t, "http://"+inst)
	natsURL := regexp.MustCompile(`nats://127\.0\.0\.1:\d+`).FindString(payLog.String())
	if natsURL == "" {
		t.Fatalf("pay's log names no embedded nats-server:\n%s", payLog)
	}
	worker := serveWorker(t, "--nats", natsURL, "--data-dir", t.TempDir())
	wr, _ := startServe(t, "waitroom", "--admin-token", token, "--data-dir", "")
	req, _ := http.NewRequest(http.MethodPut, "http://"+wr+"/v1/rooms/fresh", strings.NewReader(`{"capacity":3}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT room: %v %v", resp, err)
	}

	scrape := func(addr string) string {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/metrics", nil)
		if addr == wr {
			req.Header.Set("Authorization", "Bearer "+token) // the waiting room's metrics name rooms
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	serviceOf := map[string]string{"stampede_institution_": inst, "stampede_pay_": pay, "stampede_worker_": worker,
		"stampede_waitroom_": wr}
	for _, m := range deploy.Metrics {
		series := m.Name
		if m.Type == "histogram" {
			series += "_count"
		}
		has := func(body string) bool {
			return strings.Contains(body, "\n"+series+"{") || strings.Contains(body, "\n"+series+" ")
		}
		// stampede_ready: every service with a dependency to check (the
		// simulator has none).
		addrs := []string{pay, worker, wr}
		for prefix, addr := range serviceOf {
			if strings.HasPrefix(m.Name, prefix) {
				addrs = []string{addr}
			}
		}
		for _, addr := range addrs {
			// A room's counters appear with its first admission pass (every
			// 200 ms by default).
			ok := false
			for deadline := time.Now().Add(5 * time.Second); !ok && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
				ok = has(scrape(addr))
			}
			if !ok {
				t.Errorf("%s (%s): no series of %s on a fresh service", addr, map[string]string{inst: "institution", pay: "pay", worker: "worker", wr: "waitroom"}[addr], m.Name)
			}
		}
	}
}
