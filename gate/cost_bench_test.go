package gate_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/stampede-lab/stampede/gate"
	"github.com/stampede-lab/stampede/internal/testenv"
	"github.com/stampede-lab/stampede/waitroom"
	"github.com/stampede-lab/stampede/waitroom/api"
	"github.com/stampede-lab/stampede/waitroom/redisstore"
)

// The cost of a proxied request (BenchmarkGateProxyCost): costVisitors
// admitted visitors, each sending costRate requests a second (paced, an
// open model: the load does not slow down when the proxy does), spread
// over costGates gates of one room on one store, to a trivial upstream.
const (
	costVisitors = 1000
	costRate     = 1.0
	costGates    = 3
)

// BenchmarkGateProxyCost measures the CPU a proxied request costs the gate
// against a bare httputil.ReverseProxy to the same upstream (a stand-in
// for nginx proxy_pass), and the store commands it costs, in one run:
// costVisitors admitted visitors at costRate requests a second each,
// through costGates gates on one store, b.N requests per phase. The
// process's CPU (getrusage: the load client, the upstream and the proxy
// together) is read over three phases with the same load: straight to the
// upstream, through the bare proxy, through the gates. Reported:
//
//   - gate-us/req and proxy-us/req: CPU per request less the direct
//     phase's (what the gate, the bare proxy add);
//   - x-proxy: gate-us/req ÷ proxy-us/req;
//   - store-cmds/req: the store's commands during the gate phase (INFO
//     commandstats, or miniredis's count, scripts' own commands included)
//     ÷ requests, and gate-cmds/req the same less the idle room's
//     commands (its admission passes, measured for 2 s before with the
//     visitors admitted and no traffic);
//   - touches/req: single-admission store checks ÷ requests.
//
// "embedded" runs on miniredis (in this process: its CPU is the gate's);
// "redis" on STAMPEDE_REDIS_URL, whose INFO commandstats counts every
// client's commands: point it at a Redis of its own. Run it with a fixed
// count, e.g. -bench GateProxyCost -benchtime 5000x.
func BenchmarkGateProxyCost(b *testing.B) {
	b.Run("embedded", func(b *testing.B) {
		m := miniredis.RunT(b)
		client := redis.NewClient(&redis.Options{Addr: m.Addr()})
		b.Cleanup(func() { client.Close() })
		benchProxyCost(b, client, func() int64 { return int64(m.CommandCount()) })
	})
	b.Run("redis", func(b *testing.B) {
		if os.Getenv(testenv.RedisURL) == "" {
			b.Skip("STAMPEDE_REDIS_URL is not set: no real Redis to count commands on")
		}
		opts, err := redis.ParseURL(os.Getenv(testenv.RedisURL))
		if err != nil {
			b.Fatalf("STAMPEDE_REDIS_URL: %v", err)
		}
		client := redis.NewClient(opts)
		b.Cleanup(func() { client.Close() })
		benchProxyCost(b, client, func() int64 { return commandstats(b, client) })
	})
}

// commandstats is the sum of INFO commandstats' calls, less INFO's own.
func commandstats(b *testing.B, client *redis.Client) int64 {
	s, err := client.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatalf("INFO commandstats: %v", err)
	}
	var n int64
	for line := range strings.SplitSeq(s, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok || name == "cmdstat_info" {
			continue
		}
		calls, _, _ := strings.Cut(rest, ",")
		v, _ := strconv.ParseInt(calls, 10, 64)
		n += v
	}
	return n
}

// cpuNow is the process's user plus system CPU time.
func cpuNow() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// costRig is the benchmark's world: the upstream, a bare proxy in front
// of it, and costGates gates, each on its own waiting-room instance.
type costRig struct {
	upstream, proxy string
	gates           []string
	cookieName      string
	cookies         []atomic.Pointer[string]
	touches         func() int64
	client          *http.Client
}

