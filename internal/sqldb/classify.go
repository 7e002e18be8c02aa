package sqldb

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
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
