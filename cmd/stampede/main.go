// Command stampede runs Stampede's services and its lab experiments.
//
// Run `stampede --help` for the commands, and `stampede lab` for every
// experiment on embedded defaults.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/stampede-lab/stampede/lab"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCmd().ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "stampede:", err)
		os.Exit(exitCode(err))
	}
}

// exitCode is the exit status for an error of a command: 2 when the command
// ran and found something wrong (an invalid lab run or a broken invariant,
// an expectation that does not hold under --strict, a parity mismatch), 1
// for anything else.
func exitCode(err error) int {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, lab.ErrInvalid), errors.Is(err, lab.ErrExpectation), errors.Is(err, errParity):
		return 2
	}
	return 1
}

func newRootCmd() *cobra.Command {
	logOpts := &logOptions{}
	root := &cobra.Command{
		Use:   "stampede",
		Short: "Survive a ticket-sale rush: waiting room, payments, keyed dispatch, and the lab that measures them",
		Long: `Stampede is a platform for the moment a ticket sale opens. Each component
ships with a lab experiment that puts it under load and faults and measures
the invariant it promises.

Start with:
  stampede lab            run every experiment on embedded defaults (a few minutes)
  stampede lab --help     the experiments and their flags

Every flag of the serve and pay commands, and --log-format and --log-level,
can also be set with an environment variable: STAMPEDE_ and the flag's name
in upper case with '-' as '_' (--admin-token: STAMPEDE_ADMIN_TOKEN). A flag
given on the command line wins over the environment.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		// The one hook of every command: the environment, then the logger.
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error { return logOpts.setup(cmd) },
	}
	logOpts.flags(root.PersistentFlags())
	bindEnvFlags(root.PersistentFlags())
	serve, pay, events, room := newServeCmd(), newPayCmd(), newEventsCmd(), newRoomCmd()
	bindEnv(serve)
	bindEnv(pay)
	bindEnv(events)
	bindEnv(room)
	root.AddCommand(newLabCmd(), serve, room, pay, events, newProbeCmd())
	return root
}
