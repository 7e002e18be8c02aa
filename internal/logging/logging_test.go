package logging_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"log"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/redis/go-redis/v9"

	"github.com/stampede-lab/stampede/internal/logging"
)

// The adapters are what the libraries ask for.
var (
	_ server.Logger = (*logging.NATSLogger)(nil)
	_ interface {
		Printf(ctx context.Context, format string, v ...any)
	} = (*logging.RedisLogger)(nil)
)

// lines parses every line of out as a JSON object.
func lines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var got []map[string]any
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("a log line is not JSON: %v\n%s", err, sc.Text())
		}
		got = append(got, m)
	}
	return got
}

// find returns the first line whose msg contains substr.
func find(ls []map[string]any, substr string) map[string]any {
	for _, l := range ls {
		if msg, _ := l["msg"].(string); strings.Contains(msg, substr) {
			return l
		}
	}
	return nil
}

// TestSetupJSON installs the process logger with JSON lines and has
// slog, the standard log package, go-redis and the nats-server adapter
// write through it: every line must parse as JSON.
func TestSetupJSON(t *testing.T) {
	prevSlog, prevLog := slog.Default(), log.Writer()
	t.Cleanup(func() {
		slog.SetDefault(prevSlog)
		log.SetOutput(prevLog)
		redis.SetLogger(logging.Redis(prevSlog))
	})
	var buf bytes.Buffer
	lg := logging.Setup(&buf, logging.FormatJSON, slog.LevelDebug)

	slog.Info("from slog", "n", 1)
	log.Printf("from the log package")

	// A real go-redis log line: an expiry under 1 ms is truncated, and
	// go-redis says so through its logger.
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	if err := rdb.Set(context.Background(), "k", "v", 500*time.Microsecond).Err(); err != nil {
		t.Fatal(err)
	}

	nl := logging.NATS(lg)
	nl.Noticef("Server is ready on %s", "127.0.0.1:4222")
	nl.Warnf("slow consumer %d", 7)
	nl.Errorf("error %q", "x")
	nl.Fatalf("fatal %s", "y")
	nl.Debugf("debug %v", true)
	nl.Tracef("trace, not shown at debug")

	ls := lines(t, buf.String())
	for _, want := range []struct{ msg, level, component string }{
		{"from slog", "INFO", ""},
		{"from the log package", "INFO", ""},
		{"minimal supported value is 1ms", "WARN", "go-redis"},
		{"Server is ready on 127.0.0.1:4222", "DEBUG", "nats-server"},
		{"slow consumer 7", "WARN", "nats-server"},
		{`error "x"`, "ERROR", "nats-server"},
		{"fatal y", "ERROR", "nats-server"},
		{"debug true", "DEBUG", "nats-server"},
	} {
		l := find(ls, want.msg)
		if l == nil {
			t.Errorf("no line with %q in:\n%s", want.msg, buf.String())
			continue
		}
		if l["level"] != want.level || (want.component != "" && l["component"] != want.component) {
			t.Errorf("%q: level %v component %v, want %s %s", want.msg, l["level"], l["component"], want.level, want.component)
		}
	}
	if l := find(ls, "fatal y"); l != nil && l["fatal"] != true {
		t.Errorf("the fatal line lacks fatal=true: %v", l)
	}
	if find(ls, "trace, not shown") != nil {
		t.Error("a trace line was written at debug level")
	}
}

func TestNewFormats(t *testing.T) {
	var buf bytes.Buffer
	logging.New(&buf, logging.FormatText, slog.LevelInfo).Info("hello", "k", "v")
	if got := buf.String(); !strings.Contains(got, "level=INFO msg=hello k=v") {
		t.Errorf("text: %q", got)
	}
	buf.Reset()
	// A buffer is not a terminal: auto means JSON.
	logging.New(&buf, logging.FormatAuto, slog.LevelInfo).Info("hello")
	if !json.Valid(bytes.TrimSpace(buf.Bytes())) {
		t.Errorf("auto on a buffer is not JSON: %q", buf.String())
	}
	buf.Reset()
	logging.New(&buf, logging.FormatJSON, slog.LevelWarn).Info("dropped")
	if buf.Len() != 0 {
		t.Errorf("an Info line was written at warn level: %q", buf.String())
	}
}

func TestParse(t *testing.T) {
	for in, want := range map[string]logging.Format{"json": logging.FormatJSON, "TEXT": logging.FormatText, "auto": logging.FormatAuto, "": logging.FormatAuto} {
		if got, err := logging.ParseFormat(in); err != nil || got != want {
			t.Errorf("ParseFormat(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := logging.ParseFormat("xml"); err == nil {
		t.Error("ParseFormat(xml) succeeded")
	}
	for in, want := range map[string]slog.Level{"debug": slog.LevelDebug, "INFO": slog.LevelInfo, "warn": slog.LevelWarn, "error": slog.LevelError} {
		if got, err := logging.ParseLevel(in); err != nil || got != want {
			t.Errorf("ParseLevel(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := logging.ParseLevel("loud"); err == nil {
		t.Error("ParseLevel(loud) succeeded")
	}
}

// TestJSONDurationsCarryTheirUnit: a duration reads "1.5s", not
// 1500000000.
func TestJSONDurationsCarryTheirUnit(t *testing.T) {
	var out bytes.Buffer
	logging.New(&out, logging.FormatJSON, slog.LevelInfo).Info("x", "took", 1500*time.Millisecond)
	if !strings.Contains(out.String(), `"took":"1.5s"`) {
		t.Fatalf("line %s", out.String())
	}
}
