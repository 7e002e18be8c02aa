package sqldb

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"

	"github.com/pressly/goose/v3"
)

// GooseDialect returns goose's dialect for a Dialect's Name ("sqlite" or
// "postgres").
func GooseDialect(name string) (goose.Dialect, bool) {
	gd, ok := map[string]goose.Dialect{"sqlite": goose.DialectSQLite3, "postgres": goose.DialectPostgres}[name]
	return gd, ok
}

// MigrateTable applies to db the goose migrations of fsys not yet
// applied, in version order, recording them in the version table named
// table, so that the stores sharing a database (pay, fulfilment,
// checkout) each keep their own versions. Errors are unmapped: the
// caller maps them with its own classification. It takes no lock.
func MigrateTable(ctx context.Context, db *sql.DB, dialect goose.Dialect, fsys fs.FS, table string) error {
	return Up(ctx, db, dialect, fsys, goose.WithTableName(table))
}

// Up applies the pending goose migrations of fsys, SQL files at its root
// named NNNNN_name.sql and annotated with "-- +goose Up", each in its own
// transaction, with goose's global registry disabled and opts; errors are
// unmapped. It takes no lock: OpenSQLite and OpenPostgres serialise the
// processes that migrate one database.
func Up(ctx context.Context, db *sql.DB, dialect goose.Dialect, fsys fs.FS, opts ...goose.ProviderOption) error {
	p, err := goose.NewProvider(dialect, db, fsys, append([]goose.ProviderOption{goose.WithDisableGlobalRegistry(true)}, opts...)...)
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}
