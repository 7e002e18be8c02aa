package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/internal/httpapi"
	"github.com/stampede-lab/stampede/waitroom"
	"github.com/stampede-lab/stampede/waitroom/api"
	"github.com/stampede-lab/stampede/waitroom/redisstore"
)

// waitroomOptions are the flags of `stampede serve waitroom`.
type waitroomOptions struct {
	http         string
	listener     net.Listener // where serve waitroom serves; nil for a gate's embedded instance
	redis        string
	redisTimeout time.Duration
	ackReplicas  int
	ackTimeout   time.Duration
	secret       string
	adminToken   string
	metricsToken string
	instance     string
	immediate    bool
	pipeline     bool
	joinRate     float64
	joinBurst    int
	joinClients  int
	prefixRate   float64
	prefixBurst  int
	trustedProxy string
	server       httpapi.ServerConfig
	// onAdmit is the waiting page's admission hook; set by serve gate
	// (its hand-off path), not a flag.
	onAdmit string
	// Identity and checkout integration.
	checkoutKey      string
	siteSecret       string
	allowUnsigned    bool
	keyEpoch         string
	previousSecret   string
	previousKeyEpoch string
	// The adaptive outflow (waitroom.OutflowController).
	adaptive   bool
	outflowP99 time.Duration
	// dataDir keeps the embedded store's snapshot (and its generated
	// secret) across restarts; name is the snapshot's base name, set by
	// the command (serve waitroom, serve gate, serve forward-auth), not a
	// flag, so that two of them in one directory keep separate files.
	dataDir string
	name    string
}

// The environment variables `stampede serve waitroom` reads when the flag
// is not given.
const (
	envRedis      = "STAMPEDE_REDIS_URL"
	envSecret     = "STAMPEDE_SECRET"
	envAdminToken = "STAMPEDE_ADMIN_TOKEN"
)

// shutdownTimeout bounds how long in-flight requests may take after a
// shutdown signal.
const shutdownTimeout = 5 * time.Second

func newServeWaitroomCmd() *cobra.Command {
	opts := &waitroomOptions{server: httpapi.DefaultServerConfig()}
	cmd := &cobra.Command{
		Use:   "waitroom",
		Short: "Run the waiting room's HTTP service",
		Long: `Run the waiting room: a JSON API that queues users for a room of fixed
capacity and admits them, a waiting page at /rooms/{room}, /healthz,
/readyz, Prometheus /metrics and its OpenAPI description at /openapi.json.
The metrics name every room, unannounced ones too, so /metrics answers
only Bearer --admin-token or Bearer --metrics-token (Prometheus:
authorization.credentials_file in the scrape config); /healthz and
/readyz answer anyone.

  PUT    /v1/rooms/{room}                 configure a room (Bearer admin token)
  GET    /v1/rooms/{room}                 the room's counters
  GET    /v1/rooms/{room}/challenge       a proof-of-work challenge (rooms with pow_difficulty)
  POST   /v1/rooms/{room}/tickets         join: {} (anonymous), {"user_id","user_sig","user_expires"}
                                          (trusted, --site-secret), or again with Bearer ticket_token;
                                          plus "challenge" and "solution" in rooms with pow_difficulty
  GET    /v1/rooms/{room}/tickets/{user}  the ticket (Bearer ticket_token); admission_token (a JWT) once admitted
  DELETE /v1/rooms/{room}/tickets/{user}  leave or release the slot (Bearer ticket_token)
  POST   /v1/rooms/{room}/admissions/check  {"admission_token"}: is the slot still held? (Bearer --checkout-key)
  POST   /v1/rooms/{room}/admissions/done   {"admission_token"}: release the slot (Bearer --checkout-key)
  GET    /.well-known/jwks.json           the admission tokens' public keys (EdDSA)

A join for a user who holds a live ticket answers 409 unless it presents
that ticket's token. Admission tokens are signed with an Ed25519 key
derived from --secret and --key-epoch, so every instance with the same
pair serves the same keys; rotate with a new --key-epoch and the old one
as --previous-key-epoch until the old tokens have expired.

Errors are RFC 9457 application/problem+json. Joins are limited per client
address (--join-rate, --join-burst) and per network prefix, IPv4 /24 or
IPv6 /48 (--join-prefix-rate, --join-prefix-burst): 429 rate_limited with
Retry-After; behind a reverse proxy, name it with --trusted-proxy so that
its X-Forwarded-For counts. A room also bounds its line (max_waiting) and
its joins per second (max_joins_per_second): 503 with Retry-After. Every call to Redis ends
within --redis-timeout: a down or frozen Redis answers 503 with
Retry-After, never a hang; /readyz then fails while /healthz stays ok.

State lives in Redis (--redis); without one, an in-process Redis-protocol
server (miniredis) is started and its address logged: its state is lost on
exit. Run several instances on one Redis with one --secret to scale out.

Flags that are not given are read from the environment: STAMPEDE_REDIS_URL
for --redis, and STAMPEDE_<FLAG> for every other flag, e.g.
STAMPEDE_ADMIN_TOKEN, STAMPEDE_SECRET, STAMPEDE_REDIS_TIMEOUT=500ms.`,
		Example: `  stampede serve waitroom --admin-token "$(openssl rand -hex 16)"
  STAMPEDE_REDIS_URL=redis://localhost:6379/0 STAMPEDE_SECRET=... STAMPEDE_ADMIN_TOKEN=... stampede serve waitroom --http :8080`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runWaitroom(cmd, opts) },
	}
	opts.addFlags(cmd.Flags())
	return cmd
}

