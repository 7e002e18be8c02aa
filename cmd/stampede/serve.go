package main

import "github.com/spf13/cobra"

func newServeCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "serve SERVICE",
		Short: "Run a Stampede service",
		Long: `Run one of Stampede's services until SIGINT or SIGTERM, then shut down
gracefully. Without a --redis (or similar) URL a service starts its storage
in-process, so every service runs with no set-up.`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newServeWaitroomCmd())
	cmd.AddCommand(newServeGateCmd())
	cmd.AddCommand(newServeForwardAuthCmd())
	cmd.AddCommand(newServeInstitutionCmd())
	cmd.AddCommand(newServePayCmd())
	cmd.AddCommand(newServeCheckoutCmd())
	cmd.AddCommand(newServeWorkerCmd())
	cmd.AddCommand(newServeConsoleCmd())
	return cmd
}
