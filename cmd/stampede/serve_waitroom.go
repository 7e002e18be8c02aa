package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/stampede-lab/stampede/waitroom"
	"github.com/stampede-lab/stampede/waitroom/redisstore"
)

// waitroomOptions are the flags of `stampede serve waitroom`.
type waitroomOptions struct {
	http       string
	redis      string
	secret     string
	adminToken string
	instance   string
	immediate  bool
	pipeline   bool
}

// Environment variables named in messages; every flag reads STAMPEDE_<FLAG>
// (see env.go), and --redis reads STAMPEDE_REDIS_URL too.
const (
	envRedis      = "STAMPEDE_REDIS_URL"
	envSecret     = "STAMPEDE_SECRET"
	envAdminToken = "STAMPEDE_ADMIN_TOKEN"
)

// shutdownTimeout bounds how long in-flight requests may take after a
// shutdown signal.
const shutdownTimeout = 5 * time.Second

func newServeWaitroomCmd() *cobra.Command {
	opts := &waitroomOptions{}
	cmd := &cobra.Command{
		Use:   "waitroom",
		Short: "Run the waiting room's HTTP service",
		Long: `Run the waiting room: a JSON API that queues users for a room of fixed
capacity and admits them, a waiting page at /rooms/{room}, /healthz and
Prometheus /metrics.

  PUT    /v1/rooms/{room}                 configure a room (Bearer admin token)
  GET    /v1/rooms/{room}                 the room's counters
  POST   /v1/rooms/{room}/tickets         join: {"user_id"}
  GET    /v1/rooms/{room}/tickets/{user}  the ticket (Bearer ticket_token)
  DELETE /v1/rooms/{room}/tickets/{user}  leave or release the slot (Bearer ticket_token)

State lives in Redis (--redis); without one, an in-process Redis-protocol
server (miniredis) is started and its address logged: its state is lost on
exit. Run several instances on one Redis with one --secret to scale out.

Every flag can also be set with STAMPEDE_<FLAG>, e.g. STAMPEDE_ADMIN_TOKEN;
--redis also reads STAMPEDE_REDIS_URL.`,
		Example: `  stampede serve waitroom --admin-token "$(openssl rand -hex 16)"
  STAMPEDE_REDIS_URL=redis://localhost:6379/0 STAMPEDE_SECRET=... STAMPEDE_ADMIN_TOKEN=... stampede serve waitroom --http :8080`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runWaitroom(cmd, opts) },
	}
	f := cmd.Flags()
	f.StringVar(&opts.http, "http", "127.0.0.1:8080", "address to listen on for HTTP")
	f.StringVar(&opts.redis, "redis", "", "Redis URL: redis://[user:pass@]host:port/db, rediss:// for TLS, unix:///path, or\n"+
		"redis-cluster://[user:pass@]host1:port,host2:port,... for Redis Cluster; empty: start an in-process miniredis")
	f.StringVar(&opts.secret, "secret", "", "token signing secret, at least 32 bytes, the same on every instance;\n"+
		"empty: a random one, so tokens do not survive a restart nor verify on other instances")
	f.StringVar(&opts.adminToken, "admin-token", "", "bearer token for PUT /v1/rooms/{room}, at least 16 bytes (required)")
	f.StringVar(&opts.instance, "instance", "", "this instance's name in leader elections (default: host-pid)")
	f.BoolVar(&opts.immediate, "immediate", true, "admit right after a release and when a lease runs out, not only on the tick")
	f.BoolVar(&opts.pipeline, "autopipeline", true, "send the join, ticket and leave scripts of concurrent requests to Redis in shared pipelines\n"+
		"(go-redis automatic pipelining, an experimental go-redis feature; false: one round trip each)")
	return cmd
}

