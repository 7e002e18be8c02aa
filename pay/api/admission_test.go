package api_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	instapi "github.com/stampede-lab/stampede/institution/api"
	instclient "github.com/stampede-lab/stampede/institution/client"
	"github.com/stampede-lab/stampede/pay"
	payapi "github.com/stampede-lab/stampede/pay/api"
	"github.com/stampede-lab/stampede/pay/institutionclient"
	"github.com/stampede-lab/stampede/pay/sqlite"
	"github.com/stampede-lab/stampede/protocol"
)

// onlineAdmissions answers CheckAdmission from a table of tokens; an
// unknown token is the waiting room not answering.
type onlineAdmissions map[string]protocol.AdmissionStatus

func (a onlineAdmissions) CheckAdmission(_ context.Context, _, token string) (protocol.AdmissionStatus, error) {
	if st, ok := a[token]; ok {
		return st, nil
	}
	return protocol.AdmissionStatus{}, errors.New("waiting room unreachable")
}

// admissionSigner signs admission tokens as the waiting room does.
type admissionSigner struct {
	signer jose.Signer
	keys   jose.JSONWebKeySet
}

func newAdmissionSigner(t *testing.T, kid string) admissionSigner {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sig, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.EdDSA, Key: jose.JSONWebKey{Key: priv, KeyID: kid}},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	return admissionSigner{signer: sig, keys: jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: pub, KeyID: kid, Algorithm: string(jose.EdDSA), Use: "sig"}}}}
}

// token returns an admission token of user to room, valid for a minute.
func (a admissionSigner) token(t *testing.T, room, user string) string {
	t.Helper()
	now := time.Now()
	c := protocol.AdmissionClaims{Room: room, User: user, Seq: 1, AdmittedAt: now, IssuedAt: now, Expires: now.Add(time.Minute)}
	tok, err := jwt.Signed(a.signer).Claims(c.StandardClaims()).Claims(c.PrivateClaims()).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestRequireAdmission: with api.Config.Admission, a new payment needs an
// admission token that verifies against the waiting room's keys and whose
// slot the online check says is held (401 without one or with a forged
// one, 403 for another room's or one not held, naming the header; 503
// when the waiting room cannot say), and a retry of a known key passes
// without one.
func TestRequireAdmission(t *testing.T) {
	its := newInstitution(t)
	store, err := sqlite.Open(filepath.Join(t.TempDir(), "pay.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	key := pay.NewAPIKey()
	if err := store.CreateMerchant(context.Background(), pay.Merchant{ID: pay.NewID(), Name: "m", KeyHash: pay.HashAPIKey(key), CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	svc, err := pay.NewService(store, institutionclient.New(instclient.NewClient(its.URL, its.Client())), pay.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	room, forger := newAdmissionSigner(t, "room-key"), newAdmissionSigner(t, "room-key")
	held, gone, down := room.token(t, "sale", "u-held"), room.token(t, "sale", "u-gone"), room.token(t, "sale", "u-down")
	hcfg := payapi.DefaultConfig()
	hcfg.Admission = &protocol.AdmissionVerifier{Room: "sale", Keys: protocol.StaticKeys(room.keys),
		Online: onlineAdmissions{held: {Held: true}, gone: {Held: false, Reason: "expired"}}}
	h, err := payapi.New(svc, store, hcfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	api := httptest.NewServer(h)
	t.Cleanup(api.Close)

	post := func(idem, admission, order string) (int, map[string]any) {
		body, _ := json.Marshal(map[string]any{"order_id": order, "amount": 1000, "currency": "KRW"})
		req, _ := http.NewRequest(http.MethodPost, api.URL+"/v1/payments", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", idem)
		if admission != "" {
			req.Header.Set(protocol.HeaderAdmission, admission)
		}
		resp, err := api.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	for _, c := range []struct {
		name, admission string
		want            int
		field           string
	}{
		{"missing", "", http.StatusUnauthorized, protocol.HeaderAdmission},
		{"malformed", "not-a-token", http.StatusUnauthorized, protocol.HeaderAdmission},
		{"forged", forger.token(t, "sale", "u-held"), http.StatusUnauthorized, protocol.HeaderAdmission},
		{"other room", room.token(t, "other", "u-held"), http.StatusForbidden, protocol.HeaderAdmission},
		{"not held", gone, http.StatusForbidden, protocol.HeaderAdmission},
		{"waiting room down", down, http.StatusServiceUnavailable, ""},
	} {
		code, body := post("k-"+c.name, c.admission, "o-"+c.name)
		if code != c.want || (c.field != "" && body["field"] != c.field) {
			t.Errorf("%s: %d %v, want %d naming %q", c.name, code, body, c.want, c.field)
		}
	}
	if code, body := post("k-ok", held, "o-ok"); code != http.StatusCreated {
		t.Fatalf("held admission: %d %v, want 201", code, body)
	}
	// A retry of the same key after the admission ended replays it.
	if code, body := post("k-ok", "", "o-ok"); code != http.StatusCreated {
		t.Errorf("retry without admission: %d %v, want 201 replayed", code, body)
	}
}

// newInstitution starts an institution simulator for the test.
func newInstitution(t testing.TB) *httptest.Server {
	t.Helper()
	icfg := instapi.DefaultConfig()
	icfg.AdminToken = "institution-admin-token-0123"
	isrv, err := instapi.New(icfg)
	if err != nil {
		t.Fatal(err)
	}
	its := httptest.NewServer(isrv)
	t.Cleanup(func() { isrv.Close(); its.Close() })
	return its
}