// addFlags registers the waiting room's flags on f: `serve waitroom` and
// `serve gate` (which embeds a waiting room) share them.
func (opts *waitroomOptions) addFlags(f *pflag.FlagSet) {
	f.StringVar(&opts.http, "http", "127.0.0.1:8080", "address to listen on for HTTP")
	f.StringVar(&opts.dataDir, "data-dir", defaultDataDir, "without --redis: where the in-process Redis keeps its data across a clean restart\n"+
		"(a snapshot written on shutdown and read at start; with no --secret, the generated secret too); empty: kept in memory only")
	f.StringVar(&opts.redis, "redis", "", "Redis URL: redis://[user:pass@]host:port/db, rediss:// for TLS, unix:///path, or\n"+
		"redis-cluster://[user:pass@]host1:port,host2:port,... for Redis Cluster; empty: start an in-process miniredis")
	f.DurationVar(&opts.redisTimeout, "redis-timeout", redisstore.DefaultConfig().OpTimeout,
		"deadline of every call to Redis (and of its dials, reads, writes and pool waits); past it the request answers 503")
	f.IntVar(&opts.ackReplicas, "ack-replicas", 0, "answer a join, and a read that hands out an admission, only once this many replicas\n"+
		"of the room's Redis master have it (WAIT), so that a failover loses no acknowledged join or admission; 0: off")
	f.DurationVar(&opts.ackTimeout, "ack-timeout", redisstore.DefaultConfig().AckTimeout,
		"how long --ack-replicas waits for the replicas; past it the request answers 503 and the user retries")
	f.StringVar(&opts.secret, "secret", "", "token signing secret, at least 32 bytes, the same on every instance;\n"+
		"empty: a random one, so tokens do not survive a restart nor verify on other instances")
	f.StringVar(&opts.adminToken, "admin-token", "", "bearer token for PUT /v1/rooms/{room}, at least 16 bytes (required)")
	f.StringVar(&opts.metricsToken, "metrics-token", "", "a bearer token that reads the metrics and nothing else, at least 16 bytes, for a Prometheus\n"+
		"that should not hold --admin-token; the metrics name every room, so they answer only these two tokens\n"+
		"(empty: only --admin-token); liveness and readiness need none")
	f.StringVar(&opts.instance, "instance", "", "this instance's name in leader elections (default: host-pid)")
	f.BoolVar(&opts.immediate, "immediate", true, "admit right after a release and when a lease runs out, not only on the tick")
	f.BoolVar(&opts.pipeline, "autopipeline", true, "send the join, ticket and leave scripts of concurrent requests to Redis in shared pipelines\n"+
		"(go-redis automatic pipelining, an experimental go-redis feature; false: one round trip each)")
	jl := api.DefaultJoinLimitConfig()
	f.Float64Var(&opts.joinRate, "join-rate", jl.Rate, "joins per second allowed per client address (token bucket, per instance); 0: no limit")
	f.IntVar(&opts.joinBurst, "join-burst", jl.Burst, "joins a client address may make at once before --join-rate applies")
	f.IntVar(&opts.joinClients, "join-clients", jl.MaxClients, "client addresses whose buckets are kept (least recently seen dropped first)")
	f.Float64Var(&opts.prefixRate, "join-prefix-rate", jl.PrefixRate, "joins per second allowed per network prefix (IPv4 /24, IPv6 /48) together, so that\n"+
		"rotating addresses within one network does not multiply --join-rate (per instance); 0: no prefix limit")
	f.IntVar(&opts.prefixBurst, "join-prefix-burst", jl.PrefixBurst, "joins a network prefix may make at once before --join-prefix-rate applies")
	f.StringVar(&opts.trustedProxy, "trusted-proxy", "", "CIDR[,CIDR...] of reverse proxies whose X-Forwarded-For names the client;\n"+
		"from any other peer the header is ignored (empty: trust none)")
	f.DurationVar(&opts.server.ReadHeaderTimeout, "read-header-timeout", opts.server.ReadHeaderTimeout, "HTTP: time to read a request's headers")
	f.DurationVar(&opts.server.ReadTimeout, "read-timeout", opts.server.ReadTimeout, "HTTP: time to read a whole request, body included (a stalled body is cut)")
	f.DurationVar(&opts.server.WriteTimeout, "write-timeout", opts.server.WriteTimeout, "HTTP: time from the end of a request's headers to the end of its answer")
	f.DurationVar(&opts.server.IdleTimeout, "idle-timeout", opts.server.IdleTimeout, "HTTP: an idle keep-alive connection is closed after this long")
	f.DurationVar(&opts.server.ShutdownTimeout, "shutdown-timeout", opts.server.ShutdownTimeout, "HTTP: requests still running this long after SIGINT or SIGTERM are cut")
	f.StringVar(&opts.checkoutKey, "checkout-key", "", "bearer key of POST /v1/rooms/{room}/admissions/check and /done, at least 16 bytes;\n"+
		"empty: the online admission check is off")
	f.StringVar(&opts.siteSecret, "site-secret", "", "secret shared with the site for trusted joins (user_id signed with user_sig, user_expires),\n"+
		"at least 32 bytes; empty: only anonymous joins (and unsigned ones with --allow-unsigned-users)")
	f.BoolVar(&opts.allowUnsigned, "allow-unsigned-users", false, "accept joins with a bare, unsigned user_id (anyone may then join as anyone; never take over a ticket)")
	f.StringVar(&opts.keyEpoch, "key-epoch", waitroom.DefaultKeyEpoch, "epoch of the admission-token signing key derived from --secret; change it to rotate keys")
	f.StringVar(&opts.previousSecret, "previous-secret", "", "the secret before a rotation: its key (with --previous-key-epoch) still verifies\n"+
		"admission tokens and is served in /.well-known/jwks.json; empty: --secret")
	f.StringVar(&opts.previousKeyEpoch, "previous-key-epoch", "", "the key epoch before a rotation; empty: no previous key unless --previous-secret is set")
	f.BoolVar(&opts.adaptive, "adaptive-outflow", false, "adapt the outflow of rooms with a max_admissions_per_minute to the checkout's health (AIMD, never above it):\n"+
		"slower while the upstream's p99 or failures (seen by a gate) or pay's UNKNOWN share (serve gate --pay-metrics) are high")
	f.DurationVar(&opts.outflowP99, "outflow-p99", waitroom.DefaultOutflowConfig().P99, "with --adaptive-outflow: the upstream p99 above which the checkout counts as unwell")
}

