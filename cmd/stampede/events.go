package main

import (
	"context"
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	dispatchjs "github.com/stampede-lab/stampede/dispatch/natskeyed"
)

// eventsOptions are the flags every events subcommand shares: where the
// keyed consumer's parked keys live.
type eventsOptions struct {
	nats    string
	stream  string
	durable string
	timeout time.Duration
}

func (o *eventsOptions) flags(cmd *cobra.Command) {
	def := dispatchjs.DefaultConfig()
	f := cmd.Flags()
	f.StringVar(&o.nats, "nats", "", "NATS URL of the workers' server (required)")
	f.StringVar(&o.stream, "stream", def.Stream, "the event stream the workers consume")
	f.StringVar(&o.durable, "durable", def.Durable, "the workers' durable consumer name prefix")
	f.DurationVar(&o.timeout, "timeout", 10*time.Second, "deadline of each call to NATS")
}

// open connects and opens the parking of the consumer the flags name.
func (o *eventsOptions) open(ctx context.Context) (*dispatchjs.Parking, func(), error) {
	if o.nats == "" {
		return nil, nil, fmt.Errorf("--nats (or %s) is required: the NATS server the workers consume from", envNATS)
	}
	cfg := dispatchjs.DefaultConfig()
	cfg.Stream, cfg.Durable = o.stream, o.durable
	if cfg.Stream == "" || cfg.Durable == "" {
		return nil, nil, errors.New("--stream and --durable must not be empty")
	}
	nc, err := nats.Connect(o.nats, nats.Name("stampede-events"), nats.Timeout(o.timeout))
	if err != nil {
		return nil, nil, fmt.Errorf("--nats: %w", err)
	}
	js, err := natsjs.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	pk, err := dispatchjs.OpenParking(ctx, js, cfg)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return pk, nc.Close, nil
}

func newEventsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Parked events of the keyed workers: list them, redrive them",
		Long: `A worker parks an event whose handler failed on every one of its
--max-attempts deliveries (or answered a permanent failure), together with
every later event of the same key: those wait, in order, while the
partition's other keys go on. These commands list the parked keys and ask the
worker that owns a key's partition to run its parked events again, in order,
once each, and to unpark the key when they all succeeded.`,
	}
	cmd.AddCommand(newEventsParkedCmd(), newEventsRedriveCmd())
	return cmd
}

func newEventsParkedCmd() *cobra.Command {
	opts := &eventsOptions{}
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "parked",
		Short: "List the parked keys, oldest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), opts.timeout)
			defer cancel()
			pk, done, err := opts.open(ctx)
			if err != nil {
				return err
			}
			defer done()
			keys, err := pk.List(ctx)
			if err != nil {
				return err
			}
			if asJSON {
				if keys == nil {
					keys = []dispatchjs.ParkedKey{}
				}
				return printJSON(cmd.OutOrStdout(), keys)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "KEY\tPARTITION\tEVENTS\tFIRST EVENT\tATTEMPTS\tPARKED AT\tREDRIVE\tREASON")
			for _, k := range keys {
				fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%d\t%s\t%v\t%s\n", k.Key, k.Partition, k.Events, k.FirstID, k.Attempts,
					k.ParkedAt.UTC().Format(time.RFC3339), k.Redrive, k.Reason)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.ErrOrStderr(), "%d parked keys\n", len(keys))
			return err
		},
	}
	opts.flags(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	return cmd
}

func newEventsRedriveCmd() *cobra.Command {
	opts := &eventsOptions{}
	var keys []string
	var all bool
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "redrive (--key KEY ... | --all)",
		Short: "Run a parked key's events again, in order, and unpark it",
		Long: `Ask the worker that owns each key's partition to run the key's parked
events again, in order, each once, and to unpark the key when they all
succeeded; the key's events that arrived meanwhile follow. With --wait the
command waits for that and fails if a key is still parked (its redrive failed
again: the key stays parked with the new reason, see stampede events parked).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if all == (len(keys) > 0) {
				return errors.New("give --key (one or more) or --all")
			}
			if wait < 0 {
				return errors.New("--wait must not be negative")
			}
			ctx := cmd.Context()
			octx, cancel := context.WithTimeout(ctx, opts.timeout)
			defer cancel()
			pk, done, err := opts.open(octx)
			if err != nil {
				return err
			}
			defer done()
			if all {
				if keys, err = pk.RedriveAll(octx); err != nil {
					return err
				}
			} else {
				for _, k := range keys {
					if err := pk.Redrive(octx, k); err != nil {
						if errors.Is(err, dispatchjs.ErrNotParked) {
							return fmt.Errorf("--key %q: not parked", k)
						}
						return err
					}
				}
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "redrive asked for %d keys\n", len(keys))
			if wait == 0 || len(keys) == 0 {
				return nil
			}
			wctx, cancel := context.WithTimeout(ctx, wait)
			defer cancel()
			left, err := pk.Wait(wctx, keys)
			if len(left) > 0 {
				return fmt.Errorf("still parked after --wait %s: %v (see stampede events parked)", wait, left)
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "%d keys redriven and unparked\n", len(keys))
			return nil
		},
	}
	opts.flags(cmd)
	f := cmd.Flags()
	f.StringSliceVar(&keys, "key", nil, "a parked key to redrive (repeat or comma-separate for several)")
	f.BoolVar(&all, "all", false, "redrive every parked key")
	f.DurationVar(&wait, "wait", 0, "wait this long for the redrives to finish (0: ask and return)")
	return cmd
}
