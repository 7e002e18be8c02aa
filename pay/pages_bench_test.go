package pay_test

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/binary"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stampede-lab/stampede/pay/sqlite"
)

// BenchmarkPaymentPages counts the pages a payment writes on SQLite: the
// WAL frames its two commits append (each frame is one page, written
// with two pwrite calls, its 24-byte header and the page), on a database
// holding 100,000 payments, at BenchmarkPaymentCost's 4 clients, against
// the floor's two bare commits in the same run. It is the mechanism
// behind most of BenchmarkPaymentCost's x-floor: the store's writer
// spends most of a commit writing these frames. A read transaction held
// open on another connection keeps the WAL from being reset or
// checkpointed past it, so that every frame of the measured stretch
// stays in the file; frame headers name the page, and SQLite's dbstat
// table names the table or index each page belongs to. With -v it logs
// the pages per payment of each table and index.
//
// Metrics: frames/payment, frames/floor (two bare commits) and
// x-floor-frames.
func BenchmarkPaymentPages(b *testing.B) {
	ctx := context.Background()
	path := filepath.Join(b.TempDir(), "pay.db")
	cfg := sqlite.DefaultConfig()
	cfg.Path = path
	s, err := sqlite.OpenConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	benchFillSQLite(b, path, benchCostSizes[1])
	var timed atomic.Bool
	post, _ := benchPayer(b, s, benchCostClients, &timed)
	bare := benchSQLiteBare(b, path)
	var seq atomic.Int64
	floor := func() error {
		for range 2 {
			if err := bare(ctx, fmt.Sprintf("pages-%d", seq.Add(1))); err != nil {
				return err
			}
		}
		return nil
	}
	if _, err := benchRun(4*benchCostClients, benchCostClients, post); err != nil {
		b.Fatal(err)
	}

	const chunk = 250
	var (
		frames   [2]int
		count    [2]int
		perTable = map[string]int{}
	)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j, op := range []func() error{post, floor} {
			pages, err := benchWALPages(ctx, path, func() error {
				_, err := benchRun(chunk, benchCostClients, op)
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
			frames[j] += len(pages)
			count[j] += chunk
			if j == 0 {
				for _, name := range benchPageOwners(b, path, pages) {
					perTable[name]++
				}
			}
		}
	}
	b.StopTimer()
	per := func(j int) float64 { return float64(frames[j]) / float64(count[j]) }
	b.ReportMetric(per(0), "frames/payment")
	b.ReportMetric(per(1), "frames/floor")
	b.ReportMetric(per(0)/per(1), "x-floor-frames")
	names := slices.SortedFunc(maps.Keys(perTable), func(x, y string) int { return cmp.Compare(perTable[y], perTable[x]) })
	var out strings.Builder
	for _, name := range names {
		fmt.Fprintf(&out, "\n%6.2f %s", float64(perTable[name])/float64(count[0]), name)
	}
	b.Logf("pages written per payment, by table or index:%s", out.String())
}

// benchWALPages runs op while a read transaction pins the WAL of the
// database at path and returns the page number of every frame op
// appended to it.
func benchWALPages(ctx context.Context, path string, op func() error) ([]uint32, error) {
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		return nil, err
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	// Empty the WAL first, then pin it: later frames can neither be
	// checkpointed nor overwritten while the read transaction lasts.
	if _, err := conn.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		return nil, err
	}
	if _, err := conn.ExecContext(ctx, `BEGIN`); err != nil {
		return nil, err
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), `ROLLBACK`) //nolint:errcheck // a read transaction
	var n int
	if err := conn.QueryRowContext(ctx, `SELECT count(*) FROM merchants`).Scan(&n); err != nil {
		return nil, err
	}
	before, err := os.ReadFile(path + "-wal")
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	if err := op(); err != nil {
		return nil, err
	}
	after, err := os.ReadFile(path + "-wal")
	if err != nil {
		return nil, err
	}
	// The WAL: a 32-byte header (page size at offset 8), then frames of
	// a 24-byte header (page number first) and one page.
	if len(after) < 32 {
		return nil, fmt.Errorf("WAL of %d bytes", len(after))
	}
	size := int(binary.BigEndian.Uint32(after[8:12]))
	start := max(32, len(before))
	var pages []uint32
	for off := start; off+24+size <= len(after); off += 24 + size {
		pages = append(pages, binary.BigEndian.Uint32(after[off:off+4]))
	}
	return pages, nil
}

// benchPageOwners names the table or index of every page in pages (the
// database's dbstat table; "?" for a page it does not list, such as a
// freelist page).
func benchPageOwners(b *testing.B, path string, pages []uint32) []string {
	b.Helper()
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)&_pragma=query_only(1)")
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT pageno, name FROM dbstat`)
	if err != nil {
		b.Fatal(err)
	}
	defer rows.Close()
	owner := map[uint32]string{}
	for rows.Next() {
		var (
			page uint32
			name string
		)
		if err := rows.Scan(&page, &name); err != nil {
			b.Fatal(err)
		}
		owner[page] = name
	}
	if err := rows.Err(); err != nil {
		b.Fatal(err)
	}
	out := make([]string, len(pages))
	for i, p := range pages {
		out[i] = cmp.Or(owner[p], "?")
	}
	return out
}
