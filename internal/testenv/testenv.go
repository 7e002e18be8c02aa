// Package testenv gives tests the real services they need and decides, in
// one place, what happens when one is missing.
//
// A test that needs a real service (a Redis server, a Redis Cluster,
// PostgreSQL, NATS) or an executable (Chromium) asks for it here. Outside
// CI, a missing one skips the test with a reason that says how to provide
// it. In CI (the environment variable CI is true, as .ci/run sets it) a
// missing one fails the test: a CI run that lost a service must not pass by
// skipping everything that needed it.
//
// The package is for tests only; nothing outside _test.go files imports it.
package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// The environment variables that name the real services. .ci/run sets
// them all.
const (
	// RedisURL names a Redis server, e.g. redis://127.0.0.1:6379/0.
	RedisURL = "STAMPEDE_REDIS_URL"
	// RedisClusterURL names a Redis Cluster, e.g.
	// redis-cluster://127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003.
	RedisClusterURL = "STAMPEDE_REDIS_CLUSTER_URL"
	// RedisHAURL names a Redis Cluster of three masters with a replica
	// each whose nodes run on this machine (a test kills one and starts it
	// again with `.ci/redis-cluster --ha restart PORT`), e.g.
	// redis-cluster://127.0.0.1:7011,...,127.0.0.1:7016.
	RedisHAURL = "STAMPEDE_REDIS_HA_URL"
	// PostgresURL names a PostgreSQL database, e.g.
	// postgres://postgres@127.0.0.1:5432/test?sslmode=disable.
	PostgresURL = "STAMPEDE_POSTGRES_URL"
	// NATSURL names a NATS server with JetStream, e.g. nats://127.0.0.1:4222.
	NATSURL = "STAMPEDE_NATS_URL"
	// NATSClusterURL names a three-node NATS cluster with JetStream whose
	// nodes .ci/nats-cluster started (a test kills one with
	// `.ci/nats-cluster kill PORT`), e.g.
	// nats://127.0.0.1:4231,nats://127.0.0.1:4232,nats://127.0.0.1:4233.
	NATSClusterURL = "STAMPEDE_NATS_CLUSTER_URL"
	// NATSClusterNewURL names the same kind of cluster running a current
	// nats-server built from the module go.mod requires, which
	// `.ci/nats-cluster --new` starts (and kills a node of with
	// `.ci/nats-cluster --new kill PORT`), e.g.
	// nats://127.0.0.1:4241,nats://127.0.0.1:4242,nats://127.0.0.1:4243.
	NATSClusterNewURL = "STAMPEDE_NATS_CLUSTER_NEW_URL"
	// StripeMockURL is the base URL of a stripe-mock server, the Stripe
	// connector's tests' Stripe (.ci/stripe-mock starts one).
	StripeMockURL = "STAMPEDE_STRIPE_MOCK_URL"
	// ChromiumPath names the Chromium executable of the browser test; when
	// it is unset, Chromium looks for Debian's.
	ChromiumPath = "STAMPEDE_CHROMIUM"
)

// examples are the values of the package's variables on a machine set up
// like CI's, shown in the reason for a skip.
var examples = map[string]string{
	RedisURL:          "redis://127.0.0.1:6379/0",
	RedisClusterURL:   "redis-cluster://127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003",
	RedisHAURL:        "redis-cluster://127.0.0.1:7011,127.0.0.1:7012,127.0.0.1:7013,127.0.0.1:7014,127.0.0.1:7015,127.0.0.1:7016",
	PostgresURL:       "'postgres://postgres@127.0.0.1:5432/test?sslmode=disable'",
	NATSURL:           "nats://127.0.0.1:4222",
	NATSClusterURL:    "nats://127.0.0.1:4231,nats://127.0.0.1:4232,nats://127.0.0.1:4233",
	NATSClusterNewURL: "nats://127.0.0.1:4241,nats://127.0.0.1:4242,nats://127.0.0.1:4243",
	StripeMockURL:     "http://127.0.0.1:12111",
}

// starters say what starts a service locally, when .ci/run has a helper
// for it.
var starters = map[string]string{
	RedisClusterURL:   ".ci/redis-cluster starts one",
	RedisHAURL:        ".ci/redis-cluster --ha starts one",
	NATSClusterURL:    ".ci/nats-cluster starts one",
	NATSClusterNewURL: ".ci/nats-cluster --new starts one",
	StripeMockURL:     ".ci/stripe-mock starts one",
}

// debianChromium is where Debian's chromium package installs Chromium
// (.ci/run installs it), then its older name.
var debianChromium = []string{"/usr/bin/chromium", "/usr/bin/chromium-browser"}

// CI reports whether the tests run in CI: the environment variable CI holds
// a true value for strconv.ParseBool ("true", "1", ...).
func CI() bool {
	ci, _ := strconv.ParseBool(os.Getenv("CI"))
	return ci
}

// URL returns the value of the environment variable name, the address of a
// real service (for example RedisURL). When it is unset or empty, URL
// skips the test, or fails it when CI reports true; either way the test
// stops there.
func URL(t testing.TB, name string) string {
	t.Helper()
	if v := os.Getenv(name); v != "" {
		return v
	}
	why := name + " is not set: no real service to test against"
	if ex, ok := examples[name]; ok {
		why += " (e.g. " + name + "=" + ex
		if st, ok := starters[name]; ok {
			why += "; " + st
		}
		why += "; .ci/run sets it)"
	}
	Missing(t, why)
	return ""
}

// Executable returns the path of an executable: the value of the
// environment variable env when it is set (and then only that), else the
// first of candidates found (a bare name is looked up in PATH). When there
// is none, it skips the test, or fails it when CI reports true.
func Executable(t testing.TB, env string, candidates ...string) string {
	t.Helper()
	if p := os.Getenv(env); p != "" {
		candidates = []string{p}
	}
	for _, c := range candidates {
		if p, err := exec.LookPath(c); err == nil {
			return p
		}
	}
	Missing(t, fmt.Sprintf("no executable found (set %s); tried %s", env, strings.Join(candidates, ", ")))
	return ""
}

// Chromium returns the Chromium of the browser tests: the value of
// ChromiumPath when it is set, else Debian's (which .ci/run installs). When
// there is none, it skips the test, or fails it when CI reports true.
func Chromium(t testing.TB) string {
	t.Helper()
	return Executable(t, ChromiumPath, debianChromium...)
}

// Missing stops a test that cannot run because something it needs, said by
// why, is missing: it skips the test, or fails it when CI reports true.
func Missing(t testing.TB, why string) {
	t.Helper()
	if CI() {
		t.Fatalf("CI=%s, and a test that needs a service must run there: %s", os.Getenv("CI"), why)
	}
	t.Skip(why)
}
