package sqlstore

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"slices"

	"github.com/stampede-lab/stampede/pay"
)

var _ pay.BatchTransitioner = (*Store)(nil)

// MaxTransitionBatch bounds the transitions of one TransitionBatch call:
// one transaction holds the row locks of all of them until it commits.
const MaxTransitionBatch = 256

// TransitionBatch implements pay.BatchTransitioner: every transition is
// written by applyTransition, as by Transition, and all of them commit
// in one transaction. On PostgreSQL the rows are locked in ID order, so
// that two batches (of two instances' reconcilers) over the same payments
// cannot deadlock.
func (s *Store) TransitionBatch(ctx context.Context, reqs []pay.TransitionRequest) ([]error, error) {
	if len(reqs) == 0 {
		return []error{}, nil
	}
	if len(reqs) > MaxTransitionBatch {
		return nil, pay.Invalid("reqs", "at most %d transitions in one batch, got %d", MaxTransitionBatch, len(reqs))
	}
	order := make([]int, len(reqs))
	for i, r := range reqs {
		if err := pay.CheckTransition(r.From, r.To); err != nil {
			return nil, err
		}
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(reqs[a].ID, reqs[b].ID) })
	for k := 1; k < len(order); k++ {
		if reqs[order[k]].ID == reqs[order[k-1]].ID {
			return nil, pay.Invalid("reqs", "payment %q appears twice in one batch", reqs[order[k]].ID)
		}
	}
	now := pay.StoreTime(s.cfg.Now())
	var errs []error
	err := s.writeTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		// The transaction may run again (a group commit that falls back
		// to running its units alone): start from a clean slate.
		errs = make([]error, len(reqs))
		for _, i := range order {
			r := reqs[i]
			cur, seq, err := s.getPayment(ctx, tx, r.ID, true)
			if err == nil {
				_, err = s.applyTransition(ctx, tx, cur, seq, r.From, r.To, r.Reason, now)
			}
			switch {
			case err == nil:
			case errors.Is(err, pay.ErrNotFound), errors.Is(err, pay.ErrStaleStatus):
				// Found before anything of this request was written.
				errs[i] = err
			default:
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return errs, nil
}
