package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"

	"github.com/pressly/goose/v3"
)

// Migrate applies to db the goose migrations of fsys not yet applied,
// in version order, each in its own transaction, and records them in
// goose's version table (goose_db_version). fsys holds the SQL files at
// its root, named NNNNN_name.sql and annotated with "-- +goose Up".
// Errors are mapped with d (see MapError).
//
// A migration missing below the database's version (one written on a
// branch that landed after a later one) is applied too: the migrations
// are independent of each other's order beyond their numbers.
//
// Migrate takes no lock: an adapter whose database is shared by
// processes that start together serialises them itself (pay/postgres
// holds an advisory lock; SQLite's write lock serialises each migration).
func Migrate(ctx context.Context, db *sql.DB, d Dialect, dialect goose.Dialect, fsys fs.FS) error {
	return MapError(d, Up(ctx, db, dialect, fsys, goose.WithAllowOutofOrder(true)))
}

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
// caller maps them with its own MapError. It takes no lock.
func MigrateTable(ctx context.Context, db *sql.DB, dialect goose.Dialect, fsys fs.FS, table string) error {
	return Up(ctx, db, dialect, fsys, goose.WithTableName(table))
}

// Up applies the pending migrations of fsys with goose's global registry
// disabled and opts; errors are unmapped.
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
