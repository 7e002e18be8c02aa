package checkout_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stampede-lab/stampede/checkout"
	"github.com/stampede-lab/stampede/checkout/api"
	"github.com/stampede-lab/stampede/checkout/payclient"
	"github.com/stampede-lab/stampede/checkout/sqlstore"
	instapi "github.com/stampede-lab/stampede/institution/api"
	instclient "github.com/stampede-lab/stampede/institution/client"
	"github.com/stampede-lab/stampede/internal/httpapi/apitest"
	"github.com/stampede-lab/stampede/internal/testenv"
	"github.com/stampede-lab/stampede/pay"
	"github.com/stampede-lab/stampede/pay/institutionclient"
	payserver "github.com/stampede-lab/stampede/pay/server"
	"github.com/stampede-lab/stampede/pay/sqlite"
	"github.com/stampede-lab/stampede/protocol"
	"github.com/stampede-lab/stampede/waitroom"
)

const adminToken = "checkout-admin-token-for-tests"

// discard is a pay.Publisher that drops the outbox rows.
type discard struct{}

func (discard) Publish(context.Context, pay.OutboxEvent) error { return nil }

// payRig is the real payment service, in-process, in front of the
// institution simulator.
type payRig struct {
	base string
	key  string // a merchant's API key
	inst *instapi.Server
	// ledger reads the institution's records (admin token).
	ledger *instclient.Client
}

