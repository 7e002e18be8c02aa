package pay

import (
	"context"
	"encoding/base64"
	"strconv"
	"strings"
	"time"
)

// PaymentQuery selects a merchant's payments for its listing (GET
// /v1/payments): the filters, the page size and where the page starts.
type PaymentQuery struct {
	MerchantID string
	// OrderID, when set, selects the payments of one order.
	OrderID string
	// Status, when set, selects the payments in that status.
	Status Status
	// CreatedFrom (inclusive) and CreatedTo (exclusive) bound the
	// creation time; zero leaves the bound open.
	CreatedFrom, CreatedTo time.Time
	// After is the last payment of the previous page (its cursor); zero
	// for the first page.
	After Cursor
	// Limit is the page size, 1 to MaxPageSize.
	Limit int
}

// MaxPageSize is the largest page of a listing.
const MaxPageSize = 100

// Validate checks the query, naming the query parameter at fault.
func (q PaymentQuery) Validate() error {
	if err := q.ValidateFilters(); err != nil {
		return err
	}
	if q.Limit < 1 || q.Limit > MaxPageSize {
		return Invalid("limit", "must be between 1 and %d", MaxPageSize)
	}
	return nil
}

// ValidateFilters checks the query but its page size; stores call it
// with CheckLimit.
func (q PaymentQuery) ValidateFilters() error {
	if _, err := ParseUUID(q.MerchantID); err != nil {
		return Invalid("merchant_id", "must be a UUID")
	}
	if q.OrderID != "" {
		if err := ValidateText("order_id", q.OrderID, MaxOrderIDLen); err != nil {
			return err
		}
	}
	if q.Status != "" && !q.Status.Valid() {
		return Invalid("status", "must be one of %v", Statuses())
	}
	if !q.CreatedFrom.IsZero() && !q.CreatedTo.IsZero() && !q.CreatedFrom.Before(q.CreatedTo) {
		return Invalid("created_before", "must be after created_after")
	}
	return nil
}

// MerchantLister is a Store that lists a merchant's payments with
// filters, ordered by creation time then ID. The SQL store implements it.
type MerchantLister interface {
	// ListForMerchant returns up to q.Limit payments of q.MerchantID
	// matching q, after q.After, without history.
	ListForMerchant(ctx context.Context, q PaymentQuery) ([]Payment, error)
}

// Cursor is where a listing's page ends: the last payment's creation
// time and ID. Its text form is opaque to clients.
type Cursor struct {
	CreatedAt time.Time
	ID        string
}

// CursorOf returns the cursor after p.
func CursorOf(p Payment) Cursor { return Cursor{CreatedAt: StoreTime(p.CreatedAt), ID: p.ID} }

// String encodes the cursor (base64url of microseconds and ID).
func (c Cursor) String() string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(c.CreatedAt.UnixMicro(), 10) + ":" + c.ID))
}

// ParseCursor decodes a cursor written by Cursor.String; its error names
// the query parameter "cursor".
func ParseCursor(s string) (Cursor, error) {
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return Cursor{}, Invalid("cursor", "is not a cursor this API returned")
	}
	us, id, ok := strings.Cut(string(raw), ":")
	n, err := strconv.ParseInt(us, 10, 64)
	if !ok || err != nil {
		return Cursor{}, Invalid("cursor", "is not a cursor this API returned")
	}
	if u, err := ParseUUID(id); err != nil || u.String() != id {
		return Cursor{}, Invalid("cursor", "is not a cursor this API returned")
	}
	return Cursor{CreatedAt: time.UnixMicro(n).UTC(), ID: id}, nil
}

// ListPayments returns a page of the merchant's payments matching q and
// the cursor of the next page ("" when this is the last).
func (s *Service) ListPayments(ctx context.Context, q PaymentQuery) ([]Payment, string, error) {
	if err := q.Validate(); err != nil {
		return nil, "", err
	}
	l, ok := s.store.(MerchantLister)
	if !ok {
		return nil, "", &Error{Code: CodeNotSupported, Kind: CodeConflict, Message: "this payment store cannot list payments"}
	}
	want := q.Limit
	q.Limit++ // one more tells whether a next page exists
	ps, err := l.ListForMerchant(ctx, q)
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(ps) > want {
		ps = ps[:want]
		next = CursorOf(ps[want-1]).String()
	}
	return ps, next, nil
}
