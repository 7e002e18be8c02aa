//go:build linux

package pay_test

import (
	"net/http"
	"os/signal"
	"syscall"
	"testing"
)

// TestReadyzFollowsTheAbilityToWrite: when the disk refuses every write
// (here a file size limit of one byte on the process, so that SQLite's
// writes fail as on a full disk while reads still work), payments answer
// 503 and /readyz says not ready; once writes work again /readyz is
// ready without any payment having to succeed first.
func TestReadyzFollowsTheAbilityToWrite(t *testing.T) {
	r := newRig(t, nil)
	if code, body := r.post(t, "k-full-0", payment("full-0", 100)); code != http.StatusCreated {
		t.Fatalf("first payment = %d %v", code, body)
	}
	if resp, _ := r.get(t, "/readyz"); resp.StatusCode != http.StatusOK {
		t.Fatalf("/readyz before = %d", resp.StatusCode)
	}
	signal.Ignore(syscall.SIGXFSZ)
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &old); err != nil {
		t.Skipf("getrlimit: %v", err)
	}
	full := syscall.Rlimit{Cur: 1, Max: old.Max}
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &full); err != nil {
		t.Skipf("setrlimit: %v", err)
	}
	restored := false
	restore := func() {
		if !restored {
			syscall.Setrlimit(syscall.RLIMIT_FSIZE, &old)
			restored = true
		}
	}
	t.Cleanup(restore)
	got503 := false
	for i := range 20 {
		code, _ := r.post(t, "k-full-"+string(rune('a'+i)), payment("full-"+string(rune('a'+i)), 100))
		if code == http.StatusServiceUnavailable {
			got503 = true
			break
		}
	}
	if !got503 {
		restore()
		t.Fatal("no payment failed with the file size limit: the test does not fill the disk")
	}
	resp, body := r.get(t, "/readyz")
	restore()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("/readyz while writes fail = %d %v, want 503", resp.StatusCode, body)
	}
	if resp, body := r.get(t, "/readyz"); resp.StatusCode != http.StatusOK {
		t.Errorf("/readyz once writes work again = %d %v, want 200", resp.StatusCode, body)
	}
}
