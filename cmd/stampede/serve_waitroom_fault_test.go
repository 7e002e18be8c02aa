//go:build unix

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-lab/stampede/internal/httpapi/apitest"
	"github.com/stampede-lab/stampede/waitroom/api"
	"github.com/stampede-lab/stampede/waitroom/redisstore"
)

// Black-box fault tests of `stampede serve waitroom`: each instance is the
// real command in a child process (this test binary run again), talking
// to a real redis-server that the test starts, freezes with SIGSTOP and
// thaws with SIGCONT. Identifiers start with "wr" so that they cannot
// clash with the other tests of the package.

const (
	wrAdminToken = "wr-fault-admin-token-0123456789"
	wrSecret     = "wr-fault-secret-0123456789abcdef0123456789"
)

// wrRedis is a redis-server process of the test's own.
type wrRedis struct {
	addr string
	proc *os.Process
}

// wrStartRedis starts redis-server on a free port, without persistence.
// Without redis-server the test skips, except in CI (CI=true): there it
// fails.
func wrStartRedis(t *testing.T) *wrRedis {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		bin, err = exec.LookPath("/usr/bin/redis-server")
	}
	if err != nil {
		msg := "no redis-server found (install Debian's redis-server; .ci/run does): this test freezes a Redis of its own with SIGSTOP"
		if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
			t.Fatalf("CI=true: %s", msg)
		}
		t.Skip(msg)
	}
	addr := freeAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--daemonize", "no", "--protected-mode", "no", "--loglevel", "warning", "--dir", t.TempDir())
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_, _ = cmd.Process.Wait()
	})
	client := redis.NewClient(&redis.Options{Addr: addr})
	defer client.Close()
	deadline := time.Now().Add(10 * time.Second)
	for client.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on %s did not answer within 10s", addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return &wrRedis{addr: addr, proc: cmd.Process}
}

// wrInstance is one `stampede serve waitroom` child process.
type wrInstance struct {
	url string
	log string // its stderr
}

// wrStart runs `stampede serve waitroom` with args in a child process and
// waits until it answers /healthz.
func wrStart(t *testing.T, name string, args ...string) *wrInstance {
	t.Helper()
	// An empty STAMPEDE_REDIS_URL: the embedded Redis unless --redis is
	// among args, never a Redis of the environment.
	c := startChild(t, name, "waitroom", "/healthz", []string{envRedis + "="}, append([]string{"--instance", name, "--allow-unsigned-users",
		"--admin-token", wrAdminToken, "--secret", wrSecret, "--join-rate", "0"}, args...)...)
	return &wrInstance{url: c.url, log: c.log}
}

// wrAnswer is one HTTP answer.
type wrAnswer struct {
	status int
	header http.Header
	raw    []byte
	json   map[string]any
	took   time.Duration
}

func (a wrAnswer) str(k string) string { s, _ := a.json[k].(string); return s }

// wrDo sends one request with hc; a transport error fails the test.
func wrDo(t *testing.T, hc *http.Client, method, url, body, auth string) wrAnswer {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if auth != "" {
		req.Header.Set("Authorization", "Bearer "+auth)
	}
	start := time.Now()
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: no answer after %s: %v", method, url, time.Since(start).Round(time.Millisecond), err)
	}
	defer resp.Body.Close()
	a := wrAnswer{status: resp.StatusCode, header: resp.Header}
	a.raw, err = io.ReadAll(resp.Body)
	a.took = time.Since(start)
	if err != nil {
		t.Fatalf("%s %s: reading the answer: %v", method, url, err)
	}
	if ct := resp.Header.Get("Content-Type"); strings.Contains(ct, "json") {
		_ = json.Unmarshal(a.raw, &a.json)
	}
	return a
}

// wrMust sends a request that must answer status.
func wrMust(t *testing.T, hc *http.Client, status int, method, url, body, auth string) wrAnswer {
	t.Helper()
	a := wrDo(t, hc, method, url, body, auth)
	if a.status != status {
		t.Fatalf("%s %s = %d, want %d\n%s", method, url, a.status, status, a.raw)
	}
	return a
}

// wrWaitFor polls cond every 20 ms until it holds, failing after limit.
func wrWaitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", limit, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// wrMetric returns the value of the sample named exactly series (name and
// labels as exposed) in a /metrics body, or -1.
func wrMetric(body []byte, series string) float64 {
	for line := range strings.SplitSeq(string(body), "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err == nil {
				return v
			}
		}
	}
	return -1
}

