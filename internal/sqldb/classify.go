package sqldb

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"

	"github.com/stampede-lab/stampede"
)

// DriverUnavailable reports whether err means that the database did not
// answer or cannot be reached — a missed deadline, a cancelled context, a
// lost connection, a closed pool, or whatever d calls unavailable — and
// returns err annotated with the dialect's name for the log. Every SQL
// store classifies its errors with it, so that "try again later" means
// the same everywhere.
func DriverUnavailable(d Dialect, err error) (error, bool) {
	switch {
	case err == nil:
		return nil, false
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return fmt.Errorf("%s: no answer in time: %w", d.Name(), err), true
	case errors.Is(err, sql.ErrConnDone), errors.Is(err, driver.ErrBadConn),
		strings.Contains(err.Error(), "sql: database is closed"), d.Unavailable(err):
		return fmt.Errorf("%s: %w", d.Name(), err), true
	}
	return nil, false
}

// Classify turns a database/sql or driver error into an *stampede.Error
// with d's help: a missed deadline, a cancelled context, a lost
// connection, a closed pool and whatever d calls unavailable go to
// unavailable (CodeUnavailable); a unique violation to conflict, or
// CodeConflict "conflicting write (table)" when conflict is nil; anything
// else is CodeInternal, its detail kept for the log and never shown.
func Classify(d Dialect, err error, unavailable func(error) *stampede.Error, conflict func(table string, err error) *stampede.Error) *stampede.Error {
	if err == nil {
		return nil
	}
	if c, ok := DriverUnavailable(d, err); ok {
		return unavailable(c)
	}
	if table, ok := d.UniqueViolation(err); ok {
		if conflict != nil {
			return conflict(table, err)
		}
		return &stampede.Error{Code: stampede.Conflict, Message: "conflicting write (" + table + ")", Err: err}
	}
	return stampede.InternalErr(fmt.Errorf("%s: %w", d.Name(), err))
}
