package pay_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "modernc.org/sqlite" // the "sqlite" database/sql driver, as pay/sqlite uses

	instapi "github.com/stampede-lab/stampede/institution/api"
	instclient "github.com/stampede-lab/stampede/institution/client"
	"github.com/stampede-lab/stampede/internal/testenv"
	"github.com/stampede-lab/stampede/pay"
	payapi "github.com/stampede-lab/stampede/pay/api"
	"github.com/stampede-lab/stampede/pay/institutionclient"
	"github.com/stampede-lab/stampede/pay/postgres"
	"github.com/stampede-lab/stampede/pay/sqlite"
)

// Every identifier of this file starts with "bench" so that it cannot
// clash with the helpers of the package's other test files. It reuses
// adminToken and payment from service_test.go.

// benchClientCounts are the client counts of the scaling curves: each
// sub-benchmark clients=N sends N requests at once, in both measurements.
var benchClientCounts = []int{1, 4, 16, 64}

// benchChunkOf returns the items of one measurement chunk at clients
// clients, for payments and bare transactions alike: 500, or 125 per
// client below 4 clients (one client is slow, and the count is large
// enough for its p99).
func benchChunkOf(clients int) int { return 125 * min(clients, 4) }

// benchBare runs one bare transaction for item id: insert a row, update
// it, commit.
type benchBare func(ctx context.Context, id string) error

// BenchmarkPaymentsHTTP measures payments per second through the payment
// API over real HTTP (httptest), 16 clients at once, each POST
// /v1/payments with a unique Idempotency-Key answered 201 APPROVED by the
// institution simulator in NORMAL mode (no latency, over HTTP too), on
// SQLite and on PostgreSQL. Its baseline is the same database doing bare
// transactions at the same concurrency: per item one transaction that
// inserts a row into a scratch table and updates it, what the storage of a
// payment costs at the least (a payment is two write transactions:
// CreatePending, then Transition). Each iteration runs one chunk of each,
// alternating which goes first, so that drift weighs on both alike.
// Metrics: payments/s, bare-tx/s, x-bare = payments/s ÷ bare-tx/s, and
// p99-ms, the 99th percentile of a payment's latency as its client saw it.
// Sub-benchmarks: sqlite/clients=N and postgres/clients=N for N in 1, 4,
// 16, 64 (the scaling curves that cmd/benchchart draws).
//
// The postgres sub-benchmarks need STAMPEDE_POSTGRES_URL and work in a
// fresh schema stampede_bench_<random>, dropped at the end.
func BenchmarkPaymentsHTTP(b *testing.B) {
	for _, clients := range benchClientCounts {
		b.Run(fmt.Sprintf("sqlite/clients=%d", clients), func(b *testing.B) {
			benchSQLite(b, sqlite.DefaultConfig(), clients)
		})
	}
	for _, clients := range benchClientCounts {
		b.Run(fmt.Sprintf("postgres/clients=%d", clients), func(b *testing.B) {
			benchPostgres(b, postgres.DefaultConfig(), clients)
		})
	}
}

// BenchmarkPaymentsPostgresPool measures BenchmarkPaymentsHTTP's
// PostgreSQL payments against the size of the store's connection pool
// (postgres.Config.MaxConns; the bare baseline gets the same pool), at 16
// and 64 clients. synchronous_commit stays at the server's default, on:
// every commit waits for its WAL flush.
func BenchmarkPaymentsPostgresPool(b *testing.B) {
	for _, clients := range []int{16, 64} {
		for _, pool := range []int{2, 4, 10, 32} {
			b.Run(fmt.Sprintf("clients=%d/pool=%d", clients, pool), func(b *testing.B) {
				cfg := postgres.DefaultConfig()
				cfg.MaxConns = pool
				benchPostgres(b, cfg, clients)
			})
		}
	}
}

