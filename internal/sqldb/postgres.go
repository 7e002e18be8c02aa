package sqldb

import (
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

var _ Dialect = Postgres{}

// Postgres is the PostgreSQL Dialect (pgx v5 through database/sql): $n
// placeholders, timestamptz, SELECT ... FOR UPDATE, SQLSTATE classes.
type Postgres struct{}

// Name implements Dialect.
func (Postgres) Name() string { return "postgres" }

// Rebind implements Dialect: queries are written for PostgreSQL.
func (Postgres) Rebind(query string) string { return query }

// LockRow implements Dialect.
func (Postgres) LockRow() string { return " FOR UPDATE" }

// ReadTx implements Dialect.
func (Postgres) ReadTx() *sql.TxOptions {
	return &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true}
}

// EncodeTime implements Dialect.
func (Postgres) EncodeTime(t time.Time) any { return t }

// DecodeTime implements Dialect.
func (Postgres) DecodeTime(src any) (time.Time, error) {
	t, ok := src.(time.Time)
	if !ok {
		return time.Time{}, fmt.Errorf("want timestamptz, got %T", src)
	}
	return t.UTC(), nil
}

// UniqueViolation implements Dialect: SQLSTATE 23505.
func (Postgres) UniqueViolation(err error) (string, bool) {
	var pg *pgconn.PgError
	if errors.As(err, &pg) && pg.Code == "23505" {
		return pg.TableName, true
	}
	return "", false
}

// Unavailable implements Dialect: timeouts, connection and network
// failures, and the SQLSTATEs of a server that cannot serve now.
func (Postgres) Unavailable(err error) bool {
	var (
		pg *pgconn.PgError
		ce *pgconn.ConnectError
		ne net.Error
	)
	switch {
	case pgconn.Timeout(err), errors.As(err, &ce), errors.As(err, &ne),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed),
		strings.Contains(err.Error(), "conn closed"): // the server or the network dropped the connection
		return true
	case errors.As(err, &pg):
		return strings.HasPrefix(pg.Code, "08") || // connection exception
			strings.HasPrefix(pg.Code, "53") || // insufficient resources
			pg.Code == "57P01" || pg.Code == "57P02" || pg.Code == "57P03" || // shutdown, cannot connect now
			pg.Code == "40001" || pg.Code == "40P01" || pg.Code == "55P03" // serialization, deadlock, lock not available
	}
	return false
}
