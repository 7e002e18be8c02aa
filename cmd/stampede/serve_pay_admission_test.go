package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPayAdmissionFlagsNamedAtOnce: --require-admission without its
// companions names every missing flag in one error; the companions
// without --require-admission are refused.
func TestPayAdmissionFlagsNamedAtOnce(t *testing.T) {
	o := payAdmissionOptions{require: true, timeout: time.Second}
	_, err := o.verifier()
	for _, flag := range []string{"--admission-room:", "--checkout-key:", "--waitroom:"} {
		if err == nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("verifier() = %v, want an error naming %s", err, flag)
		}
	}
	o = payAdmissionOptions{room: "sale"}
	if _, err := o.verifier(); err == nil || !strings.Contains(err.Error(), "--require-admission") {
		t.Errorf("--admission-room alone = %v, want it to need --require-admission", err)
	}
	o = payAdmissionOptions{timeout: time.Second}
	if v, err := o.verifier(); v != nil || err != nil {
		t.Errorf("no admission flags = %v, %v; want no verifier", v, err)
	}
}

// TestServePayNamesEveryBadFlag: the service's, the API's and the
// webhook sender's bad flags are named together, by flag, before
// anything is created.
func TestServePayNamesEveryBadFlag(t *testing.T) {
	t.Setenv(envPostgres, "")
	t.Setenv(envNATS, "")
	dir := filepath.Join(t.TempDir(), "data")
	_, _, err := execute(t, "serve", "pay", "--institution", "http://127.0.0.1:1", "--data-dir", dir,
		"--inquiry-concurrency", "0", "--admin-token", "short", "--webhook-concurrency", "0")
	for _, flag := range []string{"--inquiry-concurrency:", "--admin-token:", "--webhook-concurrency:"} {
		if err == nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("error %v, want one naming %s", err, flag)
		}
	}
	if _, err := os.Stat(dir); err == nil {
		t.Error("a bad flag still created the data dir")
	}
}
