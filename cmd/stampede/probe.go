package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/spf13/cobra"
)

// newProbeCmd is `stampede probe URL`: a health check for images that have
// no shell and no curl (distroless, scratch).
func newProbeCmd() *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "probe URL",
		Short: "Check that a service answers: GET URL, exit 0 on a 2xx answer, 1 otherwise",
		Long: `GET the URL and exit 0 when the answer is 2xx within --timeout, else 1. For
container health checks in an image without a shell or curl, e.g. in
compose:

  healthcheck:
    test: ["CMD", "/stampede", "probe", "http://127.0.0.1:8081/healthz"]`,
		Example: `  stampede probe http://127.0.0.1:8080/healthz`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, args[0], nil)
			if err != nil {
				return fmt.Errorf("probe: %w", err)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				return fmt.Errorf("probe: %w", err)
			}
			defer res.Body.Close()
			_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 1<<16))
			if res.StatusCode/100 != 2 {
				return fmt.Errorf("probe: %s answered %s", args[0], res.Status)
			}
			return nil
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 2*time.Second, "how long to wait for the answer")
	return cmd
}
