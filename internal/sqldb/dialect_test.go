package sqldb_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"testing"
	"time"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/internal/sqldb"
)

// TestRebind: queries are written once with PostgreSQL's $n and rebound
// for SQLite's numbered ?n (a number may repeat).
func TestRebind(t *testing.T) {
	q := `UPDATE t SET a = $1 WHERE id = $2 AND a >= $1 AND b = $10`
	if got, want := (sqldb.SQLite{}).Rebind(q), `UPDATE t SET a = ?1 WHERE id = ?2 AND a >= ?1 AND b = ?10`; got != want {
		t.Errorf("SQLite Rebind = %q, want %q", got, want)
	}
	if got := (sqldb.Postgres{}).Rebind(q); got != q {
		t.Errorf("Postgres Rebind = %q, want it unchanged", got)
	}
}

// TestTimeRoundTrip: a time encoded by a dialect and scanned back through
// TimeCol is the StoreTime of the original (UTC, to the microsecond), on
// a real SQLite database; NullTimeCol reads NULL as the zero time.
func TestTimeRoundTrip(t *testing.T) {
	ctx := context.Background()
	write, read, d, err := sqldb.OpenSQLite(ctx, sqldb.SQLiteConfig{Path: sqldb.Memory, BusyTimeout: time.Second, MaxReadConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer write.Close()
	at := time.Date(2026, 3, 1, 12, 30, 45, 123456789, time.FixedZone("KST", 9*3600))
	if _, err := write.ExecContext(ctx, `CREATE TABLE times (at INTEGER, never INTEGER)`); err != nil {
		t.Fatal(err)
	}
	if _, err := write.ExecContext(ctx, d.Rebind(`INSERT INTO times (at, never) VALUES ($1, NULL)`), sqldb.EncodeTime(d, at)); err != nil {
		t.Fatal(err)
	}
	var got, never time.Time
	never = time.Now()
	if err := read.QueryRowContext(ctx, `SELECT at, never FROM times`).Scan(sqldb.TimeCol(d, &got), sqldb.NullTimeCol(d, &never)); err != nil {
		t.Fatal(err)
	}
	if want := sqldb.StoreTime(at); !got.Equal(want) || got.Location() != time.UTC || got.Nanosecond() != 123456000 {
		t.Errorf("round trip = %v, want %v in UTC", got, want)
	}
	if !never.IsZero() {
		t.Errorf("NULL = %v, want the zero time", never)
	}
	if err := read.QueryRowContext(ctx, `SELECT 'text'`).Scan(sqldb.TimeCol(d, &got)); err == nil {
		t.Error("scanning text as a time succeeded")
	}
}

// TestClassify: what a driver says becomes the class a client is answered
// with, the cause kept.
func TestClassify(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	<-ctx.Done()
	unavailable := func(err error) *stampede.Error { return stampede.UnavailableErr("the test store", err) }
	for _, c := range []struct {
		name string
		err  error
		want stampede.Code
	}{
		{"deadline", errors.Join(errors.New("read"), ctx.Err()), stampede.Unavailable},
		{"cancelled", context.Canceled, stampede.Unavailable},
		{"connection done", sql.ErrConnDone, stampede.Unavailable},
		{"bad connection", driver.ErrBadConn, stampede.Unavailable},
		{"pool closed", errors.New("sql: database is closed"), stampede.Unavailable},
		{"anything else", errors.New("syntax error"), stampede.Internal},
	} {
		for _, d := range []sqldb.Dialect{sqldb.SQLite{}, sqldb.Postgres{}} {
			got := sqldb.Classify(d, c.err, unavailable, nil)
			if stampede.ClassOf(got) != c.want || !errors.Is(got, c.err) {
				t.Errorf("%s, %s: Classify(%v) = %v, want %s wrapping the cause", d.Name(), c.name, c.err, got, c.want)
			}
		}
	}
	if got := sqldb.Classify(sqldb.SQLite{}, nil, unavailable, nil); got != nil {
		t.Errorf("Classify(nil) = %v", got)
	}
}
