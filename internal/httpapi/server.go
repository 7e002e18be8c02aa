package httpapi

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/stampede-lab/stampede"
)

// ServerConfig holds an http.Server's limits. Every Stampede server sets
// all of them, so that a stalled client (a slow body, an idle keep-alive
// connection, endless headers) cannot hold a connection for ever.
type ServerConfig struct {
	// ReadHeaderTimeout bounds reading a request's headers.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request, body included.
	ReadTimeout time.Duration
	// WriteTimeout bounds a request from the end of its headers to the
	// end of the answer; it must exceed the longest handler.
	WriteTimeout time.Duration
	// IdleTimeout closes keep-alive connections idle that long.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds the request headers' size.
	MaxHeaderBytes int
	// ShutdownTimeout bounds a graceful shutdown: requests still running
	// after it are cut.
	ShutdownTimeout time.Duration
}

// DefaultServerConfig returns 5 s for headers, 10 s for a request, 30 s
// for an answer, 60 s idle, 16 KiB of headers and a 5 s shutdown.
func DefaultServerConfig() ServerConfig {
	return ServerConfig{
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    16 << 10,
		ShutdownTimeout:   5 * time.Second,
	}
}

// Validate reports every unusable field at once, each by its snake_case
// name (the serve commands' flags are the same words in kebab-case).
func (c ServerConfig) Validate() error {
	var f stampede.Fields
	if c.ReadHeaderTimeout <= 0 {
		f.Add("read_header_timeout", "must be positive, got %s", c.ReadHeaderTimeout)
	}
	if c.ReadTimeout < c.ReadHeaderTimeout {
		f.Add("read_timeout", "must be at least the read header timeout (%s), got %s", c.ReadHeaderTimeout, c.ReadTimeout)
	}
	if c.WriteTimeout <= 0 {
		f.Add("write_timeout", "must be positive, got %s", c.WriteTimeout)
	}
	if c.IdleTimeout <= 0 {
		f.Add("idle_timeout", "must be positive, got %s", c.IdleTimeout)
	}
	if c.MaxHeaderBytes < 1024 {
		f.Add("max_header_bytes", "must be at least 1024, got %d", c.MaxHeaderBytes)
	}
	if c.ShutdownTimeout < 0 {
		f.Add("shutdown_timeout", "must not be negative, got %s", c.ShutdownTimeout)
	}
	return f.Err()
}

// NewServer returns an http.Server for h with every limit of cfg and its
// errors logged to log.
func NewServer(h http.Handler, cfg ServerConfig, log *slog.Logger) (*http.Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		ReadTimeout:       cfg.ReadTimeout,
		WriteTimeout:      cfg.WriteTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		MaxHeaderBytes:    cfg.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}, nil
}

// Serve serves h on ln with cfg's limits until ctx ends, then shuts down
// gracefully within cfg.ShutdownTimeout. It returns nil after a shutdown
// that ctx asked for.
func Serve(ctx context.Context, ln net.Listener, h http.Handler, cfg ServerConfig, log *slog.Logger) error {
	srv, err := NewServer(h, cfg, log)
	if err != nil {
		return err
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
	defer cancel()
	err = srv.Shutdown(sctx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = srv.Close()
	}
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}
