package logging

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// BurstWindow is how long New's logger collapses a burst of one failure:
// the first line of a warning or error is written at once, the same
// failure again within BurstWindow only counted, and the count written in
// one line (repeated=N) when the window ends.
const BurstWindow = time.Second

// burstKeys are the attributes that tell one failure from another. A
// record that has none of them is told apart by all its attributes.
var burstKeys = []string{"err", "error", "code", "status", "method", "route", "component"}

// Burst returns a handler that writes the records of h below Warn as they
// come and collapses repeated warnings and errors: a record at Warn or
// above whose level, message and identifying attributes (burstKeys) match
// one written less than window ago is not written but counted, and when
// that window ends one line is written with the first record's message
// and attributes, repeated (how many were not written) and within (the
// window). A service failing every request while a dependency is down
// logs a line and a count a second, not a line per request.
func Burst(h slog.Handler, window time.Duration) slog.Handler {
	return &burstHandler{h: h, window: window, s: &burstState{open: map[string]*burst{}}}
}

type burstHandler struct {
	h      slog.Handler
	window time.Duration
	prefix string // the attributes and groups added with With*, in the key
	s      *burstState
}

type burstState struct {
	mu   sync.Mutex
	open map[string]*burst
}

// burst is a failure first written at start; count more came since.
type burst struct {
	start time.Time
	count int
	rec   slog.Record
	h     slog.Handler
}

// Enabled implements slog.Handler.
func (b *burstHandler) Enabled(ctx context.Context, l slog.Level) bool { return b.h.Enabled(ctx, l) }

// WithAttrs implements slog.Handler.
func (b *burstHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &burstHandler{h: b.h.WithAttrs(as), window: b.window, prefix: b.prefix + fmt.Sprint(as), s: b.s}
}

// WithGroup implements slog.Handler.
func (b *burstHandler) WithGroup(name string) slog.Handler {
	return &burstHandler{h: b.h.WithGroup(name), window: b.window, prefix: b.prefix + "/" + name, s: b.s}
}

// Handle implements slog.Handler.
func (b *burstHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelWarn || b.window <= 0 {
		return b.h.Handle(ctx, r)
	}
	key := b.key(r)
	now := time.Now()
	b.s.mu.Lock()
	open := b.s.open[key]
	if open == nil || now.Sub(open.start) >= b.window {
		o := &burst{start: now, h: b.h}
		b.s.open[key] = o
		time.AfterFunc(b.window, func() { b.flush(key, o) })
		b.s.mu.Unlock()
		return b.h.Handle(ctx, r)
	}
	open.count++
	if open.count == 1 {
		open.rec = r.Clone()
	}
	b.s.mu.Unlock()
	return nil
}

// flush closes burst o, open under key, when its window ends, and writes
// its count if the failure came again meanwhile.
func (b *burstHandler) flush(key string, o *burst) {
	b.s.mu.Lock()
	if b.s.open[key] == o {
		delete(b.s.open, key)
	}
	n, rec := o.count, o.rec
	b.s.mu.Unlock()
	if n == 0 {
		return
	}
	out := slog.NewRecord(time.Now(), rec.Level, rec.Message, 0)
	rec.Attrs(func(a slog.Attr) bool { out.AddAttrs(a); return true })
	out.AddAttrs(slog.Int("repeated", n), slog.Duration("within", b.window))
	_ = o.h.Handle(context.Background(), out)
}

// key is what tells record r's failure from another's.
func (b *burstHandler) key(r slog.Record) string {
	var sb strings.Builder
	sb.WriteString(b.prefix)
	fmt.Fprintf(&sb, "|%d|%s", r.Level, r.Message)
	var all strings.Builder
	found := false
	r.Attrs(func(a slog.Attr) bool {
		for _, k := range burstKeys {
			if a.Key == k {
				fmt.Fprintf(&sb, "|%s=%s", a.Key, a.Value.Resolve())
				found = true
			}
		}
		fmt.Fprintf(&all, "|%s=%s", a.Key, a.Value.Resolve())
		return true
	})
	if !found {
		sb.WriteString(all.String())
	}
	return sb.String()
}
