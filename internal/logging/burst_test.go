package logging_test

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stampede-lab/stampede/internal/logging"
)

// lockedBuffer is a bytes.Buffer safe for the handler's timer goroutine.
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

// TestBurstLogsOnceWithACount: 100 identical failures within the
// window give one line, then one line with repeated=99; a different
// failure and every info line are written as they come.
func TestBurstLogsOnceWithACount(t *testing.T) {
	var out lockedBuffer
	const window = 500 * time.Millisecond
	log := slog.New(logging.Burst(slog.NewTextHandler(&out, nil), window))
	down := errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")
	for i := range 100 {
		log.Error("gate: request failed", "status", 503, "err", down, "path", "/v1/rooms/r/tickets/u"+string(rune('a'+i%26)))
	}
	log.Error("gate: request failed", "status", 500, "err", errors.New("other"))
	log.Info("started")
	log.Info("started")
	time.Sleep(3 * window)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 5 {
		t.Fatalf("%d lines, want 5 (the failure, the other failure, 2 info lines, the count):\n%s", len(lines), out.String())
	}
	if !strings.Contains(lines[4], "repeated=99") || !strings.Contains(lines[4], "connection refused") {
		t.Errorf("the last line = %q, want the failure with repeated=99", lines[4])
	}
}
