package httplog

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestWrapAnswersAPanicThroughFail(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	var failed error
	h := Wrap(log, "test", http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") }),
		func(w http.ResponseWriter, r *http.Request, err error) {
			failed = err
			w.WriteHeader(http.StatusInternalServerError)
		})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/x", nil))
	if rec.Code != http.StatusInternalServerError || failed == nil || !strings.Contains(failed.Error(), "boom") {
		t.Fatalf("status %d, fail got %v; want 500 through fail with the panic", rec.Code, failed)
	}
	if !strings.Contains(logs.String(), "status=500") {
		t.Errorf("the request log lacks the status:\n%s", logs.String())
	}
}

func TestWrapLogsAPanicAfterTheAnswer(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	h := Wrap(log, "test", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "ok")
		panic("late")
	}), func(http.ResponseWriter, *http.Request, error) { t.Error("fail called after the answer was written") })
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/x", nil))
	if rec.Code != http.StatusOK || !strings.Contains(logs.String(), "panicked after answering") {
		t.Fatalf("status %d, logs %q", rec.Code, logs.String())
	}
}

func TestWrapLetsErrAbortHandlerThrough(t *testing.T) {
	h := Wrap(slog.New(slog.NewTextHandler(io.Discard, nil)), "test",
		http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic(http.ErrAbortHandler) }),
		func(http.ResponseWriter, *http.Request, error) { t.Error("fail called for ErrAbortHandler") })
	defer func() {
		if p := recover(); p != http.ErrAbortHandler {
			t.Fatalf("recovered %v, want http.ErrAbortHandler", p)
		}
	}()
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/x", nil))
}
