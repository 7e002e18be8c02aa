package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/gate"
	"github.com/stampede-lab/stampede/internal/httpapi"
	"github.com/stampede-lab/stampede/waitroom"
	"github.com/stampede-lab/stampede/waitroom/api"
)

// gateOptions are the flags of `stampede serve gate`: the embedded waiting
// room's (shared with `serve waitroom`) and the gate's own.
type gateOptions struct {
	wr         waitroomOptions
	upstream   string
	room       string
	cookie     string
	checkCache time.Duration
	maxSession time.Duration
	// the limits of admitted traffic
	checkConcurrency int
	checkBackoff     time.Duration
	visitorRate      float64
	visitorBurst     int
	// payMetrics is pay's /metrics URL (--pay-metrics).
	payMetrics string
}

// addLimitFlags adds the flags limiting admitted traffic, shared by
// serve gate and serve forward-auth.
func (o *gateOptions) addLimitFlags(f *pflag.FlagSet, def gate.Config) {
	f.Float64Var(&o.visitorRate, "visitor-rate", def.VisitorRate, "requests a second each admitted visitor may send on average (a token bucket); over it: 429 with Retry-After, without asking the store; 0 turns the limit off")
	f.IntVar(&o.visitorBurst, "visitor-burst", def.VisitorBurst, "requests an admitted visitor may send at once (the bucket's size)")
	f.IntVar(&o.checkConcurrency, "check-concurrency", def.CheckConcurrency, "most store calls the online checks make at once, all visitors together (the rest of the store client's pool stays for the room's admission)")
	f.DurationVar(&o.checkBackoff, "check-backoff", def.CheckBackoff, "after a failed online check, how long a visitor's admission is not asked about again (doubling with each further failure, up to 16 times)")
}

// applyLimits sets cfg's limits from the flags.
func (o *gateOptions) applyLimits(cfg *gate.Config) {
	cfg.CheckConcurrency, cfg.CheckBackoff = o.checkConcurrency, o.checkBackoff
	cfg.VisitorRate, cfg.VisitorBurst = o.visitorRate, o.visitorBurst
}

func newServeGateCmd() *cobra.Command {
	opts := &gateOptions{wr: waitroomOptions{server: httpapi.DefaultServerConfig()}}
	def := gate.DefaultConfig()
	cmd := &cobra.Command{
		Use:   "gate",
		Short: "Run a reverse proxy that puts a waiting room in front of a checkout",
		Long: `Run the gate: a reverse proxy in front of any checkout (--upstream) that
lets through only visitors admitted to the waiting room --room. It embeds a
waiting-room instance with the same flags as 'stampede serve waitroom'
(--redis, --secret, ...): run any number of gates and waiting rooms on one
Redis and the room's capacity holds across all of them.

A visitor without an admission cookie is sent to the waiting page
(/rooms/{room}?join=anonymous); once admitted, the page hands its ticket to
the gate, which sets an HttpOnly, SameSite=Lax cookie (Secure under TLS)
and sends the visitor back to the address first asked for. An API client
(Accept: application/json) gets 503 problem+json with the queue's length
and Retry-After instead.

Admitted requests go upstream with Stampede-User and Stampede-Admission
(the admission JWT) headers, after an online check of the slot (cached for
at most --check-cache). Each check slides the lease, up to --max-session
after admission. An upstream answer with 'Stampede-Release: done' releases
the slot. A tampered, expired or released cookie leads back to the
waiting page.

One admitted visitor cannot take the room down: its cookie is verified
once per token, its online checks make at most one store call at a time
(renewed in the background while the cached answer is served, every active
visitor's in one batched store call; after a failure, not asked again for
--check-backoff), all checks together make at most
--check-concurrency store calls at once, and each visitor may send
--visitor-rate requests a second (bursts of --visitor-burst): over it the
gate answers 429 with Retry-After without asking the store.

The gate also serves the waiting room's API for --room, its page and
/.well-known/jwks.json, and its own liveness, readiness and metrics under
its reserved prefix (/.stampede/healthz, /.stampede/readyz,
/.stampede/metrics); every other path goes upstream. The metrics name
rooms, so /.stampede/metrics answers only Bearer --admin-token or
--metrics-token; liveness and readiness answer anyone.`,
		Example: `  stampede serve gate --upstream http://127.0.0.1:9000 --room drop --admin-token "$(openssl rand -hex 16)"
  STAMPEDE_REDIS_URL=redis://localhost:6379/0 STAMPEDE_SECRET=... stampede serve gate --upstream http://checkout:9000 --room drop --http :8443`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runGate(cmd, opts) },
	}
	f := cmd.Flags()
	opts.wr.addFlags(f)
	f.StringVar(&opts.upstream, "upstream", "", "the checkout to proxy admitted visitors to: an http or https URL (required)")
	f.StringVar(&opts.room, "room", "", "the waiting room guarding the checkout (required; an admin creates it with PUT /v1/rooms/{room})")
	f.StringVar(&opts.cookie, "cookie", def.CookieName, "name of the admission cookie")
	f.DurationVar(&opts.checkCache, "check-cache", def.CheckCache, "how long an online check of a slot is reused, at most 1s")
	f.DurationVar(&opts.maxSession, "max-session", def.MaxSession, "longest an admission lasts, however active the visitor (the lease slides up to it)")
	opts.addLimitFlags(f, def)
	f.StringVar(&opts.payMetrics, "pay-metrics", "", "with --adaptive-outflow: pay's /metrics URL, read every second for the share of payments left UNKNOWN")
	return cmd
}

