package postgres_test

import (
	"context"
	"database/sql"
	neturl "net/url"
	"os"
	"strconv"
	"strings"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
	"github.com/pressly/goose/v3"

	"github.com/stampede-lab/stampede/pay/paytest"
)

// v9Schema writes, in a fresh schema on the schema of migration 9, the
// fixture paytest.CheckMigration10 reads (payments a and b) and, with
// orphan, a payment c whose history entry has no event.
func v9Schema(t *testing.T, orphan bool) (url, schema string, db *sql.DB, p *goose.Provider) {
	t.Helper()
	ctx := context.Background()
	url = databaseURL(t)
	schema = freshSchema(t, url)
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	db, err = sql.Open("pgx", u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.ExecContext(ctx, `CREATE SCHEMA `+schema); err != nil {
		t.Fatal(err)
	}
	p, err = goose.NewProvider(goose.DialectPostgres, db, os.DirFS("migrations"), goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(ctx, 9); err != nil {
		t.Fatalf("up to 9: %v", err)
	}
	at := func(sec int) string { return `to_timestamp(` + strconv.Itoa(sec) + `)` }
	stmts := []string{
		`INSERT INTO payments (id, merchant_id, order_id, amount, currency, status, external_key, idempotency_key, created_at, updated_at, event_seq)
			VALUES ('a', '` + paytest.MigrationMerchant + `', 'oa', 100, 'KRW', 'APPROVED', 'a', 'ka', ` + at(1) + `, ` + at(3) + `, 3),
			       ('b', '` + paytest.MigrationMerchant + `', 'ob', 100, 'KRW', 'PENDING', 'b', 'kb', ` + at(4) + `, ` + at(4) + `, 1)`,
		`INSERT INTO outbox (payment_id, seq, type, payload, created_at, merchant_id) VALUES
			('a', 1, 'payment.created', '{}', ` + at(1) + `, '` + paytest.MigrationMerchant + `'),
			('b', 1, 'payment.created', '{}', ` + at(4) + `, '` + paytest.MigrationMerchant + `'),
			('a', 2, 'payment.review_flagged', '{}', ` + at(2) + `, '` + paytest.MigrationMerchant + `'),
			('a', 3, 'payment.status_changed', '{}', ` + at(3) + `, '` + paytest.MigrationMerchant + `')`,
		`INSERT INTO payment_history (payment_id, from_status, to_status, reason, at) VALUES
			('a', '', 'PENDING', 'created', ` + at(1) + `),
			('b', '', 'PENDING', 'created', ` + at(4) + `),
			('a', 'PENDING', 'APPROVED', 'approved', ` + at(3) + `)`,
		`INSERT INTO idempotency_keys (key, request_hash, payment_id, state, created_at, expires_at) VALUES
			('ka', 'ha', 'a', 'completed', ` + at(1) + `, now() + interval '1 day'),
			('kb', 'hb', 'b', 'in_flight', ` + at(4) + `, now() + interval '1 day')`,
	}
	if orphan {
		stmts = append(stmts,
			`INSERT INTO payments (id, merchant_id, order_id, amount, currency, status, external_key, idempotency_key, created_at, updated_at)
				VALUES ('c', '`+paytest.MigrationMerchant+`', 'oc', 100, 'KRW', 'PENDING', 'c', 'kc', `+at(5)+`, `+at(5)+`)`,
			`INSERT INTO payment_history (payment_id, from_status, to_status, reason, at) VALUES ('c', '', 'PENDING', 'created', `+at(5)+`)`)
	}
	for _, s := range stmts {
		if _, err := db.ExecContext(ctx, s); err != nil {
			t.Fatalf("%.50s...: %v", s, err)
		}
	}
	return url, schema, db, p
}

// TestMigration10KeepsHistoryAndRecordStates: migration 10 moves each
// history entry to the event it was written with, the idempotency
// records keep their states (now read from their payments), and its
// down migration gives both back.
func TestMigration10KeepsHistoryAndRecordStates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, schema, db, p := v9Schema(t, false)
	if _, err := p.UpTo(ctx, 10); err != nil {
		t.Fatalf("up to 10: %v", err)
	}
	s := openSchema(t, url, schema)
	paytest.CheckMigration10(t, s)
	s.Close()

	if _, err := p.DownTo(ctx, 9); err != nil {
		t.Fatalf("down to 9: %v", err)
	}
	var got string
	if err := db.QueryRowContext(ctx, `SELECT string_agg(payment_id || ':' || from_status || '>' || to_status || ':' || reason, ' ' ORDER BY id)
		FROM payment_history`).Scan(&got); err != nil {
		t.Fatal(err)
	}
	if w := "a:>PENDING:created b:>PENDING:created a:PENDING>APPROVED:approved b:PENDING>DECLINED:declined "; !strings.HasPrefix(got, w) || !strings.HasSuffix(got, ":>PENDING:created") {
		t.Fatalf("payment_history after the down migration: %s, want %s and the new payment's creation", got, w)
	}
	var states string
	if err := db.QueryRowContext(ctx, `SELECT string_agg(key || '=' || state, ' ' ORDER BY key) FROM idempotency_keys WHERE key IN ('ka', 'kb')`).Scan(&states); err != nil {
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
	_, _, db, p := v9Schema(t, true)
	if _, err := p.UpTo(ctx, 10); err == nil || !strings.Contains(err.Error(), "migration_check_ok_check") {
		t.Fatalf("up to 10 with an entry without its event: %v, want a failed check", err)
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM payment_history`).Scan(&n); err != nil || n != 4 {
		t.Fatalf("payment_history after the failed migration: %d rows, %v; want the 4 untouched", n, err)
	}
	if v, err := p.GetDBVersion(ctx); err != nil || v != 9 {
		t.Fatalf("version after the failed migration: %d, %v; want 9", v, err)
	}
}
