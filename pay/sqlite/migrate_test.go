package sqlite_test

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pressly/goose/v3"

	"github.com/stampede-lab/stampede/pay/paytest"
)

// v9Database writes, on the schema of migration 9, the fixture
// paytest.CheckMigration10 reads (payments a and b) and, with orphan, a
// payment c whose history entry has no event. It returns the file's path, open.
func v9Database(t *testing.T, orphan bool) (string, *sql.DB, *goose.Provider) {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "v9.db")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	p, err := goose.NewProvider(goose.DialectSQLite3, db, os.DirFS("migrations"), goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(ctx, 9); err != nil {
		t.Fatalf("up to 9: %v", err)
	}
	stmts := []string{
		`INSERT INTO payments (id, merchant_id, order_id, amount, currency, status, external_key, idempotency_key, created_at, updated_at, event_seq)
			VALUES ('a', '` + paytest.MigrationMerchant + `', 'oa', 100, 'KRW', 'APPROVED', 'a', 'ka', 1000000, 3000000, 3),
			       ('b', '` + paytest.MigrationMerchant + `', 'ob', 100, 'KRW', 'PENDING', 'b', 'kb', 4000000, 4000000, 1)`,
		`INSERT INTO outbox (payment_id, seq, type, payload, created_at, merchant_id) VALUES
			('a', 1, 'payment.created', '{}', 1000000, '` + paytest.MigrationMerchant + `'),
			('b', 1, 'payment.created', '{}', 4000000, '` + paytest.MigrationMerchant + `'),
			('a', 2, 'payment.review_flagged', '{}', 2000000, '` + paytest.MigrationMerchant + `'),
			('a', 3, 'payment.status_changed', '{}', 3000000, '` + paytest.MigrationMerchant + `')`,
		`INSERT INTO payment_history (payment_id, from_status, to_status, reason, at) VALUES
			('a', '', 'PENDING', 'created', 1000000),
			('b', '', 'PENDING', 'created', 4000000),
			('a', 'PENDING', 'APPROVED', 'approved', 3000000)`,
		`INSERT INTO idempotency_keys (key, request_hash, payment_id, state, created_at, expires_at) VALUES
			('ka', 'ha', 'a', 'completed', 1000000, 90000000000),
			('kb', 'hb', 'b', 'in_flight', 4000000, 90000000000)`,
	}
	if orphan {
		stmts = append(stmts,
			`INSERT INTO payments (id, merchant_id, order_id, amount, currency, status, external_key, idempotency_key, created_at, updated_at)
				VALUES ('c', '`+paytest.MigrationMerchant+`', 'oc', 100, 'KRW', 'PENDING', 'c', 'kc', 5000000, 5000000)`,
			`INSERT INTO payment_history (payment_id, from_status, to_status, reason, at) VALUES ('c', '', 'PENDING', 'created', 5000000)`)
	}
	for _, q := range stmts {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%.50s...: %v", q, err)
		}
	}
	return path, db, p
}

// TestMigration10KeepsHistoryAndRecordStates: migration 10 moves each
// history entry to the event it was written with, the idempotency
// records keep their states (now read from their payments), and its
// down migration gives both back.
func TestMigration10KeepsHistoryAndRecordStates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path, db, p := v9Database(t, false)
	if _, err := p.UpTo(ctx, 10); err != nil {
		t.Fatalf("up to 10: %v", err)
	}
	s := open(t, path)
	paytest.CheckMigration10(t, s)
	s.Close()

	if _, err := p.DownTo(ctx, 9); err != nil {
		t.Fatalf("down to 9: %v", err)
	}
	var got []string
	rows, err := db.QueryContext(ctx, `SELECT payment_id || ':' || from_status || '>' || to_status || ':' || reason || ':' || at FROM payment_history ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var r string
		if err := rows.Scan(&r); err != nil {
			t.Fatal(err)
		}
		got = append(got, r)
	}
	rows.Close()
	if w := "a:>PENDING:created:1000000 b:>PENDING:created:4000000 a:PENDING>APPROVED:approved:3000000"; !strings.HasPrefix(strings.Join(got, " "), w) || len(got) != 5 {
		t.Fatalf("payment_history after the down migration: %v, want %s, b's decline and the new payment's creation", got, w)
	}
	var states string
	if err := db.QueryRowContext(ctx, `SELECT group_concat(key || '=' || state, ' ') FROM (SELECT key, state FROM idempotency_keys WHERE key IN ('ka', 'kb') ORDER BY key)`).Scan(&states); err != nil {
		t.Fatal(err)
	}
	if states != "ka=completed kb=completed" {
		t.Fatalf("idempotency states after the down migration: %s", states)
	}
}

// TestMigration10RefusesAHistoryEntryWithoutItsEvent: an entry that no
// event carries would be lost, so the migration fails and changes
// nothing.
func TestMigration10RefusesAHistoryEntryWithoutItsEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, db, p := v9Database(t, true)
	if _, err := p.UpTo(ctx, 10); err == nil || !strings.Contains(err.Error(), "CHECK constraint failed") {
		t.Fatalf("up to 10 with an entry without its event: %v, want a failed CHECK", err)
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM payment_history`).Scan(&n); err != nil || n != 4 {
		t.Fatalf("payment_history after the failed migration: %d rows, %v; want the 4 untouched", n, err)
	}
	if v, err := p.GetDBVersion(ctx); err != nil || v != 9 {
		t.Fatalf("version after the failed migration: %d, %v; want 9", v, err)
	}
}
