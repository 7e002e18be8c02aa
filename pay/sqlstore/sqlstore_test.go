package sqlstore_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/pay"
	"github.com/stampede-lab/stampede/pay/sqlstore"
)

// fakeDialect classifies the errors errBusy and errUnique as its database
// would.
type fakeDialect struct{}

var (
	errBusy   = errors.New("fake: busy")
	errUnique = errors.New("fake: unique violation")
)

func (fakeDialect) Name() string                      { return "fake" }
func (fakeDialect) Rebind(q string) string            { return q }
func (fakeDialect) LockRow() string                   { return "" }
func (fakeDialect) ReadTx() *sql.TxOptions            { return nil }
func (fakeDialect) EncodeTime(t time.Time) any        { return t }
func (fakeDialect) DecodeTime(any) (time.Time, error) { return time.Time{}, nil }
func (fakeDialect) Unavailable(err error) bool        { return errors.Is(err, errBusy) }
func (fakeDialect) UniqueViolation(err error) (string, bool) {
	if errors.Is(err, errUnique) {
		return "payments", true
	}
	return "", false
}

// TestMapError: what a driver says becomes the pay error a client is
// answered with.
func TestMapError(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	<-ctx.Done()
	conflict := &pay.IdempotencyConflict{}
	for _, c := range []struct {
		name string
		err  error
		want pay.Code
	}{
		{"nil", nil, ""},
		{"deadline", errors.Join(errors.New("read"), ctx.Err()), pay.CodeUnavailable},
		{"cancelled", context.Canceled, pay.CodeUnavailable},
		{"connection done", sql.ErrConnDone, pay.CodeUnavailable},
		{"bad connection", driver.ErrBadConn, pay.CodeUnavailable},
		{"pool closed", errors.New("sql: database is closed"), pay.CodeUnavailable},
		{"dialect: unavailable", errors.Join(errors.New("exec"), errBusy), pay.CodeUnavailable},
		{"dialect: unique", errUnique, pay.CodeConflict},
		{"anything else", errors.New("syntax error"), pay.CodeInternal},
		{"not found passes", errors.Join(errors.New("x"), pay.ErrNotFound), pay.CodeNotFound},
		{"stale passes", pay.ErrStaleStatus, pay.CodeConflict},
		{"conflict passes", conflict, pay.CodeConflict},
		{"invalid passes", pay.Invalid("limit", "bad"), pay.CodeInvalid},
	} {
		got := sqlstore.MapError(fakeDialect{}, c.err)
		if code := pay.ErrorCode(got); code != c.want {
			t.Errorf("%s: MapError(%v) = %v (%s), want %s", c.name, c.err, got, code, c.want)
		}
		if c.err != nil && !errors.Is(got, c.err) {
			t.Errorf("%s: MapError(%v) = %v, which does not wrap the cause", c.name, c.err, got)
		}
	}
	if got := sqlstore.MapError(fakeDialect{}, errUnique); !strings.Contains(got.Error(), "the payment already exists") {
		t.Errorf("a unique violation on payments = %v, want it named", got)
	}
	if got := sqlstore.MapError(fakeDialect{}, conflict); got != error(conflict) {
		t.Errorf("MapError(conflict) = %v, want it unchanged", got)
	}
}

// TestConfigValidateNamesFields: every invalid field is reported by name.
func TestConfigValidateNamesFields(t *testing.T) {
	if err := sqlstore.DefaultConfig().Validate(); err != nil {
		t.Fatalf("DefaultConfig().Validate() = %v", err)
	}
	err := sqlstore.Config{OpTimeout: -time.Second, GroupCommit: true}.Validate()
	var got []string
	for _, e := range stampede.FieldErrors(err) {
		got = append(got, e.Field)
	}
	if want := []string{"db_timeout", "now", "max_batch"}; !slices.Equal(got, want) {
		t.Errorf("Validate() = %v, fields %v; want every bad field named as its flag: %v", err, got, want)
	}
	if _, err := sqlstore.New(fakeDialect{}, nil, nil, sqlstore.DefaultConfig()); err == nil {
		t.Error("New without a *sql.DB succeeded")
	}
}