// startPay runs pay (SQLite file) and an institution simulator for t;
// approval times out after approvalTimeout.
func startPay(t *testing.T, approvalTimeout time.Duration) *payRig {
	t.Helper()
	icfg := instapi.DefaultConfig()
	icfg.AdminToken, icfg.NotFoundWindow, icfg.Logger = "institution-admin-token", 200*time.Millisecond, quiet()
	inst, err := instapi.New(icfg)
	if err != nil {
		t.Fatal(err)
	}
	its := httptest.NewServer(inst)
	t.Cleanup(func() { inst.Close(); its.Close() })

	scfg := sqlite.DefaultConfig()
	scfg.Path, scfg.OpTimeout, scfg.BusyTimeout = filepath.Join(t.TempDir(), "pay.db"), time.Minute, time.Minute
	store, err := sqlite.OpenConfig(context.Background(), scfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	key := pay.NewAPIKey()
	m := pay.Merchant{ID: pay.NewID(), Name: "checkout tests", KeyHash: pay.HashAPIKey(key), CreatedAt: time.Now()}
	if err := store.CreateMerchant(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := payserver.DefaultConfig()
	cfg.Store, cfg.Events, cfg.Listener = store, discard{}, ln
	cfg.Institution = institutionclient.New(instclient.NewClient(its.URL, nil))
	cfg.Service.ApprovalTimeout = approvalTimeout
	cfg.Service.ReconcileEvery = 50 * time.Millisecond
	cfg.HTTP.WriteTimeout = approvalTimeout + 10*time.Second
	cfg.Logger = quiet()
	srv, err := payserver.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); srv.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return &payRig{base: "http://" + ln.Addr().String(), key: key, inst: inst,
		ledger: instclient.NewClient(its.URL, nil).WithAdminToken("institution-admin-token")}
}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// storeOpener opens a fresh checkout store for a test.
type storeOpener func(t *testing.T) checkout.Store

// sqliteFile opens a store on a new SQLite file.
func sqliteFile(t *testing.T) checkout.Store {
	t.Helper()
	cfg := sqlstore.DefaultConfig()
	cfg.SQLitePath = filepath.Join(t.TempDir(), "checkout.db")
	cfg.OpTimeout = 2 * time.Minute // 1,000 buyers queue for the one writer (slow under -race)
	return openStore(t, cfg)
}

// postgresSchema opens a store in a new schema of STAMPEDE_POSTGRES_URL's
// database (skipped when it is unset, failed in CI).
func postgresSchema(t *testing.T) checkout.Store {
	t.Helper()
	cfg := sqlstore.DefaultConfig()
	cfg.PostgresURL = testenv.URL(t, testenv.PostgresURL)
	cfg.Schema = fmt.Sprintf("checkout_test_%d", time.Now().UnixNano())
	cfg.MaxConns, cfg.OpTimeout = 16, 2*time.Minute
	return openStore(t, cfg)
}

func openStore(t *testing.T, cfg sqlstore.Config) checkout.Store {
	t.Helper()
	s, err := sqlstore.Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("sqlstore.Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// rig is a checkout served over HTTP in front of a payRig.
type rig struct {
	pay  *payRig
	svc  *checkout.Service
	base string
	hc   *http.Client // validates every answer against openapi.yaml
}

// newRig serves a checkout on store, paying through p; mutate adjusts
// the service's config.
func newRig(t *testing.T, store checkout.Store, p *payRig, mutate func(*checkout.Config)) *rig {
	t.Helper()
	pc, err := payclient.New(p.base, p.key, &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := checkout.DefaultConfig()
	cfg.Store, cfg.Payer, cfg.Logger = store, pc, quiet()
	cfg.Admissions = verifier(nil)
	if mutate != nil {
		mutate(&cfg)
	}
	svc, err := checkout.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hcfg := api.DefaultConfig()
	hcfg.AdminToken, hcfg.Logger = adminToken, quiet()
	h, err := api.New(svc, hcfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	v := apitest.New(t, api.OpenAPI())
	hc := &http.Client{Transport: v.Transport(t, &http.Transport{MaxIdleConnsPerHost: 256})}
	return &rig{pay: p, svc: svc, base: ts.URL, hc: hc}
}

// answer is a decoded answer.
type answer struct {
	status int
	header http.Header
	body   map[string]any
}

// do sends a request; headers are name/value pairs.
func (r *rig) do(t testing.TB, method, path, body string, headers ...string) answer {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, r.base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := r.hc.Do(req)
	if err != nil {
		t.Errorf("%s %s: %v", method, path, err)
		return answer{}
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, header: resp.Header}
	if len(bytes.TrimSpace(raw)) > 0 {
		if err := json.Unmarshal(raw, &a.body); err != nil {
			t.Errorf("%s %s: answer %d is not JSON: %q", method, path, resp.StatusCode, raw)
		}
	}
	return a
}

// createEvent creates an event of seats seats at 1000 KRW.
func (r *rig) createEvent(t *testing.T, id string, seats int) {
	t.Helper()
	a := r.do(t, http.MethodPost, "/v1/events/"+id, fmt.Sprintf(`{"seats":%d,"price":1000,"currency":"KRW"}`, seats),
		"Authorization", "Bearer "+adminToken)
	if a.status != http.StatusCreated {
		t.Fatalf("create event = %d %v", a.status, a.body)
	}
}

// event reads an event's inventory.
func (r *rig) event(t *testing.T, id string) map[string]any {
	t.Helper()
	a := r.do(t, http.MethodGet, "/v1/events/"+id, "")
	if a.status != http.StatusOK {
		t.Fatalf("GET event = %d %v", a.status, a.body)
	}
	return a.body
}

// hold holds n seats for user with an admission token.
func (r *rig) hold(t testing.TB, event, user, admission string, n int) answer {
	return r.do(t, http.MethodPost, "/v1/events/"+event+"/holds", fmt.Sprintf(`{"seats":%d}`, n),
		protocol.HeaderUser, user, protocol.HeaderAdmission, admission)
}

// purchase pays for a hold.
func (r *rig) purchase(t testing.TB, hold, user, admission string) answer {
	return r.do(t, http.MethodPost, "/v1/holds/"+hold+"/purchase", "", protocol.HeaderUser, user, protocol.HeaderAdmission, admission)
}

// room is the waiting room's room the tests' admissions are for.
const room = "checkout-tests"

// signer signs the tests' admission tokens as the waiting room does.
var signer = func() *waitroom.AdmissionSigner {
	s, err := waitroom.NewAdmissionSigner(waitroom.KeySpec{Secret: []byte("checkout tests: the waiting room's secret"), Epoch: "t1"}, nil, nil)
	if err != nil {
		panic(err)
	}
	return s
}()

// verifier verifies admissions of room against signer's keys, online with
// online when it is not nil.
func verifier(online protocol.AdmissionChecker) protocol.AdmissionVerifier {
	return protocol.AdmissionVerifier{Room: room, Keys: protocol.StaticKeys(signer.JWKS()), Online: online}
}

// admissionToken is the waiting room's admission token for user to room,
// expiring at exp.
func admissionToken(user string, exp time.Time) string {
	return signedToken(signer, room, user, exp)
}

// signedToken is an admission token for user to room signed by s.
func signedToken(s *waitroom.AdmissionSigner, room, user string, exp time.Time) string {
	tok, err := s.Sign(protocol.AdmissionClaims{Room: room, User: user, Seq: 1, Expires: exp})
	if err != nil {
		panic(err)
	}
	return tok
}

// seatsOf reads the seat numbers of a hold or order body.
func seatsOf(body map[string]any) []int {
	var out []int
	list, _ := body["seats"].([]any)
	for _, v := range list {
		if f, ok := v.(float64); ok {
			out = append(out, int(f))
		}
	}
	return out
}

// fakeClock is a settable clock.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
