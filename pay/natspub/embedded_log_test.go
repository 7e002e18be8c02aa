package natspub_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/stampede-lab/stampede/internal/logging"
	"github.com/stampede-lab/stampede/pay/natspub"
)

// lockedBuffer is a bytes.Buffer safe for the server's goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestEmbeddedLogsThroughSlog starts the embedded nats-server with a JSON
// logger at Debug: its start-up lines arrive as JSON, tagged
// component=nats-server.
func TestEmbeddedLogsThroughSlog(t *testing.T) {
	var out lockedBuffer
	e, err := natspub.StartEmbeddedConfig(func() natspub.EmbeddedConfig {
		c := natspub.DefaultEmbeddedConfig(t.TempDir())
		c.Logger = logging.New(&out, logging.FormatJSON, slog.LevelDebug)
		return c
	}())
	if err != nil {
		t.Fatal(err)
	}
	e.Close()
	ready := false
	sc := bufio.NewScanner(strings.NewReader(out.String()))
	for sc.Scan() {
		var l map[string]any
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("a nats-server log line is not JSON: %v\n%s", err, sc.Text())
		}
		if l["component"] != "nats-server" {
			t.Errorf("line without component=nats-server: %s", sc.Text())
		}
		if msg, _ := l["msg"].(string); strings.Contains(msg, "Server is ready") {
			ready = true
		}
	}
	if !ready {
		t.Errorf("no \"Server is ready\" line:\n%s", out.String())
	}
}