// TestWaitroomRedisFrozen freezes Redis with SIGSTOP under three
// instances: every API call answers 503 problem+json with Retry-After
// within --redis-timeout + 1 s, /readyz fails, /healthz stays ok and the
// admission passes fail instead of hanging. After SIGCONT every instance
// recovers by itself: joins succeed, /readyz is ready, admission resumes,
// and an observer never sees the room over capacity.
func TestWaitroomRedisFrozen(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server and three service processes")
	}
	rs := wrStartRedis(t)
	const (
		redisTimeout = 500 * time.Millisecond
		capacity     = 3
		nUsers       = 9
	)
	bound := redisTimeout + time.Second // every answer within the deadline + 1 s
	var insts []*wrInstance
	for i := range 3 {
		insts = append(insts, wrStart(t, fmt.Sprintf("wr-frozen-%d", i),
			"--redis", "redis://"+rs.addr+"/0", "--redis-timeout", redisTimeout.String()))
	}
	v := apitest.New(t, api.OpenAPI())
	tr := &http.Transport{MaxIdleConnsPerHost: 16}
	t.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: v.Transport(t, tr), Timeout: 10 * time.Second}

	room := "wr-frozen"
	path := "/v1/rooms/" + room
	cfg := fmt.Sprintf(`{"capacity":%d,"lease_seconds":60,"admit_interval_ms":50,"max_admissions_per_minute":0,`+
		`"opens_at":null,"paused":false,"closed":false,"closed_message":"","abandon_after_seconds":0,`+
		`"arrival_seconds":0,"retention_seconds":86400,"pow_difficulty":0,"template":null}`, capacity)
	wrMust(t, hc, http.StatusOK, "PUT", insts[0].url+path, cfg, wrAdminToken)
	// An observer counts the room on Redis every few milliseconds, with a
	// client of its own that gives up quickly while Redis is frozen.
	var maxActive, samples, obsErrs atomic.Int64
	var lastObsErr atomic.Value
	obsCtx, stopObs := context.WithCancel(context.Background())
	obsDone := make(chan struct{})
	go func() {
		defer close(obsDone)
		c := redis.NewClient(&redis.Options{Addr: rs.addr, ContextTimeoutEnabled: true, ReadTimeout: 200 * time.Millisecond,
			WriteTimeout: 200 * time.Millisecond, DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
		defer c.Close()
		key := redisstore.KeysFor(room).Active
		for obsCtx.Err() == nil {
			ctx, cancel := context.WithTimeout(obsCtx, 200*time.Millisecond)
			n, err := c.ZCard(ctx, key).Result()
			cancel()
			if err != nil {
				obsErrs.Add(1)
				lastObsErr.Store(err.Error())
			}
			if err == nil {
				samples.Add(1)
				for cur := maxActive.Load(); n > cur && !maxActive.CompareAndSwap(cur, n); cur = maxActive.Load() {
				}
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	defer func() { stopObs(); <-obsDone }()
	tokens := map[string]string{}
	for i := range nUsers {
		u := fmt.Sprintf("u%d", i)
		a := wrMust(t, hc, http.StatusCreated, "POST", insts[i%3].url+path+"/tickets", `{"user_id":"`+u+`"}`, "")
		tokens[u] = a.str("ticket_token")
	}
	// The admin view of the room: the public one has no totals.
	roomStats := func(in *wrInstance) wrAnswer {
		return wrMust(t, hc, http.StatusOK, "GET", in.url+path, "", wrAdminToken)
	}
	wrWaitFor(t, 10*time.Second, "the first users to be admitted", func() bool { return roomStats(insts[1]).json["active"] == float64(capacity) })
	// Every instance runs an admitter for the room once it has found it
	// (its room gauges then appear).
	for k, in := range insts {
		wrWaitFor(t, 10*time.Second, fmt.Sprintf("instance %d to admit for the room", k), func() bool {
			m := wrMust(t, hc, http.StatusOK, "GET", in.url+"/metrics", "", wrAdminToken)
			return wrMetric(m.raw, `stampede_waitroom_room_capacity{room="`+room+`"}`) == capacity
		})
	}

	// --- Redis freezes. ---
	if err := rs.proc.Signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP redis-server: %v", err)
	}
	frozen := time.Now()
	check503 := func(what string, a wrAnswer) {
		t.Helper()
		if a.status != http.StatusServiceUnavailable || a.str("code") != "unavailable" {
			t.Errorf("%s with Redis frozen = %d %s, want 503 unavailable", what, a.status, a.raw)
		}
		if ct := a.header.Get("Content-Type"); ct != "application/problem+json" {
			t.Errorf("%s with Redis frozen: Content-Type %q, want application/problem+json", what, ct)
		}
		if ra, err := strconv.Atoi(a.header.Get("Retry-After")); err != nil || ra < 1 {
			t.Errorf("%s with Redis frozen: Retry-After %q, want whole seconds", what, a.header.Get("Retry-After"))
		}
		if a.took > bound {
			t.Errorf("%s with Redis frozen took %s, want at most %s (--redis-timeout + 1s)", what, a.took.Round(time.Millisecond), bound)
		}
	}
	var worst atomic.Int64
	// Two rounds: the first meets the pooled connections, the second the
	// new ones, whose dials a frozen Redis still accepts (the kernel
	// does) but whose handshakes it never answers.
	for round := range 2 {
		var wg sync.WaitGroup
		for k, in := range insts {
			probes := []struct{ what, method, url, body, auth string }{
				{"POST join", "POST", in.url + path + "/tickets", fmt.Sprintf(`{"user_id":"frozen-%d-%d"}`, round, k), ""},
				{"GET ticket", "GET", in.url + path + "/tickets/u0", "", tokens["u0"]},
				{"DELETE ticket", "DELETE", in.url + path + "/tickets/u8", "", tokens["u8"]},
				{"GET room", "GET", in.url + path, "", ""},
				{"PUT room", "PUT", in.url + path, cfg, wrAdminToken},
			}
			for _, p := range probes {
				wg.Go(func() {
					a := wrDo(t, hc, p.method, p.url, p.body, p.auth)
					for cur := worst.Load(); int64(a.took) > cur && !worst.CompareAndSwap(cur, int64(a.took)); cur = worst.Load() {
					}
					check503(fmt.Sprintf("round %d, instance %d: %s", round, k, p.what), a)
				})
			}
			wg.Go(func() {
				a := wrDo(t, hc, "GET", in.url+"/readyz", "", "")
				if a.status != http.StatusServiceUnavailable || !bytes.Contains(a.raw, []byte(`"redis"`)) {
					t.Errorf("instance %d: /readyz with Redis frozen = %d %s, want 503 naming redis", k, a.status, a.raw)
				}
				if a.took > 2*time.Second {
					t.Errorf("instance %d: /readyz took %s, want at most 2s (1s check + 1s)", k, a.took)
				}
			})
			wg.Go(func() {
				a := wrDo(t, hc, "GET", in.url+"/healthz", "", "")
				if a.status != http.StatusOK || a.took > time.Second {
					t.Errorf("instance %d: /healthz with Redis frozen = %d after %s, want 200 at once", k, a.status, a.took)
				}
			})
		}
		wg.Wait()
		time.Sleep(300 * time.Millisecond)
	}
	// The admitters' passes end with an error instead of hanging: each
	// instance counts failed passes, and its scrape still answers.
	for k, in := range insts {
		series := `stampede_waitroom_admission_pass_errors_total{room="` + room + `"}`
		wrWaitFor(t, 5*time.Second, fmt.Sprintf("instance %d to count a failed admission pass", k), func() bool {
			m := wrMust(t, hc, http.StatusOK, "GET", in.url+"/metrics", "", wrAdminToken)
			return wrMetric(m.raw, series) > 0 && wrMetric(m.raw, "stampede_waitroom_store_up") == 0
		})
	}
	t.Logf("Redis frozen for %s; slowest API answer %s (bound %s)", time.Since(frozen).Round(time.Millisecond),
		time.Duration(worst.Load()).Round(time.Millisecond), bound)

	// --- Redis thaws. ---
	if err := rs.proc.Signal(syscall.SIGCONT); err != nil {
		t.Fatalf("SIGCONT redis-server: %v", err)
	}
	thawed := time.Now()
	for k, in := range insts {
		wrWaitFor(t, 10*time.Second, fmt.Sprintf("instance %d to be ready again", k), func() bool {
			return wrDo(t, hc, "GET", in.url+"/readyz", "", "").status == http.StatusOK
		})
		u := fmt.Sprintf("after-%d", k)
		wrWaitFor(t, 10*time.Second, fmt.Sprintf("a join through instance %d", k), func() bool {
			a := wrDo(t, hc, "POST", in.url+path+"/tickets", `{"user_id":"`+u+`"}`, "")
			if a.status != http.StatusCreated && a.status != http.StatusServiceUnavailable {
				t.Fatalf("join after the thaw = %d %s, want 201 or (while recovering) 503", a.status, a.raw)
			}
			tokens[u] = a.str("ticket_token")
			return a.status == http.StatusCreated
		})
	}
	t.Logf("every instance ready and joining %s after SIGCONT", time.Since(thawed).Round(time.Millisecond))

	// Admission resumes by itself: release whoever is admitted until
	// u1..u7 have all been through the room (u0 stays in, u8 may have left
	// by a DELETE that Redis ran after the thaw).
	released := map[string]bool{}
	wrWaitFor(t, 20*time.Second, "u1..u7 to be admitted and released", func() bool {
		for i := 1; i <= 7; i++ {
			u := fmt.Sprintf("u%d", i)
			if released[u] {
				continue
			}
			in := insts[i%3]
			a := wrMust(t, hc, http.StatusOK, "GET", in.url+path+"/tickets/"+u, "", tokens[u])
			switch a.str("state") {
			case "admitted":
				if r := wrMust(t, hc, http.StatusOK, "DELETE", in.url+path+"/tickets/"+u, "", tokens[u]); r.str("state") != "released" {
					t.Fatalf("release %s: %s", u, r.raw)
				}
				released[u] = true
			case "waiting":
			default:
				t.Fatalf("%s is %s, want waiting or admitted", u, a.raw)
			}
		}
		return len(released) == 7
	})
	st := roomStats(insts[2])
	if st.json["active"].(float64) > capacity {
		t.Errorf("room after the run: %s, over capacity %d", st.raw, capacity)
	}
	if st.json["joined_total"].(float64) < nUsers+3 {
		t.Errorf("room after the run: %s, want at least %d joined", st.raw, nUsers+3)
	}
	stopObs()
	<-obsDone
	if max := maxActive.Load(); max > capacity || samples.Load() == 0 {
		t.Errorf("observer: max active %d in %d samples, want at most %d and some samples", max, samples.Load(), capacity)
	}
	// The request metrics count by route pattern, the room gauges are there.
	m := wrMust(t, hc, http.StatusOK, "GET", insts[0].url+"/metrics", "", wrAdminToken)
	for _, series := range []string{
		`http_requests_total{code="503",method="POST",route="/v1/rooms/{room}/tickets"}`,
		`http_requests_total{code="201",method="POST",route="/v1/rooms/{room}/tickets"}`,
		`stampede_waitroom_room_capacity{room="` + room + `"}`,
		`stampede_waitroom_room_active{room="` + room + `"}`,
		`stampede_waitroom_room_waiting{room="` + room + `"}`,
		`stampede_waitroom_room_oldest_wait_seconds{room="` + room + `"}`,
	} {
		if wrMetric(m.raw, series) < 0 {
			t.Errorf("/metrics lacks %s", series)
		}
	}
	t.Logf("observer: %d samples (%d failed, last: %v), max active %d; room %s", samples.Load(), obsErrs.Load(), lastObsErr.Load(), maxActive.Load(), st.raw)
}

// TestWaitroomServerTimeouts: a request whose body stalls, headers that
// never end and an idle keep-alive connection are all closed by the server
// within its timeouts (short ones here).
func TestWaitroomServerTimeouts(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a service process")
	}
	const (
		readHeader = 300 * time.Millisecond
		read       = 600 * time.Millisecond
		idle       = 600 * time.Millisecond
	)
	in := wrStart(t, "wr-timeouts", "--read-header-timeout", readHeader.String(), "--read-timeout", read.String(),
		"--idle-timeout", idle.String(), "--write-timeout", "5s")
	addr := strings.TrimPrefix(in.url, "http://")
	// closedWithin sends raw, then reads until the server closes the
	// connection, and returns how long that took from the send.
	closedWithin := func(t *testing.T, raw string) (time.Duration, []byte) {
		t.Helper()
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		start := time.Now()
		if _, err := io.WriteString(conn, raw); err != nil {
			t.Fatal(err)
		}
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		got, err := io.ReadAll(conn)
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatalf("the server kept the connection open for 10s: %q", got)
		}
		return time.Since(start), got
	}
	t.Run("stalled body", func(t *testing.T) {
		took, got := closedWithin(t, "POST /v1/rooms/r/tickets HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"user_id\"")
		if took > read+time.Second {
			t.Errorf("a stalled body held the connection %s, want at most %s (--read-timeout + 1s)", took, read+time.Second)
		}
		t.Logf("stalled body: closed after %s; answer %q", took.Round(time.Millisecond), firstLine(string(got)))
	})
	t.Run("stalled headers", func(t *testing.T) {
		took, got := closedWithin(t, "GET /healthz HTTP/1.1\r\nHost: x\r\n")
		if took > readHeader+time.Second {
			t.Errorf("stalled headers held the connection %s, want at most %s (--read-header-timeout + 1s)", took, readHeader+time.Second)
		}
		t.Logf("stalled headers: closed after %s; answer %q", took.Round(time.Millisecond), firstLine(string(got)))
	})
	t.Run("idle keep-alive", func(t *testing.T) {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Close {
			t.Fatalf("GET /healthz = %d (close %t), want 200 on a kept-alive connection", resp.StatusCode, resp.Close)
		}
		start := time.Now()
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err = br.ReadByte()
		took := time.Since(start)
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatal("the server kept an idle connection open for 10s")
		}
		if took > idle+time.Second {
			t.Errorf("an idle connection stayed open %s, want at most %s (--idle-timeout + 1s)", took, idle+time.Second)
		}
		t.Logf("idle connection closed after %s", took.Round(time.Millisecond))
	})
}
