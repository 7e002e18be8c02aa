package sqldb

import (
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

var _ Dialect = SQLite{}

// SQLite is the SQLite Dialect (modernc.org/sqlite, pure Go): numbered ?NNN
// placeholders, times as INTEGER microseconds since the Unix epoch, no
// row lock (the write transaction's BEGIN IMMEDIATE excludes every other
// writer).
type SQLite struct{}

// Name implements Dialect.
func (SQLite) Name() string { return "sqlite" }

var dollar = regexp.MustCompile(`\$([0-9]+)`)

// Rebind implements Dialect: $n becomes ?n, SQLite's numbered parameter.
func (SQLite) Rebind(query string) string { return dollar.ReplaceAllString(query, "?$1") }

// LockRow implements Dialect.
func (SQLite) LockRow() string { return "" }

// ReadTx implements Dialect: a deferred (not IMMEDIATE) transaction,
// which in WAL mode reads one snapshot.
func (SQLite) ReadTx() *sql.TxOptions { return &sql.TxOptions{ReadOnly: true} }

// EncodeTime implements Dialect.
func (SQLite) EncodeTime(t time.Time) any { return t.UnixMicro() }

// DecodeTime implements Dialect.
func (SQLite) DecodeTime(src any) (time.Time, error) {
	us, ok := src.(int64)
	if !ok {
		return time.Time{}, fmt.Errorf("want INTEGER microseconds, got %T", src)
	}
	return time.UnixMicro(us).UTC(), nil
}

// UniqueViolation implements Dialect; the table is read from SQLite's
// message ("UNIQUE constraint failed: payments.id").
func (SQLite) UniqueViolation(err error) (string, bool) {
	var se *sqlite.Error
	if !errors.As(err, &se) || (se.Code() != sqlite3.SQLITE_CONSTRAINT_UNIQUE && se.Code() != sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY) {
		return "", false
	}
	msg := se.Error()
	if i := strings.LastIndex(msg, "failed: "); i >= 0 {
		msg = msg[i+len("failed: "):]
	}
	table, _, _ := strings.Cut(msg, ".")
	return table, true
}

// Unavailable implements Dialect: busy, locked, I/O and resource errors.
func (SQLite) Unavailable(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	switch se.Code() & 0xff {
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_IOERR,
		sqlite3.SQLITE_FULL, sqlite3.SQLITE_NOMEM, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_PROTOCOL,
		sqlite3.SQLITE_INTERRUPT:
		return true
	}
	return false
}
