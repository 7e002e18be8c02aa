package admission

import (
	"bytes"
	"context"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestNodeStartsAgainAsItRan starts a redis-server of its own, notes how
// it runs (readNodeStart), kills it with SIGKILL and starts it again from
// that note alone: the new process answers on the same port, in the same
// directory, with the same settings. That is how the failover experiment
// brings back the master it killed, with no script of the repository.
func TestNodeStartsAgainAsItRan(t *testing.T) {
	server, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("no redis-server on the PATH to start")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, port, _ := net.SplitHostPort(addr)
	dir := t.TempDir()
	cmd := exec.Command(server, "--port", port, "--bind", "127.0.0.1", "--dir", dir, "--save", "",
		"--appendonly", "no", "--logfile", filepath.Join(dir, "node.log"), "--maxmemory-policy", "noeviction", "--daemonize", "yes")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("redis-server: %v\n%s", err, out)
	}
	opts := &redis.ClusterOptions{Addrs: []string{addr}}
	ctx := context.Background()
	if err := waitPing(ctx, opts, addr, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	c := nodeClient(opts, addr)
	defer c.Close()
	kill := func() {
		if pid, err := nodePID(ctx, opts, addr); err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	t.Cleanup(kill)

	pid, err := localNode(ctx, opts, addr)
	if err != nil {
		t.Fatalf("localNode: %v", err)
	}
	start, err := readNodeStart(ctx, opts, addr, pid)
	if err != nil {
		t.Fatalf("readNodeStart: %v", err)
	}
	t.Logf("%s %s", start.path, strings.Join(start.args, " "))
	if start.dir() != dir {
		t.Errorf("noted directory %q, want %q", start.dir(), dir)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for c.Ping(ctx).Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	if err := start.start(ctx, opts, addr, 10*time.Second); err != nil {
		t.Fatalf("start again: %v", err)
	}
	newPID, err := nodePID(ctx, opts, addr)
	if err != nil || newPID == pid {
		t.Fatalf("after the restart: pid %d (was %d), %v", newPID, pid, err)
	}
	for name, want := range map[string]string{"dir": dir, "maxmemory-policy": "noeviction", "save": "", "appendonly": "no",
		"logfile": filepath.Join(dir, "node.log")} {
		got, err := c.ConfigGet(ctx, name).Result()
		if err != nil || got[name] != want {
			t.Errorf("after the restart, %s = %q (%v), want %q", name, got[name], err, want)
		}
	}
}

// TestWaitReadySaysWhatIsMissing points the readiness wait at a Redis
// that is no cluster: it waits no longer than told, says so on the
// progress writer, and its error names what is missing and why it is needed.
func TestWaitReadySaysWhatIsMissing(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing answers there
	var progress bytes.Buffer
	began := time.Now()
	_, err = waitReady(context.Background(), &redis.ClusterOptions{Addrs: []string{addr}}, 600*time.Millisecond, &progress)
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("waited %s, want about the 600ms timeout", took)
	}
	if err == nil || !strings.Contains(err.Error(), "not ready within 600ms") || !strings.Contains(err.Error(), addr) ||
		!strings.Contains(err.Error(), "every master has a replica in sync") {
		t.Errorf("error = %v, want one naming the timeout, the node and the need", err)
	}
	if !strings.Contains(progress.String(), "failover: waiting for the cluster") {
		t.Errorf("no progress line: %q", progress.String())
	}
}
