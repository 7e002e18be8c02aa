package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/stampede-lab/stampede/pay"
)

// timePtrCol scans a nullable timestamp column into a pointer: NULL is
// nil.
type timePtrCol struct {
	d Dialect
	t **time.Time
}

// Scan implements sql.Scanner.
func (c timePtrCol) Scan(src any) error {
	if src == nil {
		*c.t = nil
		return nil
	}
	t, err := c.d.DecodeTime(src)
	if err != nil {
		return fmt.Errorf("%s: decode time: %w", c.d.Name(), err)
	}
	*c.t = &t
	return nil
}

func (s *Store) scanMerchant(row interface{ Scan(...any) error }) (pay.Merchant, error) {
	var m pay.Merchant
	err := row.Scan(&m.ID, &m.Name, &m.KeyHash, &m.WebhookURL, &m.WebhookSecret, s.at(&m.CreatedAt), timePtrCol{s.d, &m.RevokedAt})
	if errors.Is(err, sql.ErrNoRows) {
		return m, pay.ErrNotFound
	}
	return m, err
}

// CreateMerchant implements pay.MerchantStore.
func (s *Store) CreateMerchant(ctx context.Context, m pay.Merchant) error {
	if _, err := pay.ParseUUID(m.ID); err != nil {
		return pay.Invalid("id", "must be a UUID")
	}
	if err := pay.ValidateMerchantName(m.Name); err != nil {
		return err
	}
	if len(m.KeyHash) != 64 {
		return pay.Invalid("key_hash", "must be a hex SHA-256")
	}
	if m.WebhookURL != "" {
		if err := pay.ValidateWebhookURL(m.WebhookURL); err != nil {
			return err
		}
	}
	if m.CreatedAt.IsZero() {
		m.CreatedAt = s.cfg.Now()
	}
	return s.writeTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := s.exec(ctx, tx, s.q.insertMerchant, m.ID, m.Name, m.KeyHash, m.WebhookURL, m.WebhookSecret,
			s.d.EncodeTime(pay.StoreTime(m.CreatedAt)))
		return err
	})
}

// Merchants implements pay.MerchantStore.
func (s *Store) Merchants(ctx context.Context) ([]pay.Merchant, error) {
	out := []pay.Merchant{}
	err := s.run(ctx, func(ctx context.Context, db *sql.DB) error {
		rows, err := s.query(ctx, db, s.q.listMerchants)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			m, err := s.scanMerchant(rows)
			if err != nil {
				return err
			}
			out = append(out, m)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Merchant implements pay.MerchantStore.
func (s *Store) Merchant(ctx context.Context, id string) (pay.Merchant, error) {
	var m pay.Merchant
	err := s.run(ctx, func(ctx context.Context, db *sql.DB) error {
		var err error
		m, err = s.scanMerchant(s.queryRow(ctx, db, s.q.getMerchant, id))
		if errors.Is(err, pay.ErrNotFound) {
			err = fmt.Errorf("merchant %q: %w", id, pay.ErrNotFound)
		}
		return err
	})
	return m, err
}

// MerchantByKeyHash implements pay.MerchantStore. A merchant found is
// kept for Config.MerchantTTL (see merchantCache): a revocation made by
// another process refuses its key within that time.
func (s *Store) MerchantByKeyHash(ctx context.Context, hash string) (pay.Merchant, error) {
	if m, ok := s.merchants.get(true, hash); ok {
		if m.Revoked() {
			return pay.Merchant{}, pay.ErrNotFound
		}
		return m, nil
	}
	var m pay.Merchant
	err := s.run(ctx, func(ctx context.Context, db *sql.DB) error {
		var err error
		m, err = s.scanMerchant(s.queryRow(ctx, db, s.q.merchantByKey, hash))
		return err
	})
	if err == nil {
		s.merchants.put(m)
	}
	return m, err
}

// hasWebhook reports whether merchant id has a webhook, from the cache
// or read in tx (and then kept). A merchant that does not exist has none.
// Without a cache it answers true: the delivery's INSERT ... SELECT
// checks the merchant itself.
func (s *Store) hasWebhook(ctx context.Context, tx *sql.Tx, id string) (bool, error) {
	if s.merchants == nil {
		return true, nil
	}
	if m, ok := s.merchants.get(false, id); ok {
		return m.WebhookURL != "", nil
	}
	m, err := s.scanMerchant(s.queryRow(ctx, tx, s.q.getMerchant, id))
	if errors.Is(err, pay.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	s.merchants.put(m)
	return m.WebhookURL != "", nil
}

// RevokeMerchant implements pay.MerchantStore.
func (s *Store) RevokeMerchant(ctx context.Context, id string, at time.Time) error {
	defer s.merchants.drop(id)
	return s.writeTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := s.exec(ctx, tx, s.q.revokeMerchant, s.d.EncodeTime(pay.StoreTime(at)), id)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n > 0 {
			return err
		}
		_, err = s.scanMerchant(s.queryRow(ctx, tx, s.q.getMerchant, id))
		if errors.Is(err, pay.ErrNotFound) {
			err = fmt.Errorf("merchant %q: %w", id, pay.ErrNotFound)
		}
		return err // nil: already revoked
	})
}

// SetWebhook implements pay.MerchantStore.
func (s *Store) SetWebhook(ctx context.Context, id, url, secret string) error {
	if url != "" {
		if err := pay.ValidateWebhookURL(url); err != nil {
			return err
		}
		if secret == "" {
			return pay.Invalid("secret", "is required with a webhook URL")
		}
	} else {
		secret = ""
	}
	defer s.merchants.drop(id)
	return s.writeTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := s.exec(ctx, tx, s.q.setWebhook, url, secret, id)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			if err == nil {
				err = fmt.Errorf("merchant %q: %w", id, pay.ErrNotFound)
			}
			return err
		}
		return nil
	})
}
