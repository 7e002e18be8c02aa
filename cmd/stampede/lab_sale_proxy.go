package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/stampede-lab/stampede/internal/tcpproxy"
)

// newLabSaleProxyCmd is the sale lab's fault proxy in front of a real
// Redis or PostgreSQL, in a process of its own so that the crowd's CPU
// does not delay the parts' traffic through it. Its control address
// answers GET /healthz, POST /cut (connections closed and refused) and
// POST /restore.
func newLabSaleProxyCmd() *cobra.Command {
	var addr, target, control string
	cmd := &cobra.Command{
		Use:    "sale-proxy",
		Short:  "The sale lab's fault proxy (internal)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := tcpproxy.StartAt(addr, target)
			if err != nil {
				return err
			}
			defer p.Close()
			mux := http.NewServeMux()
			mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
			mux.HandleFunc("POST /cut", func(w http.ResponseWriter, _ *http.Request) { p.Cut(); w.WriteHeader(http.StatusNoContent) })
			mux.HandleFunc("POST /restore", func(w http.ResponseWriter, _ *http.Request) {
				p.Restore()
				w.WriteHeader(http.StatusNoContent)
			})
			ln, err := net.Listen("tcp", control)
			if err != nil {
				return err
			}
			srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
			go func() {
				<-cmd.Context().Done()
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				_ = srv.Shutdown(ctx)
			}()
			loggerOf(cmd).Info("sale-proxy listening", "addr", p.Addr(), "target", target, "control", control)
			if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:0", "address the proxy listens on")
	cmd.Flags().StringVar(&target, "target", "", "host:port the proxy forwards to")
	cmd.Flags().StringVar(&control, "control", "127.0.0.1:0", "address of the control endpoints (/healthz, /cut, /restore)")
	return cmd
}
