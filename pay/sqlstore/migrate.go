package sqlstore

import (
	"context"
	"database/sql"
	"io/fs"

	"github.com/pressly/goose/v3"

	"github.com/stampede-lab/stampede/internal/sqldb"
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
// Migrate takes no lock: the adapters open their databases with
// sqldb.OpenSQLite and sqldb.OpenPostgres, which serialise the processes
// that migrate one database.
func Migrate(ctx context.Context, db *sql.DB, d Dialect, dialect goose.Dialect, fsys fs.FS) error {
	return MapError(d, sqldb.Up(ctx, db, dialect, fsys, goose.WithAllowOutofOrder(true)))
}
