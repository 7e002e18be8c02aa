package sqlstore

import (
	"sync"
	"time"

	"github.com/stampede-lab/stampede/pay"
)

// DefaultMerchantTTL is the default Config.MerchantTTL: a merchant
// revoked, or given a webhook, by another process (another instance, or
// `stampede pay merchant`) is seen by this one within a second.
const DefaultMerchantTTL = time.Second

// merchantCache keeps the merchants this store has read, by key hash and
// by ID, each for ttl after it was read (by the store's clock). A
// merchant changed through this store (revoked, its webhook set) is
// dropped at once; a change made by another process is seen when the
// entry expires, within ttl. Only merchants that exist are kept: an
// unknown key is looked up every time, so the cache holds at most one
// entry per merchant.
type merchantCache struct {
	ttl time.Duration
	now func() time.Time

	mu     sync.RWMutex
	byHash map[string]cachedMerchant
	byID   map[string]cachedMerchant
}

type cachedMerchant struct {
	m  pay.Merchant
	at time.Time
}

func newMerchantCache(ttl time.Duration, now func() time.Time) *merchantCache {
	return &merchantCache{ttl: ttl, now: now, byHash: map[string]cachedMerchant{}, byID: map[string]cachedMerchant{}}
}

// get returns the merchant of key (its hash or its ID, per the map m) if
// it was read less than ttl ago.
func (c *merchantCache) get(byHash bool, key string) (pay.Merchant, bool) {
	if c == nil {
		return pay.Merchant{}, false
	}
	c.mu.RLock()
	e, ok := c.byID[key]
	if byHash {
		e, ok = c.byHash[key]
	}
	c.mu.RUnlock()
	if !ok || c.now().Sub(e.at) >= c.ttl {
		return pay.Merchant{}, false
	}
	return e.m, true
}

// put keeps m, read at the store's now.
func (c *merchantCache) put(m pay.Merchant) {
	if c == nil {
		return
	}
	e := cachedMerchant{m: m, at: c.now()}
	c.mu.Lock()
	if old, ok := c.byID[m.ID]; ok && old.m.KeyHash != m.KeyHash {
		delete(c.byHash, old.m.KeyHash)
	}
	c.byID[m.ID] = e
	c.byHash[m.KeyHash] = e
	c.mu.Unlock()
}

// drop forgets merchant id.
func (c *merchantCache) drop(id string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	if old, ok := c.byID[id]; ok {
		delete(c.byHash, old.m.KeyHash)
		delete(c.byID, id)
	}
	c.mu.Unlock()
}