func benchProxyCost(b *testing.B, client redis.UniversalClient, commands func() int64) {
	ctx := context.Background()
	store := &countingStore{Store: redisstore.New(client)}
	room := "cost-" + randomName()
	b.Cleanup(func() { store.DeleteRoom(context.Background(), room) })
	rig := &costRig{touches: store.touches.Load}

	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") }))
	b.Cleanup(up.Close)
	upURL, _ := url.Parse(up.URL)
	rig.upstream = up.URL
	bare := httputil.NewSingleHostReverseProxy(upURL)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = 1024, 1024
	bare.Transport = tr
	ps := httptest.NewServer(bare)
	b.Cleanup(ps.Close)
	rig.proxy = ps.URL

	var srvs []*running
	for i := range costGates {
		opts := api.DefaultConfig()
		opts.Instance = fmt.Sprintf("cost-%d-%s", i, randomName())
		opts.Secret, opts.AdminToken, opts.CheckoutKey = testSecret, adminToken, checkoutKey
		opts.Logger = slog.New(slog.DiscardHandler)
		srv, err := startServer(b, ctx, store, opts)
		if err != nil {
			b.Fatalf("NewServer: %v", err)
		}
		srvs = append(srvs, srv)
		gcfg := gate.DefaultConfig()
		gcfg.Room, gcfg.Upstream, gcfg.VisitorRate = room, upURL, 0
		gcfg.Logger = slog.New(slog.DiscardHandler)
		rig.cookieName = gcfg.CookieName
		g, err := gate.New(withWaitroom(gcfg, srv))
		if err != nil {
			b.Fatalf("gate.New: %v", err)
		}
		gs := httptest.NewServer(g)
		b.Cleanup(gs.Close)
		rig.gates = append(rig.gates, gs.URL)
	}
	svc := srvs[0].Service()
	rc := waitroom.RoomConfig{Capacity: costVisitors, Lease: 10 * time.Minute, AdmitInterval: 20 * time.Millisecond,
		Retention: waitroom.DefaultRetention}
	if err := svc.Configure(ctx, room, rc); err != nil {
		b.Fatalf("Configure: %v", err)
	}
	users := make([]string, costVisitors)
	for i := range users {
		users[i] = fmt.Sprintf("visitor-%d", i)
		if _, err := svc.Join(ctx, room, users[i]); err != nil {
			b.Fatalf("Join: %v", err)
		}
	}
	rig.cookies = make([]atomic.Pointer[string], costVisitors)
	deadline := time.Now().Add(time.Minute)
	for i, u := range users {
		for {
			t, err := svc.Ticket(ctx, room, u)
			if err != nil {
				b.Fatalf("Ticket: %v", err)
			}
			if t.State == waitroom.StateAdmitted {
				tok, err := svc.SignAdmission(ctx, srvs[0].Admissions(), t, time.Now())
				if err != nil || tok == "" {
					b.Fatalf("SignAdmission: %q %v", tok, err)
				}
				rig.cookies[i].Store(&tok)
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("%s not admitted within a minute: %s", u, t.State)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// Admitted: the room's own passes back to a production pace.
	rc.AdmitInterval = time.Second
	if err := svc.Configure(ctx, room, rc); err != nil {
		b.Fatalf("Configure: %v", err)
	}
	rig.client = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConns: 4096, MaxIdleConnsPerHost: 1024,
		IdleConnTimeout: time.Minute}, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	// Warm every path: connections, the gates' first checks of each visitor.
	rig.load(b, "gate", 2*costVisitors*costGates)
	rig.load(b, "proxy", costVisitors)
	rig.load(b, "direct", costVisitors)
	time.Sleep(time.Second)

	b.Run(fmt.Sprintf("visitors=%d/rate=%g/gates=%d", costVisitors, costRate, costGates), func(b *testing.B) {
		c0 := commands()
		time.Sleep(2 * time.Second)
		idlePerSec := float64(commands()-c0) / 2
		b.ResetTimer()
		direct := rig.load(b, "direct", b.N)
		proxy := rig.load(b, "proxy", b.N)
		c0, t0 := commands(), rig.touches()
		start := time.Now()
		viaGate := rig.load(b, "gate", b.N)
		secs := time.Since(start).Seconds()
		cmds, touches := float64(commands()-c0), float64(rig.touches()-t0)
		b.StopTimer()
		perReq := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(b.N) }
		gateUS, proxyUS := perReq(viaGate-direct), perReq(proxy-direct)
		b.ReportMetric(perReq(direct), "direct-us/req")
		b.ReportMetric(proxyUS, "proxy-us/req")
		b.ReportMetric(gateUS, "gate-us/req")
		b.ReportMetric(gateUS/proxyUS, "x-proxy")
		b.ReportMetric(cmds/float64(b.N), "store-cmds/req")
		b.ReportMetric(max(0, cmds-idlePerSec*secs)/float64(b.N), "gate-cmds/req")
		b.ReportMetric(touches/float64(b.N), "touches/req")
	})
}

// load sends n requests at costVisitors × costRate a second, visitor by
// visitor in turn, to target ("direct", "proxy" or "gate": the gates in
// turn, with the visitor's cookie, which follows the gate's Set-Cookie
// as a browser's would), and returns the process's CPU meanwhile. Any
// answer but 200 fails the benchmark.
func (rig *costRig) load(b *testing.B, target string, n int) time.Duration {
	const workers = 256
	jobs := make(chan int, workers)
	var (
		wg     sync.WaitGroup
		failed atomic.Pointer[string]
	)
	for range workers {
		wg.Go(func() {
			for i := range jobs {
				if failed.Load() != nil {
					continue
				}
				if err := rig.one(target, i); err != nil {
					s := err.Error()
					failed.CompareAndSwap(nil, &s)
				}
			}
		})
	}
	every := time.Duration(float64(time.Second) / (costVisitors * costRate))
	c0 := cpuNow()
	start := time.Now()
	for i := range n {
		if d := time.Until(start.Add(time.Duration(i) * every)); d > 0 {
			time.Sleep(d)
		}
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	used := cpuNow() - c0
	if f := failed.Load(); f != nil {
		b.Fatalf("%s: %s", target, *f)
	}
	return used
}

// one sends request i of a phase.
func (rig *costRig) one(target string, i int) error {
	v := i % costVisitors
	base := rig.upstream
	switch target {
	case "proxy":
		base = rig.proxy
	case "gate":
		base = rig.gates[(i/costVisitors+v)%len(rig.gates)]
	}
	req, _ := http.NewRequest(http.MethodGet, base+"/cart", nil)
	if target == "gate" {
		req.AddCookie(&http.Cookie{Name: rig.cookieName, Value: *rig.cookies[v].Load()})
	}
	resp, err := rig.client.Do(req)
	if err != nil {
		return err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("visitor %d: status %d: %.300s", v, resp.StatusCode, body)
	}
	for _, c := range resp.Cookies() {
		if c.Name == rig.cookieName && c.Value != "" {
			rig.cookies[v].Store(&c.Value)
		}
	}
	return nil
}