// BenchmarkPaymentsSQLiteGroupCommit compares SQLite with and without
// group commit (sqlite.Config.GroupCommit) at 16 and 64 clients.
func BenchmarkPaymentsSQLiteGroupCommit(b *testing.B) {
	for _, clients := range []int{16, 64} {
		for _, group := range []bool{false, true} {
			b.Run(fmt.Sprintf("clients=%d/group=%t", clients, group), func(b *testing.B) {
				cfg := sqlite.DefaultConfig()
				cfg.GroupCommit = group
				benchSQLite(b, cfg, clients)
			})
		}
	}
}

// benchSQLite runs the measurement on a fresh SQLite file opened with cfg
// (its Path replaced).
func benchSQLite(b *testing.B, cfg sqlite.Config, clients int) {
	path := filepath.Join(b.TempDir(), "pay.db")
	cfg.Path = path
	store, err := sqlite.OpenConfig(context.Background(), cfg)
	if err != nil {
		b.Fatalf("sqlite.OpenConfig: %v", err)
	}
	b.Cleanup(func() { store.Close() })
	benchPaymentsVsBare(b, store, benchSQLiteBare(b, path), clients)
}

// benchPostgres runs the measurement in a fresh schema with cfg (its URL
// and Schema replaced).
func benchPostgres(b *testing.B, cfg postgres.Config, clients int) {
	dbURL := testenv.URL(b, testenv.PostgresURL)
	schema := benchSchema(b, dbURL)
	cfg.URL, cfg.Schema = dbURL, schema
	store, err := postgres.OpenConfig(context.Background(), cfg)
	if err != nil {
		b.Fatalf("postgres.OpenConfig: %v", err)
	}
	b.Cleanup(func() { store.Close() })
	benchPaymentsVsBare(b, store, benchPostgresBare(b, dbURL, schema, cfg.MaxConns), clients)
}