// config is the gate's configuration from the flags, embedding the
// waiting-room instance srv (nil while only validating the flags).
func (o *gateOptions) config(cmd *cobra.Command, srv *api.Server) (gate.Config, error) {
	cfg := gate.DefaultConfig()
	cfg.Room, cfg.CookieName, cfg.CheckCache, cfg.MaxSession = o.room, o.cookie, o.checkCache, o.maxSession
	o.applyLimits(&cfg)
	cfg.Logger = loggerOf(cmd)
	cfg.HTTP, cfg.Server = o.wr.http, o.wr.server
	if o.upstream == "" {
		return cfg, errors.New("--upstream is required: the checkout's URL")
	}
	var bad []error
	if u, err := url.Parse(o.upstream); err != nil {
		// Not Go's parser error: the flag's words (Validate checks the
		// scheme and host of a URL that parses).
		bad = append(bad, &stampede.Error{Code: stampede.Invalid, Field: "upstream",
			Message: fmt.Sprintf("must be an http or https URL such as http://127.0.0.1:9000, got %q", o.upstream)})
	} else {
		cfg.Upstream = u
	}
	embedded := map[string]bool{"service": true, "tickets": true, "admissions": true, "waitroom": true}
	if srv != nil {
		cfg.Service, cfg.Tickets, cfg.Admissions, cfg.Waitroom = srv.Service(), srv.Tickets(), srv.Admissions(), srv
		embedded = nil
	}
	for _, e := range stampede.FieldErrors(cfg.Validate()) {
		if !embedded[e.Field] && !(e.Field == "upstream" && cfg.Upstream == nil && len(bad) > 0) {
			bad = append(bad, e)
		}
	}
	return cfg, flagErrors("", stampede.Join(bad...))
}

func runGate(cmd *cobra.Command, opts *gateOptions) error {
	if err := opts.wr.validate(); err != nil {
		return err
	}
	if _, err := opts.config(cmd, nil); err != nil {
		return err
	}
	opts.wr.onAdmit, opts.wr.name = gate.AdmitPath, "gate-"+opts.room
	srv, stop, err := opts.wr.start(cmd)
	if err != nil {
		return err
	}
	defer stop()
	cfg, err := opts.config(cmd, srv)
	if err != nil {
		return err
	}
	g, err := gate.New(cfg)
	if err != nil {
		return err
	}
	admitting, stopAdmitting := runInBackground(cmd.Context(), srv.Run)
	defer func() { stopAdmitting(); <-admitting }()
	if opts.payMetrics != "" {
		reading, stopReading := runInBackground(cmd.Context(), func(ctx context.Context) error {
			readPayMetrics(ctx, opts.payMetrics, srv.Service(), opts.room, loggerOf(cmd))
			return nil
		})
		defer func() { stopReading(); <-reading }()
	}
	warnMissingRoom(cmd, srv, opts.room)
	if err := g.Run(cmd.Context()); err != nil {
		if e, ok := errors.AsType[*stampede.Error](err); ok && e.Field != "" {
			return flagErrors("", err) // --http
		}
		return err
	}
	loggerOf(cmd).Info("stopped")
	return nil
}

// warnMissingRoom says, at start, when the room the gate guards does not
// exist yet: until an admin creates it, nobody can join and every visitor
// is kept out.
func warnMissingRoom(cmd *cobra.Command, srv *api.Server, room string) {
	ctx, cancel := context.WithTimeout(cmd.Context(), 2*time.Second)
	defer cancel()
	_, err := srv.Service().RoomConfig(ctx, room)
	switch {
	case err == nil:
	case errors.Is(err, waitroom.ErrNoRoom):
		loggerOf(cmd).Warn("the room does not exist yet: nobody can join and every visitor is kept out until an admin creates it (stampede room create)", "room", room)
	default:
		loggerOf(cmd).Warn("could not read the room's configuration at start", "room", room, "err", err)
	}
}
