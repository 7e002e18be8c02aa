package api

import (
	"sync"

	"github.com/stampede-lab/stampede/waitroom"
)

// ticketCacheSize is how many verified ticket tokens one generation of
// the cache holds; the cache holds at most two generations.
const ticketCacheSize = 1 << 16

// ticketCache remembers ticket tokens verified already, so that a buyer
// polling with the same token every few seconds costs one map lookup
// instead of a MAC and a parse. A token is the cache's key byte for byte,
// and its claims are returned only until the token expires: the cache
// accepts exactly what Verify accepted. It holds two generations of at
// most ticketCacheSize tokens each: when the newer fills up, the older is
// dropped.
type ticketCache struct {
	mu        sync.Mutex
	cur, prev map[string]waitroom.Claims
}

func newTicketCache() *ticketCache {
	return &ticketCache{cur: map[string]waitroom.Claims{}, prev: map[string]waitroom.Claims{}}
}

// verify returns token's claims from the cache, or from signer (then
// remembered).
func (c *ticketCache) verify(signer *waitroom.Signer, token string) (waitroom.Claims, error) {
	now := signer.Now()
	c.mu.Lock()
	cl, ok := c.cur[token]
	if !ok {
		if cl, ok = c.prev[token]; ok {
			c.putLocked(token, cl)
		}
	}
	c.mu.Unlock()
	if ok && now.Before(cl.Expires) {
		return cl, nil
	}
	cl, err := signer.Verify(token, waitroom.TicketToken)
	if err != nil {
		return cl, err
	}
	c.mu.Lock()
	c.putLocked(token, cl)
	c.mu.Unlock()
	return cl, nil
}

func (c *ticketCache) putLocked(token string, cl waitroom.Claims) {
	if len(c.cur) >= ticketCacheSize {
		c.prev, c.cur = c.cur, make(map[string]waitroom.Claims, ticketCacheSize/4)
	}
	c.cur[token] = cl
}
