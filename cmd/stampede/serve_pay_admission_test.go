package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
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

// TestJWKSKeysFetchAndCache: the keys come from the first instance that
// answers, are kept for the TTL, and are kept past it while no instance
// answers.
func TestJWKSKeysFetchAndCache(t *testing.T) {
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	set := jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: pub, KeyID: "k1", Algorithm: string(jose.EdDSA), Use: "sig"}}}
	var fetches atomic.Int32
	var down atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/.well-known/jwks.json" || down.Load() {
			http.Error(w, "no", http.StatusServiceUnavailable)
			return
		}
		fetches.Add(1)
		json.NewEncoder(w).Encode(set)
	}))
	defer srv.Close()
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()

	now := time.Unix(1_700_000_000, 0)
	keys := &jwksKeys{urls: []string{dead.URL, srv.URL}, timeout: time.Second, ttl: time.Minute, hc: srv.Client(),
		now: func() time.Time { return now }}
	ctx := context.Background()
	for range 3 {
		got, err := keys.AdmissionKeys(ctx)
		if err != nil || len(got.Key("k1")) != 1 {
			t.Fatalf("AdmissionKeys = %v, %v; want the key k1", got, err)
		}
	}
	if n := fetches.Load(); n != 1 {
		t.Errorf("fetched %d times within the TTL, want once", n)
	}
	now = now.Add(2 * time.Minute)
	down.Store(true)
	if got, err := keys.AdmissionKeys(ctx); err != nil || len(got.Key("k1")) != 1 {
		t.Errorf("AdmissionKeys with the waiting room down = %v, %v; want the last keys", got, err)
	}
	empty := &jwksKeys{urls: []string{dead.URL}, timeout: time.Second, ttl: time.Minute, hc: srv.Client(), now: time.Now}
	if _, err := empty.AdmissionKeys(ctx); err == nil {
		t.Error("AdmissionKeys with no instance answering and nothing cached: want an error")
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