// validate checks the options before anything starts, naming the flag.
func (o *waitroomOptions) validate() error {
	if o.adminToken == "" {
		return fmt.Errorf("--admin-token (or %s) is required: the token that authorizes room configuration", envAdminToken)
	}
	if o.secret != "" && len(o.secret) < waitroom.MinSecretLen {
		return fmt.Errorf("--secret: must be at least %d bytes, got %d (use random bytes, e.g. openssl rand -hex 32)", waitroom.MinSecretLen, len(o.secret))
	}
	if o.http == "" {
		return errors.New("--http: must not be empty")
	}
	if (o.previousSecret != "" || o.previousKeyEpoch != "") && o.secret == "" {
		return errors.New("--previous-secret and --previous-key-epoch need --secret: a random secret cannot be rotated")
	}
	// The server's configuration, every bad field at once; its store is
	// made later, and an empty --secret means a random one.
	cfg, err := o.serverConfig(nil, []byte(o.secret))
	if err != nil {
		return err
	}
	if len(cfg.Secret) == 0 {
		cfg.Secret = make([]byte, waitroom.MinSecretLen)
	}
	// The join limit as the flags give it (the server takes a zero
	// --join-clients for the default), then the rest once, then the
	// Redis store's.
	var bad []error
	seen := map[string]bool{"store": true}
	all := append(stampede.FieldErrors(cfg.JoinLimit.Validate()), stampede.FieldErrors(cfg.Validate())...)
	for _, e := range append(all, stampede.FieldErrors(o.storeConfig().Validate())...) {
		if !seen[e.Field] {
			seen[e.Field] = true
			bad = append(bad, e)
		}
	}
	if err := flagErrors("", stampede.Join(bad...)); err != nil {
		return err
	}
	if o.ackReplicas > 0 && o.redis == "" {
		return fmt.Errorf("--ack-replicas %d needs --redis naming a Redis whose masters have replicas; the embedded server has none, and every join would answer 503", o.ackReplicas)
	}
	if err := o.server.Validate(); err != nil {
		return flagErrors("", err)
	}
	// The slowest answer reads Redis twice (GET /v1/rooms/{room}); /readyz
	// waits up to 1 s.
	if longest := max(2*o.redisTimeout, time.Second); o.server.WriteTimeout <= longest {
		return fmt.Errorf("--write-timeout must exceed %s (twice --redis-timeout, at least 1s), got %s", longest, o.server.WriteTimeout)
	}
	if o.redis != "" {
		client, err := redisClient(o.redis, o.storeConfig())
		if err != nil {
			return err
		}
		client.Close()
	}
	return nil
}

