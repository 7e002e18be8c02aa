package sqlstore

import (
	"context"
	"database/sql"
	"embed"
	"io/fs"

	"github.com/stampede-lab/stampede/internal/sqldb"
)

// Memory is the SQLitePath of a private in-memory database.
const Memory = sqldb.Memory

// VersionTable is the goose version table of fulfilment's migrations,
// apart from pay's goose_db_version.
const VersionTable = "fulfilment_goose_db_version"

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
	return newStore(db), nil
}

//go:embed migrations/sqlite/*.sql migrations/postgres/*.sql
var migrations embed.FS

func migrationsFS() fs.FS {
	sub, err := fs.Sub(migrations, "migrations")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	return sub
}

// Migrate applies to db the migrations of d not yet applied, recording
// them in VersionTable. It takes no lock: callers that may migrate one
// database from several processes at once serialise them (Open does).
func Migrate(ctx context.Context, db *sql.DB, d Dialect) error {
	return sqldb.Migrate(ctx, db, d, spec)
}
