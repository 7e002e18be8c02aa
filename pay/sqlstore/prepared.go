package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"reflect"
)

// Prepared statements (Config.PrepareStatements): every statement of
// queries is prepared once on each handle when the store is made, and the
// calls below run the prepared statement instead of handing the driver
// SQL text to compile again. modernc.org/sqlite compiles every statement
// it is given as text (a profile of the payment path had a fifth of its
// CPU in SQLite's parser and code generator); pgx's database/sql driver
// already caches prepared statements per connection, so the PostgreSQL
// adapter leaves this off.
//
// database/sql keeps a prepared statement per connection: a *sql.Stmt of
// a pool is prepared again, once, on each connection it runs on, and
// Tx.StmtContext reuses the one of the transaction's connection.

// readTxKey marks the context of a read transaction (Store.readTx), whose
// statements are the read handle's.
type readTxKey struct{}

// prepare prepares every statement of s.q on the write and read handles.
func (s *Store) prepare(ctx context.Context) error {
	var texts []string
	v := reflect.ValueOf(s.q)
	for i := range v.NumField() {
		if f := v.Field(i); f.Kind() == reflect.String && f.String() != "" {
			texts = append(texts, f.String())
		}
	}
	on := func(db *sql.DB) (map[string]*sql.Stmt, error) {
		m := make(map[string]*sql.Stmt, len(texts))
		for _, q := range texts {
			if m[q] != nil {
				continue
			}
			st, err := db.PrepareContext(ctx, q)
			if err != nil {
				closeStmts(m)
				return nil, err
			}
			m[q] = st
		}
		return m, nil
	}
	var err error
	if s.wst, err = on(s.write); err != nil {
		return err
	}
	if s.read == s.write {
		s.rst = s.wst
		return nil
	}
	if s.rst, err = on(s.read); err != nil {
		closeStmts(s.wst)
		return err
	}
	return nil
}

// closeStmts closes the statements of m.
func closeStmts(m map[string]*sql.Stmt) error {
	var errs []error
	for _, st := range m {
		errs = append(errs, st.Close())
	}
	return errors.Join(errs...)
}

// stmt returns the prepared statement of query for q (a handle of the
// store or a transaction on one), or nil if there is none.
func (s *Store) stmt(ctx context.Context, q querier, query string) *sql.Stmt {
	if s.wst == nil {
		return nil
	}
	switch q := q.(type) {
	case *sql.Tx:
		m := s.wst
		if ctx.Value(readTxKey{}) != nil {
			m = s.rst
		}
		if st := m[query]; st != nil {
			return q.StmtContext(ctx, st)
		}
	case *sql.DB:
		m := s.rst
		if q == s.write {
			m = s.wst
		}
		return m[query]
	}
	return nil
}

// exec runs query on q, prepared where it can.
func (s *Store) exec(ctx context.Context, q querier, query string, args ...any) (sql.Result, error) {
	if st := s.stmt(ctx, q, query); st != nil {
		return st.ExecContext(ctx, args...)
	}
	return q.ExecContext(ctx, query, args...)
}

// queryRow runs query on q, prepared where it can.
func (s *Store) queryRow(ctx context.Context, q querier, query string, args ...any) *sql.Row {
	if st := s.stmt(ctx, q, query); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return q.QueryRowContext(ctx, query, args...)
}

// query runs query on q, prepared where it can.
func (s *Store) query(ctx context.Context, q querier, query string, args ...any) (*sql.Rows, error) {
	if st := s.stmt(ctx, q, query); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return q.QueryContext(ctx, query, args...)
}