// serverConfig is the waiting room's configuration from the flags, on
// store with secret. Only --trusted-proxy can fail to parse here; the
// rest is left to Config.Validate.
func (o *waitroomOptions) serverConfig(store waitroom.Store, secret []byte) (api.Config, error) {
	proxies, err := api.ParseTrustedProxies(o.trustedProxy)
	if err != nil {
		return api.Config{}, fmt.Errorf("--trusted-proxy: %w", err)
	}
	cfg := api.DefaultConfig()
	cfg.Store = store
	cfg.Instance, cfg.Immediate = o.instance, o.immediate
	cfg.Secret, cfg.AdminToken, cfg.MetricsToken = secret, o.adminToken, o.metricsToken
	cfg.JoinLimit = api.JoinLimitConfig{Rate: o.joinRate, Burst: o.joinBurst, PrefixRate: o.prefixRate, PrefixBurst: o.prefixBurst,
		MaxClients: o.joinClients, TrustedProxies: proxies}
	cfg.OnAdmit = o.onAdmit
	cfg.CheckoutKey, cfg.AllowUnsignedUsers = o.checkoutKey, o.allowUnsigned
	cfg.KeyEpoch, cfg.PreviousKeys = o.keyEpoch, o.previousKeys()
	if o.siteSecret != "" {
		cfg.SiteSecret = []byte(o.siteSecret)
	}
	if o.adaptive {
		oc := waitroom.DefaultOutflowConfig()
		oc.P99 = o.outflowP99
		cfg.Outflow = &oc
	}
	return cfg, nil
}

