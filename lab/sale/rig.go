package sale

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the pgx database/sql driver
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	_ "modernc.org/sqlite" // the SQLite database/sql driver

	"github.com/stampede-lab/stampede/dispatch/natskeyed"
	"github.com/stampede-lab/stampede/internal/freeport"
	"github.com/stampede-lab/stampede/waitroom/redisstore"
)

// Partitions of the payment event stream.
const partitions = 4

// proc is one child process of the sale: this binary with args.
type proc struct {
	name string
	args []string
	mk   func([]string) *cmdHandle
	log  *os.File
	// health is the URL that answers 200 once the process is up, or a
	// host:port to dial.
	health string

	mu   sync.Mutex
	cur  *cmdHandle
	kill int // kill -9 count
}

// cmdHandle is one run of a proc.
type cmdHandle struct {
	c    interface{ Wait() error }
	pid  int
	done chan struct{}
	sig  func(os.Signal) error
}

// start starts p and waits until it is healthy (or gone).
func (p *proc) start(ctx context.Context) error {
	p.mu.Lock()
	h := p.mk(p.args)
	p.cur = h
	p.mu.Unlock()
	if h == nil {
		return fmt.Errorf("sale: %s did not start (see %s)", p.name, p.log.Name())
	}
	return p.ready(ctx, h)
}

