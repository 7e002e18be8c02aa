package client_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/protocol"
	"github.com/stampede-lab/stampede/waitroom"
	"github.com/stampede-lab/stampede/waitroom/api"
	"github.com/stampede-lab/stampede/waitroom/client"
	"github.com/stampede-lab/stampede/waitroom/redisstore"
)

var (
	secret      = []byte("0123456789abcdef0123456789abcdef-client-test")
	siteSecret  = []byte("site-secret-for-trusted-joins-0123456789abcdef")
	checkoutKey = "checkout-key-0123456789abcdef"
	adminToken  = "client-test-admin-token-0123"
)

// room is a waiting room served over HTTP, with one room of capacity 1
// that admits only when the test says so.
type room struct {
	name  string
	store *redisstore.Store
	srv   *api.Server
	ts    *httptest.Server
	// handler is what ts serves (swappable); jwks counts its key fetches.
	handler atomic.Pointer[http.Handler]
	jwks    atomic.Int64
}

// newRoom starts a waiting room on a fresh miniredis; change edits its
// configuration after the tests' defaults.
func newRoom(t *testing.T, change func(*api.Config)) *room {
	t.Helper()
	m := miniredis.RunT(t)
	rc := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { rc.Close() })
	r := &room{name: "drop", store: redisstore.New(rc)}
	r.srv = r.server(t, change)
	h := http.Handler(r.srv)
	r.handler.Store(&h)
	r.ts = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == client.JWKSPath {
			r.jwks.Add(1)
		}
		(*r.handler.Load()).ServeHTTP(w, req)
	}))
	t.Cleanup(r.ts.Close)
	cfg := waitroom.DefaultRoomConfig()
	cfg.Capacity, cfg.AdmitInterval, cfg.Lease = 1, time.Minute, time.Minute
	if err := r.srv.Service().Configure(context.Background(), r.name, cfg); err != nil {
		t.Fatal(err)
	}
	return r
}

