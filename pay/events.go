package pay

import (
	"context"
	"strconv"
)

// EventFeed reads a merchant's events: the outbox rows of its payments
// (payment, refund, capture and void events), which are kept for good
// (nothing deletes an outbox row). The SQL store implements it.
type EventFeed interface {
	// MerchantEvents returns up to limit events of merchant merchantID
	// with IDs greater than after (0 for the first), in ID order: the
	// order they were written in, each payment's in its seq order.
	MerchantEvents(ctx context.Context, merchantID string, after int64, limit int) ([]OutboxEvent, error)
}

// MaxEventsLimit is the largest page of the events feed.
const MaxEventsLimit = 100

// DefaultEventsLimit is the events feed's page when none is asked.
const DefaultEventsLimit = 20

// EventsPage is one page of a merchant's events feed.
type EventsPage struct {
	Events []OutboxEvent
	// Next is the cursor of the next page: the last event's ID; the
	// request's cursor when the page is empty (nothing newer yet).
	Next string
}

// ParseEventsCursor reads an events cursor ("" is the start), naming the
// parameter "after".
func ParseEventsCursor(c string) (int64, error) {
	if c == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(c, 10, 64)
	if err != nil || n < 0 || strconv.FormatInt(n, 10) != c {
		return 0, Invalid("after", "must be a cursor from an earlier page (a non-negative integer)")
	}
	return n, nil
}

// Events returns a page of merchant merchantID's events after cursor
// (from an earlier page's Next; "" for the first), limit at a time (1 to
// MaxEventsLimit). Another merchant's events are never returned.
func (s *Service) Events(ctx context.Context, merchantID, cursor string, limit int) (EventsPage, error) {
	mid, err := ParseUUID(merchantID)
	if err != nil {
		return EventsPage{}, Invalid("merchant_id", "must be a UUID")
	}
	after, err := ParseEventsCursor(cursor)
	if err != nil {
		return EventsPage{}, err
	}
	if limit < 1 || limit > MaxEventsLimit {
		return EventsPage{}, Invalid("limit", "must be between 1 and %d", MaxEventsLimit)
	}
	feed, ok := s.store.(EventFeed)
	if !ok {
		return EventsPage{}, &Error{Code: CodeNotSupported, Kind: CodeConflict, Message: "this payment store has no events feed"}
	}
	evs, err := feed.MerchantEvents(ctx, mid.String(), after, limit)
	if err != nil {
		return EventsPage{}, err
	}
	page := EventsPage{Events: evs, Next: cursor}
	if len(evs) > 0 {
		page.Next = strconv.FormatInt(evs[len(evs)-1].ID, 10)
	}
	return page, nil
}
