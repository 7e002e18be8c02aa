package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/gate"
	"github.com/stampede-lab/stampede/internal/httpapi"
	"github.com/stampede-lab/stampede/waitroom/api"
)

// forwardAuthOptions are the flags of `stampede serve forward-auth`: the
// gate's but --upstream, and --rules.
type forwardAuthOptions struct {
	gateOptions
	rules string
}

func newServeForwardAuthCmd() *cobra.Command {
	opts := &forwardAuthOptions{gateOptions: gateOptions{wr: waitroomOptions{server: httpapi.DefaultServerConfig()}}}
	def := gate.DefaultConfig()
	cmd := &cobra.Command{
		Use:   "forward-auth",
		Short: "Answer a proxy's question before each request: is this visitor admitted?",
		Long: `Run the forward-auth server: the gate's decision for a proxy the team
already runs (nginx auth_request, Caddy forward_auth, Traefik ForwardAuth,
Envoy ext_authz over HTTP), which asks ` + gate.AuthPath + ` before every
request to the checkout. It embeds a waiting-room instance with the same
flags as 'stampede serve waitroom' (--redis, --secret, ...), so that any
number of forward-auth servers, gates and waiting rooms on one Redis hold
the room's capacity together.

An admitted visitor's request gets 200 with Stampede-User and
Stampede-Admission, which the proxy copies onto the request to the
checkout, after the same online check as the gate (cached for at most
--check-cache), which slides the lease up to --max-session after admission;
a re-issued admission cookie comes back as Set-Cookie. The gate's limits
hold here too (--visitor-rate, --visitor-burst, --check-concurrency,
--check-backoff): a visitor over its rate gets 429 with Retry-After, never
the checkout (nginx's auth_request turns any status but 2xx, 401 and 403
into 500, which deploy/forward-auth/nginx.conf answers as 503). Any other visitor
gets what the gate answers (303 to the waiting page, or 503 problem+json
for an API client), or a bare 401 with ` + gate.AuthPath + `?deny=401 (nginx),
whose error page then asks ` + gate.WaitPath + `.

The proxy sends the waiting room's paths straight here: /rooms/, /v1/rooms/,
/.well-known/jwks.json and /.stampede/ (the waiting page hands its ticket
to ` + gate.AdmitPath + `; a form posted to ` + gate.ReleasePath + ` ends the
admission). Configuration for each proxy is in deploy/forward-auth/.
Its own /healthz and /readyz answer anyone; /metrics, which names every
room, answers only Bearer --admin-token or --metrics-token.

--rules names a JSON file of rules: rooms by host and path prefix (the
first match wins), bypass rules (path prefixes such as /static/, CIDRs,
and a Stampede-Bypass header signed with a secret, for monitoring), and
what an unmatched request gets ("room": --room guards it, "allow",
"deny"):

  {"rooms": [{"host": "tickets.example", "path_prefix": "/concert/", "room": "concert"}],
   "bypass": {"path_prefixes": ["/static/", "/healthz"], "cidrs": ["10.0.0.0/8"]},
   "unmatched": "room"}`,
		Example: `  stampede serve forward-auth --room drop --admin-token "$(openssl rand -hex 16)" --http 127.0.0.1:8081
  STAMPEDE_REDIS_URL=redis://localhost:6379/0 STAMPEDE_SECRET=... stampede serve forward-auth --room drop`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runForwardAuth(cmd, opts) },
	}
	f := cmd.Flags()
	opts.wr.addFlags(f)
	f.StringVar(&opts.room, "room", "", "the waiting room guarding the checkout (required; an admin creates it with PUT /v1/rooms/{room})")
	f.StringVar(&opts.cookie, "cookie", def.CookieName, "name of the admission cookie")
	f.DurationVar(&opts.checkCache, "check-cache", def.CheckCache, "how long an online check of a slot is reused, at most 1s")
	f.DurationVar(&opts.maxSession, "max-session", def.MaxSession, "longest an admission lasts, however active the visitor (the lease slides up to it)")
	opts.addLimitFlags(f, def)
	f.StringVar(&opts.rules, "rules", "", "a JSON file of rules: rooms by host and path prefix, bypass rules, and what unmatched requests get (see above)")
	return cmd
}

// forwardAuthConfig is the forward-auth server's configuration from the
// flags (the gate's, without --upstream), embedding srv (nil while only
// validating the flags).
func (o *gateOptions) forwardAuthConfig(cmd *cobra.Command, srv *api.Server) (gate.Config, error) {
	cfg := gate.DefaultConfig()
	cfg.Room, cfg.CookieName, cfg.CheckCache, cfg.MaxSession = o.room, o.cookie, o.checkCache, o.maxSession
	o.applyLimits(&cfg)
	cfg.Logger = loggerOf(cmd)
	cfg.HTTP, cfg.Server = o.wr.http, o.wr.server
	embedded := map[string]bool{"service": true, "tickets": true, "admissions": true, "waitroom": true}
	if srv != nil {
		cfg.Service, cfg.Tickets, cfg.Admissions, cfg.Waitroom = srv.Service(), srv.Tickets(), srv.Admissions(), srv
		embedded = nil
	}
	var bad []error
	for _, e := range stampede.FieldErrors(gate.ValidateForwardAuth(cfg)) {
		if !embedded[e.Field] {
			bad = append(bad, e)
		}
	}
	return cfg, flagErrors("", stampede.Join(bad...))
}

// readRules reads and checks the --rules file: nil without one; an
// error naming the flag and each bad field (rooms[0].room, ...).
func readRules(file string) (*gate.Rules, error) {
	if file == "" {
		return nil, nil
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("--rules: %w", err)
	}
	var r gate.Rules
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("--rules %s: not the rules' JSON: %w", file, err)
	}
	if err := r.Validate(); err != nil {
		var msgs []string
		for _, e := range stampede.FieldErrors(err) {
			msgs = append(msgs, e.Field+": "+e.Message)
		}
		return nil, fmt.Errorf("--rules %s: %s", file, strings.Join(msgs, "; "))
	}
	return &r, nil
}

func runForwardAuth(cmd *cobra.Command, opts *forwardAuthOptions) error {
	if err := opts.wr.validate(); err != nil {
		return err
	}
	if _, err := opts.forwardAuthConfig(cmd, nil); err != nil {
		return err
	}
	rules, err := readRules(opts.rules)
	if err != nil {
		return err
	}
	opts.wr.onAdmit, opts.wr.name = gate.AdmitPath, "forward-auth-"+opts.room
	srv, stop, err := opts.wr.start(cmd)
	if err != nil {
		return err
	}
	defer stop()
	cfg, err := opts.forwardAuthConfig(cmd, srv)
	if err != nil {
		return err
	}
	fa, err := gate.NewForwardAuth(cfg, rules)
	if err != nil {
		return err
	}
	admitting, stopAdmitting := runInBackground(cmd.Context(), srv.Run)
	defer func() { stopAdmitting(); <-admitting }()
	if err := fa.Run(cmd.Context()); err != nil {
		if e, ok := errors.AsType[*stampede.Error](err); ok && e.Field != "" {
			return flagErrors("", err) // --http
		}
		return err
	}
	loggerOf(cmd).Info("stopped")
	return nil
}