// prevEpoch is the previous key's epoch: --previous-key-epoch, else
// --key-epoch (a rotation of the secret alone).
func (o *waitroomOptions) prevEpoch() string {
	if o.previousKeyEpoch != "" {
		return o.previousKeyEpoch
	}
	return o.keyEpoch
}

// previousKeys is the verification-only key of a rotation, if any.
func (o *waitroomOptions) previousKeys() []waitroom.KeySpec {
	if o.previousSecret == "" && o.previousKeyEpoch == "" {
		return nil
	}
	secret := o.previousSecret
	if secret == "" {
		secret = o.secret
	}
	return []waitroom.KeySpec{{Secret: []byte(secret), Epoch: o.prevEpoch()}}
}

// storeConfig is the Redis store's configuration from the flags.
func (o *waitroomOptions) storeConfig() redisstore.Config {
	cfg := redisstore.DefaultConfig()
	cfg.AutoPipeline, cfg.OpTimeout = o.pipeline, o.redisTimeout
	cfg.AckReplicas, cfg.AckTimeout = o.ackReplicas, o.ackTimeout
	return cfg
}

// redisClient makes a client for a redis://, rediss://, unix:// or
// redis-cluster://host1:port,host2:port URL, with cfg's timeouts. It does
// not connect.
func redisClient(url string, cfg redisstore.Config) (redis.UniversalClient, error) {
	if strings.HasPrefix(url, "redis-cluster://") {
		copts, err := redisstore.ParseClusterURL(url)
		if err != nil {
			return nil, fmt.Errorf("--redis: %w", err)
		}
		cfg.ApplyClusterTimeouts(copts)
		return redis.NewClusterClient(copts), nil
	}
	ropts, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("--redis: %w", err)
	}
	cfg.ApplyTimeouts(ropts)
	return redis.NewClient(ropts), nil
}

// startEmbedded starts the in-process Redis: with a --data-dir, on the
// snapshot <data-dir>/<name>.json (read when it exists), which the caller
// writes at shutdown; the directory is made when missing. snapshot is ""
// without a --data-dir.
func (o *waitroomOptions) startEmbedded() (m *redisstore.Embedded, snapshot string, err error) {
	if o.dataDir == "" {
		m, err := redisstore.StartEmbedded()
		return m, "", err
	}
	if err := os.MkdirAll(o.dataDir, 0o700); err != nil {
		return nil, "", fmt.Errorf("--data-dir: %w", err)
	}
	snapshot = filepath.Join(o.dataDir, o.fileName()+".json")
	m, err = redisstore.StartEmbeddedAt("127.0.0.1:0", snapshot)
	if err != nil {
		return nil, "", fmt.Errorf("--data-dir: %w (move the file away to start empty)", err)
	}
	return m, snapshot, nil
}

// fileName is the base name of the embedded store's files in --data-dir.
func (o *waitroomOptions) fileName() string {
	if o.name == "" {
		return "waitroom"
	}
	return o.name
}

// dataSecret reads the signing secret kept in <data-dir>/<name>.secret, or
// makes one and keeps it there (mode 0600), so that tickets and admissions
// issued before a restart still verify after it.
func (o *waitroomOptions) dataSecret(log *slog.Logger) ([]byte, error) {
	path := filepath.Join(o.dataDir, o.fileName()+".secret")
	if b, err := os.ReadFile(path); err == nil {
		if len(b) < 32 {
			return nil, fmt.Errorf("--data-dir: %s holds %d bytes, not a secret of at least 32: remove it or give --secret", path, len(b))
		}
		return b, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("--data-dir: %w", err)
	}
	b := make([]byte, 32)
	rand.Read(b)
	b = []byte(hex.EncodeToString(b))
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return nil, fmt.Errorf("--data-dir: %w", err)
	}
	log.Warn("no --secret given: generated one and kept it in --data-dir; other instances need it as --secret", "file", path)
	return b, nil
}

