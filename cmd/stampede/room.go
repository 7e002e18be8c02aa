package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/stampede-lab/stampede/waitroom/client"
)

// roomOptions are the flags every room subcommand shares: which waiting
// room (or gate) to talk to, and its admin token.
type roomOptions struct {
	url        string
	adminToken string
	timeout    time.Duration
}

func (o *roomOptions) flags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&o.url, "url", "http://127.0.0.1:8080", "the waiting room's (or a gate's) base URL")
	f.StringVar(&o.adminToken, "admin-token", "", "the server's --admin-token (required)")
	f.DurationVar(&o.timeout, "timeout", 10*time.Second, "deadline of the call")
}

// client makes the waiting-room client the flags describe.
func (o *roomOptions) client() (*client.Client, error) {
	if o.adminToken == "" {
		return nil, fmt.Errorf("--admin-token (or %s) is required: the token the waiting room was started with", envAdminToken)
	}
	cfg := client.DefaultConfig()
	cfg.BaseURL, cfg.AdminToken, cfg.Timeout = o.url, o.adminToken, o.timeout
	c, err := client.New(cfg)
	if err != nil {
		// The client's base_url is the --url flag; its other fields are
		// named as their flags.
		return nil, errors.New(strings.ReplaceAll(flagErrors("", err).Error(), "--base-url:", "--url:"))
	}
	return c, nil
}

// call runs one call with the flags' client and prints its JSON answer,
// indented, to cmd's output (nothing when the answer is empty).
func (o *roomOptions) call(cmd *cobra.Command, f func(context.Context, *client.Client) (json.RawMessage, error)) error {
	c, err := o.client()
	if err != nil {
		return err
	}
	out, err := f(cmd.Context(), c)
	if err != nil {
		return err
	}
	if len(out) == 0 {
		return nil
	}
	var b bytes.Buffer
	if err := json.Indent(&b, out, "", "  "); err != nil {
		return err
	}
	b.WriteByte('\n')
	_, err = cmd.OutOrStdout().Write(b.Bytes())
	return err
}

func newRoomCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "room",
		Short: "Create, read, change and remove waiting rooms over HTTP",
		Long: `Talks to a running waiting room (stampede serve waitroom) or gate
(stampede serve gate, which serves its embedded room's API) with the admin
token it was started with, and prints the server's JSON answer. The server
checks every field and names each bad one: a refusal is printed as the
server's problem and the command exits with status 1.

The room's fields are those of PUT /v1/rooms/{room} (see docs/waitroom.md
and the server's /openapi.json): capacity is required, every other field has
a documented default.`,
		Example: `  export STAMPEDE_ADMIN_TOKEN=...   # the token the waiting room was started with
  stampede room create concert --capacity 100
  stampede room create concert --capacity 100 --set '{"lease_seconds": 300, "opens_at": "2026-12-24T11:00:00+09:00"}'
  stampede room get concert
  stampede room patch concert '{"max_admissions_per_minute": 600}'
  stampede room patch concert '{"closes_at": "2026-12-24T20:00:00+09:00", "invite_key": "<Ed25519 public key, base64url>",
    "schedule": [{"start": "2026-12-24T11:00:00+09:00", "end": "2026-12-24T12:00:00+09:00", "capacity": 50, "invite_only": true},
                 {"start": "2026-12-24T13:00:00+09:00", "capacity": 200, "max_admissions_per_minute": 1200}]}'
  stampede room pause concert
  stampede room resume concert
  stampede room close concert --message "Sold out. Thank you!"
  stampede room list
  stampede room log concert > concert.log
  stampede room verify --log concert.log --seed HEX [--user ID]
  stampede room delete concert --yes`,
	}
	cmd.AddCommand(newRoomCreateCmd(), newRoomGetCmd(), newRoomListCmd(), newRoomPatchCmd(),
		newRoomSetCmd("pause", "Stop admitting (the queue keeps its order; joins still queue)", `{"paused": true}`),
		newRoomSetCmd("resume", "Admit again after a pause", `{"paused": false}`),
		newRoomCloseCmd(), newRoomDeleteCmd(), newRoomLogCmd(), newRoomVerifyCmd())
	return cmd
}

