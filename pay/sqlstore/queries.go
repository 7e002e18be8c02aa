package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/stampede-lab/stampede/internal/sqldb"
	"github.com/stampede-lab/stampede/pay"
)

const paymentCols = `id, merchant_id, order_id, amount, currency, status, external_key, idempotency_key,
	manual_review, review_reason, created_at, updated_at, event_seq, next_inquiry_at, inquiries, capture_mode, captured`

// idemCols are the columns of an idempotency record. A replay is
// rendered from the payment, and the record's state is its payment's:
// in flight while the payment is PENDING (no status leads back to it),
// completed once the approval's outcome is written.
const idemCols = `key, request_hash, payment_id, created_at, expires_at`

// queries holds every statement, written once with $n placeholders and
// rebound for the dialect when the store is made.
type queries struct {
	getPayment, lockPayment, history, listByStatus, list         string
	lockWithHistory                                              string
	insertPayment, updateStatus, updateStatusFreeing, flagReview string
	insertOutbox                                                 string
	getIdem, upsertIdem                                          string
	pendingOutbox, deleteExpired                                 string
	liveOrder                                                    string

	insertMerchant, listMerchants, getMerchant, merchantByKey string
	revokeMerchant, setWebhook                                string

	insertDelivery, dueDeliveries, claimDelivery, recordAttempt string
	listDeliveries, listPaymentDeliveries, getDelivery, resend  string
	claimDue, claimOne, deferInquiry                            string
	countUnsettled, countFlagged, oldestUnpublished             string
}

const merchantCols = `id, name, key_hash, webhook_url, webhook_secret, created_at, revoked_at`

const deliveryCols = `id, payment_id, seq, merchant_id, type, body, status, attempts, last_error,
	next_at, since, created_at, updated_at`

// orderKeepers are the statuses of a payment that keeps its order taken
// (one such payment per order). Such a payment's live_order column holds
// its order id, under the partial unique index payments_live_order; a
// status change to any other status clears it. The index's condition
// names live_order only, so a change between two of these statuses
// (PENDING to APPROVED, the common one) leaves the index alone.
var orderKeepers = []pay.Status{pay.StatusPending, pay.StatusUnknown, pay.StatusApproved, pay.StatusAuthorized}

// keepsOrder reports whether a payment in status st keeps its order taken.
func keepsOrder(st pay.Status) bool { return slices.Contains(orderKeepers, st) }