// benchPaymentsVsBare runs the measurement on store with clients clients,
// with bare as the baseline on the same database.
func benchPaymentsVsBare(b *testing.B, store pay.Store, bare benchBare, clients int) {
	b.Helper()
	ctx := context.Background()
	chunk, warmup := benchChunkOf(clients), 4*clients

	var timed atomic.Bool
	postOne, latenciesOf := benchPayer(b, store, clients, &timed)
	var seq atomic.Int64
	run := fmt.Sprintf("%016x", rand.Uint64()) // unique across runs on one database
	bareOne := func() error {
		id := fmt.Sprintf("bare-%s-%d", run, seq.Add(1))
		if err := bare(ctx, id); err != nil {
			return fmt.Errorf("bare transaction %s: %w", id, err)
		}
		return nil
	}

	if _, err := benchRun(warmup, clients, postOne); err != nil {
		b.Fatal(err)
	}
	if _, err := benchRun(warmup, clients, bareOne); err != nil {
		b.Fatal(err)
	}
	timed.Store(true)

	var payTime, bareTime, payCPU, bareCPU time.Duration
	var pays, bares int
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		phases := []func() error{
			func() error {
				cpu0 := benchProcessCPU()
				d, err := benchRun(chunk, clients, postOne)
				payTime, pays, payCPU = payTime+d, pays+chunk, payCPU+benchProcessCPU()-cpu0
				return err
			},
			func() error {
				cpu0 := benchProcessCPU()
				d, err := benchRun(chunk, clients, bareOne)
				bareTime, bares, bareCPU = bareTime+d, bares+chunk, bareCPU+benchProcessCPU()-cpu0
				return err
			},
		}
		if i%2 == 1 {
			phases[0], phases[1] = phases[1], phases[0]
		}
		for _, phase := range phases {
			if err := phase(); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	paysPerS := float64(pays) / payTime.Seconds()
	baresPerS := float64(bares) / bareTime.Seconds()
	b.ReportMetric(paysPerS, "payments/s")
	b.ReportMetric(baresPerS, "bare-tx/s")
	b.ReportMetric(paysPerS/baresPerS, "x-bare")
	// CPU time of this process (clients, API, institution and, for
	// SQLite, the database) per item; a PostgreSQL server's is not in it.
	b.ReportMetric(float64(payCPU.Microseconds())/float64(pays), "cpu-us/payment")
	b.ReportMetric(float64(bareCPU.Microseconds())/float64(bares), "cpu-us/bare-tx")
	// What the CPU alone allows: the bare transaction's CPU over the
	// payment's, x-bare's value on a machine that only this process keeps
	// busy (SQLite; PostgreSQL's server CPU is not counted).
	b.ReportMetric((float64(bareCPU)/float64(bares))/(float64(payCPU)/float64(pays)), "cpu-x-bare")
	latencies := latenciesOf()
	slices.Sort(latencies)
	if len(latencies) > 0 {
		p99 := latencies[min(len(latencies)-1, len(latencies)*99/100)]
		b.ReportMetric(float64(p99)/float64(time.Millisecond), "p99-ms")
	}
}

// benchPayer starts the payment API on store, with the institution
// simulator and the service's background work running, as serve pay runs
// it, for up to clients clients at once, and returns one payment: POST
// /v1/payments with a unique Idempotency-Key, answered 201 APPROVED.
// Payments made while timed reports true have their latency added to
// the returned list (under its mutex).
func benchPayer(b *testing.B, store pay.Store, clients int, timed *atomic.Bool) (postOne func() error, latenciesOf func() []time.Duration) {
	b.Helper()
	ctx := context.Background()
	// Idle connections for every client: the default transport keeps 2
	// per host, and 16 clients would then open and close a connection
	// for most requests, measuring TCP set-up and filling TIME_WAIT.
	tr := &http.Transport{MaxIdleConns: 4 * clients, MaxIdleConnsPerHost: 2 * clients, IdleConnTimeout: time.Minute}
	b.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}

	// The institution: NORMAL mode (DefaultBehavior) answers at once.
	icfg := instapi.DefaultConfig()
	icfg.AdminToken = adminToken
	icfg.Logger = slog.New(slog.DiscardHandler) // no request log in the timed loop
	isrv, err := instapi.New(icfg)
	if err != nil {
		b.Fatalf("instapi.New: %v", err)
	}
	its := httptest.NewServer(isrv)
	b.Cleanup(func() { its.Close(); isrv.Close() })

	// The payment service, as serve_pay runs it (minus the outbox relay):
	// DefaultConfig, the reconciler and idempotency expiry running.
	svc, err := pay.NewService(store, institutionclient.New(instclient.NewClient(its.URL, hc)), pay.DefaultConfig())
	if err != nil {
		b.Fatalf("pay.NewService: %v", err)
	}
	hcfg := payapi.DefaultConfig()
	hcfg.Logger = slog.New(slog.DiscardHandler) // no request log in the timed loop
	h, err := payapi.New(svc, store, hcfg, nil)
	if err != nil {
		b.Fatalf("pay.NewHandler: %v", err)
	}
	api := httptest.NewServer(h)
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan struct{})
	go func() { defer close(ran); _ = svc.Run(runCtx) }()
	// Cleanups run last-in first-out: the API closes, then Run stops,
	// then (registered earlier) the institution and the store close.
	b.Cleanup(func() { stop(); <-ran })
	b.Cleanup(api.Close)

	run := fmt.Sprintf("%016x", rand.Uint64()) // unique across runs on one database
	mid, apiKey := addMerchant(b, store, "")   // a merchant of this run
	var (
		seq       atomic.Int64
		latMu     sync.Mutex
		latencies []time.Duration // of the timed payments
	)
	postOne = func() error {
		start := time.Now()
		n := seq.Add(1)
		key := fmt.Sprintf("bench-%s-%d", run, n)
		req, err := http.NewRequest(http.MethodPost, api.URL+"/v1/payments", strings.NewReader(paymentOf(mid, "order-"+key, 1000+n%9000)))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Authorization", "Bearer "+apiKey)
		res, err := hc.Do(req)
		if err != nil {
			return fmt.Errorf("POST %s: %w", key, err)
		}
		body, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil {
			return fmt.Errorf("POST %s: reading the answer: %w", key, err)
		}
		var got struct {
			Status string `json:"status"`
		}
		if res.StatusCode != http.StatusCreated || json.Unmarshal(body, &got) != nil || got.Status != string(pay.StatusApproved) {
			return fmt.Errorf("POST %s = %d %s, want 201 APPROVED", key, res.StatusCode, body)
		}
		if timed.Load() {
			took := time.Since(start)
			latMu.Lock()
			latencies = append(latencies, took)
			latMu.Unlock()
		}
		return nil
	}
	return postOne, func() []time.Duration {
		latMu.Lock()
		defer latMu.Unlock()
		return slices.Clone(latencies)
	}
}