// jsonObject reads a JSON object from s, or from the file s names after
// an @ ("@-" is standard input), for the flag or argument what.
func jsonObject(cmd *cobra.Command, what, s string) (map[string]json.RawMessage, error) {
	raw := []byte(s)
	if name, ok := strings.CutPrefix(s, "@"); ok {
		var err error
		if name == "-" {
			raw, err = io.ReadAll(io.LimitReader(cmd.InOrStdin(), 1<<20))
		} else {
			raw, err = os.ReadFile(name)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
		return nil, fmt.Errorf("%s: must be a JSON object (or @FILE holding one): %v", what, errOr(err, "null"))
	}
	return obj, nil
}

func errOr(err error, otherwise string) string {
	if err != nil {
		return err.Error()
	}
	return otherwise
}

func newRoomCreateCmd() *cobra.Command {
	opts := &roomOptions{}
	var capacity int
	var set string
	cmd := &cobra.Command{
		Use:   "create ROOM --capacity N [--set JSON|@FILE]",
		Short: "Create a room, or replace its whole configuration",
		Long: `PUT /v1/rooms/{room}: the room gets --capacity and the fields of --set;
every field not given takes its default (a room that exists has its whole
configuration replaced: use patch to change some fields).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			body := map[string]json.RawMessage{}
			if set != "" {
				var err error
				if body, err = jsonObject(cmd, "--set", set); err != nil {
					return err
				}
			}
			if cmd.Flags().Changed("capacity") {
				body["capacity"] = json.RawMessage(fmt.Sprint(capacity))
			}
			if _, ok := body["capacity"]; !ok {
				return errors.New("--capacity is required: how many buyers the checkout holds at once")
			}
			raw, err := json.Marshal(body)
			if err != nil {
				return err
			}
			return opts.call(cmd, func(ctx context.Context, c *client.Client) (json.RawMessage, error) {
				return c.PutRoom(ctx, args[0], raw)
			})
		},
	}
	opts.flags(cmd)
	cmd.Flags().IntVar(&capacity, "capacity", 0, "buyers admitted to the checkout at once (required)")
	cmd.Flags().StringVar(&set, "set", "", `other fields as a JSON object, or @FILE ("@-": standard input)`)
	return cmd
}

func newRoomGetCmd() *cobra.Command {
	opts := &roomOptions{}
	cmd := &cobra.Command{
		Use:   "get ROOM",
		Short: "Print a room's counters and whole configuration",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return opts.call(cmd, func(ctx context.Context, c *client.Client) (json.RawMessage, error) {
				return c.RoomAdmin(ctx, args[0])
			})
		},
	}
	opts.flags(cmd)
	return cmd
}

func newRoomListCmd() *cobra.Command {
	opts := &roomOptions{}
	cmd := &cobra.Command{
		Use:   "list",
		Short: "Print every room with its configuration",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return opts.call(cmd, func(ctx context.Context, c *client.Client) (json.RawMessage, error) {
				return c.Rooms(ctx)
			})
		},
	}
	opts.flags(cmd)
	return cmd
}

func newRoomPatchCmd() *cobra.Command {
	opts := &roomOptions{}
	cmd := &cobra.Command{
		Use:   "patch ROOM JSON|@FILE",
		Short: "Change the fields a JSON object names (a merge patch)",
		Long: `PATCH /v1/rooms/{room} with a JSON merge patch (RFC 7396): the fields it
names change, an object member such as the template is merged, the rest is
kept.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			obj, err := jsonObject(cmd, "the patch", args[1])
			if err != nil {
				return err
			}
			raw, err := json.Marshal(obj)
			if err != nil {
				return err
			}
			return opts.call(cmd, func(ctx context.Context, c *client.Client) (json.RawMessage, error) {
				return c.PatchRoom(ctx, args[0], raw)
			})
		},
	}
	opts.flags(cmd)
	return cmd
}

// newRoomSetCmd is a subcommand that sends one fixed patch.
func newRoomSetCmd(use, short, patch string) *cobra.Command {
	opts := &roomOptions{}
	cmd := &cobra.Command{
		Use:   use + " ROOM",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return opts.call(cmd, func(ctx context.Context, c *client.Client) (json.RawMessage, error) {
				return c.PatchRoom(ctx, args[0], json.RawMessage(patch))
			})
		},
	}
	opts.flags(cmd)
	return cmd
}

func newRoomCloseCmd() *cobra.Command {
	opts := &roomOptions{}
	var message string
	cmd := &cobra.Command{
		Use:   "close ROOM [--message TEXT]",
		Short: "Close a room: waiting buyers are told, nobody else is admitted",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			patch := map[string]any{"closed": true}
			if cmd.Flags().Changed("message") {
				patch["closed_message"] = message
			}
			raw, err := json.Marshal(patch)
			if err != nil {
				return err
			}
			return opts.call(cmd, func(ctx context.Context, c *client.Client) (json.RawMessage, error) {
				return c.PatchRoom(ctx, args[0], raw)
			})
		},
	}
	opts.flags(cmd)
	cmd.Flags().StringVar(&message, "message", "", "what the waiting page shows once the room is closed")
	return cmd
}

func newRoomDeleteCmd() *cobra.Command {
	opts := &roomOptions{}
	var yes bool
	cmd := &cobra.Command{
		Use:   "delete ROOM --yes",
		Short: "Remove a room and all its data (tickets, admissions, counters)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !yes {
				return errors.New("--yes is required: deleting a room removes every ticket and admission in it")
			}
			err := opts.call(cmd, func(ctx context.Context, c *client.Client) (json.RawMessage, error) {
				return nil, c.DeleteRoom(ctx, args[0])
			})
			if err == nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "room %s deleted\n", args[0])
			}
			return err
		},
	}
	opts.flags(cmd)
	cmd.Flags().BoolVar(&yes, "yes", false, "confirm the deletion")
	return cmd
}
