package pay_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stampede-lab/stampede/internal/testenv"
	"github.com/stampede-lab/stampede/pay"
	"github.com/stampede-lab/stampede/pay/postgres"
	"github.com/stampede-lab/stampede/pay/sqlite"
)

// benchCostClients is the concurrency of BenchmarkPaymentCost: every
// measurement sends this many requests at once.
const benchCostClients = 4

// benchCostSizes are the stored histories BenchmarkPaymentCost compares:
// payments already in the database (each with its idempotency record,
// two published outbox rows, which carry its two history entries)
// before it starts.
var benchCostSizes = [2]int{1_000, 100_000}

// BenchmarkPaymentCost measures the CPU time of one payment (POST
// /v1/payments through the API over HTTP, institution simulator
// included, answered 201 APPROVED) on a database holding 1,000 payments
// and on one holding 100,000 (written by bulk SQL before the timer
// starts), and the floor the issue names: two no-op HTTP round trips (the
// payment's two requests, to the API and to the institution) plus two
// bare write transactions (a payment's two commits) on the same
// database, all at 4 clients in one run, each iteration running one chunk
// of each in rotating order. Metrics: cpu-us/payment-1k,
// cpu-us/payment-100k, x-100k-vs-1k (flat is 1), cpu-us/floor and
// x-floor (the 100k payment over the floor). CPU is this process's
// (clients, API, institution and SQLite) plus, on PostgreSQL, its server
// processes serving the benchmark's connections (read from /proc: the
// server must run on this machine).
func BenchmarkPaymentCost(b *testing.B) {
	b.Run("sqlite", func(b *testing.B) {
		var stores [2]pay.Store
		var bare benchBare
		for i, n := range benchCostSizes {
			path := filepath.Join(b.TempDir(), "pay.db")
			cfg := sqlite.DefaultConfig()
			cfg.Path = path
			s, err := sqlite.OpenConfig(context.Background(), cfg)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close() })
			benchFillSQLite(b, path, n)
			stores[i] = s
			if i == 1 {
				bare = benchSQLiteBare(b, path)
			}
		}
		benchCost(b, stores, bare, func() time.Duration { return 0 })
	})
	b.Run("postgres", func(b *testing.B) {
		dbURL := testenv.URL(b, testenv.PostgresURL)
		app := fmt.Sprintf("stampede_cost_%d", time.Now().UnixNano())
		tagged := benchWithApp(b, dbURL, app)
		var stores [2]pay.Store
		var bare benchBare
		for i, n := range benchCostSizes {
			schema := benchSchema(b, dbURL)
			cfg := postgres.DefaultConfig()
			cfg.URL, cfg.Schema = tagged, schema
			s, err := postgres.OpenConfig(context.Background(), cfg)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close() })
			benchFillPostgres(b, dbURL, schema, n)
			stores[i] = s
			if i == 1 {
				bare = benchPostgresBare(b, tagged, schema, cfg.MaxConns)
			}
		}
		benchCost(b, stores, bare, func() time.Duration { return benchServerCPU(b, dbURL, app) })
	})
}

// benchCost runs BenchmarkPaymentCost's measurement: stores[0] and
// stores[1] hold the two histories, bare is the bare transaction on the
// larger one's database, serverCPU the CPU a database server has used
// for the benchmark so far (0 when the database is in this process).
func benchCost(b *testing.B, stores [2]pay.Store, bare benchBare, serverCPU func() time.Duration) {
	ctx := context.Background()
	const chunk = 250
	var timed atomic.Bool
	var pays [2]func() error
	for i, s := range stores {
		pays[i], _ = benchPayer(b, s, benchCostClients, &timed)
	}
	noop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	b.Cleanup(noop.Close)
	tr := &http.Transport{MaxIdleConns: 4 * benchCostClients, MaxIdleConnsPerHost: 2 * benchCostClients}
	b.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	body := paymentOf(pay.NewID(), "order-floor", 1000)
	var seq atomic.Int64
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	floor := func() error {
		for range 2 {
			res, err := hc.Post(noop.URL, "application/json", strings.NewReader(body))
			if err != nil {
				return err
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}
		for range 2 {
			if err := bare(ctx, fmt.Sprintf("floor-%s-%d", run, seq.Add(1))); err != nil {
				return err
			}
		}
		return nil
	}
	ops := []func() error{pays[0], pays[1], floor}
	for _, op := range ops {
		if _, err := benchRun(4*benchCostClients, benchCostClients, op); err != nil {
			b.Fatal(err)
		}
	}
	var cpu [3]time.Duration
	var count [3]int
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for k := range ops {
			j := (i + k) % len(ops)
			cpu0, srv0 := benchProcessCPU(), serverCPU()
			if _, err := benchRun(chunk, benchCostClients, ops[j]); err != nil {
				b.Fatal(err)
			}
			cpu[j] += benchProcessCPU() - cpu0 + serverCPU() - srv0
			count[j] += chunk
		}
	}
	b.StopTimer()
	per := func(j int) float64 { return float64(cpu[j].Microseconds()) / float64(count[j]) }
	b.ReportMetric(per(0), "cpu-us/payment-1k")
	b.ReportMetric(per(1), "cpu-us/payment-100k")
	b.ReportMetric(per(1)/per(0), "x-100k-vs-1k")
	b.ReportMetric(per(2), "cpu-us/floor")
	b.ReportMetric(per(1)/per(2), "x-floor")
}

