package postgres_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	neturl "net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/internal/httpapi"
	"github.com/stampede-lab/stampede/internal/tcpproxy"
	"github.com/stampede-lab/stampede/internal/testenv"
	"github.com/stampede-lab/stampede/pay"
	"github.com/stampede-lab/stampede/pay/paytest"
	"github.com/stampede-lab/stampede/pay/postgres"
)

// databaseURL returns STAMPEDE_POSTGRES_URL, or skips the test (fails it in
// CI) when it is not set.
func databaseURL(t *testing.T) string {
	t.Helper()
	return testenv.URL(t, testenv.PostgresURL)
}

// freshSchema returns the name of a schema unique to this test, dropped
// with everything in it when the test ends.
func freshSchema(t *testing.T, url string) string {
	t.Helper()
	schema := fmt.Sprintf("stampede_test_%016x", rand.Uint64())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	return schema
}

// openSchema opens a store on schema, closed when the test ends (before
// the schema is dropped).
func openSchema(t *testing.T, url, schema string) *postgres.Store {
	t.Helper()
	cfg := postgres.DefaultConfig()
	cfg.URL, cfg.Schema = url, schema
	s, err := postgres.OpenConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("OpenConfig: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestConformance runs the suite on the PostgreSQL server named by
// STAMPEDE_POSTGRES_URL, in a schema of its own shared by every test.
func TestConformance(t *testing.T) {
	t.Parallel()
	url := databaseURL(t)
	s := openSchema(t, url, freshSchema(t, url))
	paytest.Exercise(t, func(*testing.T) pay.Store { return s }, paytest.Options{})
}

// TestConformanceFreshStores runs the suite with a new store (and
// connections) per test on one schema, migrated again each time.
func TestConformanceFreshStores(t *testing.T) {
	t.Parallel()
	url := databaseURL(t)
	schema := freshSchema(t, url)
	paytest.Exercise(t, func(t *testing.T) pay.Store { return openSchema(t, url, schema) }, paytest.Options{})
}

// TestConcurrentOpenMigratesOnce: instances starting together on an empty
// schema all open, and each migration is recorded once.
func TestConcurrentOpenMigratesOnce(t *testing.T) {
	t.Parallel()
	url := databaseURL(t)
	schema := freshSchema(t, url)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() { openSchema(t, url, schema) })
	}
	wg.Wait()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var n int
	if err := c.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{schema, "goose_db_version"}.Sanitize()+` WHERE version_id = 1`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("goose_db_version records migration 1 %d times, want once", n)
	}
}

// TestUnreachableIsUnavailable: a server that refuses connections is
// CodeUnavailable. Runs without a database.
func TestUnreachableIsUnavailable(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = postgres.Open(ctx, "postgres://postgres@"+addr+"/test?sslmode=disable&connect_timeout=2")
	if pay.ErrorCode(err) != pay.CodeUnavailable || httpapi.StatusOf(pay.MapError(err)) != 503 {
		t.Fatalf("Open on a closed port = %v, want unavailable (503)", err)
	}
}

// TestClosedStoreIsUnavailable: every call on a closed store fails with
// CodeUnavailable.
func TestClosedStoreIsUnavailable(t *testing.T) {
	t.Parallel()
	url := databaseURL(t)
	s := openSchema(t, url, freshSchema(t, url))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p := pay.Payment{ID: pay.NewID(), MerchantID: pay.NewID(), OrderID: "o", Amount: 1, Currency: "USD"}
	_, errCreate := s.CreatePending(ctx, p, pay.IdempotencyRecord{Key: "k"})
	_, errGet := s.Get(ctx, p.ID)
	_, errList := s.List(ctx, "", 10)
	for name, err := range map[string]error{"Ping": s.Ping(ctx), "CreatePending": errCreate, "Get": errGet, "List": errList} {
		if pay.ErrorCode(err) != pay.CodeUnavailable {
			t.Errorf("%s on a closed store = %v, want unavailable", name, err)
		}
	}
}

// TestKilledConnectionIsUnavailableThenRecovers: when the server ends the
// store's idle connections, the next call fails with CodeUnavailable (or
// succeeds) and the store recovers; a connection idle for over a second is
// checked before use, so the call after a longer pause succeeds.
func TestKilledConnectionIsUnavailableThenRecovers(t *testing.T) {
	t.Parallel()
	url := databaseURL(t)
	schema := freshSchema(t, url)
	// Tag the store's connections so that only they are terminated: the
	// database is shared.
	tagged := url + "&application_name=" + schema
	if !strings.Contains(url, "?") {
		tagged = url + "?application_name=" + schema
	}
	s := openSchema(t, tagged, schema)
	ctx := context.Background()
	if err := s.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if killed := terminate(t, c, schema); killed == 0 {
		t.Fatal("found no connection of the store to terminate")
	}
	time.Sleep(50 * time.Millisecond) // let the termination reach the client socket
	err = s.Ping(ctx)
	t.Logf("Ping after the server ended the connection: %v", err)
	if err != nil && pay.ErrorCode(err) != pay.CodeUnavailable {
		t.Fatalf("Ping after the server ended the connection = %v, want success or unavailable", err)
	}
	if _, err := s.List(ctx, "", 1); err != nil {
		t.Fatalf("List after recovery: %v", err)
	}
	// Again, but the store's connection has been idle for longer than a
	// second: it is checked and replaced, and the caller sees no error.
	if killed := terminate(t, c, schema); killed == 0 {
		t.Fatal("found no connection of the store to terminate")
	}
	time.Sleep(1100 * time.Millisecond)
	if _, err := s.List(ctx, "", 1); err != nil {
		t.Fatalf("List after an idle connection was ended: %v", err)
	}
}

