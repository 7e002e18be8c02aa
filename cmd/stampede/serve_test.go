package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stampede-lab/stampede/waitroom/redisstore"
)

func TestServeWaitroomRejectsBadFlags(t *testing.T) {
	for _, env := range []string{envRedis, envSecret, envAdminToken} {
		t.Setenv(env, "")
	}
	long := "--admin-token=0123456789abcdef"
	cases := []struct {
		args []string
		want string
	}{
		{nil, "--admin-token"},
		{[]string{"--admin-token", "short"}, "--admin-token"},
		{[]string{long, "--secret", "too-short"}, "--secret"},
		{[]string{long, "--redis", "http://localhost:6379"}, "--redis"},
		{[]string{long, "--redis", "redis-cluster://a:1,b"}, "--redis"},
		{[]string{long, "--log-level", "loud"}, "--log-level"},
		{[]string{long, "--http", ""}, "--http"},
		{[]string{long, "--redis-timeout", "0s"}, "--redis-timeout"},
		{[]string{long, "--read-timeout", "1ms"}, "--read-timeout"},
		{[]string{long, "--idle-timeout", "0s"}, "--idle-timeout"},
		{[]string{long, "--write-timeout", "-1s"}, "--write-timeout"},
		{[]string{long, "--write-timeout", "1s", "--redis-timeout", "2s"}, "--write-timeout"},
		{[]string{long, "--join-rate", "-1"}, "--join-rate"},
		{[]string{long, "--join-burst", "0"}, "--join-burst"},
		{[]string{long, "--join-clients", "0"}, "--join-clients"},
		{[]string{long, "--trusted-proxy", "10.0.0.0/33"}, "--trusted-proxy"},
		{[]string{long, "--trusted-proxy", "proxy.local"}, "--trusted-proxy"},
		{[]string{long, "--ack-replicas", "1"}, "--ack-replicas"},
		{[]string{long, "--redis", "redis://127.0.0.1:1/0", "--ack-replicas", "17"}, "--ack-replicas"},
		{[]string{long, "--redis", "redis://127.0.0.1:1/0", "--ack-replicas", "1", "--ack-timeout", "1s"}, "--ack-timeout"},
	}
	for _, tc := range cases {
		_, _, err := execute(t, append([]string{"serve", "waitroom"}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one naming %s", tc.args, err, tc.want)
		}
	}
}

// TestServeWaitroomNamesEveryBadStoreFlag: the Redis store's bad flags
// are reported together, each by its flag.
func TestServeWaitroomNamesEveryBadStoreFlag(t *testing.T) {
	for _, env := range []string{envRedis, envSecret, envAdminToken} {
		t.Setenv(env, "")
	}
	_, _, err := execute(t, "serve", "waitroom", "--admin-token=0123456789abcdef", "--redis", "redis://127.0.0.1:1/0",
		"--redis-timeout", "2m", "--ack-replicas", "17")
	for _, want := range []string{"--redis-timeout: must be between 1ms and 1m", "--ack-replicas: must be between 0 and 16"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v, want one saying %q", err, want)
		}
	}
}

func TestServeWaitroomReadsTheEnvironment(t *testing.T) {
	t.Setenv(envAdminToken, "short")
	if _, _, err := execute(t, "serve", "waitroom"); err == nil || !strings.Contains(err.Error(), "--admin-token: must be at least 16 bytes") {
		t.Errorf("a short %s: %v", envAdminToken, err)
	}
	t.Setenv(envAdminToken, "0123456789abcdef0123")
	t.Setenv("STAMPEDE_REDIS_TIMEOUT", "soon")
	if _, _, err := execute(t, "serve", "waitroom"); err == nil || !strings.Contains(err.Error(), "STAMPEDE_REDIS_TIMEOUT") {
		t.Errorf("STAMPEDE_REDIS_TIMEOUT=soon: %v, want an error naming it", err)
	}
}

func TestRedisClientURLs(t *testing.T) {
	for _, url := range []string{"redis://localhost:6379/0", "rediss://u:p@host:6380/2", "unix:///tmp/redis.sock",
		"redis-cluster://h1:7000,h2:7001", "redis-cluster://user:pass@h1:7000"} {
		c, err := redisClient(url, redisstore.DefaultConfig())
		if err != nil {
			t.Errorf("%s: %v", url, err)
			continue
		}
		c.Close()
	}
}

// TestServeWaitroomStartsAndStops runs the service on the embedded Redis
// and stops it with the context, as SIGINT does.
func TestServeWaitroomStartsAndStops(t *testing.T) {
	for _, env := range []string{envRedis, envSecret} {
		t.Setenv(env, "")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := newRootCmd()
	var errOut bytes.Buffer
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetErr(&errOut)
	cmd.SetArgs([]string{"serve", "waitroom", "--http", "127.0.0.1:0", "--admin-token", "0123456789abcdef0123", "--data-dir", t.TempDir()})
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	time.Sleep(300 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve waitroom: %v\n%s", err, errOut.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve waitroom did not stop within 10s of the cancel")
	}
	for _, want := range []string{"miniredis", "no --secret given", "waiting room listening", "stopped"} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, errOut.String())
		}
	}
}

// TestServeGateRejectsBadFlags: every bad flag of the gate at once, each
// named as on the command line.
func TestServeGateRejectsBadFlags(t *testing.T) {
	for _, env := range []string{envRedis, envSecret, envAdminToken} {
		t.Setenv(env, "")
	}
	_, _, err := execute(t, "serve", "gate", "--admin-token=0123456789abcdef", "--upstream", "ftp://x",
		"--room", "bad room", "--check-cache", "5s", "--max-session", "0s",
		"--visitor-rate", "-1", "--visitor-burst", "-2", "--check-concurrency", "0", "--check-backoff", "0s")
	if err == nil {
		t.Fatal("serve gate accepted bad flags")
	}
	for _, want := range []string{"--room:", "--upstream:", "--check-cache:", "--max-session:", "--visitor-rate:", "--visitor-burst:", "--check-concurrency:", "--check-backoff:"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	if _, _, err := execute(t, "serve", "gate", "--admin-token=0123456789abcdef", "--room", "drop"); err == nil || !strings.Contains(err.Error(), "--upstream") {
		t.Errorf("serve gate without --upstream: %v, want an error naming it", err)
	}
}

// TestServeWaitroomNamesEveryBadFlag: the waiting room's configuration
// reports every bad flag at once.
func TestServeWaitroomNamesEveryBadFlag(t *testing.T) {
	for _, env := range []string{envRedis, envSecret, envAdminToken} {
		t.Setenv(env, "")
	}
	_, _, err := execute(t, "serve", "waitroom", "--admin-token=short", "--checkout-key=x", "--key-epoch", "a b", "--join-rate", "-1", "--metrics-token=short")
	if err == nil {
		t.Fatal("serve waitroom accepted bad flags")
	}
	for _, want := range []string{"--admin-token:", "--checkout-key:", "--key-epoch:", "--join-rate:", "--metrics-token:"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
}