// start connects to Redis (or starts an embedded one) and makes a
// waiting-room instance on it, not yet running (api.Server.Run admits).
// stop closes the store and Redis; call it once the server is done.
func (opts *waitroomOptions) start(cmd *cobra.Command) (srv *api.Server, stop func(), err error) {
	log := loggerOf(cmd)
	ctx := cmd.Context()
	scfg := opts.storeConfig()
	var closers []func()
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	defer func() {
		// Not stop: a failed start returns a nil stop.
		if err != nil {
			closeAll()
		}
	}()

	var client redis.UniversalClient
	secret := []byte(opts.secret)
	if opts.redis == "" {
		m, snapshot, err := opts.startEmbedded()
		if err != nil {
			return nil, nil, err
		}
		closers = append(closers, func() {
			if snapshot == "" {
				m.Close()
				return
			}
			// The listener first, so that the snapshot sees no more writes.
			m.CloseListener()
			if err := m.Save(snapshot); err != nil {
				log.Error("the in-process Redis's snapshot could not be written: its state is lost", "file", snapshot, "err", err)
			} else {
				log.Info("the in-process Redis's state was saved", "file", snapshot)
			}
			m.Close()
		})
		if snapshot == "" {
			log.Info("no --redis given: started an in-process Redis (miniredis); --data-dir is empty, so its state is lost on exit", "addr", m.Addr())
		} else {
			log.Info("no --redis given: started an in-process Redis (miniredis), kept in --data-dir across clean restarts", "addr", m.Addr(), "snapshot", snapshot)
			if len(secret) == 0 {
				if secret, err = opts.dataSecret(log); err != nil {
					return nil, nil, err
				}
			}
		}
		ropts := &redis.Options{Addr: m.Addr()}
		scfg.ApplyTimeouts(ropts)
		client = redis.NewClient(ropts)
	} else {
		if client, err = redisClient(opts.redis, scfg); err != nil {
			return nil, nil, err
		}
		pingCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err = client.Ping(pingCtx).Err()
		cancel()
		if err != nil {
			client.Close()
			return nil, nil, fmt.Errorf("--redis: cannot reach Redis: %w", err)
		}
	}
	closers = append(closers, func() { client.Close() })

	if len(secret) == 0 {
		secret = make([]byte, 32)
		rand.Read(secret)
		log.Warn("no --secret given: using a random one; tokens will not survive a restart nor verify on other instances")
	}

	store, err := redisstore.NewWithConfig(client, scfg)
	if err != nil {
		return nil, nil, err
	}
	closers = append(closers, func() { _ = store.Close() })
	cfg, err := opts.serverConfig(store, secret)
	if err != nil {
		return nil, nil, err
	}
	cfg.Logger, cfg.Listener, cfg.HTTP = log, opts.listener, opts.server
	srv, err = api.New(cfg)
	if err != nil {
		return nil, nil, flagErrors("", err)
	}
	log.Info("admission tokens: EdDSA JWTs", "kid", srv.Admissions().KeyID(), "jwks", "/.well-known/jwks.json",
		"online_check", opts.checkoutKey != "", "trusted_joins", opts.siteSecret != "", "unsigned_joins", opts.allowUnsigned)
	return srv, closeAll, nil
}

// runInBackground runs run in a goroutine under a context of its own,
// derived from ctx. stop cancels that context and waits for run to
// return; done is closed when it has.
func runInBackground(ctx context.Context, run func(context.Context) error) (done <-chan struct{}, stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		_ = run(ctx)
	}()
	return ch, func() { cancel(); <-ch }
}

func runWaitroom(cmd *cobra.Command, opts *waitroomOptions) error {
	if err := opts.validate(); err != nil {
		return err
	}
	log := loggerOf(cmd)
	ln, err := net.Listen("tcp", opts.http)
	if err != nil {
		return fmt.Errorf("--http: %w", err)
	}
	opts.listener = ln
	srv, stop, err := opts.start(cmd)
	if err != nil {
		ln.Close()
		return err
	}
	defer stop()
	log.Info("waiting room listening", "addr", ln.Addr().String(), "page", "http://"+ln.Addr().String()+"/rooms/{room}",
		"redis_timeout", opts.redisTimeout)
	if err := srv.Run(cmd.Context()); err != nil {
		return fmt.Errorf("http server: %w", err)
	}
	log.Info("stopped")
	return nil
}