// validate checks the options before anything starts, naming the flag.
func (o *waitroomOptions) validate() error {
	if o.adminToken == "" {
		return fmt.Errorf("--admin-token (or %s) is required: the token that authorizes room configuration", envAdminToken)
	}
	if n := len(o.adminToken); n < 16 {
		return fmt.Errorf("--admin-token must be at least 16 bytes, got %d", n)
	}
	if o.secret != "" && len(o.secret) < 32 {
		return fmt.Errorf("--secret must be at least 32 bytes, got %d (use random bytes, e.g. openssl rand -hex 32)", len(o.secret))
	}
	if o.http == "" {
		return errors.New("--http must not be empty")
	}
	if o.redis != "" {
		client, err := redisClient(o.redis)
		if err != nil {
			return err
		}
		client.Close()
	}
	return nil
}

// redisClient makes a client for a redis://, rediss://, unix:// or
// redis-cluster://host1:port,host2:port URL. It does not connect.
func redisClient(url string) (redis.UniversalClient, error) {
	if rest, ok := strings.CutPrefix(url, "redis-cluster://"); ok {
		copts := &redis.ClusterOptions{}
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			user, pass, hasPass := strings.Cut(rest[:at], ":")
			if hasPass {
				copts.Username, copts.Password = user, pass
			} else {
				copts.Password = user
			}
			rest = rest[at+1:]
		}
		rest = strings.TrimSuffix(rest, "/")
		for addr := range strings.SplitSeq(rest, ",") {
			if _, _, err := net.SplitHostPort(addr); err != nil {
				return nil, fmt.Errorf("--redis: cluster address %q: want host:port (redis-cluster://host1:port,host2:port)", addr)
			}
			copts.Addrs = append(copts.Addrs, addr)
		}
		return redis.NewClusterClient(copts), nil
	}
	ropts, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("--redis: %w", err)
	}
	return redis.NewClient(ropts), nil
}

func runWaitroom(cmd *cobra.Command, opts *waitroomOptions) error {
	if err := opts.validate(); err != nil {
		return err
	}
	log := loggerOf(cmd)
	ctx := cmd.Context()

	var client redis.UniversalClient
	if opts.redis == "" {
		m, err := redisstore.StartEmbedded()
		if err != nil {
			return err
		}
		defer m.Close()
		log.Info("no --redis given: started an in-process Redis (miniredis); its state is lost on exit", "addr", m.Addr())
		client = redis.NewClient(&redis.Options{Addr: m.Addr()})
	} else {
		var err error
		if client, err = redisClient(opts.redis); err != nil {
			return err
		}
		pingCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err = client.Ping(pingCtx).Err()
		cancel()
		if err != nil {
			client.Close()
			return fmt.Errorf("--redis: cannot reach Redis: %w", err)
		}
	}
	defer client.Close()

	secret := []byte(opts.secret)
	if len(secret) == 0 {
		secret = make([]byte, 32)
		rand.Read(secret)
		log.Warn("no --secret given: using a random one; tokens will not survive a restart nor verify on other instances")
	}

	sopts := waitroom.DefaultServerOptions()
	sopts.Instance, sopts.Immediate = opts.instance, opts.immediate
	sopts.Secret, sopts.AdminToken, sopts.Logger = secret, opts.adminToken, log
	scfg := redisstore.DefaultConfig()
	scfg.AutoPipeline = opts.pipeline
	store, err := redisstore.NewWithConfig(client, scfg)
	if err != nil {
		return err
	}
	srv, err := waitroom.NewServer(ctx, store, sopts)
	if err != nil {
		return err
	}
	defer srv.Close()

	ln, err := net.Listen("tcp", opts.http)
	if err != nil {
		return fmt.Errorf("--http: %w", err)
	}
	hs := &http.Server{
		Handler:           srv.Handler(),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	log.Info("waiting room listening", "addr", ln.Addr().String(), "page", "http://"+ln.Addr().String()+"/rooms/{room}")

	select {
	case err := <-served:
		return fmt.Errorf("http server: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down")
	shutCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	if err := hs.Shutdown(shutCtx); err != nil {
		log.Warn("requests still running after the shutdown timeout were cut off", "timeout", shutdownTimeout, "err", err)
		hs.Close()
	}
	srv.Close()
	log.Info("stopped")
	return nil
}
