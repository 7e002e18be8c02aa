// Package logging builds the one log/slog logger of a Stampede process and
// routes the logs of its libraries through it: go-redis (Redis) and the
// embedded nats-server (NATS).
//
// A process calls Setup once at start. The logger writes JSON when its
// writer is not a terminal (a container, a file, a pipe) and text when it
// is, unless a format is named.
package logging

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"
	"golang.org/x/term"
)

// Format is a log line format: FormatAuto, FormatJSON or FormatText.
type Format string

// The log formats.
const (
	// FormatAuto is FormatText when the writer is a terminal, else FormatJSON.
	FormatAuto Format = ""
	// FormatJSON writes one JSON object per line (slog.JSONHandler).
	FormatJSON Format = "json"
	// FormatText writes key=value lines (slog.TextHandler).
	FormatText Format = "text"
)

// ParseFormat reads "json", "text", or "auto" or "" (FormatAuto).
func ParseFormat(s string) (Format, error) {
	switch f := Format(strings.ToLower(s)); f {
	case FormatJSON, FormatText, FormatAuto:
		return f, nil
	case "auto":
		return FormatAuto, nil
	}
	return "", fmt.Errorf("want json or text, got %q", s)
}

// ParseLevel reads a slog level: debug, info, warn or error, in any case,
// optionally with an offset such as debug-4.
func ParseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("want debug, info, warn or error, got %q", s)
	}
	return l, nil
}

// resolve turns FormatAuto into FormatText for a terminal, else FormatJSON.
func resolve(w io.Writer, f Format) Format {
	if f != FormatAuto {
		return f
	}
	if file, ok := w.(*os.File); ok && term.IsTerminal(int(file.Fd())) {
		return FormatText
	}
	return FormatJSON
}

// New returns a logger writing lines of format f at level and above to w,
// a burst of one warning or error collapsed into its first line and a
// count (Burst, BurstWindow).
// In JSON, durations are written as Go duration strings ("1.5s"), not as
// integer nanoseconds, so that a person reading the line with jq sees the
// unit.
func New(w io.Writer, f Format, level slog.Leveler) *slog.Logger {
	if resolve(w, f) == FormatText {
		return slog.New(Burst(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}), BurstWindow))
	}
	return slog.New(Burst(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level, ReplaceAttr: durationText}), BurstWindow))
}

// durationText writes a duration attribute as its string.
func durationText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.String(a.Key, a.Value.Duration().String())
	}
	return a
}

// Setup makes the process's logger with New, makes it slog's default (and
// so the standard log package's output) and routes go-redis's logs through
// it. Call it once, at start.
func Setup(w io.Writer, f Format, level slog.Leveler) *slog.Logger {
	log := New(w, f, level)
	slog.SetDefault(log)
	redis.SetLogger(Redis(log))
	return log
}

// RedisLogger adapts a slog.Logger to go-redis's logging interface; see
// Redis.
type RedisLogger struct {
	log *slog.Logger
}

// Redis returns a go-redis logger (for redis.SetLogger) that writes each
// go-redis message to log at Warn with component=go-redis: go-redis logs
// only what went wrong, such as a failed dial or a dropped connection.
func Redis(log *slog.Logger) *RedisLogger {
	return &RedisLogger{log: log.With("component", "go-redis")}
}

// Printf implements go-redis's internal.Logging.
func (l *RedisLogger) Printf(ctx context.Context, format string, v ...any) {
	if ctx == nil {
		ctx = context.Background()
	}
	l.log.Log(ctx, slog.LevelWarn, strings.TrimPrefix(fmt.Sprintf(format, v...), "redis: "))
}

// LevelTrace is the slog level of nats-server's trace lines, below Debug.
const LevelTrace = slog.LevelDebug - 4

// NATSLogger adapts a slog.Logger to nats-server's server.Logger; see NATS.
type NATSLogger struct {
	log *slog.Logger
}

// NATS returns a logger for an embedded nats-server (server.SetLoggerV2)
// that writes to log with component=nats-server: warnings at Warn, errors
// at Error, notices and debug lines at Debug, traces at LevelTrace. The
// notices are the server's start-up banner (some thirty lines) and its
// life-cycle; the embedding command logs its own line at Info. A fatal
// message is logged at Error with fatal=true and does not exit the
// process: the embedding program decides what to do when its server stops.
func NATS(log *slog.Logger) *NATSLogger {
	return &NATSLogger{log: log.With("component", "nats-server")}
}

// Enabled says whether l writes lines at level; it tells the server whether
// to produce its debug and trace lines at all.
func (l *NATSLogger) Enabled(level slog.Level) bool {
	return l.log.Enabled(context.Background(), level)
}

func (l *NATSLogger) logf(level slog.Level, format string, v []any, attrs ...any) {
	ctx := context.Background()
	if l.log.Enabled(ctx, level) {
		l.log.Log(ctx, level, fmt.Sprintf(format, v...), attrs...)
	}
}

// Noticef implements server.Logger, at Debug.
func (l *NATSLogger) Noticef(format string, v ...any) { l.logf(slog.LevelDebug, format, v) }

// Warnf implements server.Logger.
func (l *NATSLogger) Warnf(format string, v ...any) { l.logf(slog.LevelWarn, format, v) }

// Fatalf implements server.Logger; it does not exit.
func (l *NATSLogger) Fatalf(format string, v ...any) {
	l.logf(slog.LevelError, format, v, "fatal", true)
}

// Errorf implements server.Logger.
func (l *NATSLogger) Errorf(format string, v ...any) { l.logf(slog.LevelError, format, v) }

// Debugf implements server.Logger.
func (l *NATSLogger) Debugf(format string, v ...any) { l.logf(slog.LevelDebug, format, v) }

// Tracef implements server.Logger.
func (l *NATSLogger) Tracef(format string, v ...any) { l.logf(LevelTrace, format, v) }
