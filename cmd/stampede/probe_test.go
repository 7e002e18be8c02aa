package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestProbe(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.Error(w, "down", http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	if _, _, err := execute(t, "probe", srv.URL+"/healthz"); err != nil {
		t.Errorf("a 200: %v", err)
	}
	if _, _, err := execute(t, "probe", srv.URL+"/readyz"); err == nil || !strings.Contains(err.Error(), "503") {
		t.Errorf("a 503: %v, want an error naming the status", err)
	}
	if _, _, err := execute(t, "probe", "http://127.0.0.1:1/healthz", "--timeout", "200ms"); err == nil {
		t.Error("nothing listening: no error")
	}
}