func newQueries(d Dialect) queries {
	get := `SELECT ` + paymentCols + ` FROM payments WHERE id = $1`
	q := queries{
		getPayment:  get,
		lockPayment: get + d.LockRow(),
		// A payment's history is its outbox rows that carry a status
		// change (to_status set): the created and status_changed events.
		history: `SELECT from_status, to_status, reason, created_at FROM outbox
			WHERE payment_id = $1 AND to_status IS NOT NULL ORDER BY seq`,
		// A status change reads the payment, locked, and its history in
		// one statement; the lock is the payment row's only.
		lockWithHistory: `SELECT ` + prefixed("p.", paymentCols) + `, h.from_status, h.to_status, h.reason, h.created_at
			FROM payments p LEFT JOIN outbox h ON h.payment_id = p.id AND h.to_status IS NOT NULL
			WHERE p.id = $1 ORDER BY h.seq` + lockOf(d, "p"),
		listByStatus: `SELECT ` + paymentCols + ` FROM payments WHERE status = $1 ORDER BY created_at, id LIMIT $2`,
		list:         `SELECT ` + paymentCols + ` FROM payments WHERE id > $1 ORDER BY id LIMIT $2`,
		// A new payment is PENDING: it keeps its order ($3).
		insertPayment: `INSERT INTO payments (` + paymentCols + `, live_order)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, 1, $13, 0, $14, 0, $3)`,
		updateStatus: `UPDATE payments SET status = $1, updated_at = $2, event_seq = $3, next_inquiry_at = $5 WHERE id = $4`,
		// The same, to a status that gives the order back (see keepsOrder).
		updateStatusFreeing: `UPDATE payments SET status = $1, updated_at = $2, event_seq = $3, next_inquiry_at = $5, live_order = NULL
			WHERE id = $4`,
		flagReview: `UPDATE payments SET manual_review = $1, review_reason = $2, updated_at = $3, event_seq = $4 WHERE id = $5`,
		// from_status, to_status and reason: the history entry of a
		// status change, NULL on every other event.
		insertOutbox: `INSERT INTO outbox (payment_id, seq, type, payload, created_at, merchant_id, from_status, to_status, reason)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
		getIdem: `SELECT k.key, k.request_hash, k.payment_id,
				CASE WHEN p.status = 'PENDING' THEN '` + string(pay.IdempotencyInFlight) + `' ELSE '` + string(pay.IdempotencyCompleted) + `' END,
				k.created_at, k.expires_at
			FROM idempotency_keys k JOIN payments p ON p.id = k.payment_id WHERE k.key = $1`,
		// A live record is left alone (no row affected); an expired one
		// is replaced.
		upsertIdem: `INSERT INTO idempotency_keys (` + idemCols + `)
			VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (key) DO UPDATE SET
				request_hash = excluded.request_hash, payment_id = excluded.payment_id,
				created_at = excluded.created_at, expires_at = excluded.expires_at
			WHERE idempotency_keys.expires_at <= excluded.created_at`,
		pendingOutbox: `SELECT id, payment_id, seq, type, payload, created_at FROM outbox
			WHERE published_at IS NULL ORDER BY id LIMIT $1`,
		deleteExpired: `DELETE FROM idempotency_keys WHERE expires_at <= $1`,
		liveOrder:     `SELECT id FROM payments WHERE merchant_id = $1 AND live_order = $2`,

		insertMerchant: `INSERT INTO merchants (` + merchantCols + `) VALUES ($1, $2, $3, $4, $5, $6, NULL)`,
		listMerchants:  `SELECT ` + merchantCols + ` FROM merchants ORDER BY created_at, id`,
		getMerchant:    `SELECT ` + merchantCols + ` FROM merchants WHERE id = $1`,
		merchantByKey:  `SELECT ` + merchantCols + ` FROM merchants WHERE key_hash = $1 AND revoked_at IS NULL`,
		revokeMerchant: `UPDATE merchants SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL`,
		setWebhook:     `UPDATE merchants SET webhook_url = $1, webhook_secret = $2 WHERE id = $3`,

		// A delivery is written only when the payment's merchant exists
		// and has a webhook.
		insertDelivery: `INSERT INTO webhook_deliveries (` + deliveryCols + `)
			SELECT $1, $2, $3, m.id, $4, $5, 'pending', 0, '', $6, $6, $6, $6
			FROM merchants m WHERE m.id = $7 AND m.webhook_url <> ''`,
		// The earliest pending delivery of each payment only: event n+1
		// waits for event n.
		dueDeliveries: `SELECT ` + prefixed("d.", deliveryCols) + `, m.webhook_url, m.webhook_secret
			FROM webhook_deliveries d JOIN merchants m ON m.id = d.merchant_id
			WHERE d.status = 'pending' AND d.next_at <= $1 AND m.webhook_url <> ''
			AND NOT EXISTS (SELECT 1 FROM webhook_deliveries e
				WHERE e.payment_id = d.payment_id AND e.status = 'pending' AND e.seq < d.seq)
			ORDER BY d.next_at, d.id LIMIT $2`,
		claimDelivery: `UPDATE webhook_deliveries SET next_at = $1 WHERE id = $2 AND status = 'pending' AND next_at <= $3`,
		recordAttempt: `UPDATE webhook_deliveries SET status = $1, attempts = attempts + 1, last_error = $2, next_at = $3, updated_at = $4
			WHERE id = $5`,
		listDeliveries:        `SELECT ` + deliveryCols + ` FROM webhook_deliveries ORDER BY created_at DESC, seq DESC, id LIMIT $1`,
		listPaymentDeliveries: `SELECT ` + deliveryCols + ` FROM webhook_deliveries WHERE payment_id = $1 ORDER BY created_at DESC, seq DESC, id LIMIT $2`,
		getDelivery:           `SELECT ` + deliveryCols + ` FROM webhook_deliveries WHERE id = $1`,
		resend: `UPDATE webhook_deliveries SET status = 'pending', attempts = 0, last_error = '', next_at = $1, since = $1, updated_at = $1
			WHERE id = $2`,
		// The claim selects and leases in one statement. PostgreSQL
		// skips the rows another claim holds (FOR UPDATE SKIP LOCKED);
		// SQLite has a single writer, so the statement excludes every
		// other claim by itself. The status list matches the partial
		// index payments_due.
		claimDue: `WITH due AS (
				SELECT id FROM payments
				WHERE status IN ('PENDING', 'UNKNOWN') AND next_inquiry_at <= $1
				ORDER BY next_inquiry_at, id LIMIT $3` + claimLock(d) + `
			)
			UPDATE payments SET next_inquiry_at = $2 WHERE id IN (SELECT id FROM due)
			RETURNING ` + paymentCols,
		claimOne: `UPDATE payments SET next_inquiry_at = $3
			WHERE id = $1 AND status = 'UNKNOWN' AND next_inquiry_at <= $2
			RETURNING ` + paymentCols,
		deferInquiry: `UPDATE payments SET inquiries = inquiries + 1, next_inquiry_at = $3
			WHERE id = $1 AND status = $2
			RETURNING ` + paymentCols,
		countUnsettled:    `SELECT status, COUNT(*) FROM payments WHERE status IN ('PENDING', 'UNKNOWN') GROUP BY status`,
		countFlagged:      `SELECT COUNT(*) FROM payments WHERE manual_review = $1`,
		oldestUnpublished: `SELECT created_at FROM outbox WHERE published_at IS NULL ORDER BY id LIMIT 1`,
	}
	for _, p := range []*string{
		&q.getPayment, &q.lockPayment, &q.history, &q.lockWithHistory, &q.listByStatus, &q.list,
		&q.insertPayment, &q.updateStatus, &q.updateStatusFreeing, &q.flagReview, &q.insertOutbox,
		&q.getIdem, &q.upsertIdem, &q.pendingOutbox, &q.deleteExpired,
		&q.liveOrder, &q.insertMerchant, &q.listMerchants, &q.getMerchant, &q.merchantByKey, &q.revokeMerchant, &q.setWebhook,
		&q.insertDelivery, &q.dueDeliveries, &q.claimDelivery, &q.recordAttempt,
		&q.listDeliveries, &q.listPaymentDeliveries, &q.getDelivery, &q.resend,
		&q.claimDue, &q.claimOne, &q.deferInquiry, &q.countUnsettled, &q.countFlagged, &q.oldestUnpublished,
	} {
		*p = d.Rebind(*p)
	}
	return q
}

// prefixed qualifies each column of cols with prefix.
func prefixed(prefix, cols string) string {
	parts := strings.Split(cols, ",")
	for i, c := range parts {
		parts[i] = prefix + strings.TrimSpace(c)
	}
	return strings.Join(parts, ", ")
}

// claimLock is the lock clause of a claim's SELECT: the dialect's row
// lock with SKIP LOCKED, so that concurrent claims take different rows;
// nothing where the dialect needs no row lock (a single writer).
func claimLock(d Dialect) string {
	if d.LockRow() == "" {
		return ""
	}
	return d.LockRow() + " SKIP LOCKED"
}

// lockOf is the dialect's row lock restricted to the rows of table alias
// (" FOR UPDATE OF p"), or nothing where the dialect needs no row lock.
func lockOf(d Dialect, alias string) string {
	if d.LockRow() == "" {
		return ""
	}
	return d.LockRow() + " OF " + alias
}

// markPublished returns the statement that marks n outbox rows published:
// $1 is the time, $2 to $n+1 the IDs.
func markPublished(d Dialect, n int) string {
	var b strings.Builder
	b.WriteString(`UPDATE outbox SET published_at = $1 WHERE published_at IS NULL AND id IN (`)
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("$" + strconv.Itoa(i+2))
	}
	b.WriteString(")")
	return d.Rebind(b.String())
}

// at scans a timestamp column into t through the dialect.
func (s *Store) at(t *time.Time) sql.Scanner { return sqldb.TimeCol(s.d, t) }

// nullAt scans a nullable timestamp into t.
func (s *Store) nullAt(t *time.Time) sql.Scanner { return sqldb.NullTimeCol(s.d, t) }

// encodeNullTime encodes t, or NULL for the zero time.
func (s *Store) encodeNullTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return s.d.EncodeTime(pay.StoreTime(t))
}

// scanPayment scans paymentCols; it returns the payment's last event seq.
func (s *Store) scanPayment(row interface{ Scan(...any) error }) (pay.Payment, int64, error) {
	var (
		p            pay.Payment
		status, mode string
		seq          int64
	)
	err := row.Scan(&p.ID, &p.MerchantID, &p.OrderID, &p.Amount, &p.Currency, &status, &p.ExternalKey, &p.IdempotencyKey,
		&p.ManualReview, &p.ReviewReason, s.at(&p.CreatedAt), s.at(&p.UpdatedAt), &seq, s.nullAt(&p.NextInquiryAt), &p.Inquiries,
		&mode, &p.Captured)
	p.CaptureMode = pay.CaptureMode(mode)
	if errors.Is(err, sql.ErrNoRows) {
		return p, 0, pay.ErrNotFound
	}
	if err != nil {
		return p, 0, err
	}
	p.Status = pay.Status(status)
	return p, seq, nil
}

// querier is what *sql.DB and *sql.Tx share.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}
