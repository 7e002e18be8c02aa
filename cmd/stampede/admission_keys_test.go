package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/protocol"
	"github.com/stampede-lab/stampede/waitroom"
)

// TestWaitroomKeysFollowARotation: the checkout's key source caches the
// waiting room's JWKS, fetches it again when a token is signed by a key
// it lacks (at most once a second), and then verifies the token; a forged
// token does not make it fetch more often than that.
func TestWaitroomKeysFollowARotation(t *testing.T) {
	sign := func(epoch string) *waitroom.AdmissionSigner {
		s, err := waitroom.NewAdmissionSigner(waitroom.KeySpec{Secret: []byte("admission keys test: the waiting room's secret"), Epoch: epoch}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	old, rotated := sign("1"), sign("2")
	var (
		mu      sync.Mutex
		serving = old.JWKS()
		fetches atomic.Int32
	)
	wr := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetches.Add(1)
		mu.Lock()
		defer mu.Unlock()
		json.NewEncoder(w).Encode(serving)
	}))
	defer wr.Close()
	keys, err := newWaitroomKeys(wr.URL, wr.Client(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	clock := time.Now()
	keys.now = func() time.Time { return clock }
	v := refetchingVerifier{AdmissionVerifier: protocol.AdmissionVerifier{Room: "room", Keys: keys}, keys: keys}
	token := func(s *waitroom.AdmissionSigner) string {
		tok, err := s.Sign(protocol.AdmissionClaims{Room: "room", User: "ann", Seq: 1, Expires: time.Now().Add(time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	ctx := context.Background()
	if _, err := v.Verify(ctx, token(old), "ann"); err != nil || fetches.Load() != 1 {
		t.Fatalf("the current key: %v after %d fetches; want verified after 1", err, fetches.Load())
	}
	if _, err := v.Verify(ctx, token(old), "ann"); err != nil || fetches.Load() != 1 {
		t.Fatalf("again: %v after %d fetches; want verified from the cache", err, fetches.Load())
	}

	// The waiting room rotates to a new key: a token it signs verifies
	// once the set is fetched again, a second later at the earliest.
	mu.Lock()
	serving = jose.JSONWebKeySet{Keys: append(rotated.JWKS().Keys, old.JWKS().Keys...)}
	mu.Unlock()
	if _, err := v.Verify(ctx, token(rotated), "ann"); stampede.ClassOf(err) != stampede.Unauthorized || fetches.Load() != 1 {
		t.Fatalf("within the second: %v after %d fetches; want refused, no fetch", err, fetches.Load())
	}
	clock = clock.Add(time.Second)
	if _, err := v.Verify(ctx, token(rotated), "ann"); err != nil || fetches.Load() != 2 {
		t.Fatalf("the rotated key: %v after %d fetches; want verified after 2", err, fetches.Load())
	}
	forged := token(rotated)
	forged = forged[:len(forged)-4] + "AAAA"
	for range 5 {
		if _, err := v.Verify(ctx, forged, "ann"); stampede.ClassOf(err) != stampede.Unauthorized {
			t.Fatalf("a forged token: %v, want unauthorized", err)
		}
	}
	clock = clock.Add(time.Second)
	if _, err := v.Verify(ctx, forged, "ann"); stampede.ClassOf(err) != stampede.Unauthorized || fetches.Load() != 3 {
		t.Fatalf("a forged token a second later: %v after %d fetches; want refused after 3", err, fetches.Load())
	}

	// A waiting room that does not answer: the cached keys still serve;
	// with none cached, the verifier cannot say (Unavailable).
	wr.Close()
	if _, err := v.Verify(ctx, token(old), "ann"); err != nil {
		t.Fatalf("the waiting room down, keys cached: %v", err)
	}
	cold, err := newWaitroomKeys(wr.URL, wr.Client(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	cv := refetchingVerifier{AdmissionVerifier: protocol.AdmissionVerifier{Room: "room", Keys: cold}, keys: cold}
	if _, err := cv.Verify(ctx, token(old), "ann"); stampede.ClassOf(err) != stampede.Unavailable {
		t.Fatalf("the waiting room down, no keys: %v, want unavailable", err)
	}
}
