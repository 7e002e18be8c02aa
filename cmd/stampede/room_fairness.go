package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/stampede-lab/stampede/waitroom"
	"github.com/stampede-lab/stampede/waitroom/client"
)

func newRoomLogCmd() *cobra.Command {
	opts := &roomOptions{}
	cmd := &cobra.Command{
		Use:   "log ROOM > FILE",
		Short: "Write a room's admission log, one hash-chained entry a line",
		Long: `GET /v1/rooms/{room}/log, page by page: every admission of the room (and
its opening's draw) as the store appended them, for stampede room verify.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return opts.call(cmd, func(ctx context.Context, c *client.Client) (json.RawMessage, error) {
				w := bufio.NewWriter(cmd.OutOrStdout())
				n, err := c.AdmissionLog(ctx, args[0], w)
				if ferr := w.Flush(); err == nil {
					err = ferr
				}
				if err == nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "%d entries\n", n)
				}
				return nil, err
			})
		},
	}
	opts.flags(cmd)
	return cmd
}

func newRoomVerifyCmd() *cobra.Command {
	var file string
	var opt waitroom.VerifyOptions
	cmd := &cobra.Command{
		Use:   "verify --log FILE [--seed HEX] [--commitment HEX] [--user ID]",
		Short: "Check a room's admission log: chain, draw, queue order, capacity",
		Long: `Checks, offline, a log written by stampede room log:

  - the chain: every entry's PREV is the previous entry's hash, and its
    HASH the SHA-1 of the entry;
  - the draw: --seed (the seed the room revealed once it opened) matches
    the commitment the log's opening recorded (and --commitment, the one
    the room published before opening), and the pre-queue's admitted
    users hold their places in the order of their draw keys;
  - the queue's order: no admission came after a later place admitted in
    an earlier pass (the tolerance is one admission pass), except users
    set aside for not polling who came back to their place, in a room
    that sets them aside (abandon_after_seconds);
  - the capacity: no admission left more slots held than the capacity.

With --user, a buyer sees their own admissions. The exit status is 1 when a
check fails. The format is in docs/waitroom.md (Verifiable fairness).`,
		Example: `  stampede room log concert > concert.log
  stampede room verify --log concert.log --seed 3f...e1 --user alice@example.com`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return errors.New("--log is required: the file stampede room log wrote")
			}
			lines, err := readLogLines(file)
			if err != nil {
				return err
			}
			r := waitroom.VerifyLog(lines, opt)
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "room %s: %d entries, %d admissions in %d passes, %d openings; %d drawn places checked against the seed; %d returns; most held %d of %d; head %s\n",
				r.Room, r.Entries, r.Admissions, r.Passes, r.Openings, r.Drawn, r.Returns, r.MaxHeld, r.MaxHeldCap, r.Head)
			for _, l := range r.UserLines {
				fmt.Fprintf(out, "you: %s\n", l)
			}
			if r.OK() {
				fmt.Fprintln(out, "OK")
				return nil
			}
			for _, p := range r.Problems {
				fmt.Fprintf(out, "FAIL: %s\n", p)
			}
			return fmt.Errorf("the log failed %d checks", len(r.Problems))
		},
	}
	f := cmd.Flags()
	f.StringVar(&file, "log", "", "the log stampede room log wrote (required)")
	f.StringVar(&opt.Seed, "seed", "", "the seed the room revealed after opening (hex); required when the log has an opening")
	f.StringVar(&opt.Commitment, "commitment", "", "the commitment the room published before opening, to check the log's against")
	f.StringVar(&opt.User, "user", "", "your user id: show your own admissions")
	return cmd
}

// readLogLines reads a log file's non-empty lines.
func readLogLines(name string) ([]string, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("--log: %w", err)
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 64*1024)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			lines = append(lines, l)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("--log: %w", err)
	}
	return lines, nil
}