// ready waits until p answers its health check.
func (p *proc) ready(ctx context.Context, h *cmdHandle) error {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-h.done:
			return fmt.Errorf("sale: %s exited at start (see %s): %s", p.name, p.log.Name(), lastLine(p.log.Name()))
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		if healthy(p.health) {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("sale: %s not healthy within 60s (see %s)", p.name, p.log.Name())
}

// healthy asks a health URL (200) or dials a host:port.
func healthy(target string) bool {
	if strings.HasPrefix(target, "http") {
		c := http.Client{Timeout: time.Second}
		resp, err := c.Get(target)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	c, err := net.DialTimeout("tcp", target, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// signal sends sig to p's current run and waits up to wait for it to end.
func (p *proc) signal(sig os.Signal, wait time.Duration) bool {
	p.mu.Lock()
	h := p.cur
	p.mu.Unlock()
	if h == nil {
		return true
	}
	select {
	case <-h.done:
		return true
	default:
	}
	_ = h.sig(sig)
	select {
	case <-h.done:
		return true
	case <-time.After(wait):
		return false
	}
}

// kill9 kills p with SIGKILL.
func (p *proc) kill9() {
	p.mu.Lock()
	p.kill++
	p.mu.Unlock()
	p.signal(syscall.SIGKILL, 10*time.Second)
}

// stop ends p: SIGTERM, then SIGKILL after 10 s.
func (p *proc) stop() {
	if !p.signal(syscall.SIGTERM, 10*time.Second) {
		p.signal(syscall.SIGKILL, 10*time.Second)
	}
}

// rig is one sale's set of processes and services.
type rig struct {
	cfg  Config
	dir  string
	logf func(string, ...any)

	room, event, stream, id         string
	adminToken, checkoutKey, secret string
	merchantKey                     string

	redisAddr  string // what the gates dial (the proxy with real Redis)
	natsURL    string
	pgDBs      map[string]string // part → its database's URL (through the proxy)
	redisProxy *faultProxy
	pgProxy    *faultProxy

	redis, nats, inst, pay, checkout *proc
	gates, workers                   []*proc

	instURL, payURL, checkoutURL string
	gateURLs                     []string
	workerMetrics                []string

	procs []*proc
	// extraMetrics are the metrics endpoints of the processes started
	// beside the sale's (Rig.StartPart), by name.
	extraMetrics map[string]string
}

// token returns n random bytes in hex.
func token(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// freePort returns a free loopback address outside the ephemeral port
// range, where a killed part can be started again (freeport.Restartable).
func freePort() (string, error) {
	port, err := freeport.Restartable()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), nil
}

// newProc registers a child process running this binary with args.
func (r *rig) newProc(name, health string, args ...string) (*proc, error) {
	f, err := os.OpenFile(filepath.Join(r.dir, "logs", name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	p := &proc{name: name, args: args, log: f, health: health}
	p.mk = func(args []string) *cmdHandle {
		c := r.cfg.Cmd(args)
		c.Stdout, c.Stderr = f, f
		c.Env = append(envOf(c), "STAMPEDE_REDIS_URL=", "STAMPEDE_POSTGRES_URL=", "STAMPEDE_NATS_URL=")
		fmt.Fprintf(f, "=== %s start: %s\n", time.Now().UTC().Format(time.RFC3339Nano), strings.Join(args, " "))
		if err := c.Start(); err != nil {
			fmt.Fprintf(f, "start: %v\n", err)
			return nil
		}
		h := &cmdHandle{c: c, pid: c.Process.Pid, done: make(chan struct{}), sig: c.Process.Signal}
		go func() {
			err := c.Wait()
			fmt.Fprintf(f, "=== %s exit: %v\n", time.Now().UTC().Format(time.RFC3339Nano), err)
			close(h.done)
		}()
		return h
	}
	r.procs = append(r.procs, p)
	return p, nil
}

// envOf is c's environment: its own, else ours. The parts get their
// services by flag only.
func envOf(c *exec.Cmd) []string {
	if c.Env != nil {
		return c.Env
	}
	return os.Environ()
}

// setUp starts every part and creates the room, the event and the
// merchant.
func (r *rig) setUp(ctx context.Context) error {
	if err := os.MkdirAll(filepath.Join(r.dir, "logs"), 0o700); err != nil {
		return err
	}
	r.id = token(4)
	r.room, r.event, r.stream = "sale-"+r.id, "concert-"+r.id, "SALE_"+strings.ToUpper(r.id)
	r.adminToken, r.checkoutKey, r.secret = token(16), token(16), token(32)

	// Redis: an embedded server process, or a proxy in front of the
	// real one (so that its restart can be played by cutting
	// connections, without touching a shared server).
	if r.cfg.Redis == "" {
		addr, err := freePort()
		if err != nil {
			return err
		}
		r.redisAddr = addr
		if r.redis, err = r.newProc("redis", addr, "lab", "sale-redis", "--addr", addr, "--snapshot", filepath.Join(r.dir, "redis.json")); err != nil {
			return err
		}
		if err := r.redis.start(ctx); err != nil {
			return err
		}
	} else {
		u, err := url.Parse(r.cfg.Redis)
		if err != nil || u.Host == "" {
			return fmt.Errorf("sale: --redis must be a redis:// URL, got %q", r.cfg.Redis)
		}
		if r.redisProxy, err = r.startProxy(ctx, "redis-proxy", u.Host); err != nil {
			return err
		}
		r.redisAddr = r.redisProxy.addr
	}
	redisURL := "redis://" + r.redisAddr + "/0"
	if r.cfg.Redis != "" {
		u, _ := url.Parse(r.cfg.Redis)
		u.Host = r.redisAddr
		redisURL = u.String()
	}

	// NATS: an embedded server process keeping its store in the run's
	// directory, or the real one.
	if r.cfg.NATS == "" {
		addr, err := freePort()
		if err != nil {
			return err
		}
		_, port, _ := net.SplitHostPort(addr)
		if r.nats, err = r.newProc("nats", addr, "lab", "sale-nats", "--port", port, "--dir", filepath.Join(r.dir, "nats")); err != nil {
			return err
		}
		if err := r.nats.start(ctx); err != nil {
			return err
		}
		r.natsURL = "nats://" + addr
	} else {
		r.natsURL = r.cfg.NATS
	}

	// PostgreSQL: a database per part, reached through a proxy that the
	// database cut cuts.
	store := func(part string) []string {
		if r.cfg.Postgres != "" {
			return []string{"--postgres", r.pgDBs[part]}
		}
		return []string{"--sqlite", filepath.Join(r.dir, part+".db")}
	}
	if r.cfg.Postgres != "" {
		if err := r.createDatabases(ctx); err != nil {
			return err
		}
	}

	ports := func(n int) ([]string, error) {
		var out []string
		for range n {
			a, err := freePort()
			if err != nil {
				return nil, err
			}
			out = append(out, a)
		}
		return out, nil
	}
	addrs, err := ports(5 + 3 + 3)
	if err != nil {
		return err
	}
	instAddr, payAddr, checkoutAddr := addrs[0], addrs[1], addrs[2]
	r.instURL, r.payURL, r.checkoutURL = "http://"+instAddr, "http://"+payAddr, "http://"+checkoutAddr
	gateAddrs, workerAddrs := addrs[5:8], addrs[8:11]
	for _, a := range gateAddrs {
		r.gateURLs = append(r.gateURLs, "http://"+a)
	}

	// The institution.
	if r.inst, err = r.newProc("institution", r.instURL+"/healthz", "serve", "institution", "--http", instAddr, "--admin-token", r.adminToken, "--max-hung", "100000"); err != nil {
		return err
	}
	if err := r.inst.start(ctx); err != nil {
		return err
	}
	// The merchant the checkout pays as (this also creates pay's database).
	if err := r.addMerchant(ctx, store("pay")); err != nil {
		return err
	}
	// The gates with their waiting-room instances.
	for i, a := range gateAddrs {
		args := []string{"serve", "gate", "--http", a, "--redis", redisURL,
			"--secret", r.secret, "--admin-token", r.adminToken, "--checkout-key", r.checkoutKey,
			"--upstream", r.checkoutURL, "--room", r.room, "--instance", fmt.Sprintf("gate-%d", i),
			"--trusted-proxy", "127.0.0.1/32", "--join-rate", "2", "--join-burst", "10", "--join-clients", "100000",
			"--log-level", "warn"}
		if r.cfg.Adaptive {
			// At info the gate's log has every change of the outflow (a
			// rise too, not only the cuts): the timeline of the controller.
			args = append(args, "--adaptive-outflow", "--pay-metrics", r.payURL+"/metrics", "--log-level", "info")
		}
		g, err := r.newProc(fmt.Sprintf("gate-%d", i), "http://"+a+"/.well-known/jwks.json", args...)
		if err != nil {
			return err
		}
		r.gates = append(r.gates, g)
	}
	for _, g := range r.gates {
		if err := g.start(ctx); err != nil {
			return err
		}
	}
	// Pay, checking admissions at the gates.
	payArgs := append([]string{"serve", "pay", "--http", payAddr, "--institution", r.instURL, "--nats", r.natsURL,
		"--stream", r.stream, "--subject", strings.ToLower(r.stream), "--partitions", strconv.Itoa(partitions),
		"--timeout", "3s", "--require-admission", "--waitroom", strings.Join(r.gateURLs, ","),
		"--admission-room", r.room, "--checkout-key", r.checkoutKey, "--db-timeout", "2s", "--log-level", "warn",
		"--close-unconfirmed-after", r.cfg.CloseAfter.String()}, store("pay")...)
	if r.pay, err = r.newProc("pay", r.payURL+"/healthz", payArgs...); err != nil {
		return err
	}
	if err := r.pay.start(ctx); err != nil {
		return err
	}
	// The checkout.
	coArgs := append([]string{"serve", "checkout", "--http", checkoutAddr, "--pay", r.payURL, "--pay-key", r.merchantKey,
		"--admin-token", r.adminToken, "--pay-timeout", "5s", "--max-seats-per-hold", "1", "--db-timeout", "2s", "--log-level", "warn",
		"--waitroom", strings.Join(r.gateURLs, ","), "--room", r.room, "--capture", r.cfg.Capture}, store("checkout")...)
	if r.cfg.UnsafeInventory {
		coArgs = append(coArgs, "--unsafe-inventory", "--unsafe-gap", r.cfg.UnsafeGap.String())
	}
	if r.checkout, err = r.newProc("checkout", r.checkoutURL+"/healthz", coArgs...); err != nil {
		return err
	}
	if err := r.checkout.start(ctx); err != nil {
		return err
	}
	// The workers: pinned consumers share the partitions on nats-server
	// 2.11+; on an older server each worker has its own share, held by
	// leases, so that the others take a dead worker's share over.
	static, err := r.oldNATS()
	if err != nil {
		return err
	}
	for i, a := range workerAddrs {
		args := append([]string{"serve", "worker", "--http", a, "--nats", r.natsURL,
			"--stream", r.stream, "--subject", strings.ToLower(r.stream), "--partitions", strconv.Itoa(partitions),
			"--durable", "sale", "--log-level", "warn"}, store("fulfilment")...)
		if static {
			var mine []string
			for p := i; p < partitions; p += len(workerAddrs) {
				mine = append(mine, strconv.Itoa(p))
			}
			args = append(args, "--serve", strings.Join(mine, ","), "--lease", WorkerLease.String(), "--ack-wait", WorkerAckWait.String())
		}
		w, err := r.newProc(fmt.Sprintf("worker-%d", i), "http://"+a+"/healthz", args...)
		if err != nil {
			return err
		}
		r.workers = append(r.workers, w)
		r.workerMetrics = append(r.workerMetrics, "http://"+a+"/metrics")
	}
	for _, w := range r.workers {
		if err := w.start(ctx); err != nil {
			return err
		}
	}
	// The room and the event.
	room := map[string]any{"capacity": r.cfg.Capacity, "lease_seconds": r.cfg.Lease.Seconds(), "admit_interval_ms": 200,
		"max_admissions_per_minute": r.cfg.Outflow, "opens_at": nil, "paused": false, "closed": false, "closed_message": "",
		"abandon_after_seconds": 5, "arrival_seconds": 5, "retention_seconds": r.cfg.retention().Seconds(), "pow_difficulty": 0, "template": nil}
	if err := r.call(ctx, http.MethodPut, r.gateURLs[0]+"/v1/rooms/"+r.room, r.adminToken, room, nil); err != nil {
		return fmt.Errorf("sale: creating the room: %w", err)
	}
	ev := map[string]any{"seats": r.cfg.Seats, "price": 5000, "currency": "KRW"}
	if err := r.call(ctx, http.MethodPost, r.checkoutURL+"/v1/events/"+r.event, r.adminToken, ev, nil); err != nil {
		return fmt.Errorf("sale: creating the event: %w", err)
	}
	return nil
}

// oldNATS tells whether the NATS server predates pinned consumers (2.11).
func (r *rig) oldNATS() (bool, error) {
	nc, err := nats.Connect(r.natsURL, nats.Timeout(5*time.Second))
	if err != nil {
		return false, fmt.Errorf("sale: --nats: %w", err)
	}
	defer nc.Close()
	var major, minor int
	fmt.Sscanf(nc.ConnectedServerVersion(), "%d.%d", &major, &minor)
	return major < 2 || (major == 2 && minor < 11), nil
}

// addMerchant runs `pay merchant add` on pay's store and keeps the key.
func (r *rig) addMerchant(ctx context.Context, store []string) error {
	c := r.cfg.Cmd(append([]string{"pay", "merchant", "add", "sale-lab"}, store...))
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	c.Env = append(envOf(c), "STAMPEDE_POSTGRES_URL=")
	if err := c.Run(); err != nil {
		return fmt.Errorf("sale: pay merchant add: %w: %s", err, errb.String())
	}
	var m struct {
		APIKey string `json:"api_key"`
	}
	if err := json.Unmarshal(out.Bytes(), &m); err != nil || m.APIKey == "" {
		return fmt.Errorf("sale: pay merchant add printed %q", out.String())
	}
	r.merchantKey = m.APIKey
	return nil
}

// faultProxy is a TCP proxy to a real service in a process of its own
// (lab sale-proxy), so that the crowd, which can keep the lab's process
// busy, does not delay the parts' traffic through it; the faults cut it
// through its control address.
type faultProxy struct {
	addr, control string
}

// startProxy starts a proxy process, name, forwarding to target.
func (r *rig) startProxy(ctx context.Context, name, target string) (*faultProxy, error) {
	addr, err := freePort()
	if err != nil {
		return nil, err
	}
	control, err := freePort()
	if err != nil {
		return nil, err
	}
	p, err := r.newProc(name, "http://"+control+"/healthz", "lab", "sale-proxy", "--addr", addr, "--target", target, "--control", control)
	if err != nil {
		return nil, err
	}
	if err := p.start(ctx); err != nil {
		return nil, err
	}
	return &faultProxy{addr: addr, control: control}, nil
}

// cut closes the proxy's connections and refuses new ones; restore lets
// them through again.
func (p *faultProxy) cut(ctx context.Context) error     { return p.post(ctx, "/cut") }
func (p *faultProxy) restore(ctx context.Context) error { return p.post(ctx, "/restore") }

func (p *faultProxy) post(ctx context.Context, path string) error {
	req, err := http.NewRequestWithContext(context.WithoutCancel(ctx), http.MethodPost, "http://"+p.control+path, nil)
	if err != nil {
		return err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("sale: proxy %s: %w", path, err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusNoContent {
		return fmt.Errorf("sale: proxy %s: %s", path, res.Status)
	}
	return nil
}

// createDatabases creates the run's databases on the PostgreSQL server
// and the proxy the parts reach them through.
func (r *rig) createDatabases(ctx context.Context) error {
	u, err := url.Parse(r.cfg.Postgres)
	if err != nil || u.Host == "" {
		return fmt.Errorf("sale: --postgres must be a postgres:// URL, got %q", r.cfg.Postgres)
	}
	db, err := sql.Open("pgx", r.cfg.Postgres)
	if err != nil {
		return err
	}
	defer db.Close()
	if r.pgProxy, err = r.startProxy(ctx, "pg-proxy", u.Host); err != nil {
		return err
	}
	r.pgDBs = map[string]string{}
	for _, part := range []string{"pay", "checkout", "fulfilment"} {
		name := "stampede_sale_" + r.id + "_" + part
		if _, err := db.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
			return fmt.Errorf("sale: creating database %s: %w", name, err)
		}
		pu := *u
		pu.Host, pu.Path = r.pgProxy.addr, "/"+name
		r.pgDBs[part] = pu.String()
	}
	return nil
}

// dropDatabases drops the run's databases.
func (r *rig) dropDatabases() {
	if r.pgDBs == nil {
		return
	}
	db, err := sql.Open("pgx", r.cfg.Postgres)
	if err != nil {
		return
	}
	defer db.Close()
	for part := range r.pgDBs {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, _ = db.ExecContext(ctx, "DROP DATABASE IF EXISTS stampede_sale_"+r.id+"_"+part+" WITH (FORCE)")
		cancel()
	}
}

// tearDown stops every process (in reverse order), removes what the run
// left on real services, and its directory unless Keep.
func (r *rig) tearDown() {
	for i := len(r.procs) - 1; i >= 0; i-- {
		r.procs[i].stop()
		r.procs[i].log.Close()
	}
	if r.cfg.Redis != "" && r.room != "" {
		if opts, err := redis.ParseURL(r.cfg.Redis); err == nil {
			c := redis.NewClient(opts)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			c.Del(ctx, redisstore.KeysFor(r.room).All()...)
			cancel()
			c.Close()
		}
	}
	if r.cfg.NATS != "" && r.stream != "" {
		r.dropStream()
	}
	if !r.cfg.Keep {
		r.dropDatabases()
	}
}

// dropStream deletes, on a real NATS, the run's stream and what its
// workers made beside it: the parking stream and bucket, the epoch and
// the lease buckets.
func (r *rig) dropStream() {
	nc, err := nats.Connect(r.natsURL, nats.Timeout(5*time.Second))
	if err != nil {
		return
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := natskeyed.DefaultConfig()
	c.Stream, c.Durable = r.stream, "sale"
	_ = js.DeleteStream(ctx, r.stream)
	_ = js.DeleteStream(ctx, c.ParkStreamName())
	for _, b := range []string{c.ParkBucketName(), c.EpochBucketName(), c.LeaseBucketName()} {
		_ = js.DeleteKeyValue(ctx, b)
	}
}

// call sends one JSON request with a bearer token and decodes a 2xx
// answer into out.
func (r *rig) call(ctx context.Context, method, u, bearer string, body, out any) error {
	return r.callKey(ctx, method, u, bearer, "", body, out)
}

// callKey is call with an Idempotency-Key (none when key is empty).
func (r *rig) callKey(ctx context.Context, method, u, bearer, key string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := adminClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %d %s", method, u, resp.StatusCode, strings.TrimSpace(string(data)))
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}

// adminClient sends the lab's own requests (set-up, sampling).
var adminClient = &http.Client{Timeout: 5 * time.Second}

// lastLine returns the last non-empty line of the file at path, cut to 300
// bytes, or "" when it cannot be read.
func lastLine(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	last := lines[len(lines)-1]
	if len(last) > 300 {
		last = last[:300]
	}
	return last
}
