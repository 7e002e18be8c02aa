package httpapi_test

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stampede-lab/stampede/internal/httpapi"
)

// lockedBuffer is a log sink safe for concurrent handlers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestRequestsLoggedAtDebugOnly: at the default level (info) answered
// requests write no log line (a rush of 50,000 joins must not write
// 50,000 lines); at debug each writes one.
func TestRequestsLoggedAtDebugOnly(t *testing.T) {
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
		var buf lockedBuffer
		a, err := httpapi.New(httpapi.Config{Name: "test", Logger: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: level}))})
		if err != nil {
			t.Fatal(err)
		}
		a.Handle("/v1/ok", httpapi.Methods{http.MethodGet: func(w http.ResponseWriter, r *http.Request) error {
			w.WriteHeader(http.StatusNoContent)
			return nil
		}})
		srv := httptest.NewServer(a)
		for range 20 {
			res, err := http.Get(srv.URL + "/v1/ok")
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
		}
		srv.Close()
		lines := strings.Count(buf.String(), "test: request")
		want := 0
		if level == slog.LevelDebug {
			want = 20
		}
		if lines != want {
			t.Errorf("level %s: %d request lines for 20 requests, want %d", level, lines, want)
		}
	}
}
