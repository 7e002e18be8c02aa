package routes

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestHandle(t *testing.T) {
	mux := http.NewServeMux()
	ok := func(body string) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, body) }
	}
	Handle(mux, "/things/{id}", map[string]http.HandlerFunc{
		http.MethodPut: ok("put"),
		http.MethodGet: ok("get"),
	}, func(allow string) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Allow", allow)
			w.WriteHeader(http.StatusMethodNotAllowed)
		}
	})
	for _, tc := range []struct {
		method   string
		status   int
		body     string
		allowHdr string
	}{
		{http.MethodGet, http.StatusOK, "get", ""},
		{http.MethodHead, http.StatusOK, "get", ""}, // the GET handler; the server, not the recorder, drops the body
		{http.MethodPut, http.StatusOK, "put", ""},
		{http.MethodDelete, http.StatusMethodNotAllowed, "", "GET, HEAD, PUT"},
		{http.MethodPost, http.StatusMethodNotAllowed, "", "GET, HEAD, PUT"},
	} {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(tc.method, "/things/7", nil))
		if rec.Code != tc.status || rec.Body.String() != tc.body || rec.Header().Get("Allow") != tc.allowHdr {
			t.Errorf("%s = %d %q Allow %q, want %d %q Allow %q", tc.method, rec.Code, rec.Body, rec.Header().Get("Allow"), tc.status, tc.body, tc.allowHdr)
		}
	}
}