// benchProcessCPU returns the CPU time (user and system, every thread)
// this process has used so far.
func benchProcessCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchRun runs n operations on clients goroutines and returns how long
// they took; the first error stops the run.
func benchRun(n, clients int, op func() error) (time.Duration, error) {
	var (
		next    atomic.Int64
		errOnce sync.Once
		first   error
		failed  atomic.Bool
		wg      sync.WaitGroup
	)
	start := time.Now()
	for range clients {
		wg.Go(func() {
			for !failed.Load() {
				if next.Add(1) > int64(n) {
					return
				}
				if err := op(); err != nil {
					errOnce.Do(func() { first = err })
					failed.Store(true)
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start), first
}

// benchSQLiteBare opens the SQLite file at path a second time, the way
// pay/sqlite opens its writer (WAL, synchronous NORMAL, 5 s busy timeout,
// one connection, BEGIN IMMEDIATE), creates the scratch table bench_bare
// and returns its bare transaction.
func benchSQLiteBare(b *testing.B, path string) benchBare {
	b.Helper()
	q := url.Values{"_pragma": {"busy_timeout(5000)", "journal_mode(WAL)", "synchronous(NORMAL)", "foreign_keys(1)"}}
	db, err := sql.Open("sqlite", path+"?"+q.Encode()+"&_txlock=immediate")
	if err != nil {
		b.Fatalf("open %s: %v", path, err)
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	b.Cleanup(func() { db.Close() })
	if _, err := db.Exec(`CREATE TABLE bench_bare (id TEXT PRIMARY KEY, status TEXT NOT NULL)`); err != nil {
		b.Fatalf("create bench_bare: %v", err)
	}
	return func(ctx context.Context, id string) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback() //nolint:errcheck // a no-op after Commit
		if _, err := tx.ExecContext(ctx, `INSERT INTO bench_bare (id, status) VALUES (?, 'PENDING')`, id); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE bench_bare SET status = 'APPROVED' WHERE id = ?`, id); err != nil {
			return err
		}
		return tx.Commit()
	}
}

// benchSchema returns a fresh schema name, dropped with everything in it
// when the benchmark ends (after the pools, closed by later cleanups).
func benchSchema(b *testing.B, dbURL string) string {
	b.Helper()
	schema := fmt.Sprintf("stampede_bench_%016x", rand.Uint64())
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, dbURL)
		if err != nil {
			b.Errorf("drop schema %s: %v", schema, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`); err != nil {
			b.Errorf("drop schema %s: %v", schema, err)
		}
	})
	return schema
}

// benchPostgresBare opens a pgx pool on schema with as many connections as
// the store's, creates the scratch table bench_bare there and returns its
// bare transaction.
func benchPostgresBare(b *testing.B, dbURL, schema string, maxConns int) benchBare {
	b.Helper()
	ctx := context.Background()
	pc, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		b.Fatalf("STAMPEDE_POSTGRES_URL: %v", err)
	}
	pc.ConnConfig.RuntimeParams["search_path"] = schema
	pc.MaxConns = int32(maxConns)
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		b.Fatalf("pgxpool: %v", err)
	}
	b.Cleanup(pool.Close)
	if _, err := pool.Exec(ctx, `CREATE TABLE bench_bare (id text PRIMARY KEY, status text NOT NULL)`); err != nil {
		b.Fatalf("create bench_bare: %v", err)
	}
	return func(ctx context.Context, id string) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO bench_bare (id, status) VALUES ($1, 'PENDING')`, id); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `UPDATE bench_bare SET status = 'APPROVED' WHERE id = $1`, id)
			return err
		})
	}
}
