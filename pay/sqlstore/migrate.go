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
	p, err := goose.NewProvider(dialect, db, fsys, goose.WithDisableGlobalRegistry(true), goose.WithAllowOutofOrder(true))
	if err != nil {
		return MapError(d, fmt.Errorf("migrations: %w", err))
	}
	if _, err := p.Up(ctx); err != nil {
		return MapError(d, fmt.Errorf("migrate: %w", err))
	}
	return nil
}
