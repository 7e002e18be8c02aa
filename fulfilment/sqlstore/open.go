package sqlstore

import (
	"context"
	"embed"

	"github.com/stampede-lab/stampede/internal/sqldb"
)

// Memory is the SQLitePath of a private in-memory database.
const Memory = sqldb.Memory

// VersionTable is the goose version table of fulfilment's migrations,
// apart from pay's goose_db_version.
const VersionTable = name + "_goose_db_version"

// name is fulfilment's name among the SQL stores.
const name = "fulfilment"

// Config configures Open (see sqldb.Config): PostgresURL selects
// PostgreSQL, else SQLite at SQLitePath.
type Config = sqldb.Config

// DefaultConfig returns an in-memory SQLite database, 4 connections and a
// 2 s operation timeout.
func DefaultConfig() Config { return sqldb.DefaultConfig() }

// Open opens the database cfg names and applies the pending migrations
// (sqldb.Open: SQLite migrated by one process at a time, PostgreSQL under
// an advisory lock). An unreachable database is an error with
// CodeUnavailable.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	db, err := sqldb.Open(ctx, cfg, spec)
	if err != nil {
		return nil, err
	}
	return &Store{db: db, d: db.Dialect(), q: newQueries(db.Dialect())}, nil
}

// migrations holds migrations/sqlite and migrations/postgres.
//
//go:embed migrations
var migrations embed.FS
