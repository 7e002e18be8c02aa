package sqldb

import (
	"context"
	"database/sql"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// PostgresConfig configures OpenPostgres.
type PostgresConfig struct {
	// URL is the connection string.
	URL string
	// Schema, when set, is the schema the tables live in (created if
	// missing; the connections' search_path).
	Schema string
	// MaxConns bounds the open (and idle) connections.
	MaxConns int
	// ConnectTimeout bounds each connection attempt, unless the URL sets
	// connect_timeout.
	ConnectTimeout time.Duration
	// ConnMaxIdleTime closes a connection idle that long; 0 keeps it.
	ConnMaxIdleTime time.Duration
	// PingTimeout bounds the first connection.
	PingTimeout time.Duration
	// LockKey names the advisory lock held while migrating; the schema is
	// appended to it.
	LockKey string
	// Migrate applies the pending migrations, under the lock; its errors
	// are returned as they are.
	Migrate func(ctx context.Context, db *sql.DB) error
}

// OpenPostgres opens PostgreSQL the way every Stampede store does: pgx's
// database/sql driver, the pool sized by MaxConns, connections recycled
// after an hour (or ConnMaxIdleTime idle), a ping within PingTimeout, then the
// schema created if missing and Migrate run under an advisory lock of
// LockKey and the schema, so that instances starting together migrate one
// after the other. Errors are unmapped, except Migrate's; on error the
// pool is closed.
func OpenPostgres(ctx context.Context, c PostgresConfig) (*sql.DB, Postgres, error) {
	cc, err := pgx.ParseConfig(c.URL)
	if err != nil {
		return nil, Postgres{}, err
	}
	if cc.ConnectTimeout == 0 {
		cc.ConnectTimeout = c.ConnectTimeout
	}
	if c.Schema != "" {
		cc.RuntimeParams["search_path"] = c.Schema
	}
	db := stdlib.OpenDB(*cc)
	db.SetMaxOpenConns(c.MaxConns)
	db.SetMaxIdleConns(c.MaxConns)
	db.SetConnMaxLifetime(time.Hour)
	db.SetConnMaxIdleTime(c.ConnMaxIdleTime)
	pingCtx, cancel := context.WithTimeout(ctx, c.PingTimeout)
	err = db.PingContext(pingCtx)
	cancel()
	if err == nil {
		err = migrateLockedPostgres(ctx, db, cc, c)
	}
	if err != nil {
		db.Close()
		return nil, Postgres{}, err
	}
	return db, Postgres{}, nil
}

// migrateLockedPostgres creates the schema if missing and runs c.Migrate, holding
// the advisory lock on a connection of its own.
func migrateLockedPostgres(ctx context.Context, db *sql.DB, cc *pgx.ConnConfig, c PostgresConfig) error {
	lock, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return err
	}
	defer lock.Close(context.WithoutCancel(ctx)) // ends the session and its lock
	if _, err := lock.Exec(ctx, `SELECT pg_advisory_lock(hashtext($1))`, c.LockKey+c.Schema); err != nil {
		return err
	}
	if c.Schema != "" {
		if _, err := lock.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+pgx.Identifier{c.Schema}.Sanitize()); err != nil {
			return err
		}
	}
	if c.Migrate == nil {
		return nil
	}
	return c.Migrate(ctx, db)
}
