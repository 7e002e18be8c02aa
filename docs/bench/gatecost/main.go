// Command gatecost measures, by hand and side by side, the CPU a proxied
// request costs nginx proxy_pass and several `stampede serve gate`
// processes in front of the same upstream, and the Redis commands the
// gates cost, with many admitted visitors at a steady rate each (an open
// model). It is run by docs/bench/gate-cost.sh, which starts the
// processes; it joins and admits the visitors through the first gate,
// sends the same load to nginx and then to the gates, reads each
// process's CPU from /proc/PID/stat and Redis's INFO commandstats, and at
// the end releases one visitor through the first gate (its upstream
// answers "Stampede-Release: done" on /done) and measures how long the
// other gates still let that visitor's requests through. It prints one
// JSON object. With -serve-proxy ADDR -upstream URL it is instead a bare
// httputil.ReverseProxy (the gate's transport settings, nothing else), the
// Go baseline measured beside nginx (-goproxy, -goproxy-pids).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

func main() {
	var (
		gatesFlag  = flag.String("gates", "", "the gates' base URLs, comma-separated")
		nginxURL   = flag.String("nginx", "", "nginx proxy_pass's base URL")
		gatePIDs   = flag.String("gate-pids", "", "the gates' process ids, comma-separated")
		nginxPIDs  = flag.String("nginx-pids", "", "nginx's process ids (master and workers), comma-separated")
		redisAddr  = flag.String("redis", "127.0.0.1:6379", "the gates' Redis, for INFO commandstats")
		room       = flag.String("room", "cost", "the room")
		admin      = flag.String("admin-token", "", "the gates' admin token")
		visitors   = flag.Int("visitors", 1000, "admitted visitors")
		rate       = flag.Float64("rate", 1, "requests a second per visitor")
		dur        = flag.Duration("duration", 20*time.Second, "each phase's length")
		idle       = flag.Duration("idle", 10*time.Second, "the idle room's commands are counted over this, before the gates' phase")
		cookieName = flag.String("cookie", "stampede_admission", "the admission cookie's name")
		serveProxy = flag.String("serve-proxy", "", "serve a bare reverse proxy on this address to -upstream instead")
		upstream   = flag.String("upstream", "", "with -serve-proxy: the upstream's URL")
		goproxyURL = flag.String("goproxy", "", "the bare Go proxy's base URL (optional)")
		goPIDs     = flag.String("goproxy-pids", "", "the bare Go proxy's process id")
	)
	flag.Parse()
	if *serveProxy != "" {
		u, err := url.Parse(*upstream)
		if err != nil || u.Host == "" {
			log.Fatalf("-upstream: %q %v", *upstream, err)
		}
		rp := httputil.NewSingleHostReverseProxy(u)
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConns, tr.MaxIdleConnsPerHost = 1024, 1024
		rp.Transport = tr
		log.Fatal(http.ListenAndServe(*serveProxy, rp))
	}
	gates := strings.Split(*gatesFlag, ",")
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConns: 4096, MaxIdleConnsPerHost: 2048},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	rdb := redis.NewClient(&redis.Options{Addr: *redisAddr})
	ctx := context.Background()

	// The room, and the visitors admitted.
	cfg := fmt.Sprintf(`{"capacity":%d,"lease_seconds":300,"admit_interval_ms":200,"max_admissions_per_minute":0,"opens_at":null,"paused":false,"closed":false,"closed_message":"","abandon_after_seconds":60,"arrival_seconds":60,"retention_seconds":3600,"pow_difficulty":0,"template":null}`, *visitors+1)
	req, _ := http.NewRequest(http.MethodPut, gates[0]+"/v1/rooms/"+*room, strings.NewReader(cfg))
	req.Header.Set("Authorization", "Bearer "+*admin)
	req.Header.Set("Content-Type", "application/json")
	if res, err := hc.Do(req); err != nil || res.StatusCode/100 != 2 {
		log.Fatalf("configuring the room: %v %v", res, err)
	}
	cookies := make([]atomic.Pointer[string], *visitors)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for i := range *visitors {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			var t struct {
				UserID         string `json:"user_id"`
				TicketToken    string `json:"ticket_token"`
				AdmissionToken string `json:"admission_token"`
			}
			if err := doJSON(hc, http.MethodPost, gates[0]+"/v1/rooms/"+*room+"/tickets", "", `{}`, &t); err != nil {
				log.Fatalf("join: %v", err)
			}
			tok := t.TicketToken
			for t.AdmissionToken == "" {
				time.Sleep(200 * time.Millisecond)
				if err := doJSON(hc, http.MethodGet, gates[0]+"/v1/rooms/"+*room+"/tickets/"+t.UserID, tok, "", &t); err != nil {
					log.Fatalf("poll: %v", err)
				}
			}
			cookies[i].Store(&t.AdmissionToken)
		})
	}
	wg.Wait()
	log.Printf("%d visitors admitted", *visitors)

	one := func(url string, v int, withCookie bool) int {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		if withCookie {
			req.AddCookie(&http.Cookie{Name: *cookieName, Value: *cookies[v].Load()})
		}
		res, err := hc.Do(req)
		if err != nil {
			return 0
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		for _, c := range res.Cookies() {
			if c.Name == *cookieName && c.Value != "" && c.MaxAge >= 0 {
				cookies[v].Store(&c.Value)
			}
		}
		return res.StatusCode
	}
	// phase sends the load for *dur (request k of visitor v to target(k, v))
	// and returns the answers by status and the CPU of pids meanwhile.
	phase := func(pids string, target func(k, v int) string, withCookie bool) (map[int]int, time.Duration, int) {
		every := time.Duration(float64(time.Second) / (float64(*visitors) * *rate))
		n := int(*dur / every)
		var (
			mu    sync.Mutex
			codes = map[int]int{}
			pwg   sync.WaitGroup
			jobs  = make(chan int, 1024)
		)
		for range 512 {
			pwg.Go(func() {
				for i := range jobs {
					v, k := i%*visitors, i / *visitors
					c := one(target(k, v), v, withCookie)
					mu.Lock()
					codes[c]++
					mu.Unlock()
				}
			})
		}
		c0 := ticks(pids)
		start := time.Now()
		for i := range n {
			if d := time.Until(start.Add(time.Duration(i) * every)); d > 0 {
				time.Sleep(d)
			}
			jobs <- i
		}
		close(jobs)
		pwg.Wait()
		return codes, ticks(pids) - c0, n
	}
	out := map[string]any{"visitors": *visitors, "rate_per_visitor": *rate, "duration": dur.String(), "gates": len(gates)}
	load := func() string { b, _ := os.ReadFile("/proc/loadavg"); return strings.Fields(string(b))[0] }

	// Each path warmed up (connections) before its phase; the gates'
	// first checks of each visitor (one store call each) then too, so
	// that their phase is steady: the idle window is shorter than the
	// 30 s the gates keep an idle visitor's answer fresh.
	phaseDur := *dur
	warm := func(pids string, target func(k, v int) string, withCookie bool) {
		*dur = 3 * time.Second
		phase(pids, target, withCookie)
		*dur = phaseDur
	}
	out["load_before"] = load()
	toNginx := func(k, v int) string { return *nginxURL + "/cart" }
	warm(*nginxPIDs, toNginx, false)
	codes, cpu, n := phase(*nginxPIDs, toNginx, false)
	out["nginx"] = map[string]any{"requests": n, "codes": codes, "cpu_us_per_req": perReq(cpu, codes[200])}
	if *goproxyURL != "" {
		toGo := func(k, v int) string { return *goproxyURL + "/cart" }
		warm(*goPIDs, toGo, false)
		codes, cpu, n := phase(*goPIDs, toGo, false)
		out["go_proxy"] = map[string]any{"requests": n, "codes": codes, "cpu_us_per_req": perReq(cpu, codes[200])}
	}
	warm(*gatePIDs, func(k, v int) string { return gates[(k+v)%len(gates)] + "/cart" }, true)

	rdb.ConfigResetStat(ctx)
	idle0 := ticks(*gatePIDs)
	time.Sleep(*idle)
	idleCPU := ticks(*gatePIDs) - idle0
	idleCmds := commands(ctx, rdb)
	rdb.ConfigResetStat(ctx)
	start := time.Now()
	codes, cpu, n = phase(*gatePIDs, func(k, v int) string { return gates[(k+v)%len(gates)] + "/cart" }, true)
	secs := time.Since(start).Seconds()
	cmds := commands(ctx, rdb)
	if s, err := rdb.Info(ctx, "commandstats").Result(); err == nil {
		var calls []string
		for line := range strings.SplitSeq(s, "\n") {
			if name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls="); ok {
				c, _, _ := strings.Cut(rest, ",")
				calls = append(calls, strings.TrimPrefix(name, "cmdstat_")+"="+c)
			}
		}
		out["redis_calls"] = strings.Join(calls, " ")
	}
	gateCPU := perReq(cpu, codes[200])
	less := float64(cmds) - float64(idleCmds)/idle.Seconds()*secs
	lessIdle := float64(cpu-time.Duration(float64(idleCPU)/idle.Seconds()*secs)) / 1e3 / float64(max(1, codes[200]))
	out["gates_run"] = map[string]any{"requests": n, "codes": codes, "cpu_us_per_req": gateCPU,
		"idle_cpu_ms_per_s": float64(idleCPU.Milliseconds()) / idle.Seconds(), "cpu_us_per_req_less_idle": lessIdle,
		"redis_cmds": cmds, "redis_cmds_per_req": float64(cmds) / float64(max(1, codes[200])),
		"redis_idle_cmds_per_s":        float64(idleCmds) / idle.Seconds(),
		"redis_cmds_per_req_less_idle": max(0, less) / float64(max(1, codes[200]))}
	ncpu := out["nginx"].(map[string]any)["cpu_us_per_req"].(float64)
	out["x_nginx"], out["x_nginx_less_idle"] = gateCPU/ncpu, lessIdle/ncpu
	if gp, ok := out["go_proxy"].(map[string]any); ok {
		out["x_go_proxy"] = gateCPU / gp["cpu_us_per_req"].(float64)
	}
	out["load_after"] = load()

	// A release through the first gate; how long the others let it through.
	v := 0
	for g := range gates {
		if c := one(gates[g]+"/cart", v, true); c != 200 {
			log.Fatalf("before the release, gate %d: %d", g, c)
		}
	}
	old := *cookies[v].Load()
	if c := one(gates[0]+"/done", v, true); c != 200 {
		log.Fatalf("release: %d", c)
	}
	cookies[v].Store(&old) // a copy of the cookie, replayed
	released := time.Now()
	last := map[int]time.Duration{}
	for time.Since(released) < 3*time.Second {
		for g := range gates {
			if one(gates[g]+"/cart", v, true) == 200 {
				last[g] = time.Since(released)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	rel := map[string]string{}
	for g := range gates {
		rel[strconv.Itoa(g)] = last[g].Round(time.Millisecond).String()
	}
	out["release_last_let_through_after"] = rel
	b, _ := json.Marshal(out)
	fmt.Println(string(b))
}

func perReq(cpu time.Duration, n int) float64 {
	return float64(cpu.Microseconds()) / float64(max(1, n))
}

// ticks is the user plus system CPU of the processes pids (/proc/PID/stat,
// in clock ticks of 10 ms).
func ticks(pids string) time.Duration {
	var t time.Duration
	for p := range strings.SplitSeq(pids, ",") {
		b, err := os.ReadFile("/proc/" + strings.TrimSpace(p) + "/stat")
		if err != nil {
			log.Fatalf("reading %s's CPU: %v", p, err)
		}
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
		u, _ := strconv.ParseInt(f[11], 10, 64)
		s, _ := strconv.ParseInt(f[12], 10, 64)
		t += time.Duration(u+s) * 10 * time.Millisecond
	}
	return t
}

// commands sums INFO commandstats' calls, less INFO's and CONFIG's.
func commands(ctx context.Context, rdb *redis.Client) int64 {
	s, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		log.Fatalf("INFO commandstats: %v", err)
	}
	var n int64
	for line := range strings.SplitSeq(s, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok || name == "cmdstat_info" || strings.HasPrefix(name, "cmdstat_config") {
			continue
		}
		calls, _, _ := strings.Cut(rest, ",")
		v, _ := strconv.ParseInt(calls, 10, 64)
		n += v
	}
	return n
}

// doJSON sends a request (with a bearer token and a JSON body when not
// empty) and decodes a 2xx answer into out.
func doJSON(hc *http.Client, method, url, bearer, body string, out any) error {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, url, rd)
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %d %s", method, url, res.StatusCode, b)
	}
	return json.Unmarshal(b, out)
}
