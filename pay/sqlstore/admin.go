package sqlstore

import (
	"context"
	"database/sql"

	"github.com/stampede-lab/stampede/pay"
)

var _ pay.AdminStore = (*Store)(nil)

// adminQueries are the operator's reads (pay.AdminStore), rebound for the
// dialect on each call: they are rare, so they are neither kept nor
// prepared.
const (
	listFlaggedQuery   = `SELECT ` + paymentCols + ` FROM payments WHERE manual_review = $1 AND id > $2 ORDER BY id LIMIT $3`
	countByStatusQuery = `SELECT status, COUNT(*) FROM payments GROUP BY status`
)

// ListFlagged implements pay.AdminStore.
func (s *Store) ListFlagged(ctx context.Context, afterID string, limit int) ([]pay.Payment, error) {
	if err := pay.CheckLimit(limit); err != nil {
		return nil, err
	}
	var out []pay.Payment
	err := s.run(ctx, func(ctx context.Context, db *sql.DB) error {
		var err error
		out, err = s.listPayments(ctx, db, s.d.Rebind(listFlaggedQuery), true, afterID, limit)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// CountByStatus implements pay.AdminStore.
func (s *Store) CountByStatus(ctx context.Context) (map[pay.Status]int, error) {
	out := map[pay.Status]int{}
	err := s.run(ctx, func(ctx context.Context, db *sql.DB) error {
		clear(out)
		rows, err := s.query(ctx, db, s.d.Rebind(countByStatusQuery))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				status string
				n      int
			)
			if err := rows.Scan(&status, &n); err != nil {
				return err
			}
			out[pay.Status(status)] = n
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
