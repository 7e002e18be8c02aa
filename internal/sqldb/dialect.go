package sqldb

import (
	"database/sql"
	"fmt"
	"time"
)

// Dialect is what a store needs to know about its database beyond
// database/sql: placeholders, how a timestamp is stored, the row lock that
// makes a read-then-update a compare-and-set, and what a unique violation
// or an outage looks like. SQLite and Postgres implement it.
// Implementations must be safe for concurrent use.
type Dialect interface {
	// Name names the database in errors, e.g. "sqlite".
	Name() string
	// Rebind rewrites a query written with PostgreSQL placeholders ($1,
	// $2, ...; a number may repeat) into the database's own.
	Rebind(query string) string
	// LockRow is appended to the SELECT that reads a row inside the
	// write transaction that will change it, so that the read and the
	// update form one compare-and-set: " FOR UPDATE", or "" where the
	// write transaction already excludes every other writer.
	LockRow() string
	// ReadTx returns the options of a read transaction: one snapshot.
	ReadTx() *sql.TxOptions
	// EncodeTime returns the value stored for t in a timestamp column.
	EncodeTime(t time.Time) any
	// DecodeTime returns the time a timestamp column holds, in UTC; src
	// is what the driver returned for the column.
	DecodeTime(src any) (time.Time, error)
	// UniqueViolation reports whether err is a unique (or primary key)
	// violation, and the table it happened on.
	UniqueViolation(err error) (table string, ok bool)
	// Unavailable reports whether err says that the database cannot be
	// reached or cannot serve now (connection lost, busy, out of
	// resources, shutting down, serialization failure): a failure that a
	// retry may cure.
	Unavailable(err error) bool
}

// StoreTime is t as every store keeps it: UTC, truncated to the
// microsecond (the precision of both dialects' timestamps), so that what
// a store returns equals what it later reads back.
func StoreTime(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

// EncodeTime returns the value d stores for t, at StoreTime precision.
func EncodeTime(d Dialect, t time.Time) any { return d.EncodeTime(StoreTime(t)) }

// timeCol scans a timestamp column through a Dialect.
type timeCol struct {
	d Dialect
	t *time.Time
}

// Scan implements sql.Scanner.
func (c timeCol) Scan(src any) error {
	t, err := c.d.DecodeTime(src)
	if err != nil {
		return fmt.Errorf("%s: decode time: %w", c.d.Name(), err)
	}
	*c.t = t
	return nil
}

// TimeCol returns a sql.Scanner that decodes a timestamp column into *t
// through d.
func TimeCol(d Dialect, t *time.Time) sql.Scanner { return timeCol{d, t} }

// nullTimeCol scans a nullable timestamp column: NULL is the zero time.
type nullTimeCol timeCol

// Scan implements sql.Scanner.
func (c nullTimeCol) Scan(src any) error {
	if src == nil {
		*c.t = time.Time{}
		return nil
	}
	return timeCol(c).Scan(src)
}

// NullTimeCol returns a sql.Scanner that decodes a nullable timestamp
// column into *t through d; NULL is the zero time.
func NullTimeCol(d Dialect, t *time.Time) sql.Scanner { return nullTimeCol{d, t} }