// terminate ends the server processes of connections named app.
func terminate(t *testing.T, c *pgx.Conn, app string) int {
	t.Helper()
	var killed int
	if err := c.QueryRow(context.Background(), `SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE application_name = $1 AND pid <> pg_backend_pid()) k`, app).Scan(&killed); err != nil {
		t.Fatal(err)
	}
	return killed
}

// TestConfigValidateNamesFields: every invalid field is reported by name.
func TestConfigValidateNamesFields(t *testing.T) {
	cfg := postgres.DefaultConfig()
	cfg.URL = "postgres://localhost/db"
	if err := cfg.Validate(); err != nil {
		t.Fatalf("Validate() = %v", err)
	}
	err := postgres.Config{Schema: "Bad-Name", ConnectTimeout: -1}.Validate()
	var got []string
	for _, e := range stampede.FieldErrors(err) {
		got = append(got, e.Field)
	}
	if want := []string{"postgres", "schema", "max_conns", "connect_timeout", "db_timeout", "now"}; !slices.Equal(got, want) {
		t.Errorf("Validate() = %v, fields %v; want every bad field named as its flag: %v", err, got, want)
	}
}

// TestFrozenIsUnavailable: with the server behind a proxy that stops
// forwarding (a frozen database, a dead network path), every call fails
// with CodeUnavailable within the operation timeout, and the store
// recovers once traffic flows again.
func TestFrozenIsUnavailable(t *testing.T) {
	t.Parallel()
	url := databaseURL(t)
	schema := freshSchema(t, url)
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	px, err := tcpproxy.Start(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(px.Close)
	u.Host = px.Addr()
	cfg := postgres.DefaultConfig()
	cfg.URL, cfg.Schema, cfg.OpTimeout, cfg.MaxConns = u.String(), schema, 300*time.Millisecond, 4
	s, err := postgres.OpenConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("OpenConfig through the proxy: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	paytest.RunFrozen(t, paytest.Frozen{Store: s, OpTimeout: cfg.OpTimeout, Freeze: px.Freeze, Thaw: px.Thaw})
}

// TestTakesOverAPreGooseSchema: a schema made by the hand-written
// migration code that came before goose (the same tables, recorded in
// schema_migrations) opens with its data and is recorded as migrated.
func TestTakesOverAPreGooseSchema(t *testing.T) {
	t.Parallel()
	url := databaseURL(t)
	schema := freshSchema(t, url)
	body, err := os.ReadFile("migrations/0001_init.sql")
	if err != nil {
		t.Fatal(err)
	}
	// What the old code ran: the same statements, without IF NOT EXISTS.
	legacy := strings.NewReplacer(" IF NOT EXISTS", "", "-- +goose Up", "").Replace(string(body))
	ctx := context.Background()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	id := pay.NewID()
	for _, q := range []string{
		`CREATE SCHEMA ` + schema,
		`SET search_path = ` + schema,
		`CREATE TABLE schema_migrations (version text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`,
		legacy,
		`INSERT INTO schema_migrations (version) VALUES ('0001_init')`,
		`INSERT INTO payments (id, merchant_id, order_id, amount, currency, status, external_key, idempotency_key,
			created_at, updated_at, event_seq) VALUES ('` + id + `', '` + pay.NewID() + `', 'o-old', 700, 'EUR', 'UNKNOWN', '` + id + `', 'old-key',
			'2020-01-01T00:00:00Z', '2020-01-01T00:00:02Z', 2)`,
	} {
		if _, err := c.Exec(ctx, q); err != nil {
			t.Fatalf("%.40s...: %v", q, err)
		}
	}
	s := openSchema(t, url, schema)
	got, err := s.Get(ctx, id)
	if err != nil || got.Amount != 700 || got.Status != pay.StatusUnknown || !got.UpdatedAt.Equal(time.Date(2020, 1, 1, 0, 0, 2, 0, time.UTC)) {
		t.Fatalf("the old payment after the take-over: %+v, %v", got, err)
	}
	if _, err := s.Transition(ctx, id, pay.StatusUnknown, pay.StatusApproved, "inquiry"); err != nil {
		t.Fatalf("Transition of the old payment: %v", err)
	}
	var n int
	if err := c.QueryRow(ctx, `SELECT count(*) FROM goose_db_version WHERE version_id = 1 AND is_applied`).Scan(&n); err != nil || n != 1 {
		t.Errorf("goose_db_version has migration 1 %d times (%v), want once", n, err)
	}
}