// benchFillSQLite writes n approved payments of a merchant of their own,
// with what a payment leaves behind (its idempotency record, two
// published outbox rows carrying its two history entries), into the
// SQLite file at path, in
// one transaction of bulk INSERT ... SELECT statements.
func benchFillSQLite(b *testing.B, path string, n int) {
	b.Helper()
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)&_txlock=immediate")
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	now := time.Now().UnixMicro()
	benchFill(b, db, fmt.Sprintf(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < %d) `, n),
		"printf('00000000-0000-4000-8000-%012d', i)", "n", strconv.FormatInt(now, 10), strconv.FormatInt(now+86_400_000_000, 10))
}

// benchFillPostgres does what benchFillSQLite does, in schema.
func benchFillPostgres(b *testing.B, dbURL, schema string, n int) {
	b.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		b.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	db, err := sql.Open("pgx", u.String())
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	benchFill(b, db, "", "'00000000-0000-4000-8000-' || lpad(i::text, 12, '0')", fmt.Sprintf("generate_series(1, %d) AS i", n),
		"now()", "now() + interval '1 day'")
	if _, err := db.Exec(`ANALYZE`); err != nil {
		b.Fatal(err)
	}
}

// benchFill runs the filling statements on db: with is a WITH clause naming
// the numbers ("" if none is needed), id the expression of payment i's
// ID, from what the numbers i are selected from, now and later the times
// written.
func benchFill(b *testing.B, db *sql.DB, with, id, from, now, later string) {
	b.Helper()
	src := func(cols string) string {
		return with + `SELECT ` + strings.ReplaceAll(cols, "ID", "x.id") + ` FROM (SELECT ` + id + ` AS id FROM ` + from + `) x`
	}
	stmts := []string{
		`INSERT INTO payments (id, merchant_id, order_id, amount, currency, status, external_key, idempotency_key,
			manual_review, review_reason, created_at, updated_at, event_seq, inquiries, live_order) ` +
			src(`ID, 'fill-merchant', 'fill-' || ID, 1000, 'KRW', 'APPROVED', 'ext-' || ID, 'fill-' || ID, false, '', `+now+`, `+now+`, 2, 0, 'fill-' || ID`),
		`INSERT INTO idempotency_keys (key, request_hash, payment_id, created_at, expires_at) ` +
			src(`'fill-' || ID, 'hash', ID, `+now+`, `+later),
		`INSERT INTO outbox (payment_id, seq, type, payload, created_at, published_at, merchant_id, from_status, to_status, reason) ` +
			src(`ID, 1, 'payment.created', '{}', `+now+`, `+now+`, 'fill-merchant', '', 'PENDING', 'created'`),
		`INSERT INTO outbox (payment_id, seq, type, payload, created_at, published_at, merchant_id, from_status, to_status, reason) ` +
			src(`ID, 2, 'payment.status_changed', '{}', `+now+`, `+now+`, 'fill-merchant', 'PENDING', 'APPROVED', 'approved'`),
	}
	tx, err := db.Begin()
	if err != nil {
		b.Fatal(err)
	}
	for _, s := range stmts {
		if _, err := tx.Exec(s); err != nil {
			tx.Rollback() //nolint:errcheck // failing anyway
			b.Fatalf("fill: %v\n%s", err, s)
		}
	}
	if err := tx.Commit(); err != nil {
		b.Fatal(err)
	}
}

// benchWithApp returns dbURL with application_name app, so that the
// server's processes serving it can be found (benchServerCPU).
func benchWithApp(b *testing.B, dbURL, app string) string {
	u, err := url.Parse(dbURL)
	if err != nil {
		b.Fatal(err)
	}
	q := u.Query()
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	return u.String()
}

// benchServerCPU returns the CPU time (user and system) used so far by
// the PostgreSQL server processes whose application_name is app, from
// /proc/<pid>/stat (the server runs on this machine).
func benchServerCPU(b *testing.B, dbURL, app string) time.Duration {
	ctx := context.Background()
	c, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close(ctx)
	rows, err := c.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE application_name = $1`, app)
	if err != nil {
		b.Fatal(err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		b.Fatal(err)
	}
	var total time.Duration
	for _, pid := range pids {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue // exited
		}
		// The fields after the command's closing parenthesis: utime and
		// stime are the 12th and 13th, in clock ticks (100 a second).
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		u, _ := strconv.ParseInt(f[11], 10, 64)
		s, _ := strconv.ParseInt(f[12], 10, 64)
		total += time.Duration(u+s) * 10 * time.Millisecond
	}
	return total
}
