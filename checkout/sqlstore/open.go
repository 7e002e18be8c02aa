package sqlstore

import (
	"context"
	"embed"

	"github.com/stampede-lab/stampede/internal/sqldb"
)

// Memory is the SQLitePath of a private in-memory database.
const Memory = sqldb.Memory

// VersionTable is the goose version table of checkout's migrations,
// apart from pay's and fulfilment's.
const VersionTable = name + "_goose_db_version"

// name is checkout's name among the SQL stores.
const name = "checkout"

// Config configures Open (see sqldb.Config): PostgresURL selects
// PostgreSQL, else SQLite at SQLitePath.
type Config = sqldb.Config

// DefaultConfig returns an in-memory SQLite database, 8 connections and a
// 2 s operation timeout.
func DefaultConfig() Config {
	c := sqldb.DefaultConfig()
	c.MaxConns = 8
	return c
}

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
