package client_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/stampede-lab/stampede/waitroom/client"
)

// TestKeysFailOverAndKeepTheLastSet: the keys come from the first address
// that answers, are kept for MaxAge, and are kept past it while no address
// answers; with nothing cached and nobody answering, there is an error.
func TestKeysFailOverAndKeepTheLastSet(t *testing.T) {
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
	keys, err := client.NewKeys(client.KeysConfig{BaseURL: dead.URL, Others: []string{srv.URL}, Timeout: time.Second,
		MaxAge: time.Minute, HTTPClient: srv.Client(), Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 3 {
		got, err := keys.AdmissionKeys(ctx)
		if err != nil || len(got.Key("k1")) != 1 {
			t.Fatalf("AdmissionKeys = %v, %v; want the key k1", got, err)
		}
	}
	if n := fetches.Load(); n != 1 {
		t.Errorf("fetched %d times within MaxAge, want once", n)
	}
	now = now.Add(2 * time.Minute)
	down.Store(true)
	if got, err := keys.AdmissionKeys(ctx); err != nil || len(got.Key("k1")) != 1 {
		t.Errorf("AdmissionKeys with the waiting room down = %v, %v; want the last keys", got, err)
	}
	empty, err := client.NewKeys(client.KeysConfig{BaseURL: dead.URL, Timeout: time.Second, MaxAge: time.Minute, HTTPClient: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := empty.AdmissionKeys(ctx); err == nil {
		t.Error("AdmissionKeys with no instance answering and nothing cached: want an error")
	}
}