// server makes another instance on the room's store.
func (r *room) server(t *testing.T, change func(*api.Config)) *api.Server {
	t.Helper()
	cfg := api.DefaultConfig()
	cfg.Store, cfg.Secret, cfg.AdminToken = r.store, secret, adminToken
	cfg.SiteSecret, cfg.CheckoutKey = siteSecret, checkoutKey
	cfg.Logger = slog.New(slog.DiscardHandler)
	if change != nil {
		change(&cfg)
	}
	srv, err := api.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

// admitted joins user through c and admits them; it returns the ticket
// with its admission token.
func (r *room) admitted(t *testing.T, c *client.Client, user string) client.TicketInfo {
	t.Helper()
	ctx := context.Background()
	exp := time.Now().Add(time.Hour)
	tk, err := c.Join(ctx, r.name, client.JoinRequest{UserID: user, UserSig: waitroom.SignUser(siteSecret, r.name, user, exp), UserExpires: exp})
	if err != nil {
		t.Fatalf("Join: %v", err)
	}
	if res, err := r.store.Admit(ctx, r.name); err != nil || len(res.Admitted) == 0 {
		t.Fatalf("Admit = %+v, %v", res, err)
	}
	tk, err = c.Ticket(ctx, r.name, user, tk.TicketToken)
	if err != nil || tk.State != waitroom.StateAdmitted || tk.AdmissionToken == "" {
		t.Fatalf("Ticket = %+v, %v", tk, err)
	}
	return tk
}

func newClient(t *testing.T, url string) *client.Client {
	t.Helper()
	c, err := client.New(client.Config{BaseURL: url, CheckoutKey: checkoutKey, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestClient: join, ticket, check and done through the Client, and error
// answers read as *stampede.Error.
func TestClient(t *testing.T) {
	r := newRoom(t, nil)
	ctx := context.Background()
	c := newClient(t, r.ts.URL)
	exp := time.Now().Add(time.Hour)
	tk, err := c.Join(ctx, r.name, client.JoinRequest{UserID: "zoe", UserSig: waitroom.SignUser(siteSecret, r.name, "zoe", exp), UserExpires: exp})
	if err != nil || tk.UserID != "zoe" || tk.TicketToken == "" || tk.State != waitroom.StateWaiting {
		t.Fatalf("Join = %+v, %v", tk, err)
	}
	_, err = c.Join(ctx, r.name, client.JoinRequest{UserID: "zoe", UserSig: waitroom.SignUser(siteSecret, r.name, "zoe", exp), UserExpires: exp})
	if e, ok := errors.AsType[*stampede.Error](err); !ok || e.Status != 409 || e.Code != stampede.Conflict {
		t.Fatalf("a second signed join = %v, want a 409 conflict *stampede.Error", err)
	}
	if res, err := r.store.Admit(ctx, r.name); err != nil || len(res.Admitted) == 0 {
		t.Fatalf("Admit = %+v, %v", res, err)
	}
	tk, err = c.Ticket(ctx, r.name, "zoe", tk.TicketToken)
	if err != nil || tk.State != waitroom.StateAdmitted || tk.AdmissionToken == "" || tk.LeaseExpiresAt.IsZero() {
		t.Fatalf("Ticket = %+v, %v", tk, err)
	}
	if a, err := c.Check(ctx, r.name, tk.AdmissionToken); err != nil || !a.Held || a.UserID != "zoe" || a.ExpiresAt.IsZero() {
		t.Fatalf("Check = %+v, %v", a, err)
	}
	if a, err := c.Done(ctx, r.name, tk.AdmissionToken); err != nil || !a.Released || a.Held {
		t.Fatalf("Done = %+v, %v", a, err)
	}
	wrong, _ := client.New(client.Config{BaseURL: r.ts.URL, CheckoutKey: "not-the-checkout-key", Timeout: time.Second})
	_, err = wrong.Check(ctx, r.name, tk.AdmissionToken)
	if e, ok := errors.AsType[*stampede.Error](err); !ok || e.Status != 401 || e.Code != stampede.Unauthorized {
		t.Fatalf("Check with a wrong key = %v, want a 401 *stampede.Error", err)
	}
	for _, cfg := range []client.Config{
		{BaseURL: "", Timeout: time.Second},
		{BaseURL: "ftp://x", Timeout: time.Second},
		{BaseURL: r.ts.URL},
		{BaseURL: r.ts.URL, Timeout: time.Second, CheckoutKey: "short"},
	} {
		if _, err := client.New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}

// TestAdmissionVerifier: Keys and the Client as the online checker let
// protocol.AdmissionVerifier accept a genuine admission, refuse a forged
// one and one whose slot was released.
func TestAdmissionVerifier(t *testing.T) {
	r := newRoom(t, nil)
	ctx := context.Background()
	c := newClient(t, r.ts.URL)
	keys, err := client.NewKeys(client.KeysConfig{BaseURL: r.ts.URL, Timeout: time.Second, MaxAge: time.Minute, MinRefresh: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	v := protocol.AdmissionVerifier{Room: r.name, Keys: keys, Online: c}
	tk := r.admitted(t, c, "ana")
	claims, err := v.Verify(ctx, tk.AdmissionToken, "ana")
	if err != nil || claims.User != "ana" || claims.Room != r.name {
		t.Fatalf("Verify of a genuine admission = %+v, %v", claims, err)
	}
	if _, err := v.Verify(ctx, tk.AdmissionToken, "bob"); stampede.CodeOf(err) != stampede.Forbidden {
		t.Errorf("Verify for another user = %v, want forbidden", err)
	}

	// A token signed with another secret: its kid is unknown, so Keys
	// fetches the set again once, and it still does not verify.
	forger, err := waitroom.NewAdmissionSigner(waitroom.KeySpec{Secret: []byte("forged-secret-0123456789abcdef-0123456789"), Epoch: waitroom.DefaultKeyEpoch}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	forged, err := forger.Sign(protocol.AdmissionClaims{Room: r.name, User: "ana", Seq: claims.Seq, Expires: time.Now().Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(ctx, forged, "ana"); stampede.CodeOf(err) != stampede.Unauthorized {
		t.Errorf("Verify of a forged token = %v, want unauthorized", err)
	}

	if _, err := c.Done(ctx, r.name, tk.AdmissionToken); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(ctx, tk.AdmissionToken, "ana"); stampede.CodeOf(err) != stampede.Forbidden {
		t.Errorf("Verify after the release = %v, want forbidden (the online check)", err)
	}
	if n := r.jwks.Load(); n != 2 {
		t.Errorf("the keys were fetched %d times, want twice (cached, one refetch for the forged kid)", n)
	}
}

// TestKeysRefetchUnknownKid: after a key rotation, a token under the new
// kid makes Keys fetch the key set again, once; a forged kid within
// MinRefresh fetches nothing more.
func TestKeysRefetchUnknownKid(t *testing.T) {
	r := newRoom(t, nil)
	ctx := context.Background()
	c := newClient(t, r.ts.URL)
	keys, err := client.NewKeys(client.KeysConfig{BaseURL: r.ts.URL, Timeout: time.Second, MaxAge: time.Hour, MinRefresh: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	v := protocol.AdmissionVerifier{Room: r.name, Keys: keys}
	ana := r.admitted(t, c, "ana")
	if _, err := v.Verify(ctx, ana.AdmissionToken, "ana"); err != nil {
		t.Fatalf("Verify before the rotation: %v", err)
	}

	// Rotate: a new key epoch, the old key kept for verification.
	rotated := r.server(t, func(cfg *api.Config) {
		cfg.KeyEpoch = "2"
		cfg.PreviousKeys = []waitroom.KeySpec{{Secret: secret, Epoch: waitroom.DefaultKeyEpoch}}
	})
	h := http.Handler(rotated)
	r.handler.Store(&h)
	if _, err := c.Done(ctx, r.name, ana.AdmissionToken); err != nil {
		t.Fatal(err)
	}
	tk := r.admitted(t, c, "bob")
	if kid := protocol.AdmissionKeyID(tk.AdmissionToken); kid == "" || kid[0] != '2' {
		t.Fatalf("the rotated server signs under kid %q, want epoch 2", kid)
	}
	if _, err := v.Verify(ctx, tk.AdmissionToken, "bob"); err != nil {
		t.Fatalf("Verify after the rotation: %v", err)
	}
	if n := r.jwks.Load(); n != 2 {
		t.Errorf("the keys were fetched %d times, want twice (one refetch for the new kid)", n)
	}

	forger, _ := waitroom.NewAdmissionSigner(waitroom.KeySpec{Secret: secret, Epoch: "unknown"}, nil, nil)
	forged, _ := forger.Sign(protocol.AdmissionClaims{Room: r.name, User: "bob", Expires: time.Now().Add(time.Minute)})
	for range 3 {
		if _, err := v.Verify(ctx, forged, "bob"); stampede.CodeOf(err) != stampede.Unauthorized {
			t.Errorf("Verify under an unknown kid = %v, want unauthorized", err)
		}
	}
	if n := r.jwks.Load(); n != 2 {
		t.Errorf("the keys were fetched %d times, want still 2 (no refetch within min_refresh)", n)
	}
}

// TestWaitHonoursPollAfter: Wait polls after each answer's poll_after_ms
// with the newest ticket token an answer handed out, and returns at the
// first answer that is no longer waiting.
func TestWaitHonoursPollAfter(t *testing.T) {
	var polls atomic.Int64
	var lastAt atomic.Int64
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		n := polls.Add(1)
		if prev := lastAt.Swap(time.Now().UnixNano()); n > 1 && time.Since(time.Unix(0, prev)) < 150*time.Millisecond {
			t.Errorf("poll %d came %v after the previous one, which said 200 ms", n, time.Since(time.Unix(0, prev)))
		}
		if want := map[int64]string{1: "Bearer t0", 2: "Bearer t1", 3: "Bearer t1"}[n]; req.Header.Get("Authorization") != want {
			t.Errorf("poll %d with %q, want %q (the newest token)", n, req.Header.Get("Authorization"), want)
		}
		w.Header().Set("Content-Type", "application/json")
		switch n {
		case 1:
			w.Write([]byte(`{"room":"r","user_id":"u","state":"waiting","poll_after_ms":200,"ticket_token":"t1"}`))
		case 2:
			w.Write([]byte(`{"room":"r","user_id":"u","state":"waiting","poll_after_ms":200}`))
		default:
			w.Write([]byte(`{"room":"r","user_id":"u","state":"admitted","poll_after_ms":2000}`))
		}
	}))
	defer ts.Close()
	c := newClient(t, ts.URL)
	var seen int
	tk, err := c.Wait(context.Background(), "r", "u", "t0", func(client.TicketInfo) { seen++ })
	if err != nil || tk.State != waitroom.StateAdmitted || tk.TicketToken != "t1" || seen != 3 || polls.Load() != 3 {
		t.Fatalf("Wait = %+v, %v after %d polls (%d seen); want admitted at the third, token t1", tk, err, polls.Load(), seen)
	}
}
