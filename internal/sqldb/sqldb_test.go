package sqldb_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/internal/sqldb"
	"github.com/stampede-lab/stampede/internal/testenv"
)

// errOwn is a domain error of the test store, which must pass through.
var errOwn = errors.New("own error")

func testSpec() sqldb.Spec {
	table := `-- +goose Up
CREATE TABLE sqldb_things (id TEXT PRIMARY KEY, n INTEGER NOT NULL);
-- +goose Down
DROP TABLE sqldb_things;
`
	return sqldb.Spec{
		Name: "sqldbtest",
		Migrations: fstest.MapFS{
			"migrations/sqlite/00001_init.sql":   {Data: []byte(table)},
			"migrations/postgres/00001_init.sql": {Data: []byte(table)},
		},
		Own: func(err error) bool { return errors.Is(err, errOwn) },
		Unavailable: func(err error) *stampede.Error {
			return &stampede.Error{Code: stampede.Unavailable, Message: "the test store is unavailable", Err: err}
		},
	}
}

// TestConfigValidateNamesFields: every invalid field is named.
func TestConfigValidateNamesFields(t *testing.T) {
	if err := sqldb.DefaultConfig().Validate(); err != nil {
		t.Fatalf("DefaultConfig().Validate() = %v", err)
	}
	fields := func(err error) []string {
		var names []string
		for _, e := range stampede.FieldErrors(err) {
			names = append(names, e.Field)
		}
		return names
	}
	err := sqldb.Config{SQLitePath: "a?b", Schema: "x"}.Validate()
	if got, want := fields(err), []string{"sqlite", "schema", "max_conns", "db_timeout"}; !slices.Equal(got, want) {
		t.Errorf("Validate() = %v, fields %v; want every bad field named as its flag: %v", err, got, want)
	}
	err = sqldb.Config{PostgresURL: "postgres://h/db", Schema: "Bad-Name", MaxConns: 1, OpTimeout: time.Second}.Validate()
	if got := fields(err); !slices.Equal(got, []string{"schema"}) {
		t.Errorf("Validate() = %v, want it to name schema", err)
	}
	err = sqldb.Config{PostgresURL: "::not a url", MaxConns: 1, OpTimeout: time.Second}.Validate()
	if got := fields(err); !slices.Equal(got, []string{"postgres"}) {
		t.Errorf("Validate() = %v, want it to name postgres", err)
	}
	if _, err := sqldb.Open(context.Background(), sqldb.Config{}, testSpec()); err == nil {
		t.Error("Open with an empty Config succeeded")
	}
	if _, err := sqldb.Open(context.Background(), sqldb.DefaultConfig(), sqldb.Spec{Name: "Bad Name"}); err == nil {
		t.Error("Open with an invalid Spec succeeded")
	}
}

// exercise checks the DB's contract on one database: a committed update is
// read back, a failed one leaves nothing, the store's own errors pass
// through, a unique violation is a conflict, and a closed DB is
// unavailable.
func exercise(t *testing.T, cfg sqldb.Config) {
	ctx := context.Background()
	db, err := sqldb.Open(ctx, cfg, testSpec())
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	insert := db.Dialect().Rebind(`INSERT INTO sqldb_things (id, n) VALUES ($1, $2)`)
	count := func() int {
		var n int
		if err := db.Read(ctx, func(ctx context.Context, pool *sql.DB) error {
			return pool.QueryRowContext(ctx, `SELECT count(*) FROM sqldb_things`).Scan(&n)
		}); err != nil {
			t.Fatalf("Read: %v", err)
		}
		return n
	}
	if err := db.Update(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, insert, "a", 1)
		return err
	}); err != nil {
		t.Fatalf("Update: %v", err)
	}
	err = db.Update(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, insert, "b", 2); err != nil {
			return err
		}
		return fmt.Errorf("refused: %w", errOwn)
	})
	if !errors.Is(err, errOwn) {
		t.Errorf("Update returning the store's own error = %v, want it passed through", err)
	}
	if n := count(); n != 1 {
		t.Errorf("after a committed and a failed update: %d rows, want 1 (the failed one rolled back)", n)
	}
	err = db.Update(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, insert, "a", 3)
		return err
	})
	if stampede.CodeOf(err) != stampede.Conflict {
		t.Errorf("duplicate key = %v, want conflict", err)
	}
	if err := db.Ping(ctx); err != nil {
		t.Errorf("Ping: %v", err)
	}
	if err := db.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := db.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := db.Ping(ctx); stampede.CodeOf(err) != stampede.Unavailable {
		t.Errorf("Ping after Close = %v, want unavailable", err)
	}
}

func TestSQLite(t *testing.T) {
	t.Parallel()
	cfg := sqldb.DefaultConfig()
	cfg.SQLitePath = t.TempDir() + "/test.db"
	exercise(t, cfg)
}

func TestPostgres(t *testing.T) {
	t.Parallel()
	url := testenv.URL(t, testenv.PostgresURL)
	schema := fmt.Sprintf("sqldb_test_%016x", rand.Uint64())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Errorf("cleanup: %v", err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	cfg := sqldb.DefaultConfig()
	cfg.PostgresURL, cfg.Schema = url, schema
	exercise(t, cfg)
}

// TestOpenUnreachableIsUnavailable: a server that refuses connections is
// CodeUnavailable, not an internal error.
func TestOpenUnreachableIsUnavailable(t *testing.T) {
	t.Parallel()
	cfg := sqldb.DefaultConfig()
	cfg.PostgresURL = "postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=2"
	if _, err := sqldb.Open(context.Background(), cfg, testSpec()); stampede.CodeOf(err) != stampede.Unavailable {
		t.Fatalf("Open on a closed port = %v, want unavailable", err)
	}
}
