package api

import (
	"testing"
	"time"

	"github.com/stampede-lab/stampede/waitroom"
)

// TestTicketCacheAcceptsWhatVerifyAccepts: a cached token is answered
// with its claims until it expires, then refused as Verify refuses it; a
// token changed by one byte is refused; the cache keeps at most two
// generations.
func TestTicketCacheAcceptsWhatVerifyAccepts(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	signer, err := waitroom.NewSigner([]byte("ticket-cache-test-secret-0123456789abcdef"), func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	c := newTicketCache()
	tok, err := signer.Sign(waitroom.Claims{Kind: waitroom.TicketToken, Room: "r", User: "u", Generation: 3,
		Place: &waitroom.Place{Rank: 9}, Expires: now.Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // verified, then from the cache
		cl, err := c.verify(signer, tok)
		if err != nil || cl.User != "u" || cl.Generation != 3 || cl.Place == nil || cl.Place.Rank != 9 {
			t.Fatalf("verify = %+v, %v", cl, err)
		}
	}
	if _, ok := c.cur[tok]; !ok {
		t.Fatal("a verified token is not cached")
	}
	bad := tok[:len(tok)-2] + "AA"
	if bad == tok {
		bad = tok[:len(tok)-2] + "BB"
	}
	if _, err := c.verify(signer, bad); err == nil {
		t.Error("a changed token was accepted")
	}
	now = now.Add(time.Minute)
	if _, err := c.verify(signer, tok); waitroom.ErrorCode(err) != waitroom.CodeUnauthorized {
		t.Errorf("an expired cached token = %v, want unauthorized", err)
	}
	for i := range ticketCacheSize + 1 {
		c.mu.Lock()
		c.putLocked(string(rune(i)), waitroom.Claims{})
		c.mu.Unlock()
	}
	if len(c.cur)+len(c.prev) > 2*ticketCacheSize {
		t.Errorf("the cache holds %d tokens, over two generations", len(c.cur)+len(c.prev))
	}
}
