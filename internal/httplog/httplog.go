// Package httplog logs the requests of an HTTP handler and turns a handler
// panic into an error answer, so that a bug answers a JSON 500 instead of a
// dropped connection.
package httplog

import (
	"fmt"
	"log/slog"
	"net/http"
	"time"
)

// recorder remembers the status a handler wrote.
type recorder struct {
	http.ResponseWriter
	status int
}

// WriteHeader remembers the first status.
func (s *recorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

// Write remembers 200 if no status was written.
func (s *recorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (s *recorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// Wrap logs every request to next at Debug, under name. When next panics
// before answering, fail answers with the panic as an error; after
// answering, the panic is logged. http.ErrAbortHandler passes through.
func Wrap(log *slog.Logger, name string, next http.Handler, fail func(w http.ResponseWriter, r *http.Request, err error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &recorder{ResponseWriter: w}
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				err := fmt.Errorf("panic: %v", p)
				if rec.status == 0 {
					fail(rec, r, err)
				} else {
					log.Error(name+": http: handler panicked after answering", "method", r.Method, "path", r.URL.Path, "err", err)
				}
			}
			log.Debug(name+": http request", "method", r.Method, "path", r.URL.Path,
				"status", rec.status, "took", time.Since(start), "remote", r.RemoteAddr)
		}()
		next.ServeHTTP(rec, r)
	})
}
