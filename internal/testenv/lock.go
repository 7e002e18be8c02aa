package testenv

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// Exclusive holds the machine-wide lock named name until the test ends,
// waiting for any other test process that holds it. Tests of different
// packages run at the same time under `go test ./...`; those that share a
// service and disturb it (a failover test kills nodes of the Redis
// Cluster named by RedisHAURL, which the store's suites also use) take the
// same lock, so that they run one after the other.
func Exclusive(t testing.TB, name string) {
	t.Helper()
	path := filepath.Join(os.TempDir(), "stampede-test-"+name+".lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatalf("testenv: lock %s: %v", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		t.Fatalf("testenv: lock %s: %v", path, err)
	}
	t.Cleanup(func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	})
}

// RedisHA returns the URL of RedisHAURL (see URL) and holds the cluster's
// lock (see Exclusive) until the test ends.
func RedisHA(t testing.TB) string {
	t.Helper()
	url := URL(t, RedisHAURL)
	Exclusive(t, "redis-ha")
	return url
}
